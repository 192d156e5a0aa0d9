"""A request refused because Redis stalled past the socket timeout leaves nothing approvable.

The create's script may still run when Redis resumes (a server busy with a slow command
runs what waited in its socket buffers), or not (Redis 7 drops the postponed command of a
client that ``CLIENT PAUSE`` held and that hung up meanwhile). Either way the id ends as a
``cancelled`` record once Redis answers again (gateway/confirm/unsure.py).

Each test has a ``redis-server`` of its own (tests/services.py ``private_redis``): a busy
script and ``CLIENT PAUSE`` hold up every client of a server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
import structlog
from redis.asyncio import Redis
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway import texts
from gateway.confirm.model import Confirmation, DecideOutcome, Decision, Status, ToolCall
from gateway.storage.confirmations import ConfirmationExistsError, FeedEntry, StoreUnavailableError
from gateway.storage.redis.confirmations import RedisConfirmationStore
from tests.confirm.records import make
from tests.core.harness import CHANNEL, Harness

pytestmark = pytest.mark.services

PREFIX = "gateway:confirm"
# Short, so that a stall of a few seconds outlasts it (the daemon's client has redis-py's
# default, 5 s).
SOCKET_TIMEOUT = 0.5
STALL_MS = 2000
# Keeps the server busy, as a slow command of another client would: nothing else runs.
BUSY = """
local t = redis.call('TIME')
local stop = t[1] * 1000000 + t[2] + tonumber(ARGV[1]) * 1000
while true do
  local n = redis.call('TIME')
  if n[1] * 1000000 + n[2] > stop then return 1 end
