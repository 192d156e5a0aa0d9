"""Backends for the storage ports' contract suites: each test gets fresh data.

``backend`` (conversations) and ``rooms`` (web chat rooms) are parametrized with
``indirect=True`` (as tests/confirm's suites are). ``await backend.open(max_messages=...,
max_sessions=...)`` gives a handle on the same data, the way a restarted process on the
same file (SQLite) or another replica (Redis) sees it; for memory it is the one store.
``await rooms.open(bounds)`` gives a handle; ``await rooms.restart(handle)`` what the next
process sees: SQLite closes the handle first (one process owns the file), Redis opens
another replica beside it, memory gives the same store.
"""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.storage.conversations import ConversationStore, MemoryConversationStore
from gateway.storage.redis.conversations import RedisConversationStore
from gateway.storage.redis.rooms import RedisRoomStore
from gateway.storage.rooms import MemoryRoomStore, RoomBounds, RoomStore
from gateway.storage.sqlite.conversations import SqliteConversationStore
from gateway.storage.sqlite.rooms import SqliteRoomStore
from tests.confirm.conftest import redis_client

BACKENDS = ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.services)]

Open = Callable[..., Awaitable[ConversationStore]]


@dataclass
class Backend:
    name: str
    open: Open
    handles: list[ConversationStore] = field(default_factory=list)


@pytest.fixture
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    kind: str = request.param
    if kind == "memory":
        shared: list[ConversationStore] = []

        async def open_memory(
            *, max_messages: int = 40, max_sessions: int = 100
        ) -> ConversationStore:
            if not shared:
                shared.append(
                    MemoryConversationStore(max_messages=max_messages, max_sessions=max_sessions)
                )
            return shared[0]

        yield Backend(kind, open_memory)
        return

    if kind == "sqlite":
        b = Backend(kind, _unset)

        async def open_sqlite(
            *, max_messages: int = 40, max_sessions: int = 100
        ) -> ConversationStore:
            store = await SqliteConversationStore.open(
                tmp_path / "confirmations.db", max_messages=max_messages, max_sessions=max_sessions
            )
            b.handles.append(store)
            return store

        b.open = open_sqlite
        yield b
        for handle in b.handles:
            await handle.close()
        return

    if kind == "redis":
        admin = await redis_client()
        prefix = f"gateway-test:{uuid.uuid4().hex}"
        clients = []

        async def open_redis(
            *, max_messages: int = 40, max_sessions: int = 100
        ) -> ConversationStore:
            client = await redis_client()
            clients.append(client)
            return RedisConversationStore(
                client, prefix=prefix, max_messages=max_messages, max_sessions=max_sessions
            )

        try:
            yield Backend(kind, open_redis)
        finally:
            for client in clients:
                await client.aclose()
            keys = [k async for k in admin.scan_iter(match=f"{prefix}:*")]
            if keys:
                await admin.delete(*keys)
            await admin.aclose()
        return

    raise AssertionError(f"unknown backend {kind}")


async def _unset(**_: int) -> ConversationStore:
    raise AssertionError("backend.open replaced before use")


ROOM_BOUNDS = RoomBounds(history_size=500, room_bytes=1 << 20, total_bytes=64 << 20, max_rooms=100)


@dataclass
class RoomsBackend:
    name: str
    open: Callable[[RoomBounds], Awaitable[RoomStore]]
    restart: Callable[[RoomStore], Awaitable[RoomStore]]
    held: Callable[[], Awaitable[int]]  # entries the backend holds (after a restart: written)


@pytest.fixture
async def rooms(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RoomsBackend]:
    kind: str = request.param
    handles: list[RoomStore] = []
    bounds_of: dict[int, RoomBounds] = {}

    async def opened(store: RoomStore, bounds: RoomBounds) -> RoomStore:
        handles.append(store)
        bounds_of[id(store)] = bounds
        return store

    if kind == "memory":

        async def open_memory(bounds: RoomBounds = ROOM_BOUNDS) -> RoomStore:
            return await opened(MemoryRoomStore(bounds), bounds)

        async def same(store: RoomStore) -> RoomStore:
            return store

        async def in_memory() -> int:
            return sum(len(h.kept.entries()) for h in handles)

        yield RoomsBackend(kind, open_memory, same, in_memory)
        return

    if kind == "sqlite":

        async def open_sqlite(bounds: RoomBounds = ROOM_BOUNDS) -> RoomStore:
            store = await SqliteRoomStore.open(tmp_path / "confirmations.db", bounds)
            return await opened(store, bounds)

        async def next_process(store: RoomStore) -> RoomStore:
            await store.close()
            handles.remove(store)
            return await open_sqlite(bounds_of[id(store)])

        def count() -> int:
            with contextlib.closing(sqlite3.connect(tmp_path / "confirmations.db")) as db:
                return int(db.execute("SELECT count(*) FROM room_entries").fetchone()[0])

        async def in_table() -> int:
            return count()

        try:
            yield RoomsBackend(kind, open_sqlite, next_process, in_table)
        finally:
            for handle in handles:
                await handle.close()
        return

    if kind == "redis":
        admin = await redis_client()
        prefix = f"gateway-test:{uuid.uuid4().hex}"
        clients = []

        async def open_redis(bounds: RoomBounds = ROOM_BOUNDS) -> RoomStore:
            client = await redis_client()
            clients.append(client)
            return await opened(await RedisRoomStore.open(client, bounds, prefix=prefix), bounds)

        async def another_replica(store: RoomStore) -> RoomStore:
            return await open_redis(bounds_of[id(store)])

        async def in_lists() -> int:
            keys = [k async for k in admin.scan_iter(match=f"{prefix}:webchat:room:*")]
            return sum([await admin.llen(k) for k in keys])

        try:
            yield RoomsBackend(kind, open_redis, another_replica, in_lists)
        finally:
            for handle in handles:
                await handle.close()
            for client in clients:
                await client.aclose()
            keys = [k async for k in admin.scan_iter(match=f"{prefix}:*")]
            if keys:
                await admin.delete(*keys)
            await admin.aclose()
        return

    raise AssertionError(f"unknown backend {kind}")
