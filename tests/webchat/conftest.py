from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.app import Gateway
from tests.webchat.support import base_url, make_settings, running_gateway


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # Loopback must never go through a proxy from the environment.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    settings = make_settings(tmp_path, channels={"webchat": {"max_text_length": 200}})
    async with running_gateway(settings) as gw:
        yield gw


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=base_url(gateway)) as session:
        yield session