end
"""


@pytest.fixture
async def harness(private_redis_url: str) -> AsyncIterator[Harness]:
    store = await RedisConfirmationStore.from_url(
        private_redis_url, prefix=PREFIX, socket_timeout=SOCKET_TIMEOUT
    )
    # Scripts loaded, as in a daemon that has served a request: an EVALSHA that waited in
    # the stall runs then (after a Redis restart it would answer NOSCRIPT, writing nothing).
    await store.create(make("WARM"))
    h = Harness(store=store)
    yield h
    await h.service.unsure.stop()
    await store.close()


async def _request(h: Harness) -> Confirmation:
    return await h.service.request(
        session_key=f"{CHANNEL}:c1",
        channel=CHANNEL,
        chat_id="c1",
        requester="alice",
        is_group=False,
        tool_call=ToolCall(name="sql_modify", args={"sql": "DELETE FROM t"}, call_id="call1"),
        summary="DELETE t",
    )


async def _until_stalled(url: str) -> None:
    """Until the server stops answering (a PING of a client with a short timeout times out)."""
    probe = Redis.from_url(url, socket_timeout=0.2)
    try:
        async with asyncio.timeout(10):
            while True:
                try:
                    await probe.ping()
                except RedisTimeoutError:
                    return
                await asyncio.sleep(0.01)
    finally:
        await probe.aclose()


async def _next_for(feed: AsyncIterator[FeedEntry], cid: str) -> FeedEntry:
    async for entry in feed:
        if entry.id == cid:
            return entry
    raise AssertionError("the feed ended")


async def test_a_create_that_ran_after_the_stall_ends_cancelled_and_undecidable(
    harness: Harness, private_redis_admin: Redis, private_redis_url: str
) -> None:
    h = harness
    # Another replica's view of the store: sees what the stalled script wrote.
    other = await RedisConfirmationStore.from_url(private_redis_url, prefix=PREFIX)
    try:
        async with other.lifecycle_feed() as feed:
            with structlog.testing.capture_logs() as logs:
                busy = asyncio.ensure_future(private_redis_admin.eval(BUSY, 0, STALL_MS))
                await _until_stalled(private_redis_url)
                with pytest.raises(StoreUnavailableError):  # the turn is refused: not run
                    await _request(h)
                (cid,) = h.service.unsure.ids
                assert await busy == 1
                async with asyncio.timeout(20):
                    # The script that waited in the stall wrote a pending record...
                    requested = await _next_for(feed, cid)
                    assert (requested.kind, requested.local) == ("requested", False)
                    # ...that nobody in this process may approve: deciding settles it.
                    result = await h.decide(cid, Decision.APPROVE, actor="alice", via="text")
                    assert result.outcome is DecideOutcome.ALREADY_DECIDED, result
                    assert result.confirmation is not None
                    assert result.confirmation.status is Status.CANCELLED
                    resolved = await _next_for(feed, cid)
                    assert resolved.kind == "resolved"
    finally:
        await other.close()
    final = await h.store.get(cid)
    assert final is not None and final.status is Status.CANCELLED
    assert (final.reason, final.decided_via) == (texts.UNSURE_CREATE_REASON, "system")
    trail = [(e.kind, e.detail.get("status")) for e in await h.store.events(cid)]
    assert trail == [("requested", None), ("decided", "cancelled")]
    settled = [e for e in logs if e["event"] == "confirm.unsure_settled"]
    assert [(e["confirmation_id"], e["was_stored"]) for e in settled] == [(cid, True)]
    assert h.service.unsure.ids == ()
    # The chat was told only that the call did not run (by the runner): no prompt, no update.
    assert h.drain() == []


async def test_a_create_redis_never_ran_is_stored_cancelled_and_a_late_one_is_refused(
    harness: Harness, private_redis_admin: Redis, private_redis_url: str
) -> None:
    h = harness
    resolved = h.events("resolved")
    with structlog.testing.capture_logs() as logs:
        await private_redis_admin.execute_command("CLIENT", "PAUSE", STALL_MS, "ALL")
        with pytest.raises(StoreUnavailableError):
            await _request(h)
        (cid,) = h.service.unsure.ids
        async with asyncio.timeout(20):
            final = await resolved.get()
    assert final.id == cid and final.status is Status.CANCELLED
    stored = await h.store.get(cid)
    assert stored is not None and stored.status is Status.CANCELLED
    assert stored.reason == texts.UNSURE_CREATE_REASON
    settled = [e for e in logs if e["event"] == "confirm.unsure_settled"]
    assert [(e["confirmation_id"], e["was_stored"]) for e in settled] == [(cid, False)]
    trail = [(e.kind, e.detail.get("status")) for e in await h.store.events(cid)]
    assert trail == [("requested", None), ("decided", "cancelled")]
    # A create of that id that still lands late finds it taken and writes nothing.
    with pytest.raises(ConfirmationExistsError):
        await h.store.create(replace(stored, status=Status.PENDING))
    result = await h.decide(cid, Decision.APPROVE, actor="alice", via="text")
    assert result.outcome is DecideOutcome.ALREADY_DECIDED
    assert h.drain() == []


async def test_stop_names_the_ids_left_in_doubt(
    harness: Harness, private_redis_admin: Redis
) -> None:
    h = harness
    with structlog.testing.capture_logs() as logs:
        await private_redis_admin.execute_command("CLIENT", "PAUSE", STALL_MS, "ALL")
        with pytest.raises(StoreUnavailableError):
            await _request(h)
        (cid,) = h.service.unsure.ids
        await h.service.unsure.stop()
    left = [e for e in logs if e["event"] == "confirm.unsure_left"]
    assert [e["ids"] for e in left] == [[cid]]


async def test_an_approval_that_won_elsewhere_runs_once_here(
    harness: Harness, private_redis_url: str
) -> None:
    """Another replica approved the record before this one could cancel it: the
    compare-and-set lets one win, and the approved call goes on here too (the claim lets
    one of the two run it)."""
    h = harness
    ran: asyncio.Queue[Confirmation] = asyncio.Queue()
    h.service.on_settled(ran.put_nowait)  # what goes on from here
    record = replace(make("RACE", session=f"{CHANNEL}:c1"), owner=h.service.instance.id)
    other = await RedisConfirmationStore.from_url(private_redis_url, prefix=PREFIX)
    try:
        # The create "timed out" here, but landed; another replica's admin approved it.
        await other.create(record)
        _, changed = await other.finish(
            "RACE",
            Status.APPROVED,
            by="bob",
            via="admin",
            reason=None,
            now=record.created_at,
        )
        assert changed
        h.service.unsure.create_failed(record, (), StoreUnavailableError("Redis: timeout"))
        async with asyncio.timeout(20):
            approved = await ran.get()
    finally:
        await other.close()
    assert (approved.id, approved.status, approved.decided_by) == ("RACE", Status.APPROVED, "bob")
    assert h.service.unsure.ids == ()
    assert ran.empty()
