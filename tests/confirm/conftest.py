"""Backends for the store contract suites: each test gets a fresh store of its kind.

`backend` is parametrized with ``indirect=True`` (as aiogram tests its FSM storages): a new
backend joins by adding a branch to the fixture. ``backend.open()`` gives another handle on
the same data, the way a second gateway replica (Redis) or a second process on the same
file (SQLite) would see it; for memory it is the same object.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.storage.confirmations import ConfirmationStore
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from gateway.storage.redis.confirmations import RedisConfirmationStore
from gateway.storage.sqlite.confirmations import SqliteConfirmationStore
from tests.services import mask_url, require_service

REDIS_URL = os.environ.get("GATEWAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


BACKENDS = [
    "memory",
    "sqlite",
    pytest.param("redis", marks=pytest.mark.services),
]
# Backends with the execution ledger (claims, instances, audit, paging). Issue 12 adds
# SQLite and Redis here as their ledger lands.
LEDGER_BACKENDS = [
    "memory",
    "sqlite",
    pytest.param("redis", marks=pytest.mark.services),
]
DURABLE_BACKENDS = [
    "sqlite",
    pytest.param("redis", marks=pytest.mark.services),
]


@dataclass
class Backend:
    name: str
    open: Callable[[], Awaitable[ConfirmationStore]]
    handles: list[ConfirmationStore] = field(default_factory=list)
    redis_prefix: str | None = None


async def redis_client() -> Redis:
    client = Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        await client.ping()
    except (RedisConnectionError, OSError) as exc:
        await client.aclose()
        require_service(f"Redis at {mask_url(REDIS_URL)}", exc)
    return client


@pytest.fixture
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    kind: str = request.param
    if kind == "memory":
        shared = MemoryConfirmationStore()

        async def open_memory() -> ConfirmationStore:
            return shared

        yield Backend(kind, open_memory)
        return

    if kind == "sqlite":
        path = tmp_path / "confirmations.db"
        b = Backend(kind, lambda: _noop_open())

        async def open_sqlite() -> ConfirmationStore:
            store = await SqliteConfirmationStore.open(path)
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
        b = Backend(kind, lambda: _noop_open(), redis_prefix=prefix)

        async def open_redis() -> ConfirmationStore:
            store = await RedisConfirmationStore.from_url(
                REDIS_URL, prefix=prefix, finished_ttl_seconds=3600
            )
            b.handles.append(store)
            return store

        b.open = open_redis
        try:
            yield b
        finally:
            for handle in b.handles:
                await handle.close()
            keys = [k async for k in admin.scan_iter(match=f"{prefix}:*")]
            if keys:
                await admin.delete(*keys)
            await admin.aclose()
        return

    raise AssertionError(f"unknown backend {kind}")


async def _noop_open() -> ConfirmationStore:
    raise AssertionError("backend.open replaced before use")


@pytest.fixture
async def store(backend: Backend) -> ConfirmationStore:
    return await backend.open()
