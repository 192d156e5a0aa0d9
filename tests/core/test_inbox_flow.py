"""Invariant 9 through the real bus, agent loop and gateway: stored before it returns,
taken before its turn's first effect (or when decided on the way in), replayed once after
a crash."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from config.keywords import load_keywords
from config.settings import DEFAULT_KEYWORDS_FILE, ConfirmationSettings, Settings
from gateway.agent.loop import AgentLoop
from gateway.app import build
from gateway.bus import InboundMessage, MessageBus, OutboundKind, PublishResult
from gateway.confirm.service import ConfirmationService
from gateway.storage.inbox import MemoryInbox, dump_message
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from gateway.storage.sqlite.inbox import SqliteInbox
from gateway.tools.runner import TurnContext
from tests.support import FailingInbox, RecordingChannel


def said(text: str, message_id: str | None, *, chat: str = "c1") -> InboundMessage:
    return InboundMessage(
        channel="rec", chat_id=chat, sender_id="alice", text=text, message_id=message_id
    )


async def test_publish_returns_once_the_message_is_stored() -> None:
    inbox = MemoryInbox()
    bus = MessageBus(inbox=inbox)
    assert await bus.publish_inbound(said("hi", "m1")) is PublishResult.QUEUED
    assert [m.message_id for m in await inbox.untaken()] == ["m1"]
    # A message without a platform id is queued, never stored (nothing would redeliver it).
    assert await bus.publish_inbound(said("hi", None)) is PublishResult.QUEUED
    assert [m.message_id for m in await inbox.untaken()] == ["m1"]


async def test_a_failed_store_raises_and_the_redelivery_is_taken_in() -> None:
    bus = MessageBus(inbox=FailingInbox())
    with pytest.raises(OSError, match="disk full"):
        await bus.publish_inbound(said("hi", "m1"))
    assert bus.inbound.empty()  # not stored, not acknowledged, not processed
    # The platform redelivers what was not acknowledged: not a duplicate.
    assert await bus.publish_inbound(said("hi", "m1")) is PublishResult.QUEUED
    assert await bus.publish_inbound(said("hi", "m1")) is PublishResult.DUPLICATE


@pytest.fixture
def sqlite_settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(confirmation={"store": "sqlite", "timeout_seconds": 30})


async def untaken_ids(data_dir: Path) -> list[str | None]:
    inbox = await SqliteInbox.open(data_dir / "inbox.db")
    try:
        return [m.message_id for m in await inbox.untaken()]
    finally:
        await inbox.close()


async def test_turns_and_decisions_mark_their_messages_taken(sqlite_settings: Settings) -> None:
    rec = RecordingChannel()
    gw = await build(sqlite_settings, serve_http=False)
    gw.channels.add(rec)
    async with gw:
        await gw.bus.publish_inbound(said("/sql DELETE FROM orders WHERE id = 3", "m1"))
        await rec.wait_prompt()
        result = await gw.bus.publish_inbound(said("确认", "m2"))
        assert result is PublishResult.INTERCEPTED
        await rec.wait_for(lambda m: m.kind is OutboundKind.TEXT and "DELETE" in m.text)
        assert gw.bus.inbox is not None
        assert await gw.bus.inbox.untaken() == []


async def test_what_a_crash_left_untaken_is_answered_once_after_restart(
    sqlite_settings: Settings,
) -> None:
    # What a process killed after acknowledging, before its agent took them, leaves behind.
    sqlite_settings.data_dir.mkdir(parents=True)
    left = await SqliteInbox.open(sqlite_settings.data_dir / "inbox.db")
    for i in range(1, 5):
        await left.put(said(f"/m{i}", f"m{i}"))
    await left.taken("rec", "m2")  # its turn had started: not replayed
    await left.close()

    rec = RecordingChannel()
    gw = await build(sqlite_settings, serve_http=False)
    gw.channels.add(rec)
    async with gw:
        # The platform redelivers one of them (it saw no ack in time): a duplicate.
        assert await gw.bus.publish_inbound(said("/m3", "m3")) is PublishResult.DUPLICATE
        # A new message in the same session is answered after everything before it.
        await gw.bus.publish_inbound(said("/m5", "m5"))
        await rec.wait_for(lambda m: m.reply_to == "m5")
        answered = [m.reply_to for m in rec.sent]
        assert answered == ["m1", "m3", "m4", "m5"]
    assert await untaken_ids(sqlite_settings.data_dir) == []


async def test_a_replayed_message_is_replayed_again_only_when_still_untaken(
    sqlite_settings: Settings,
) -> None:
    sqlite_settings.data_dir.mkdir(parents=True)
    left = await SqliteInbox.open(sqlite_settings.data_dir / "inbox.db")
    await left.put(said("/m1", "m1"))
    await left.close()
    replies_per_run = []
    for run in ("first", "second"):  # two clean restarts on the same data dir
        rec = RecordingChannel()
        gw = await build(sqlite_settings, serve_http=False)
        gw.channels.add(rec)
        async with gw:
            sentinel = f"s-{run}"
            await gw.bus.publish_inbound(said("/sentinel", sentinel))
            await rec.wait_for(lambda m, sentinel=sentinel: m.reply_to == sentinel)
        replies_per_run.append([m.reply_to for m in rec.sent])
    assert replies_per_run == [["m1", "s-first"], ["s-second"]]


class Thinking:
    """An agent whose turn thinks (no effect) until ``go`` is set, then says one line."""

    def __init__(self) -> None:
        self.thinking = asyncio.Event()
        self.go = asyncio.Event()

    async def handle(self, msg: InboundMessage, turn: TurnContext) -> None:
        self.thinking.set()
        await self.go.wait()
        await turn.say("answer")


def _confirmations(bus: MessageBus) -> ConfirmationService:
    """The service a loop goes on with ended calls through (none are asked here)."""
    return ConfirmationService(
        store=MemoryConfirmationStore(),
        bus=bus,
        settings=ConfirmationSettings(),
        keywords=load_keywords(DEFAULT_KEYWORDS_FILE),
    )


async def untaken_of(inbox: MemoryInbox) -> list[str | None]:
    return [m.message_id for m in await inbox.untaken()]


async def test_a_message_is_taken_at_its_turns_first_effect() -> None:
    inbox = MemoryInbox()
    bus = MessageBus(inbox=inbox)
    agent = Thinking()
    loop = AgentLoop(bus=bus, agent=agent, confirmations=_confirmations(bus))
    await loop.start()
    try:
        await bus.publish_inbound(said("hi", "m1"))
        await agent.thinking.wait()
        # While the model thinks nothing was shown or run: a crash now processes it again.
        assert await untaken_of(inbox) == ["m1"]
        agent.go.set()
        assert (await bus.consume_outbound()).text == "answer"
        assert await untaken_of(inbox) == []  # taken before the line went out
    finally:
        await loop.stop(timeout=1)


async def test_a_turn_cut_off_before_any_effect_stays_untaken() -> None:
    inbox = MemoryInbox()
    bus = MessageBus(inbox=inbox)
    agent = Thinking()
    loop = AgentLoop(bus=bus, agent=agent, confirmations=_confirmations(bus))
    await loop.start()
    await bus.publish_inbound(said("hi", "m1"))
    await agent.thinking.wait()
    await loop.stop(timeout=0)  # shutdown cancels the thinking turn
    assert await untaken_of(inbox) == ["m1"]  # the next run (or a replica) answers it


class Silent:
    async def handle(self, msg: InboundMessage, turn: TurnContext) -> None:
        return


async def test_a_turn_with_no_effect_is_taken_when_it_ends() -> None:
    inbox = MemoryInbox()
    bus = MessageBus(inbox=inbox)
    loop = AgentLoop(bus=bus, agent=Silent(), confirmations=_confirmations(bus))
    ended = asyncio.Event()
    loop.on_turn(lambda msg, running: None if running else ended.set())
    await loop.start()
    try:
        await bus.publish_inbound(said("hi", "m1"))
        await ended.wait()
        await loop.wait_idle(5)
        assert await untaken_of(inbox) == []
    finally:
        await loop.stop(timeout=1)


async def test_a_v1_inbox_file_is_upgraded_and_its_rows_adopted(tmp_path: Path) -> None:
    path = tmp_path / "inbox.db"
    with sqlite3.connect(path) as conn:  # what issue 12's gateway left behind
        conn.execute(
            "CREATE TABLE inbox (seq INTEGER PRIMARY KEY, channel TEXT NOT NULL,"
            " message_id TEXT NOT NULL, body TEXT NOT NULL, stored_at REAL NOT NULL,"
            " taken_at REAL, UNIQUE (channel, message_id))"
        )
        conn.execute(
            "INSERT INTO inbox (channel, message_id, body, stored_at) VALUES (?, ?, ?, ?)",
            ("rec", "old", dump_message(said("/old", "old")), 1.0),
        )
        conn.execute("PRAGMA user_version = 1")
    inbox = await SqliteInbox.open(path, owner="new-run")
    try:
        assert [m.text for m in await inbox.adopt(alive=())] == ["/old"]
        assert await inbox.put(said("/new", "new")) is True
        assert await inbox.adopt(alive=()) == []  # both are this run's now
    finally:
        await inbox.close()
