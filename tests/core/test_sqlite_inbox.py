"""SQLite inbox specifics: writes that arrive together are committed together (group commit).

What every inbox does is in the contract suite (tests/core/test_inbox_contract.py).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.bus import InboundMessage
from gateway.sqlite_inbox import SqliteInbox


def msg(message_id: str) -> InboundMessage:
    return InboundMessage(
        channel="feishu", chat_id="oc_1", sender_id="ou_a", text="hi", message_id=message_id
    )


@pytest.fixture
async def inbox(tmp_path: Path) -> AsyncIterator[SqliteInbox]:
    handle = await SqliteInbox.open(tmp_path / "inbox.db", owner="me")
    yield handle
    await handle.close()


def count_hops(loop: asyncio.AbstractEventLoop) -> list[int]:
    """Thread hops back to ``loop`` until ``del loop.call_soon_threadsafe``."""
    hops = [0]
    original = loop.call_soon_threadsafe

    def counting(*args: Any, **kwargs: Any) -> Any:
        hops[0] += 1
        return original(*args, **kwargs)

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    return hops


async def test_puts_and_takens_that_arrive_together_share_one_hop(inbox: SqliteInbox) -> None:
    # Issue 14: a thread hop per put was most of what storing an inbound message cost.
    await inbox.put(msg("m0"))
    loop = asyncio.get_running_loop()
    hops = count_hops(loop)
    try:
        results = await asyncio.gather(
            inbox.put(msg("m1")),
            inbox.put(msg("m2")),
            inbox.put(msg("m1")),  # the same message twice in one batch: stored once
            inbox.taken("feishu", "m0"),
            inbox.put(msg("m3")),
        )
    finally:
        del loop.call_soon_threadsafe
    assert results == [True, True, False, None, True]
    # All five were queued before the writer ran: one transaction, one hop.
    assert hops[0] == 1
    assert [m.message_id for m in await inbox.untaken()] == ["m1", "m2", "m3"]


async def test_a_failed_batch_fails_every_write_in_it(tmp_path: Path) -> None:
    inbox = await SqliteInbox.open(tmp_path / "inbox.db", owner="me", busy_timeout_ms=50)
    try:
        await inbox.put(msg("m0"))
        # Another connection holds the write lock past the busy timeout: the batch fails
        # as a whole, and every caller hears it (none of them may acknowledge).
        blocker = sqlite3.connect(tmp_path / "inbox.db", isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            results = await asyncio.gather(
                inbox.put(msg("m1")),
                inbox.put(msg("m2")),
                inbox.put(msg("m3")),
                return_exceptions=True,
            )
            blocker.execute("ROLLBACK")
        finally:
            blocker.close()
        assert all(isinstance(r, sqlite3.OperationalError) for r in results), results
        # Nothing of the batch was stored; the next puts work.
        assert await inbox.put(msg("m2")) is True
        assert [m.message_id for m in await inbox.untaken()] == ["m0", "m2"]
    finally:
        await inbox.close()
