"""Redis faults under two real replicas (issue 13): dropped feed connections, a paused server.

Each test has a ``redis-server`` of its own (tests/services.py ``private_redis``): ``CLIENT
KILL TYPE pubsub`` and ``CLIENT PAUSE`` act on every client of a server, and the shared one
serves other tests meanwhile.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from tests.fakes.openai_server import FakeOpenAI
from tests.process.replica_support import (
    ReplicaSet,
    decide,
    next_event,
    pending_id,
    record,
    say,
    script_model,
)
from tests.services import private_redis
from tests.webchat.support import eventually

pytestmark = pytest.mark.services

LEASE = 3.0
# Longer than the lease: a stalled Redis must not make live replicas look dead to each other.
PAUSE_SECONDS = 5.0


@pytest.fixture
def fake_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with FakeOpenAI() as server:
        script_model(server, 40)
        yield server


@pytest.fixture
def redis_url() -> Iterator[str]:
    with private_redis() as url:
        yield url


@pytest.fixture
async def admin(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def replicas(tmp_path: Path, fake_llm: FakeOpenAI, redis_url: str) -> Iterator[ReplicaSet]:
    group = ReplicaSet(
        tmp_path, redis_url=redis_url, prefix="gateway:confirm", fake=fake_llm, lease=LEASE
    )
    try:
        yield group
    finally:
        group.stop()


async def _stream_readers(admin: Redis) -> list[dict[str, Any]]:
    return [c for c in await admin.client_list() if c.get("cmd") == "xread"]


async def test_killed_feed_connections_delay_no_cross_replica_approval(
    replicas: ReplicaSet, admin: Redis
) -> None:
    a, b = replicas.start("a"), replicas.start("b")
    async with (
        aiohttp.ClientSession(base_url=a.url) as on_a,
        aiohttp.ClientSession(base_url=b.url) as on_b,
    ):
        for n in range(2):  # twice: the reconnected reader survives a kill as well
            name = f"feed{n}"
            replicas.open_gate(name)
            await say(on_a, name, f"write {name}")
            cid = await pending_id(on_a, name)
            # Both replicas' readers sit in XREAD on the finished stream.
            await eventually(lambda: _count_at_least(_stream_readers(admin), 2))
            await admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
            for client in await _stream_readers(admin):
                await admin.execute_command("CLIENT", "KILL", "ID", client["id"])
            async with on_a.get("/api/events") as feed_a:
                await decide(on_b, cid)  # decided on B; A's turn waits for it
                # The bound for a wake across replicas after a disconnect.
                executed = await next_event(feed_a, "executed", cid=cid, timeout=2.0)
            assert executed["data"]["confirmation"]["execution"]["claimed_by"].startswith(
                (await record(on_a, cid))["execution"]["claimed_by"]
            )
        assert replicas.runs_of() == ["feed0", "feed1"]
    assert a.stop() == 0 and b.stop() == 0
    assert a.errors() == [] and b.errors() == []


async def _count_at_least(found: Any, n: int) -> bool:
    return len(await found) >= n


async def _has_run(replicas: ReplicaSet, name: str) -> bool:
    return name in replicas.runs_of()


async def _readyz(http: aiohttp.ClientSession) -> tuple[int, dict[str, Any]]:
    async with http.get("/readyz") as resp:
        body: dict[str, Any] = await resp.json()
        return resp.status, body


async def _ready(*sessions: aiohttp.ClientSession) -> bool:
    statuses = [(await _readyz(http))[0] for http in sessions]
    return statuses == [200] * len(sessions)


async def _succeeded(http: aiohttp.ClientSession, cid: str) -> bool:
    state = (await record(http, cid))["execution"]["state"]
    assert state in ("waiting", "claimed", "running", "succeeded"), (cid, state)
    return bool(state == "succeeded")
