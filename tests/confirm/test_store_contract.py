"""The ConfirmationStore contract, run unchanged against every backend.

`backend` is parametrized with ``indirect=True`` (as aiogram tests its FSM storages): a new
backend joins by adding a branch to the fixture. ``backend.open()`` gives another handle on
the same data, the way a second gateway replica (Redis) or a second process on the same
file (SQLite) would see it; for memory it is the same object.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace

import pytest

from gateway.confirm.model import ExecState, Status
from gateway.storage.confirmations import (
    ConfirmationExistsError,
    ConfirmationStore,
    FeedEntry,
    PendingLimitReached,
    PendingLimits,
)
from gateway.storage.redis.confirmations import RedisConfirmationStore
from tests.confirm.conftest import BACKENDS, DURABLE_BACKENDS, Backend, redis_client
from tests.confirm.records import T0, TIMEOUT, full_record, make


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
class TestStoreContract:
    async def test_create_get_round_trips_every_field(self, store: ConfirmationStore) -> None:
        c = full_record()
        await store.create(c)
        got = await store.get(c.id)
        assert got == c
        assert got is not None
        assert isinstance(got.approvers, tuple)
        assert got.to_dict() == c.to_dict()

    async def test_decision_fields_round_trip(self, store: ConfirmationStore) -> None:
        c = full_record()
        await store.create(c)
        at = T0 + 12.000001
        done, changed = await store.finish(
            c.id,
            Status.REJECTED,
            by="ou_boss",
            via="card",
            reason="只删前10条 / only the first 10",
            now=at,
            feedback=True,
        )
        assert changed
        expected = c.finished(
            Status.REJECTED,
            by="ou_boss",
            at=at,
            via="card",
            reason="只删前10条 / only the first 10",
            feedback=True,
        )
        # The execution part (skipped) is the ledger suite's to check.
        assert done is not None and replace(done, execution=c.execution) == expected
        got = await store.get(c.id)
        assert got is not None and replace(got, execution=c.execution) == expected

    async def test_get_unknown_is_none(self, store: ConfirmationStore) -> None:
        assert await store.get("ZZ99") is None

    async def test_duplicate_id_raises_and_keeps_the_first(self, store: ConfirmationStore) -> None:
        first = make("AB12")
        await store.create(first)
        with pytest.raises(ConfirmationExistsError):
            await store.create(make("AB12", session="console:bob", summary="other"))
        assert await store.get("AB12") == first
        assert await store.list_pending("console:bob") == []

    async def test_duplicate_of_finished_id_raises(self, store: ConfirmationStore) -> None:
        await store.create(make("AB12"))
        await store.finish("AB12", Status.CANCELLED, by=None, via=None, reason=None, now=T0 + 1)
        with pytest.raises(ConfirmationExistsError):
            await store.create(make("AB12"))

    async def test_create_refuses_past_the_pending_limits_and_writes_nothing(
        self, store: ConfirmationStore
    ) -> None:
        # Issue 22: one client held 1,500 calls; the caps are counted in the create's step.
        limits = PendingLimits(per_session=2, total=3)
        await store.create(make("AA11", session="web:a"), limits=limits)
        await store.create(make("BB22", session="web:a", created_at=T0 + 1), limits=limits)
        with pytest.raises(PendingLimitReached) as refused:
            await store.create(make("CC33", session="web:a", created_at=T0 + 2), limits=limits)
        assert (refused.value.per_session, refused.value.limit) == (True, 2)
        assert refused.value.setting == "confirmation.max_pending_per_session"
        await store.create(make("DD44", session="web:b", created_at=T0 + 3), limits=limits)
        with pytest.raises(PendingLimitReached) as refused:
            await store.create(make("EE55", session="web:c", created_at=T0 + 4), limits=limits)
        assert (refused.value.per_session, refused.value.limit) == (False, 3)
        assert refused.value.setting == "confirmation.max_pending"
        for cid in ("CC33", "EE55"):  # nothing of the refused ones was written
            assert await store.get(cid) is None
            assert await store.events(cid) == []
        assert await store.count(Status.PENDING) == 3
        assert [c.id for c in await store.list_pending("web:c")] == []
        # Settled calls do not count, and a record stored settled is never refused.
        await store.finish("AA11", Status.REJECTED, by="a", via="r", reason=None, now=T0 + 5)
        await store.create(make("FF66", session="web:a", created_at=T0 + 6), limits=limits)
        settled = make("GG77", session="web:a", created_at=T0 + 7, status=Status.CANCELLED)
        await store.create(settled, limits=limits)
        assert await store.get("GG77") == settled
        assert await store.count(Status.PENDING) == 3

    async def test_list_pending_per_session_oldest_first(self, store: ConfirmationStore) -> None:
        for i, cid in enumerate(["AA11", "BB22", "CC33"]):
            await store.create(make(cid, created_at=T0 + i))
        await store.create(make("DD44", session="console:bob", created_at=T0 + 0.5))
        assert [c.id for c in await store.list_pending("console:alice")] == [
            "AA11",
            "BB22",
            "CC33",
        ]
        assert [c.id for c in await store.list_pending("console:bob")] == ["DD44"]
        assert await store.list_pending("console:nobody") == []

        await store.finish("BB22", Status.APPROVED, by="alice", via="text", reason=None, now=T0 + 5)
        assert [c.id for c in await store.list_pending("console:alice")] == ["AA11", "CC33"]

    async def test_list_filters_newest_first(self, store: ConfirmationStore) -> None:
        await store.create(make("AA11", created_at=T0))
        await store.create(make("BB22", created_at=T0 + 1))
        await store.create(make("CC33", session="console:bob", created_at=T0 + 2))
        await store.create(make("DD44", created_at=T0 + 3))
        await store.finish("BB22", Status.APPROVED, by="alice", via="text", reason=None, now=T0 + 4)
        await store.finish("CC33", Status.EXPIRED, by=None, via="timeout", reason=None, now=T0 + 5)

        ids = [c.id for c in await store.list()]
        assert ids == ["DD44", "CC33", "BB22", "AA11"]
        assert [c.id for c in await store.list(status=Status.PENDING)] == ["DD44", "AA11"]
        assert [c.id for c in await store.list(status=Status.APPROVED)] == ["BB22"]
        assert [c.id for c in await store.list(session_key="console:alice")] == [
            "DD44",
            "BB22",
            "AA11",
        ]
        assert [
            c.id for c in await store.list(status=Status.EXPIRED, session_key="console:alice")
        ] == []
        assert [
            c.id for c in await store.list(status=Status.PENDING, session_key="console:alice")
        ] == ["DD44", "AA11"]
        assert [c.id for c in await store.list(limit=2)] == ["DD44", "CC33"]
        assert [c.id for c in await store.list(status=Status.REJECTED)] == []

    async def test_pending_listing_spans_sessions(self, store: ConfirmationStore) -> None:
        await store.create(make("AA11", created_at=T0))
        await store.create(make("BB22", session="webchat:bob", created_at=T0 + 1))
        await store.create(make("CC33", session="feishu:oc_x", created_at=T0 + 2))
        await store.finish("CC33", Status.CANCELLED, by=None, via="shutdown", reason=None, now=T0)
        assert [c.id for c in await store.list(status=Status.PENDING)] == ["BB22", "AA11"]
        assert await store.count(Status.PENDING) == 2

    async def test_finish_unknown_id(self, store: ConfirmationStore) -> None:
        assert await store.finish(
            "ZZ99", Status.APPROVED, by="a", via="text", reason=None, now=T0
        ) == (None, False)

    async def test_concurrent_finishes_exactly_one_wins(self, backend: Backend) -> None:
        # Two handles: two replicas (Redis) or two connections to one file (SQLite).
        replicas = [await backend.open(), await backend.open()]
        await replicas[0].create(make("RACE"))
        statuses = [Status.APPROVED, Status.REJECTED, Status.EXPIRED, Status.CANCELLED]
        calls = [
            replicas[i % 2].finish(
                "RACE",
                statuses[i % 4],
                by=f"user{i}",
                via="text",
                reason=f"r{i}",
                now=T0 + 1 + i / 1000,
            )
            for i in range(50)
        ]
        results = await asyncio.gather(*calls)
        winners = [i for i, (_, changed) in enumerate(results) if changed]
        assert len(winners) == 1
        w = winners[0]
        final = await replicas[1].get("RACE")
        assert final is not None
        assert final.status is statuses[w % 4]
        assert final.decided_by == f"user{w}"
        assert final.reason == f"r{w}"
        # Losers see the winner's record, not their own.
        assert all(record == final for record, _ in results)

    async def test_many_sessions_race_independently(self, backend: Backend) -> None:
        replicas = [await backend.open(), await backend.open()]
        ids = [f"S{i:03d}" for i in range(20)]
        for cid in ids:
            await replicas[0].create(make(cid, session=f"console:{cid}"))
        calls = [
            replicas[j % 2].finish(
                cid, Status.APPROVED, by=f"u{j}", via="text", reason=None, now=T0 + 1
            )
            for cid in ids
            for j in range(5)
        ]
        results = await asyncio.gather(*calls)
        assert sum(changed for _, changed in results) == len(ids)
        assert await replicas[1].list(status=Status.PENDING) == []

    async def test_decision_refused_at_and_after_deadline(self, store: ConfirmationStore) -> None:
        c = make("EXP1", timeout=10)
        await store.create(c)
        at_deadline = await store.finish(
            "EXP1", Status.APPROVED, by="alice", via="text", reason=None, now=c.expires_at
        )
        assert at_deadline == (c, False)
        late_reject = await store.finish(
            "EXP1", Status.REJECTED, by="alice", via="text", reason=None, now=c.expires_at + 1
        )
        assert late_reject == (c, False)
        assert [x.id for x in await store.list_pending(c.session_key)] == ["EXP1"]

        expired, changed = await store.finish(
            "EXP1", Status.EXPIRED, by=None, via="timeout", reason=None, now=c.expires_at + 2
        )
        assert changed
        assert expired is not None
        assert expired.status is Status.EXPIRED
        assert expired.decided_at == c.expires_at + 2
        assert await store.list_pending(c.session_key) == []

    async def test_decision_accepted_just_before_deadline(self, store: ConfirmationStore) -> None:
        c = make("EXP2", timeout=10)
        await store.create(c)
        just_before = c.expires_at - 1e-6
        done, changed = await store.finish(
            "EXP2", Status.APPROVED, by="alice", via="text", reason=None, now=just_before
        )
        assert changed
        assert done is not None
        assert done.status is Status.APPROVED

    async def test_expire_and_cancel_allowed_before_deadline(
        self, backend: Backend, store: ConfirmationStore
    ) -> None:
        await store.create(make("CAN1"))
        await store.create(make("CAN2"))
        _, cancelled = await store.finish(
            "CAN1", Status.CANCELLED, by=None, via="shutdown", reason="stopping", now=T0 + 1
        )
        _, expired = await store.finish(
            "CAN2", Status.EXPIRED, by=None, via="timeout", reason=None, now=T0 + 2
        )
        assert cancelled
        assert expired
        # What was stored, read back through another handle (a replica, another process):
        # the end, and the execution skipped, so nothing will ever claim or run the call.
        reader = await backend.open()
        for cid, status, via, reason, at in (
            ("CAN1", Status.CANCELLED, "shutdown", "stopping", T0 + 1),
            ("CAN2", Status.EXPIRED, "timeout", None, T0 + 2),
        ):
            got = await reader.get(cid)
            assert got is not None, cid
            assert (got.status, got.decided_via, got.reason, got.decided_at) == (
                status,
                via,
                reason,
                at,
            ), cid
            assert got.decided_by is None, cid
            assert got.execution.state is ExecState.SKIPPED, (cid, got.execution)
            assert got.execution.finished_at == at, (cid, got.execution)
            assert got.execution.claimed_by is None, (cid, got.execution)
        assert await reader.list_pending(make("CAN1").session_key) == []

    @pytest.mark.parametrize("first", [Status.APPROVED, Status.REJECTED, Status.CANCELLED])
    async def test_terminal_is_final(self, store: ConfirmationStore, first: Status) -> None:
        await store.create(make("FIN1"))
        done, changed = await store.finish(
            "FIN1", first, by="alice", via="text", reason="first", now=T0 + 1
        )
        assert changed
        for later in (Status.APPROVED, Status.REJECTED, Status.EXPIRED, Status.CANCELLED):
            again, changed_again = await store.finish(
                "FIN1", later, by="mallory", via="admin", reason="later", now=T0 + 2
            )
            assert not changed_again
            assert again == done
        assert await store.get("FIN1") == done

    async def test_set_prompt_ref(self, store: ConfirmationStore) -> None:
        await store.create(make("REF1", prompt_refs={"console": "1"}))
        await store.set_prompt_ref("REF1", "feishu.message_id", "om_1")
        await store.set_prompt_ref("REF1", "feishu.message_id", "om_2")
        await store.set_prompt_ref("REF1", "dingtalk.card", "card:é")
        got = await store.get("REF1")
        assert got is not None
        assert dict(got.prompt_refs) == {
            "console": "1",
            "feishu.message_id": "om_2",
            "dingtalk.card": "card:é",
        }
        # Refs survive a decision (the card is patched after it) ...
        done, _ = await store.finish(
            "REF1", Status.APPROVED, by="alice", via="card", reason=None, now=T0 + 1
        )
        assert done is not None
        assert dict(done.prompt_refs) == dict(got.prompt_refs)
        # ... and an unknown id is not an error and creates nothing.
        await store.set_prompt_ref("NONE", "k", "v")
        assert await store.get("NONE") is None

    async def test_successful_finishes_are_announced_once(self, backend: Backend) -> None:
        watching = await backend.open()
        # A shared store announces every replica's finishes; the others, their own.
        deciding = await backend.open() if watching.shared else watching
        await watching.create(make("PUB1"))
        await watching.create(make("PUB2"))
        await watching.create(make("PUB3"))
        async with watching.lifecycle_feed() as feed:
            # Refused finishes announce nothing: past the deadline, unknown id, twice.
            await deciding.finish(
                "PUB1", Status.APPROVED, by="a", via="text", reason=None, now=T0 + TIMEOUT
            )
            await deciding.finish("NONE", Status.APPROVED, by="a", via="text", reason=None, now=T0)
            for _ in range(3):
                await deciding.finish(
                    "PUB2", Status.APPROVED, by="a", via="text", reason=None, now=T0 + 1
                )
            await deciding.finish(
                "PUB1", Status.EXPIRED, by=None, via="timeout", reason=None, now=T0 + TIMEOUT
            )
            # The last one marks the end: everything announced before it has arrived.
            await deciding.finish(
                "PUB3", Status.CANCELLED, by=None, via="system", reason=None, now=T0 + 1
            )
            got = [await asyncio.wait_for(anext(feed), timeout=5) for _ in range(3)]
            local = deciding is watching
            assert got == [FeedEntry(i, "resolved", local) for i in ("PUB2", "PUB1", "PUB3")]

    async def test_the_feed_gives_requests_decisions_and_execution_ends_in_order(
        self, backend: Backend
    ) -> None:
        watching = await backend.open()
        other = await backend.open() if watching.shared else None
        async with watching.lifecycle_feed() as feed:
            for writer in (watching, other):
                if writer is None:
                    continue
                cid = "MINE" if writer is watching else "THRS"
                await writer.create(make(cid))
                await writer.finish(cid, Status.APPROVED, by="a", via="text", reason=None, now=T0)
                assert await writer.claim(cid, instance="i1", now=T0, lease=30) is not None
                assert await writer.start_execution(cid, instance="i1", now=T0) is not None
                # A refused end (not the claimer) is not given out.
                await writer.finish_execution(
                    cid, instance="i2", state=ExecState.FAILED, result="x", now=T0
                )
                done = await writer.finish_execution(
                    cid, instance="i1", state=ExecState.SUCCEEDED, result="1 row", now=T0 + 1
                )
                assert done is not None
                local = writer is watching
                got = [await asyncio.wait_for(anext(feed), timeout=5) for _ in range(3)]
                assert got == [
                    FeedEntry(cid, "requested", local),
                    FeedEntry(cid, "resolved", local),
                    FeedEntry(cid, "executed", local),
                ]
            # A record stored as already settled (an import, a test) asks nothing.
            await watching.create(replace(make("DONE"), status=Status.CANCELLED))
            await watching.create(make("LAST"))
            assert await asyncio.wait_for(anext(feed), timeout=5) == FeedEntry(
                "LAST", "requested", True
            )

    async def test_a_feed_sees_finishes_from_its_start_on(self, store: ConfirmationStore) -> None:
        await store.create(make("OLD1"))
        await store.create(make("NEW1"))
        await store.finish("OLD1", Status.CANCELLED, by=None, via="system", reason=None, now=T0)
        async with store.lifecycle_feed() as feed, store.lifecycle_feed() as second:
            await store.finish("NEW1", Status.CANCELLED, by=None, via="system", reason=None, now=T0)
            expected = FeedEntry("NEW1", "resolved", local=True)
            assert await asyncio.wait_for(anext(feed), timeout=5) == expected
            assert await asyncio.wait_for(anext(second), timeout=5) == expected


@pytest.mark.parametrize("backend", DURABLE_BACKENDS, indirect=True)
async def test_records_survive_close_and_reopen(backend: Backend) -> None:
    first = await backend.open()
    c = full_record()
    await first.create(c)
    await first.create(make("PEND", created_at=T0 + 1))
    await first.set_prompt_ref("PEND", "console", "7")
    # One ref per copy of the prompt (gateway/confirm/views.py): after a restart every
    # copy can still be brought to the final state.
    await first.set_prompt_ref("PEND", "feishu_dm:ou_bob", "om_9")
    done, _ = await first.finish(
        c.id, Status.APPROVED, by="ou_boss", via="card", reason=None, now=T0 + 2
    )
    await first.close()
    backend.handles.remove(first)

    second = await backend.open()
    assert await second.get(c.id) == done
    pending = await second.list(status=Status.PENDING)
    assert [p.id for p in pending] == ["PEND"]
    assert dict(pending[0].prompt_refs) == {"console": "7", "feishu_dm:ou_bob": "om_9"}
    # The reopened store still enforces first-wins on what it found.
    assert (
        await second.finish(c.id, Status.REJECTED, by="x", via="text", reason=None, now=T0 + 3)
    )[1] is False


# -- Redis specifics: TTLs and index tidying -------------------------------------------------


@pytest.mark.services
async def test_redis_finished_records_get_the_configured_ttl() -> None:
    admin = await redis_client()
    prefix = f"gateway-test:{uuid.uuid4().hex}"
    store = RedisConfirmationStore(admin, prefix=prefix, finished_ttl_seconds=120)
    try:
        await store.create(make("TTL1", timeout=60))
        pending_ttl = await admin.ttl(f"{prefix}:c:TTL1")
        assert 120 < pending_ttl <= 180
        await store.finish("TTL1", Status.APPROVED, by="a", via="text", reason=None, now=T0 + 1)
        assert 0 < await admin.ttl(f"{prefix}:c:TTL1") <= 120

        # A record whose TTL ran out leaves the indexes on the next read.
        await store.create(make("TTL2"))
        await admin.delete(f"{prefix}:c:TTL2")
        assert await store.list_pending("console:alice") == []
        assert await store.list() == [await store.get("TTL1")]
        assert await admin.zcard(f"{prefix}:pending:console:alice") == 0
        assert await admin.zcard(f"{prefix}:index") == 1
    finally:
        keys = [k async for k in admin.scan_iter(match=f"{prefix}:*")]
        if keys:
            await admin.delete(*keys)
        await store.close()  # injected client: close() leaves it open
        assert await admin.ping()
        await admin.aclose()
