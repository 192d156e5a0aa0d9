"""A real gateway (gateway.app) with a model agent against the loopback OpenAI fake.

The chat side is a small recording channel added to the real ChannelManager, so every
message goes bus -> confirmation service -> agent loop -> runner -> manager -> channel.
"""

from __future__ import annotations

import itertools
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from config.settings import Settings
from gateway.app import Gateway, build
from gateway.bus import InboundMessage, PublishResult
from tests import support
from tests.fakes.openai_server import FakeOpenAI

CHANNEL = "test"


class RecordingChannel(support.RecordingChannel):
    name: ClassVar[str] = CHANNEL


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx (inside the openai SDK) honours *_PROXY: loopback must never go through one.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def make_settings(tmp_path: Path, fake: FakeOpenAI, **sections: Any) -> Settings:
    llm: dict[str, Any] = {
        "base_url": fake.base_url,
        "api_key": fake.api_key,
        "model": "fake-model",
        "timeout_seconds": 5.0,
        "max_retries": 2,
        # Short, so retry tests stay quick.
        "retry_base_seconds": 0.01,
        "retry_max_seconds": 0.05,
    }
    llm.update(sections.pop("llm", {}))
    confirmation: dict[str, Any] = {"store": "memory", "timeout_seconds": 30.0}
    confirmation.update(sections.pop("confirmation", {}))
    return Settings(
        data_dir=tmp_path,
        server={"host": "127.0.0.1", "port": 0},
        confirmation=confirmation,
        keywords={"watch": False},
        channels={"webchat": {"enabled": False}},
        llm=llm,
        **sections,
    )


GatewayFactory = Callable[..., Awaitable[tuple[Gateway, RecordingChannel]]]


@pytest.fixture
async def start_gateway(tmp_path: Path, fake_llm: FakeOpenAI) -> AsyncIterator[GatewayFactory]:
    """``gw, chat = await start_gateway(policy={...}, llm={...})``"""
    started: list[Gateway] = []

    async def start(
        *, clock: Callable[[], float] = time.time, **sections: Any
    ) -> tuple[Gateway, RecordingChannel]:
        settings = make_settings(tmp_path, fake_llm, **sections)
        gw = await build(settings, serve_http=False, clock=clock)
        chat = RecordingChannel()
        gw.channels.add(chat)
        await gw.start()
        started.append(gw)
        return gw, chat

    yield start
    fake_llm.release()  # held (slow-model) answers must not keep the gateway's turn open
    for gw in started:
        await gw.stop()


_message_ids = itertools.count(1)


async def say(
    gw: Gateway,
    text: str,
    *,
    sender: str = "alice",
    chat: str = "room1",
    is_group: bool = False,
    from_bot: bool = False,
) -> PublishResult:
    """What a channel does for a person's message."""
    return await gw.bus.publish_inbound(
        InboundMessage(
            channel=CHANNEL,
            chat_id=chat,
            sender_id=sender,
            text=text,
            message_id=f"m{next(_message_ids)}",
            is_group=is_group,
            from_bot=from_bot,
        )
    )


def order_rows(settings: Settings) -> dict[int, tuple[str, int]]:
    """The demo database, read directly: id -> (customer, status)."""
    with sqlite3.connect(settings.data_dir / "demo.db") as conn:
        return {
            row[0]: (row[1], row[2])
            for row in conn.execute("SELECT id, customer, status FROM orders")
        }
