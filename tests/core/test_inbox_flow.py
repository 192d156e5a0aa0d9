"""Invariant 9 through the real bus, agent loop and gateway: stored before it returns,
taken when its turn starts (or when decided on the way in), replayed once after a crash."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from config.settings import Settings
from gateway.app import build
from gateway.bus import InboundMessage, MessageBus, OutboundKind, PublishResult
from gateway.inbox import MemoryInbox
from gateway.sqlite_inbox import SqliteInbox
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
