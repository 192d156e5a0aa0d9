"""A real gateway (gateway.app) with the DingTalk channel, against the loopback fake."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from config.settings import Settings
from gateway.app import Gateway, build
from tests.fakes.dingtalk import FakeDingTalk
from tests.support import order_ids, wait_pending, wait_status  # noqa: F401 - re-exported


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # websockets >= 15 and requests honour *_PROXY: loopback must never go through one.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def fake() -> Iterator[FakeDingTalk]:
    with FakeDingTalk() as server:
        yield server


def make_settings(
    tmp_path: Path, fake: FakeDingTalk, *, policy: dict[str, Any] | None = None, **dingtalk: Any
) -> Settings:
    options: dict[str, Any] = {
        "enabled": True,
        "client_id": fake.client_id,
        "client_secret": fake.client_secret,
        "openapi_endpoint": fake.url,
        "allow_from": ["*"],
        # Short, so tests that exercise them stay quick.
        "retry_base_seconds": 0.01,
        "retry_max_seconds": 0.05,
        "reconnect_base_seconds": 0.05,
        "reconnect_max_seconds": 0.2,
        "request_timeout_seconds": 3.0,
        "stop_timeout_seconds": 3.0,
        # The fake serves session webhooks on loopback http: allow exactly that origin.
        "webhook_hosts": [f"127.0.0.1:{fake.port}"],
        "webhook_schemes": ["http"],
    }
    options.update(dingtalk)
    return Settings(
        data_dir=tmp_path,
        server={"host": "127.0.0.1", "port": 0},
        confirmation={"store": "memory"},
        keywords={"watch": False},
        channels={"webchat": {"enabled": False}, "dingtalk": options},
        policy=policy or {},
    )


@pytest.fixture
def settings(tmp_path: Path, fake: FakeDingTalk) -> Settings:
    return make_settings(tmp_path, fake)


@pytest.fixture
async def gateway(settings: Settings, fake: FakeDingTalk) -> AsyncIterator[Gateway]:
    async with await build(settings) as gw:
        if settings.channels.dingtalk.mode == "stream":
            await fake.wait_connected()
        yield gw


def shown(markdown: str) -> str:
    """What a person reads in DingTalk markdown: the backslash escapes undone."""
    return re.sub(r"\\(.)", r"\1", markdown)


def webhook_texts(fake: FakeDingTalk) -> list[str]:
    """Texts sent through session webhooks, in order (text and markdown as shown)."""
    out = []
    for r in fake.requests("/robot/sendBySession"):
        body = r.body or {}
        if body.get("msgtype") == "text":
            out.append(body["text"]["content"])
        elif body.get("msgtype") == "markdown":
            out.append(shown(body["markdown"]["text"]))
    return out
