"""The hourly purge keeps settled records ``retention_days`` after their decision.

Time is injected: the clock is a variable, and the hour between purges is a wait the test
releases, so nothing sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gateway.confirm.model import AuditEvent, Confirmation, Status, ToolCall
from gateway.confirm.retention import DAY, PURGE_EVERY_SECONDS, Retention
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from tests.confirm.conftest import LEDGER_BACKENDS, Backend

T0 = 1_800_000_000.0


def record(cid: str, created_at: float) -> Confirmation:
    return Confirmation(
        id=cid,
        session_key=f"webchat:{cid}",
        channel="webchat",
        chat_id=cid,
        requester="alice",
        is_group=False,
        tool_call=ToolCall("sql_modify", {"statement": "DELETE FROM t"}, f"call_{cid}"),
        summary="DELETE on t",
        created_at=created_at,
        expires_at=created_at + 300.0,
    )


class Hours:
    """The purge's ``wait``: each call says how long it wanted, then blocks until released."""

    def __init__(self) -> None:
        self.asked: asyncio.Queue[float] = asyncio.Queue()
        self._go: asyncio.Queue[None] = asyncio.Queue()

    async def wait(self, seconds: float) -> None:
        self.asked.put_nowait(seconds)
        await self._go.get()

    def pass_one(self) -> None:
        self._go.put_nowait(None)


@pytest.mark.parametrize("backend", LEDGER_BACKENDS, indirect=True)
async def test_settled_records_go_after_the_retention_pending_ones_stay(
    backend: Backend,
) -> None:
    store = await backend.open()
    old, recent = record("OLD1", T0 - 40 * DAY), record("RC1", T0 - 40 * DAY)
    waiting = record("PND1", T0 - 40 * DAY)
    for c in (old, recent, waiting):
        await store.create(c)
        await store.add_event(AuditEvent(confirmation_id=c.id, at=c.created_at, kind="requested"))
    # Settled 31 days ago, and 29.5 days ago; PND1 is still pending (never purged).
    await store.finish("OLD1", Status.EXPIRED, by=None, via=None, reason=None, now=T0 - 31 * DAY)
    await store.finish("RC1", Status.CANCELLED, by=None, via=None, reason=None, now=T0 - 29.5 * DAY)

    now = T0
    hours = Hours()
    retention = Retention(store=store, keep_days=30, clock=lambda: now, wait=hours.wait)
    retention.start()
    try:
        assert await hours.asked.get() == PURGE_EVERY_SECONDS  # the first purge has run
        assert await store.get("OLD1") is None
        assert await store.events("OLD1") == []
        assert await store.get("RC1") is not None
        assert [e.kind for e in await store.events("RC1")] == ["requested"]

        now = T0 + DAY  # a day of hourly purges later, RC1 is 30.5 days settled
        hours.pass_one()
        await hours.asked.get()
        assert await store.get("RC1") is None
        assert (await store.get("PND1")) is not None
        assert await store.count(Status.PENDING) == 1
    finally:
        await retention.stop()


async def test_a_failing_purge_is_tried_again_the_next_hour() -> None:
    class DownOnce(MemoryConfirmationStore):
        """The real memory store, unreachable for its first purge."""

        calls = 0

        async def purge(self, *, before: float) -> int:
            self.calls += 1
            if self.calls == 1:
                raise ConnectionError("store down")
            return await super().purge(before=before)

    store = DownOnce()
    await store.create(record("OLD2", T0 - 40 * DAY))
    await store.finish("OLD2", Status.EXPIRED, by=None, via=None, reason=None, now=T0 - 31 * DAY)
    hours = Hours()
    retention = Retention(store=store, keep_days=30, clock=lambda: T0, wait=hours.wait)
    retention.start()
    try:
        await hours.asked.get()
        assert await store.get("OLD2") is not None
        hours.pass_one()
        await hours.asked.get()
        assert store.calls == 2
        assert await store.get("OLD2") is None
    finally:
        await retention.stop()


async def test_stop_ends_the_task_when_the_store_swallows_the_cancel() -> None:
    """redis-py 8 completes a command it was cancelled in and returns normally; the stop
    then waited for the next hour (found by tests/process with store = "redis")."""

    class Swallows(MemoryConfirmationStore):
        def __init__(self) -> None:
            super().__init__()
            self.entered = asyncio.Event()
            self.release = asyncio.Event()

        async def purge(self, *, before: float) -> int:
            self.entered.set()
            # What the client library does: finish the command, no error.
            with contextlib.suppress(asyncio.CancelledError):
                await self.release.wait()
            return await super().purge(before=before)

    store = Swallows()
    retention = Retention(store=store, keep_days=30)
    retention.start()
    await store.entered.wait()
    await asyncio.wait_for(retention.stop(), 10)  # a guard against a hang, not a timing
