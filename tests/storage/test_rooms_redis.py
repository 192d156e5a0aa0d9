"""The web chat room store on Redis: what one replica appends reaches the others.

Replicas follow one feed and keep the same rooms; the contract suite beside this file
checks each handle's copy against what the next one reads.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from gateway.storage.rooms import RoomStore
from tests.storage.conftest import ROOM_BOUNDS, RoomsBackend
from tests.storage.test_rooms_contract import line
from tests.webchat.support import eventually

pytestmark = [pytest.mark.services, pytest.mark.parametrize("rooms", ["redis"], indirect=True)]


async def caught_up(*stores: RoomStore, last: int) -> bool | None:
    return all(s.kept.last_seq == last for s in stores) or None


async def test_what_one_replica_appends_reaches_the_others_once_in_order(
    rooms: RoomsBackend,
) -> None:
    a = await rooms.open(replace(ROOM_BOUNDS, history_size=20, max_rooms=3))
    b = await rooms.restart(a)
    told: dict[str, list[int]] = {"a": [], "b": []}
    a.listen(lambda e: told["a"].append(e.seq))
    b.listen(lambda e: told["b"].append(e.seq))
    said = await asyncio.gather(
        *((a if i % 2 else b).append(line(f"r{i % 4}", str(i))) for i in range(60))
    )
    assert sorted(e.seq for e in said) == list(range(1, 61))
    # Each append returns once its own replica's copy has it: the other may be a moment behind.
    await eventually(lambda: caught_up(a, b, last=60))
    assert told["a"] == told["b"] == list(range(1, 61))
    # Both copies dropped the same entries (4 rooms written, 3 kept), as Redis did.
    assert a.kept.entries() == b.kept.entries()
    c = await rooms.restart(a)
    assert c.kept.entries() == a.kept.entries() and len(c.kept) == 3
