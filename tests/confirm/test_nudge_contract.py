"""The store's once-only audit line (``add_event_once``), on every backend.

A reminder or an escalation is written by this compare-and-set before anything is sent:
what a person would notice if it broke is the same reminder twice (two replicas, or a
restart), or a reminder about a call already decided.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.confirm.model import AuditEvent, Status
from gateway.storage.confirmations import ConfirmationStore
from tests.confirm.conftest import LEDGER_BACKENDS, Backend
from tests.confirm.records import T0, make


def line(kind: str, at: float = T0 + 5, actor: str = "i1") -> AuditEvent:
    return AuditEvent(confirmation_id="A1B2", at=at, kind=kind, actor=actor, detail={"n": 1})


@pytest.mark.parametrize("backend", LEDGER_BACKENDS, indirect=True)
class TestAddEventOnce:
    async def test_first_wins_and_the_line_is_in_the_trail(self, store: ConfirmationStore) -> None:
        await store.create(make("A1B2"))
        assert await store.add_event_once(line("reminded"))
        assert not await store.add_event_once(line("reminded", at=T0 + 6, actor="i2"))
        # Another kind has its own once.
        assert await store.add_event_once(line("escalated"))
        trail = [(e.kind, e.actor, e.at) for e in await store.events("A1B2")]
        assert trail == [("reminded", "i1", T0 + 5), ("escalated", "i1", T0 + 5)]

    async def test_200_concurrent_writers_on_several_handles_one_winner(
        self, backend: Backend
    ) -> None:
        handles = [await backend.open() for _ in range(4)]
        await handles[0].create(make("A1B2"))
        won = await asyncio.gather(
            *(
                handles[n % len(handles)].add_event_once(line("reminded", actor=f"i{n}"))
                for n in range(200)
            )
        )
        assert won.count(True) == 1
        kinds = [e.kind for e in await handles[2].events("A1B2")]
        assert kinds == ["reminded"]

    async def test_never_on_an_ended_or_unknown_record(self, store: ConfirmationStore) -> None:
        await store.create(make("A1B2"))
        await store.finish("A1B2", Status.APPROVED, by="bob", via="text", reason=None, now=T0 + 1)
        assert not await store.add_event_once(line("reminded"))
        assert "reminded" not in [e.kind for e in await store.events("A1B2")]
        assert not await store.add_event_once(
            AuditEvent(confirmation_id="NOPE", at=T0, kind="reminded")
        )
        assert await store.events("NOPE") == []
