"""Replicas and restarts (gateway/confirm/replicas.py).

Two gateway replicas sharing one Redis store: a reply on one wakes the turn on the other,
and the call is run once, by the replica that asked. After a restart on a store no other
process uses, an approved call left pending runs in the new process.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from gateway.bus import OutboundKind
from gateway.confirm.model import Confirmation, ExecState, Instance, Status, ToolCall
from gateway.storage.confirmations import StoreUnavailableError
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from gateway.storage.redis.confirmations import RedisConfirmationStore
from tests.confirm.records import make
from tests.core.harness import Harness
from tests.services import mask_url, require_service

REDIS_URL = os.environ.get("GATEWAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
async def replicas() -> AsyncIterator[tuple[Harness, Harness]]:
    prefix = f"gateway-test:{uuid.uuid4().hex}"
    try:
        store_a = await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix)
    except (OSError, ConnectionError) as exc:
        require_service(f"Redis at {mask_url(REDIS_URL)}", exc)
    store_b = await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix)
    a, b = Harness(store=store_a), Harness(store=store_b)
    await a.service.recover()  # each follows the finished feed once recover() returns
    await b.service.recover()
    yield a, b
    for h in (a, b):
        await h.service.shutdown()
    keys = [k async for k in store_a._redis.scan_iter(match=f"{prefix}:*")]
    if keys:
        await store_a._redis.delete(*keys)
    await store_a.close()
    await store_b.close()


async def test_a_reply_on_the_other_replica_ends_the_call_and_goes_on_there(
    replicas: tuple[Harness, Harness],
) -> None:
    a, b = replicas
    await a.service.recover()  # A follows the feed
    _, conf = await a.ask()
    assert conf.id in a.service.deadlines
    await b.reply("确认")  # the platform delivered the reply to replica B
    async with asyncio.timeout(5):  # well before the 30 s confirmation timeout
        final = await b.ended(conf.id)  # B took the decision: B goes on with it
    assert final.status is Status.APPROVED and final.id == conf.id
    update = await b.next_out(OutboundKind.CONFIRMATION_UPDATE)
    assert update.confirmation is not None and update.confirmation.status is Status.APPROVED
    # A held its deadline; the feed tells A it ended, and A lets it go.
    async with asyncio.timeout(5):
        while conf.id in a.service.deadlines:
            await asyncio.sleep(0.01)
    await b.service.shutdown()


async def test_shutdown_of_one_replica_leaves_the_others_calls(
    replicas: tuple[Harness, Harness],
) -> None:
    a, b = replicas
    task, conf = await a.ask()
    await b.service.recover()  # B adopts timers for what is pending, as at its start
    await b.service.shutdown()
    record = await a.store.get(conf.id)
    assert record is not None and record.status is Status.PENDING
    assert not task.done()
    task.cancel()


async def test_a_call_left_by_a_previous_process_runs_here_once_approved() -> None:
    # A store no other process uses: the pending call has no turn anywhere any more.
    store = MemoryConfirmationStore()
    now = time.time()
    left = Confirmation(
        id="K7Q2",
        session_key="test:c1",
        channel="test",
        chat_id="c1",
        requester="alice",
        is_group=False,
        tool_call=ToolCall("sql_modify", {"sql": "DELETE FROM t"}, "call1"),
        summary="DELETE t",
        created_at=now,
        expires_at=now + 30,
    )
    await store.create(left)
    h = Harness(store=store)  # the restarted process
    await h.service.recover()
    # Its prompt is shown again once, with the time left.
    reposted = await h.next_out(OutboundKind.CONFIRMATION)
    assert reposted.confirmation is not None and reposted.confirmation.id == left.id
    assert "重启" in reposted.text and "Time left" in reposted.text
    task, conf = await h.ask(chat="c2")  # asked here: the same path goes on with both
    await h.reply(f"确认 {left.id}")
    await h.reply("确认", chat="c2")
    assert (await h.ended(left.id)).status is Status.APPROVED
    assert (await task).status is Status.APPROVED
    await h.service.shutdown()
    assert (await store.get(left.id)).status is Status.APPROVED  # type: ignore[union-attr]


class _GetFailsOnce(RedisConfirmationStore):
    """The real Redis store, whose next ``get`` fails once when armed (a Redis blip)."""

    armed = False

    async def get(self, confirmation_id: str) -> Confirmation | None:
        if self.armed:
            self.armed = False
            raise StoreUnavailableError("Redis blip (test)")
        return await super().get(confirmation_id)


async def test_a_failed_read_does_not_end_the_follower() -> None:
    prefix = f"gateway-test:{uuid.uuid4().hex}"
    try:
        store_a = await _GetFailsOnce.from_url(REDIS_URL, prefix=prefix)
    except (OSError, ConnectionError) as exc:
        require_service(f"Redis at {mask_url(REDIS_URL)}", exc)
    assert isinstance(store_a, _GetFailsOnce)
    store_b = await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix)
    a, b = Harness(store=store_a), Harness(store=store_b)
    try:
        await a.service.recover()
        await b.service.recover()
        seen_at_a = a.events("resolved")  # what A's live views hear, B's changes too
        _, c1 = await a.ask(chat="c1")
        store_a.armed = True  # the follower's read of the decision fails
        await b.reply("确认", chat="c1")
        async with asyncio.timeout(10):
            assert (await b.ended(c1.id)).status is Status.APPROVED
        # The follower is still there: the next cross-replica decision reaches A's views.
        _, c2 = await a.ask(chat="c2")
        await b.reply("确认", chat="c2")
        async with asyncio.timeout(10):
            seen = await seen_at_a.get()
            while seen.id != c2.id:
                seen = await seen_at_a.get()
        assert seen.status is Status.APPROVED
    finally:
        for h in (a, b):
            await h.service.shutdown()
        keys = [k async for k in store_a._redis.scan_iter(match=f"{prefix}:*")]
        if keys:
            await store_a._redis.delete(*keys)
        await store_a.close()
        await store_b.close()


class _Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class _StallingStore(MemoryConfirmationStore):
    """A store whose heartbeats land ``stall`` seconds after they were sent (a paused Redis:
    CLIENT PAUSE holds every replica's beat up alike)."""

    def __init__(self, clock: _Clock) -> None:
        super().__init__()
        self.clock = clock
        self.stall = 0.0

    async def heartbeat(self, instance: Instance, *, lease: float) -> None:
        self.clock.now += self.stall
        await super().heartbeat(instance, lease=lease)


async def test_a_stalled_store_does_not_make_live_replicas_look_dead() -> None:
    clock = _Clock()
    store = _StallingStore(clock)
    a, b = Harness(store=store, clock=clock), Harness(store=store, clock=clock)
    lease = a.service.lease
    me_a = a.service.instance.id
    await a.service._replicas.beat()
    await b.service._replicas.beat()
    # A runs an approved call.
    await store.create(make("RUN1", created_at=clock.now, owner=me_a))
    await store.finish("RUN1", Status.APPROVED, by="alice", via="text", reason=None, now=clock.now)
    await store.claim("RUN1", instance=me_a, now=clock.now, lease=lease)
    await store.start_execution("RUN1", instance=me_a, now=clock.now)

    async def state() -> ExecState:
        found = await store.get("RUN1")
        assert found is not None
        return found.execution.state

    store.stall = lease + 5  # B's beat lands long after it was sent; A's waits behind it
    await b.service._replicas.beat()
    await b.service.adopt_dead()
    assert await state() is ExecState.RUNNING  # A's beat is late, A is not dead
    store.stall = 0.0
    clock.now += lease / 3
    await a.service._replicas.beat()  # A's next beat lands: the store serves again
    await b.service._replicas.beat()
    clock.now += lease / 3
    await b.service.adopt_dead()
    assert await state() is ExecState.RUNNING
    # Now A dies: no beat for a lease while B's land.
    clock.now += lease + 1
    await b.service._replicas.beat()
    await b.service.adopt_dead()
    assert await state() is ExecState.INTERRUPTED
