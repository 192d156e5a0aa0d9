"""Confirmation ids: short, unambiguous, random, unique among live confirmations."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from gateway.confirm.ids import ID_ALPHABET, canonical_id, new_confirmation_id
from gateway.confirm.model import (
    AuditEvent,
    Confirmation,
    Status,
    ToolCall,
)
from gateway.storage.confirmations import ConfirmationExistsError, PendingLimits
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from tests.core.harness import Harness


def test_ids_are_crockford_with_a_digit_and_a_letter() -> None:
    ids = [new_confirmation_id() for _ in range(5000)]
    for cid in ids:
        assert len(cid) == 4
        assert set(cid) <= set(ID_ALPHABET)
        assert any(c.isdigit() for c in cid) and any(c.isalpha() for c in cid), cid
        assert not set(cid) & set("ILOU")
    assert len(set(ids)) > 4900  # random: collisions among 5000 draws of ~700k are rare
    # Every symbol turns up.
    assert set("".join(ids)) == set(ID_ALPHABET)
    assert {len(new_confirmation_id(6)) for _ in range(20)} == {6}


def test_typed_lookalikes_map_to_the_id() -> None:
    assert canonical_id(" k7q2 ") == "K7Q2"
    assert canonical_id("O1Il") == "0111"


class _CrowdedStore(MemoryConfirmationStore):
    """Every id is taken for the first ``taken`` attempts, as in a crowded id space."""

    def __init__(self, taken: int) -> None:
        super().__init__()
        self.taken = taken
        self.tried: list[str] = []

    async def create(
        self,
        confirmation: Confirmation,
        *,
        events: Sequence[AuditEvent] = (),
        limits: PendingLimits | None = None,
    ) -> None:
        self.tried.append(confirmation.id)
        if len(self.tried) <= self.taken:
            raise ConfirmationExistsError(confirmation.id)
        await super().create(confirmation, events=events, limits=limits)


async def test_a_taken_id_is_drawn_again_and_longer_when_crowded() -> None:
    store = _CrowdedStore(taken=10)
    h = Harness(store=store)
    task, conf = await h.ask()
    assert len(store.tried) == 11
    assert all(len(cid) == 4 for cid in store.tried[:10])
    assert len(conf.id) == 5 and conf.id == store.tried[-1]
    # The first line of its trail went in with it, under the id it got.
    assert [(e.kind, e.confirmation_id) for e in await store.events(conf.id)][:1] == [
        ("requested", conf.id)
    ]
    await h.reply(f"确认 {conf.id}")
    assert (await task).status is Status.APPROVED


async def test_live_ids_are_unique_across_many_pending() -> None:
    h = Harness(timeout=30.0, max_pending=2000)  # every one held at once
    tasks = [
        asyncio.create_task(
            h.service.request(
                session_key=f"test:c{i}",
                channel="test",
                chat_id=f"c{i}",
                requester="alice",
                is_group=False,
                tool_call=ToolCall("sql_modify", {"sql": "DELETE FROM t"}, f"call{i}"),
                summary="DELETE t",
            )
        )
        for i in range(2000)
    ]
    prompts = [await h.next_out() for _ in range(2000)]
    ids = [p.confirmation.id for p in prompts if p.confirmation]
    assert len(ids) == len(set(ids)) == 2000
    await asyncio.gather(*tasks)
    await h.service.shutdown()  # the stop cancels every one still waiting
    finals = [await h.store.get(cid) for cid in ids]
    assert {c.status for c in finals if c is not None} == {Status.CANCELLED}
