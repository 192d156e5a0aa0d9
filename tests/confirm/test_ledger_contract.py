"""The execution ledger part of the store contract: claims, leases, instances, audit, paging.

Run on every backend that has the ledger. A backend joins by being listed in
``LEDGER_BACKENDS`` (tests/confirm/conftest.py); the service relies on exactly this.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.confirm.model import AuditEvent, ExecState, Instance, Status
from gateway.storage.confirmations import ConfirmationExistsError, ConfirmationStore
from tests.confirm.conftest import LEDGER_BACKENDS, Backend
from tests.confirm.records import T0, make

LEASE = 15.0


async def approved(store: ConfirmationStore, cid: str, **changes: object) -> None:
    await store.create(make(cid, **changes))
    _, changed = await store.finish(
        cid, Status.APPROVED, by="bob", via="reply", reason=None, now=T0 + 1
    )
    assert changed


def instance(iid: str, seen_at: float = T0) -> Instance:
    return Instance(id=iid, pid=1234, host="h", started_at=T0 - 100, seen_at=seen_at)


@pytest.mark.parametrize("backend", LEDGER_BACKENDS, indirect=True)
class TestLedgerContract:
    async def test_new_records_wait_and_round_trip_ledger_fields(
        self, store: ConfirmationStore
    ) -> None:
        c = make(
            "A1B2",
            owner="inst-1",
            idempotent=True,
            continuation={"kind": "model", "messages": [{"role": "user", "content": "删"}]},
        )
        await store.create(c)
        got = await store.get("A1B2")
        assert got == c
        assert got is not None and got.execution.state is ExecState.WAITING

    async def test_a_refused_call_is_skipped(self, store: ConfirmationStore) -> None:
        await store.create(make("A1B2"))
        done, _ = await store.finish(
            "A1B2", Status.REJECTED, by="bob", via="reply", reason="no", now=T0 + 1
        )
        assert done is not None and done.execution.state is ExecState.SKIPPED
        assert await store.claim("A1B2", instance="i", now=T0 + 2, lease=LEASE) is None

    async def test_pending_cannot_be_claimed(self, store: ConfirmationStore) -> None:
        await store.create(make("A1B2"))
        assert await store.claim("A1B2", instance="i", now=T0 + 2, lease=LEASE) is None
        assert await store.claim("NOPE", instance="i", now=T0 + 2, lease=LEASE) is None

    async def test_claim_start_finish(self, store: ConfirmationStore) -> None:
        await approved(store, "A1B2")
        claimed = await store.claim("A1B2", instance="i1", now=T0 + 2, lease=LEASE)
        assert claimed is not None
        ex = claimed.execution
        assert (ex.state, ex.claimed_by, ex.lease_until, ex.attempts) == (
            ExecState.CLAIMED,
            "i1",
            T0 + 2 + LEASE,
            1,
        )
        assert await store.start_execution("A1B2", instance="other", now=T0 + 3) is None
        running = await store.start_execution("A1B2", instance="i1", now=T0 + 3)
        assert running is not None and running.execution.state is ExecState.RUNNING
        assert running.execution.started_at == T0 + 3
        wrong = await store.finish_execution(
            "A1B2", instance="other", state=ExecState.SUCCEEDED, result="x", now=T0 + 4
        )
        assert wrong is None
        done = await store.finish_execution(
            "A1B2", instance="i1", state=ExecState.SUCCEEDED, result="3 rows", now=T0 + 4
        )
        assert done is not None
        assert (done.execution.state, done.execution.result, done.execution.finished_at) == (
            ExecState.SUCCEEDED,
            "3 rows",
            T0 + 4,
        )
        assert await store.get("A1B2") == done
        # Settled: nobody claims it again, nobody finishes it twice.
        assert await store.claim("A1B2", instance="i2", now=T0 + 100, lease=LEASE) is None
        again = await store.finish_execution(
            "A1B2", instance="i1", state=ExecState.FAILED, result="x", now=T0 + 5
        )
        assert again is None

    async def test_a_claimed_call_is_not_claimed_again_even_after_its_lease(
        self, store: ConfirmationStore
    ) -> None:
        await approved(store, "A1B2")
        assert await store.claim("A1B2", instance="i1", now=T0 + 2, lease=LEASE) is not None
        later = T0 + 2 + LEASE * 10
        assert await store.claim("A1B2", instance="i2", now=later, lease=LEASE) is None

    async def test_an_idempotent_call_is_reclaimed_once_after_its_lease(
        self, store: ConfirmationStore
    ) -> None:
        await approved(store, "A1B2", idempotent=True)
        assert await store.claim("A1B2", instance="i1", now=T0 + 2, lease=LEASE) is not None
        assert await store.start_execution("A1B2", instance="i1", now=T0 + 3) is not None
        assert await store.claim("A1B2", instance="i2", now=T0 + 2 + LEASE - 1, lease=LEASE) is None
        second = await store.claim("A1B2", instance="i2", now=T0 + 2 + LEASE, lease=LEASE)
        assert second is not None
        assert (second.execution.claimed_by, second.execution.attempts) == ("i2", 2)
        assert second.execution.state is ExecState.CLAIMED
        # The first claimer's late report is refused: the call is no longer its.
        late = await store.finish_execution(
            "A1B2", instance="i1", state=ExecState.SUCCEEDED, result="x", now=T0 + 40
        )
        assert late is None
        third = await store.claim("A1B2", instance="i3", now=T0 + 1000, lease=LEASE)
        assert third is None

    async def test_heartbeat_extends_the_lease_of_claims_in_flight(
        self, store: ConfirmationStore
    ) -> None:
        await approved(store, "A1B2", idempotent=True)
        await store.claim("A1B2", instance="i1", now=T0 + 2, lease=LEASE)
        await store.heartbeat(instance("i1", seen_at=T0 + 10), lease=LEASE)
        got = await store.get("A1B2")
        assert got is not None and got.execution.lease_until == T0 + 10 + LEASE
        assert await store.claim("A1B2", instance="i2", now=T0 + 2 + LEASE, lease=LEASE) is None

    async def test_200_concurrent_claimers_one_winner(self, backend: Backend) -> None:
        handles = [await backend.open() for _ in range(4)]
        await approved(handles[0], "A1B2")
        results = await asyncio.gather(
            *(
                handles[n % len(handles)].claim("A1B2", instance=f"i{n}", now=T0 + 2, lease=LEASE)
                for n in range(200)
            )
        )
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        final = await handles[1].get("A1B2")
        assert final is not None and final.execution.claimed_by == winners[0].execution.claimed_by

    async def test_instances_heartbeat_list_forget(self, store: ConfirmationStore) -> None:
        await store.heartbeat(instance("i1", seen_at=T0), lease=LEASE)
        await store.heartbeat(instance("i2", seen_at=T0 + 1), lease=LEASE)
        await store.heartbeat(instance("i1", seen_at=T0 + 5), lease=LEASE)
        found = {i.id: i for i in await store.list_instances()}
        assert set(found) == {"i1", "i2"}
        assert found["i1"].seen_at == T0 + 5
        assert found["i1"] == instance("i1", seen_at=T0 + 5)
        await store.forget_instance("i1")
        assert [i.id for i in await store.list_instances()] == ["i2"]

    async def test_unsettled_and_adoption(self, store: ConfirmationStore) -> None:
        await store.create(make("P001", owner="dead", created_at=T0))
        await approved(store, "W002", owner="dead", created_at=T0 + 1)
        await approved(store, "R003", owner="alive", created_at=T0 + 2)
        await store.claim("R003", instance="dead", now=T0 + 3, lease=LEASE)
        await approved(store, "S004", owner="dead", created_at=T0 + 4)
        await store.claim("S004", instance="dead", now=T0 + 5, lease=LEASE)
        await store.finish_execution(
            "S004", instance="dead", state=ExecState.SUCCEEDED, result=None, now=T0 + 6
        )
        await store.create(make("X005", owner="dead", created_at=T0 + 5))
        await store.finish("X005", Status.EXPIRED, by=None, via="timeout", reason=None, now=T0 + 9)
        ids = [c.id for c in await store.list_unsettled(instance="dead")]
        assert ids == ["P001", "W002", "R003"]
        assert [c.id for c in await store.list_approved_waiting()] == ["W002"]
        adopted = await store.adopt("P001", from_owner="dead", to_owner="me")
        assert adopted is not None and adopted.owner == "me"
        assert await store.adopt("P001", from_owner="dead", to_owner="other") is None
        assert [c.id for c in await store.list_unsettled(instance="dead")] == ["W002", "R003"]
        assert [c.id for c in await store.list_unsettled(instance="me")] == ["P001"]

    async def test_adopt_many_moves_only_what_still_has_the_owner_it_was_read_with(
        self, store: ConfirmationStore
    ) -> None:
        await store.create(make("P001", owner="dead", created_at=T0))
        await store.create(make("P002", owner=None, created_at=T0 + 1))
        await approved(store, "W003", owner="dead", created_at=T0 + 2)
        await store.create(make("P004", owner="dead", created_at=T0 + 3))
        read = await store.list_unsettled(instance="dead")
        read.insert(1, await store.get("P002"))  # type: ignore[arg-type]
        # Since the listing: P004 went to another process; W003's record changed no owner.
        assert await store.adopt("P004", from_owner="dead", to_owner="other")
        moved = await store.adopt_many(read, to_owner="me")
        assert [(c.id, c.owner, c.status) for c in moved] == [
            ("P001", "me", Status.PENDING),
            ("P002", "me", Status.PENDING),
            ("W003", "me", Status.APPROVED),
        ]
        assert (await store.get("P004")).owner == "other"  # type: ignore[union-attr]
        assert await store.adopt_many(read, to_owner="again") == []
        assert await store.adopt_many([], to_owner="me") == []

    async def test_add_events_appends_each_in_order(self, store: ConfirmationStore) -> None:
        await store.create(make("A1B2"))
        await store.create(make("C3D4"))
        await store.add_event(AuditEvent(confirmation_id="A1B2", at=T0, kind="requested"))
        await store.add_events(
            [
                AuditEvent(confirmation_id="A1B2", at=T0 + 1, kind="adopted", detail={"a": 1}),
                AuditEvent(confirmation_id="GONE", at=T0 + 1, kind="adopted"),  # purged: dropped
                AuditEvent(confirmation_id="C3D4", at=T0 + 1, kind="adopted", actor="me"),
                AuditEvent(confirmation_id="A1B2", at=T0 + 2, kind="prompt_reposted"),
            ]
        )
        await store.add_events([])
        a = await store.events("A1B2")
        assert [(e.kind, e.detail) for e in a] == [
            ("requested", {}),
            ("adopted", {"a": 1}),
            ("prompt_reposted", {}),
        ]
        assert [(e.kind, e.actor) for e in await store.events("C3D4")] == [("adopted", "me")]
        assert await store.events("GONE") == []

    async def test_audit_events_in_order(self, store: ConfirmationStore) -> None:
        await store.create(make("A1B2"))
        for n, kind in enumerate(["requested", "prompt_sent", "reply_read", "decided"]):
            await store.add_event(
                AuditEvent(
                    confirmation_id="A1B2",
                    at=T0 + n,
                    kind=kind,
                    actor="bob" if kind == "decided" else None,
                    detail={"how": "确认"} if kind == "reply_read" else {},
                )
            )
        events = await store.events("A1B2")
        assert [e.kind for e in events] == ["requested", "prompt_sent", "reply_read", "decided"]
        assert events[2].detail == {"how": "确认"}
        assert events[3].actor == "bob"
        assert await store.events("NONE") == []

    async def test_events_go_in_with_the_change_they_describe_and_only_with_it(
        self, store: ConfirmationStore
    ) -> None:
        def line(kind: str, at: float, **detail: object) -> AuditEvent:
            return AuditEvent(confirmation_id="A1B2", at=at, kind=kind, detail=detail)

        await store.create(make("A1B2"), events=[line("requested", T0, tool="sql_modify")])
        await store.add_event(line("prompt_sent", T0 + 1))
        decided = [line("reply_read", T0 + 2, how="decision"), line("decided", T0 + 2)]
        _, changed = await store.finish(
            "A1B2", Status.APPROVED, by="bob", via="text", reason=None, now=T0 + 2, events=decided
        )
        assert changed
        # A refused finish and a finish_execution of a call not in flight write nothing.
        _, changed = await store.finish(
            "A1B2",
            Status.REJECTED,
            by="bob",
            via="text",
            reason=None,
            now=T0 + 3,
            events=[line("decided", T0 + 3)],
        )
        assert not changed
        lost = await store.finish_execution(
            "A1B2",
            instance="i",
            state=ExecState.FAILED,
            result="x",
            now=T0 + 3,
            events=[line("finished", T0 + 3)],
        )
        assert lost is None
        await store.claim("A1B2", instance="i", now=T0 + 4, lease=LEASE)
        done = await store.finish_execution(
            "A1B2",
            instance="i",
            state=ExecState.SUCCEEDED,
            result="ok",
            now=T0 + 5,
            events=[line("finished", T0 + 5, state="succeeded")],
        )
        assert done is not None
        events = await store.events("A1B2")
        assert [(e.kind, e.at) for e in events] == [
            ("requested", T0),
            ("prompt_sent", T0 + 1),
            ("reply_read", T0 + 2),
            ("decided", T0 + 2),
            ("finished", T0 + 5),
        ]
        assert events[0].detail == {"tool": "sql_modify"}
        assert events[-1].detail == {"state": "succeeded"}
        # A taken id writes neither the record nor its events.
        with pytest.raises(ConfirmationExistsError):
            await store.create(make("A1B2"), events=[line("requested", T0 + 9)])
        assert len(await store.events("A1B2")) == 5

    async def test_purge_drops_old_settled_records_and_their_events(
        self, store: ConfirmationStore
    ) -> None:
        await store.create(make("OLD1", created_at=T0))
        await store.finish("OLD1", Status.REJECTED, by="b", via="reply", reason=None, now=T0 + 1)
        await store.add_event(AuditEvent(confirmation_id="OLD1", at=T0, kind="requested"))
        await store.create(make("PEN2", created_at=T0))  # pending: kept whatever its age
        await approved(store, "RUN3", created_at=T0)
        await store.claim("RUN3", instance="i", now=T0 + 2, lease=LEASE)  # in flight: kept
        await store.create(make("NEW4", created_at=T0 + 1000))
        await store.finish("NEW4", Status.REJECTED, by="b", via="reply", reason=None, now=T0 + 1001)
        assert await store.purge(before=T0 + 500) == 1
        assert await store.get("OLD1") is None
        assert await store.events("OLD1") == []
        for cid in ("PEN2", "RUN3", "NEW4"):
            assert await store.get(cid) is not None

    async def test_pages_with_a_cursor_newest_first(self, store: ConfirmationStore) -> None:
        for n in range(7):
            await store.create(make(f"C{n:03d}", created_at=T0 + n))
        page, cursor = await store.page(limit=3)
        assert [c.id for c in page] == ["C006", "C005", "C004"]
        await store.create(make("C999", created_at=T0 + 99))  # a new record does not shift pages
        page, cursor = await store.page(limit=3, cursor=cursor)
        assert [c.id for c in page] == ["C003", "C002", "C001"]
        page, cursor = await store.page(limit=3, cursor=cursor)
        assert [c.id for c in page] == ["C000"]
        assert cursor is None
        await store.finish("C002", Status.REJECTED, by="b", via="r", reason=None, now=T0 + 3)
        page, _ = await store.page(status=Status.REJECTED)
        assert [c.id for c in page] == ["C002"]

    async def test_count_by_status(self, store: ConfirmationStore) -> None:
        for n in range(5):
            await store.create(make(f"C{n:03d}", created_at=T0 + n))
        await store.finish("C001", Status.REJECTED, by="b", via="r", reason=None, now=T0 + 3)
        assert await store.count(Status.PENDING) == 4
        assert await store.count(Status.REJECTED) == 1
        assert await store.count(Status.APPROVED) == 0
        # A refused finish (decided already) moves no count; the pending caps ask this.
        await store.finish("C001", Status.APPROVED, by="b", via="r", reason=None, now=T0 + 4)
        assert await store.count(Status.PENDING) == 4
        await store.finish("C004", Status.EXPIRED, by=None, via="timeout", reason=None, now=T0 + 5)
        assert await store.count(Status.PENDING) == 3
