"""A real gateway (gateway.app) with a model agent against the loopback OpenAI fake.

The chat side is a small recording channel added to the real ChannelManager, so every
message goes bus -> confirmation service -> agent loop -> runner -> manager -> channel.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from channels.base import Channel
from config.settings import Settings
from gateway.app import Gateway
from gateway.bus import InboundMessage, OutboundKind, OutboundMessage, PublishResult
from gateway.confirm.model import Confirmation
from tests.fakes.openai_server import FakeOpenAI

CHANNEL = "test"


class RecordingChannel(Channel):
    """Collects what the gateway sends, in order."""

    name: ClassVar[str] = CHANNEL

    def __init__(self) -> None:
        self.sent: list[OutboundMessage] = []
        self._new = asyncio.Event()

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def send(self, msg: OutboundMessage) -> None:
        self.sent.append(msg)
        self._new.set()

    async def wait_for(
        self, predicate: Callable[[OutboundMessage], bool], *, within: float = 10.0
    ) -> OutboundMessage:
        """The first sent message (old or new) that matches."""
        deadline = time.monotonic() + within
        while True:
            for m in self.sent:
                if predicate(m):
                    return m
            left = deadline - time.monotonic()
            if left <= 0:
                shown = "\n".join(f"  {m.kind.value}: {m.text[:120]!r}" for m in self.sent)
                raise AssertionError(f"no matching message; sent so far:\n{shown}")
            self._new.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), timeout=left)

    async def wait_prompt(self, nth: int = 1, *, within: float = 10.0) -> Confirmation:
        """The ``nth`` confirmation prompt sent to the chat."""

        def is_nth(m: OutboundMessage) -> bool:
            prompts = [x for x in self.sent if x.kind is OutboundKind.CONFIRMATION]
            return len(prompts) >= nth and m is prompts[nth - 1]

        msg = await self.wait_for(is_nth, within=within)
        assert msg.confirmation is not None
        return msg.confirmation

    async def wait_text(self, fragment: str, *, within: float = 10.0) -> OutboundMessage:
        return await self.wait_for(
            lambda m: m.kind is OutboundKind.TEXT and fragment in m.text, within=within
        )

    def texts(self) -> list[str]:
        return [m.text for m in self.sent if m.kind is OutboundKind.TEXT]

    def kinds(self) -> list[tuple[str, str | None]]:
        return [(m.kind.value, m.confirmation.id if m.confirmation else None) for m in self.sent]


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

    async def start(**sections: Any) -> tuple[Gateway, RecordingChannel]:
        settings = make_settings(tmp_path, fake_llm, **sections)
        gw = Gateway(settings, serve_http=False)
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
