"""SQLite inbox specifics: puts and takens on the loop, the rest (checkpoints included) on
its thread. What every inbox does is in the contract suite (tests/core/test_inbox_contract.py).
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from gateway.bus import InboundMessage
from gateway.storage.sqlite import inbox as sqlite_inbox
from gateway.storage.sqlite.inbox import SqliteInbox
from tests.support import count_hops


def msg(message_id: str) -> InboundMessage:
    return InboundMessage(
        channel="feishu", chat_id="oc_1", sender_id="ou_a", text="hi", message_id=message_id
    )


async def test_puts_and_takens_stay_on_the_loop_and_checkpoints_go_to_the_thread(
    tmp_path: Path,
) -> None:
    # Issue 14: a thread hop per put and per taken was most of what storing an inbound
    # message cost. The thread gets one checkpoint every checkpoint_every writes.
    inbox = await SqliteInbox.open(tmp_path / "inbox.db", owner="me", checkpoint_every=3)
    loop = asyncio.get_running_loop()
    hops = count_hops(loop)
    try:
        assert await inbox.put(msg("m1")) is True
        assert await inbox.put(msg("m1")) is False  # a redelivery: stored once
        assert hops[0] == 0
        await inbox.taken("feishu", "m1")  # the third write
        await inbox.close()  # waits for the checkpoint it handed over
        assert hops[0] == 2  # the checkpoint, and closing the file
    finally:
        del loop.call_soon_threadsafe
    again = await SqliteInbox.open(tmp_path / "inbox.db", owner="me")
    try:
        assert await again.untaken() == []
        assert await again.put(msg("m1")) is False
    finally:
        await again.close()


async def test_a_put_that_cannot_get_the_write_lock_fails(tmp_path: Path) -> None:
    inbox = await SqliteInbox.open(tmp_path / "inbox.db", owner="me", busy_timeout_ms=50)
    try:
        assert await inbox.put(msg("m0")) is True
        # Another connection holds the write lock past the busy timeout: the put raises,
        # so the message is not acknowledged (the platform sends it again).
        blocker = sqlite3.connect(tmp_path / "inbox.db", isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                await inbox.put(msg("m1"))
            blocker.execute("ROLLBACK")
        finally:
            blocker.close()
        assert await inbox.put(msg("m1")) is True
        assert [m.message_id for m in await inbox.untaken()] == ["m0", "m1"]
    finally:
        await inbox.close()


async def test_purge_goes_in_chunks_and_keeps_the_untaken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_inbox, "PURGE_CHUNK", 2)
    inbox = await SqliteInbox.open(tmp_path / "inbox.db", owner="me")
    try:
        for n in range(7):
            await inbox.put(msg(f"m{n}"))
        for n in range(5):
            await inbox.taken("feishu", f"m{n}", at=100.0 + n)
        assert await inbox.purge(before=200.0) == 5
        assert [m.message_id for m in await inbox.untaken()] == ["m5", "m6"]
    finally:
        await inbox.close()
