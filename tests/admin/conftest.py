from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.app import Gateway
from tests.webchat.support import base_url, make_settings, running_gateway

TOKEN = "test-admin-token-0123456789"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # Loopback must never go through a proxy from the environment.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    settings = make_settings(tmp_path, admin={"token": TOKEN, "sse_heartbeat_seconds": 0.2})
    async with running_gateway(settings) as gw:
        yield gw


@pytest.fixture
async def admin(gateway: Gateway) -> AsyncIterator[aiohttp.ClientSession]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(base_url=base_url(gateway), headers=headers) as session:
        yield session


@pytest.fixture
async def anonymous(gateway: Gateway) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=base_url(gateway)) as session:
        yield session
