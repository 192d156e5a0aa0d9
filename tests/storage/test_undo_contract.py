"""The undo snapshot store's contract, on every backend (memory, SQLite, Redis).

Two handles on the same data (a second process on the file, another replica on Redis) see
the same snapshots; of two undos of one change exactly one takes the snapshot; a refused
undo gives it back; the retention sweep drops what expired. Time is a number, never a sleep.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from decimal import Decimal
from pathlib import Path

import pytest

from gateway.storage.redis.undo import RedisUndoStore
from gateway.storage.sqlite.undo import SqliteUndoStore
from gateway.storage.undo import KeptChange, MemoryUndoStore, UndoSnapshot, UndoStore
from tests.services import REDIS_URL, redis_prefix

Opener = Callable[[], Awaitable[UndoStore]]
NOW = 1_795_000_000.5
WEEK = 7 * 24 * 3600.0


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.services)])
async def opener(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    handles: list[UndoStore] = []
    if request.param == "memory":
        shared = MemoryUndoStore()

        async def same() -> UndoStore:
            return shared

        yield same
        return
    if request.param == "sqlite":

        async def open_file() -> UndoStore:
            store = await SqliteUndoStore.open(tmp_path / "confirmations.db")
            handles.append(store)
            return store

        yield open_file
    else:
        async with redis_prefix() as prefix:

            async def open_redis() -> UndoStore:
                store = await RedisUndoStore.from_url(REDIS_URL, prefix=prefix)
                handles.append(store)
                return store

            yield open_redis
    for handle in handles:
        await handle.close()


def snapshot(cid: str = "K7Q2", *, expires_at: float = NOW + WEEK, rows: int = 2) -> UndoSnapshot:
    return UndoSnapshot(
        confirmation_id=cid,
        taken_at=NOW,
        expires_at=expires_at,
        changes=[
            KeptChange(
                statement=0,
                kind="UPDATE",
                table="orders",
                key=["id"],
                columns=["id", "customer", "amount"],
                before=[[i, "Bob 鲍勃", {"$decimal": "80.00"}] for i in range(rows)],
                after=[[i, "Bob 鲍勃", {"$decimal": "0.00"}] for i in range(rows)],
            ),
            KeptChange(
                statement=1,
                kind="INSERT",
                table="audit",
                key=["id"],
                columns=["id", "note"],
                after=[[99, None]],
            ),
        ],
    )


async def test_a_kept_snapshot_reads_back_whole_from_another_handle(opener: Opener) -> None:
    a, b = await opener(), await opener()
    kept = snapshot(rows=3)
    await a.put(kept)
    got = await b.get("K7Q2", now=NOW)
    assert got == kept
    assert got is not None and got.rows == 4  # 3 updated + 1 inserted
    assert await b.get("ZZ99", now=NOW) is None


async def test_an_expired_snapshot_is_not_given(opener: Opener) -> None:
    store = await opener()
    await store.put(snapshot(expires_at=NOW + 10))
    assert await store.get("K7Q2", now=NOW + 10) is None
    assert await store.claim("K7Q2", by="U1", now=NOW + 10) is None


async def test_of_two_undos_of_one_change_one_takes_the_snapshot(opener: Opener) -> None:
    a, b = await opener(), await opener()
    await a.put(snapshot())
    first, second = await asyncio.gather(
        a.claim("K7Q2", by="U1", now=NOW), b.claim("K7Q2", by="U2", now=NOW)
    )
    winners = [t for t in (first, second) if t is not None]
    assert len(winners) == 1
    assert winners[0].changes == snapshot().changes
    taken = await b.get("K7Q2", now=NOW)
    assert taken is not None and taken.undone_by == winners[0].undone_by
    # Once taken, no one takes it again, not even the winner a second time.
    assert await a.claim("K7Q2", by="U3", now=NOW) is None


async def test_a_refused_undo_gives_the_snapshot_back_and_only_its_own(opener: Opener) -> None:
    a, b = await opener(), await opener()
    await a.put(snapshot())
    assert await a.claim("K7Q2", by="U1", now=NOW) is not None
    await b.release("K7Q2", by="U2")  # not U2's to give back
    assert await b.claim("K7Q2", by="U2", now=NOW) is None
    await b.release("K7Q2", by="U1")
    again = await b.claim("K7Q2", by="U2", now=NOW)
    assert again is not None and again.undone_by == "U2"


async def test_the_sweep_drops_what_expired_and_keeps_the_rest(opener: Opener) -> None:
    a, b = await opener(), await opener()
    await a.put(snapshot("OLD1", expires_at=NOW + 5))
    await a.put(snapshot("NEW2", expires_at=NOW + WEEK))
    assert await b.purge(before=NOW + 5) == 1
    assert await a.get("OLD1", now=NOW) is None  # gone from the backend, not only hidden
    assert await a.get("NEW2", now=NOW) is not None
    assert await b.purge(before=NOW + 5) == 0


async def test_values_keep_their_json_shape(opener: Opener) -> None:
    store = await opener()
    kept = snapshot()
    await store.put(kept)
    got = await store.get("K7Q2", now=NOW)
    assert got is not None
    assert got.changes[0].before[0][2] == {"$decimal": "80.00"}
    assert Decimal(got.changes[0].before[0][2]["$decimal"]) == Decimal("80.00")
    assert got.changes[1].after == [[99, None]]
