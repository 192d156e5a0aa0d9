"""A real gateway (gateway.app) with the Feishu channel, against the loopback fake Feishu."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from config.settings import Settings
from gateway.app import Gateway, build
from tests.fakes.feishu import FakeFeishu, RecordedRequest
from tests.support import order_ids, wait_pending, wait_status  # noqa: F401 - re-exported

BOT = "ou_bot"
ALICE = "ou_alice"
MALLORY = "ou_mallory"
BOT_MENTION = {"key": "@_user_1", "open_id": BOT, "name": "gateway-bot"}


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx, requests and websockets honour *_PROXY: loopback must never go through one.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def fake() -> Iterator[FakeFeishu]:
    # A distinct app id per test: nothing may leak between tests through an app-keyed cache.
    with FakeFeishu(app_id="cli_" + uuid.uuid4().hex[:10], bot_open_id=BOT) as server:
        yield server


def make_settings(
    tmp_path: Path,
    fake: FakeFeishu,
    *,
    confirmation: dict[str, Any] | None = None,
    admin_token: str | None = None,
    policy: dict[str, Any] | None = None,
    **feishu: Any,
) -> Settings:
    options: dict[str, Any] = {
        "enabled": True,
        "app_id": fake.app_id,
        "app_secret": fake.app_secret,
        "domain": fake.url,
        "allow_from": ["*"],
        # Short, so the tests that exercise retries and reconnects stay quick.
        "retry_base_seconds": 0.01,
        "retry_max_seconds": 0.05,
        "reconnect_base_seconds": 0.05,
        "reconnect_max_seconds": 0.2,
        "request_timeout_seconds": 3.0,
        "stop_timeout_seconds": 3.0,
    }
    options.update(feishu)
    return Settings(
        data_dir=tmp_path,
        server={"host": "127.0.0.1", "port": 0},
        admin={"token": admin_token},
        confirmation={"store": "memory", **(confirmation or {})},
        keywords={"watch": False},
        channels={"webchat": {"enabled": False}, "feishu": options},
        policy=policy or {},
    )


@pytest.fixture
def settings(tmp_path: Path, fake: FakeFeishu) -> Settings:
    return make_settings(tmp_path, fake)


@pytest.fixture
async def gateway(settings: Settings, fake: FakeFeishu) -> AsyncIterator[Gateway]:
    async with await build(settings) as gw:
        if settings.channels.feishu.mode == "ws":
            await fake.wait_connected()
        yield gw


async def wait_until(cond: Any, *, what: str, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def sent_texts(fake: FakeFeishu) -> list[str]:
    """Texts the gateway sent (text and post messages, created or replies), in order."""
    out = []
    for r in fake.requests_for("create", "reply"):
        if r.status != 200 or not isinstance(r.body, dict):
            continue
        content = r.content
        if r.body.get("msg_type") == "text":
            out.append(content["text"])
        elif r.body.get("msg_type") == "post":
            out.append(json.dumps(content, ensure_ascii=False))
    return out


def card_sends(fake: FakeFeishu) -> list[RecordedRequest]:
    return [
        r
        for r in fake.requests_for("create", "reply")
        if isinstance(r.body, dict) and r.body.get("msg_type") == "interactive"
    ]


def buttons(card: dict[str, Any]) -> list[dict[str, Any]]:
    """Every button in a card JSON 2.0 body, wherever it is nested."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("tag") == "button":
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(card.get("body"))
    return found


def card_text(card: dict[str, Any]) -> str:
    return json.dumps(card, ensure_ascii=False)
