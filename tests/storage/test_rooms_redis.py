"""The web chat room store on Redis: what one replica appends reaches the others.

Replicas follow one feed and keep the same rooms; the contract suite beside this file
checks each handle's copy against what the next one reads. A replica cut off from Redis
reads the rooms again when it is back and tells what it missed, once.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from urllib.parse import urlsplit

import pytest
import structlog.testing
from redis.asyncio import Redis

from gateway.storage.redis.rooms import RedisRoomStore
from gateway.storage.rooms import RoomStore
from tests.fakes.tcp_proxy import TcpProxy
from tests.services import REDIS_URL
from tests.storage.conftest import ROOM_BOUNDS, RoomsBackend
from tests.storage.test_rooms_contract import line
from tests.webchat.support import eventually

pytestmark = pytest.mark.services


async def caught_up(*stores: RoomStore, last: int) -> bool | None:
    return all(s.kept.last_seq == last for s in stores) or None


@pytest.mark.parametrize("rooms", ["redis"], indirect=True)
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


async def test_a_replica_cut_off_tells_what_it_missed_once_when_it_is_back(
    prefix: str, proxy: TcpProxy
) -> None:
    via_proxy = urlsplit(REDIS_URL)._replace(netloc=proxy.url_host).geturl()
    clients = [Redis.from_url(REDIS_URL), Redis.from_url(via_proxy)]
    writer = await RedisRoomStore.open(clients[0], ROOM_BOUNDS, prefix=prefix)
    away = await RedisRoomStore.open(clients[1], ROOM_BOUNDS, prefix=prefix)
    told: list[int] = []
    away.listen(lambda e: told.append(e.seq))
    try:
        await writer.append(line("r", "before"))
        await eventually(lambda: caught_up(away, last=1))
        with structlog.testing.capture_logs() as logs:
            await proxy.stop()  # Redis is gone for this replica: its feed read is cut
            for i in range(3):
                await writer.append(line("r", f"missed {i}"))
            assert away.kept.last_seq == 1
            await proxy.start()
            await eventually(lambda: caught_up(away, last=4))
        events = [e["event"] for e in logs]
        assert "webchat.rooms_feed_reconnecting" in events  # read again, not read on
        await writer.append(line("r", "after"))
        await eventually(lambda: caught_up(away, last=5))
        assert told == [1, 2, 3, 4, 5]
        assert away.kept.entries() == writer.kept.entries()
    finally:
        for store in (away, writer):
            await store.close()
        for client in clients:
            await client.aclose()
