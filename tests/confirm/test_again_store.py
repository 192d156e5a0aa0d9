"""``swap_detail``, the store's one write of a record's details after its create, on every
backend: the link "asked again as M3XA" is made once, whoever races for it."""

from __future__ import annotations

import asyncio

import pytest

from gateway.confirm.model import AuditEvent, Status
from gateway.storage.confirmations import ConfirmationStore
from tests.confirm.conftest import BACKENDS, Backend
from tests.confirm.records import T0, full_record, make


def _event(cid: str, new_id: str) -> AuditEvent:
    return AuditEvent(
        confirmation_id=cid, at=T0 + 400, kind="asked_again", actor="alice", detail={"id": new_id}
    )


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
class TestSwapDetail:
    async def test_sets_an_absent_key_once_and_writes_its_event(
        self, store: ConfirmationStore
    ) -> None:
        await store.create(make("AB12"))
        await store.finish("AB12", Status.EXPIRED, by=None, via="timeout", reason="t", now=T0 + 301)
        link = {"id": "CD34", "by": "alice"}
        done, changed = await store.swap_detail(
            "AB12", "asked_again", expected=None, value=link, events=(_event("AB12", "CD34"),)
        )
        assert changed and done is not None
        assert done.details["asked_again"] == link
        assert done.status is Status.EXPIRED  # nothing else moves
        again, changed = await store.swap_detail(
            "AB12",
            "asked_again",
            expected=None,
            value={"id": "EF56"},
            events=(_event("AB12", "EF56"),),
        )
        assert not changed and again is not None
        assert again.details["asked_again"] == link  # the first link stays
        got = await store.get("AB12")
        assert got is not None and got.details["asked_again"] == link
        kinds = [(e.kind, e.detail.get("id")) for e in await store.events("AB12")]
        assert kinds.count(("asked_again", "CD34")) == 1
        assert ("asked_again", "EF56") not in kinds

    async def test_compares_the_value_it_expects(self, store: ConfirmationStore) -> None:
        await store.create(make("AB12"))
        first = {"id": "CD34", "state": "reserved"}
        await store.swap_detail("AB12", "asked_again", expected=None, value=first)
        moved, changed = await store.swap_detail(
            "AB12", "asked_again", expected={"id": "XX99"}, value={"id": "no"}
        )
        assert not changed and moved is not None and moved.details["asked_again"] == first
        moved, changed = await store.swap_detail(
            "AB12", "asked_again", expected=first, value={"id": "CD35", "state": "asked"}
        )
        assert changed and moved is not None
        assert moved.details["asked_again"] == {"id": "CD35", "state": "asked"}

    async def test_keeps_the_other_details(self, store: ConfirmationStore) -> None:
        c = full_record()
        await store.create(c)
        done, _ = await store.swap_detail(c.id, "asked_again", expected=None, value={"id": "中文1"})
        assert done is not None
        assert {k: v for k, v in done.details.items() if k != "asked_again"} == dict(c.details)
        assert done.details["asked_again"] == {"id": "中文1"}
        assert done.created_at == c.created_at  # the awkward floats round-trip

    async def test_unknown_record(self, store: ConfirmationStore) -> None:
        assert await store.swap_detail("ZZ99", "k", expected=None, value={}) == (None, False)

    async def test_racers_on_several_handles_one_wins(self, backend: Backend) -> None:
        handles = [await backend.open() for _ in range(3)]
        await handles[0].create(make("AB12"))
        results = await asyncio.gather(
            *(
                h.swap_detail("AB12", "asked_again", expected=None, value={"id": f"N{i}X2"})
                for i in range(8)
                for h in handles
            )
        )
        winners = [r for r in results if r[1]]
        assert len(winners) == 1
        won = winners[0][0]
        assert won is not None
        for record, _ in results:
            assert record is not None
        got = await handles[1].get("AB12")
        assert got is not None and got.details["asked_again"] == won.details["asked_again"]
