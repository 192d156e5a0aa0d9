"""A call that ran while Redis stalled: its end reaches the record once Redis answers.

The tool ran (or was stopped mid-run); the store did not answer the write of how it
ended. The chat hears the outcome at once; the record says it once Redis is back
(gateway/tools/executor.py, ``tool.ledger_deferred``). Each test has a ``redis-server`` of
its own: ``CLIENT PAUSE`` holds up every client of a server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import structlog
from redis.asyncio import Redis

from gateway import texts
from gateway.bus import OutboundKind
from gateway.confirm.model import Confirmation, ExecState, Status
from gateway.storage.confirmations import StoreUnavailableError
from gateway.storage.redis.confirmations import RedisConfirmationStore
from gateway.tools.base import ToolRegistry
from gateway.tools.executor import Executor
from tests.core.harness import Harness
from tests.core.test_executor import CountingTool, _said
from tests.core.test_unsure_create import BUSY, SOCKET_TIMEOUT, _until_stalled

pytestmark = pytest.mark.services

STALL_MS = 2000


@pytest.fixture
async def harness(private_redis_url: str) -> AsyncIterator[Harness]:
    store = await RedisConfirmationStore.from_url(
        private_redis_url, prefix="gateway:confirm", socket_timeout=SOCKET_TIMEOUT
    )
    h = Harness(store=store)
    yield h
    await store.close()


async def _approved_and_running(
    h: Harness, tool: CountingTool, executor: Executor
) -> tuple[Confirmation, asyncio.Future[object], list[str]]:
    task, _ = await h.ask()
    await h.reply("确认")
    record = await task
    assert record.status is Status.APPROVED
    lines, say = _said()
    tool.release = asyncio.Event()
    run = asyncio.ensure_future(executor.run(record, say=say, report=True))
    await tool.started.wait()
    return record, run, lines


async def test_a_run_that_ends_while_redis_stalls_is_told_now_and_recorded_later(
    harness: Harness, private_redis_admin: Redis, private_redis_url: str
) -> None:
    h = harness
    tool = CountingTool()
    executor = Executor(registry=ToolRegistry([tool]), confirmations=h.service)
    ended = h.events("executed")
    record, run, lines = await _approved_and_running(h, tool, executor)
    with structlog.testing.capture_logs() as logs:
        await private_redis_admin.execute_command("CLIENT", "PAUSE", STALL_MS, "ALL")
        await _until_stalled(private_redis_url)
        assert tool.release is not None
        tool.release.set()
        ran = await run  # the store's refusal does not reach the turn
        assert (ran.status, ran.output) == ("succeeded", "DELETE: 1 rows")
        assert any("DELETE: 1 rows" in line for line in lines)  # the chat was told at once
        async with asyncio.timeout(20):
            final = await ended.get()
    assert final.id == record.id and final.execution.state is ExecState.SUCCEEDED
    stored = await h.store.get(record.id)
    assert stored is not None and stored.execution.state is ExecState.SUCCEEDED
    assert [e["event"] for e in logs if e["event"].startswith("tool.ledger")] == [
        "tool.ledger_deferred",
        "tool.ledger_written",
    ]
    assert tool.runs == 1


async def test_a_run_stopped_while_redis_stalls_is_reported_interrupted_once_it_answers(
    harness: Harness, private_redis_admin: Redis, private_redis_url: str
) -> None:
    h = harness
    tool = CountingTool()
    executor = Executor(registry=ToolRegistry([tool]), confirmations=h.service)
    record, run, _ = await _approved_and_running(h, tool, executor)
    h.drain()
    await private_redis_admin.execute_command("CLIENT", "PAUSE", STALL_MS, "ALL")
    await _until_stalled(private_redis_url)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):  # stays a cancellation, not a store error
        await run
    async with asyncio.timeout(20):
        told = await h.next_out()
    assert told.kind is not OutboundKind.CONFIRMATION
    assert told.text == texts.interrupted(await h.store.get(record.id) or record)
    stored = await h.store.get(record.id)
    assert stored is not None and stored.execution.state is ExecState.INTERRUPTED


class _StallsAfterClaim(RedisConfirmationStore):
    """The real Redis store; the test's Redis stalls right after a claim is granted."""

    stall: Callable[[], Awaitable[None]] | None = None

    async def claim(
        self, confirmation_id: str, *, instance: str, now: float, lease: float
    ) -> Confirmation | None:
        claimed = await super().claim(confirmation_id, instance=instance, now=now, lease=lease)
        if self.stall is not None:
            await self.stall()
        return claimed


async def test_a_claim_whose_start_redis_does_not_take_is_recorded_as_not_run(
    private_redis_admin: Redis, private_redis_url: str
) -> None:
    store = await _StallsAfterClaim.from_url(
        private_redis_url, prefix="gateway:confirm", socket_timeout=SOCKET_TIMEOUT
    )
    assert isinstance(store, _StallsAfterClaim)
    h = Harness(store=store)
    tool = CountingTool()
    executor = Executor(registry=ToolRegistry([tool]), confirmations=h.service)
    ended = h.events("executed")
    try:
        task, _ = await h.ask()
        await h.reply("确认")
        record = await task

        async def stall() -> None:
            await private_redis_admin.execute_command("CLIENT", "PAUSE", STALL_MS, "ALL")
            await _until_stalled(private_redis_url)

        store.stall = stall
        _, say = _said()
        with pytest.raises(StoreUnavailableError):  # the turn tells its chat the store is down
            await executor.run(record, say=say)
        store.stall = None
        async with asyncio.timeout(20):
            final = await ended.get()
        assert final.id == record.id and final.execution.state is ExecState.FAILED
        assert final.execution.result == texts.NOT_RUN_STORE_RESULT
        assert tool.runs == 0
        await executor.stop(1.0)
    finally:
        await store.close()


@pytest.mark.parametrize("stall", ["busy", "pause"])
async def test_a_claim_redis_does_not_answer_ends_as_not_run(
    harness: Harness, private_redis_admin: Redis, private_redis_url: str, stall: str
) -> None:
    # busy: the claim's script waits behind a slow one and runs after the client gave up
    # (made, reply lost); pause: Redis drops it (never made). Either way the call does not
    # wait for this live process, which told its chat the store was down.
    h = harness
    tool = CountingTool()
    executor = Executor(registry=ToolRegistry([tool]), confirmations=h.service)
    ended = h.events("executed")
    task, _ = await h.ask()
    await h.reply("确认")
    record = await task
    if stall == "busy":
        busy = asyncio.ensure_future(private_redis_admin.eval(BUSY, 0, STALL_MS))
    else:
        await private_redis_admin.execute_command("CLIENT", "PAUSE", STALL_MS, "ALL")
    await _until_stalled(private_redis_url)
    _, say = _said()
    with pytest.raises(StoreUnavailableError):
        await executor.run(record, say=say)
    async with asyncio.timeout(20):
        final = await ended.get()
    assert final.id == record.id and final.execution.state is ExecState.FAILED
    assert final.execution.result == texts.NOT_RUN_STORE_RESULT
    assert tool.runs == 0
    if stall == "busy":
        assert await busy == 1
