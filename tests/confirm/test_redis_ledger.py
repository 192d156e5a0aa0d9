"""Redis specifics of the ledger: TTLs, index upkeep, cursors over equal timestamps."""

from __future__ import annotations

import pytest

from gateway.confirm.model import AuditEvent, ExecState, Instance, Status
from gateway.storage.redis.confirmations import RedisConfirmationStore
from tests.confirm.conftest import Backend, redis_client
from tests.confirm.records import T0, make

pytestmark = [pytest.mark.services, pytest.mark.parametrize("backend", ["redis"], indirect=True)]


async def _store(backend: Backend) -> RedisConfirmationStore:
    store = await backend.open()
    assert isinstance(store, RedisConfirmationStore)
    return store


async def test_pages_over_equal_created_at_neither_skip_nor_repeat(backend: Backend) -> None:
    store = await _store(backend)
    ids = [f"T{n:03d}" for n in range(23)]
    for cid in ids:
        await store.create(make(cid, created_at=T0))  # one timestamp for all
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page, cursor = await store.page(limit=5, cursor=cursor)
        seen.extend(c.id for c in page)
        if cursor is None:
            break
    assert seen == sorted(ids, reverse=True)


async def test_purge_tidies_indexes_of_records_whose_ttl_ran_out(backend: Backend) -> None:
    store = await _store(backend)
    admin = await redis_client()
    try:
        for cid in ("GON1", "GON2"):
            await store.create(make(cid))
            await store.finish(cid, Status.REJECTED, by="b", via="r", reason=None, now=T0 + 1)
        assert await store.count(Status.REJECTED) == 2
        await admin.delete(f"{backend.redis_prefix}:c:GON1")  # as if its TTL ran out
        assert await store.purge(before=T0 + 2) == 1  # only GON2 still had a record
        assert await store.count(Status.REJECTED) == 0
        assert await admin.zcard(f"{backend.redis_prefix}:index") == 0
        assert await admin.zcard(f"{backend.redis_prefix}:settled") == 0
    finally:
        await admin.aclose()


async def test_events_and_heartbeats_expire(backend: Backend) -> None:
    store = await _store(backend)
    admin = await redis_client()
    prefix = backend.redis_prefix
    try:
        await store.create(make("EVT1"))
        await store.add_event(AuditEvent(confirmation_id="EVT1", at=T0, kind="requested"))
        # Absolute expiry times (Redis >= 7), held within a second, not to the millisecond:
        # the trail gets the record's remaining PTTL by PEXPIRE, and the two read the
        # server's clock apart even inside one script (1 ms seen with three suites running
        # at once). What this catches is a trail with no TTL, or one of its own.
        record_at = await admin.execute_command("PEXPIRETIME", f"{prefix}:c:EVT1")
        events_at = await admin.execute_command("PEXPIRETIME", f"{prefix}:ev:EVT1")
        assert 0 < events_at <= record_at + 1000
        await store.finish("EVT1", Status.CANCELLED, by=None, via="s", reason=None, now=T0)
        assert 0 < await admin.ttl(f"{prefix}:ev:EVT1") <= 3600  # the finished TTL

        me = Instance(id="i1", pid=1, host="h", started_at=T0, seen_at=T0)
        await store.heartbeat(me, lease=15)
        assert 0 < await admin.pttl(f"{prefix}:alive:i1") <= 15_000
        await store.forget_instance("i1")
        assert await admin.exists(f"{prefix}:alive:i1") == 0
        assert await store.list_instances() == []
    finally:
        await admin.aclose()


async def test_indexes_follow_the_ledger(backend: Backend) -> None:
    """What the per-instance sets hold after each step (listings read only these)."""
    store = await _store(backend)
    admin = await redis_client()
    p = backend.redis_prefix

    async def members(key: str) -> list[str]:
        return [m.decode() for m in await admin.zrange(f"{p}:{key}", 0, -1)]

    try:
        await store.create(make("L001", owner="a"))
        assert await members("owned:a") == ["L001"]
        await store.finish("L001", Status.APPROVED, by="b", via="r", reason=None, now=T0 + 1)
        assert await members("approved-waiting") == ["L001"]
        await store.claim("L001", instance="b", now=T0 + 2, lease=15)
        assert (await members("approved-waiting"), await members("claims:b")) == ([], ["L001"])
        await store.finish_execution(
            "L001", instance="b", state=ExecState.FAILED, result="boom", now=T0 + 3
        )
        assert (await members("owned:a"), await members("claims:b")) == ([], [])
        done = await store.get("L001")
        assert done is not None and done.execution.result == "boom"
    finally:
        await admin.aclose()
