"""Redis faults under two real replicas (issue 13): dropped feed connections, a paused server.

Each test has a ``redis-server`` of its own (tests/services.py ``private_redis``): ``CLIENT
KILL TYPE pubsub`` and ``CLIENT PAUSE`` act on every client of a server, and the shared one
serves other tests meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
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
from tests.webchat.support import eventually

pytestmark = pytest.mark.services

LEASE = 3.0
# Longer than the lease (a stalled Redis must not make live replicas look dead to each
# other), shorter than redis-py's 5 s socket timeout (commands wait, none fails).
PAUSE_SECONDS = 4.0


@pytest.fixture
def fake_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with FakeOpenAI() as server:
        script_model(server, 40)
        yield server


@pytest.fixture
def replicas(tmp_path: Path, fake_llm: FakeOpenAI, private_redis_url: str) -> Iterator[ReplicaSet]:
    group = ReplicaSet(
        tmp_path,
        redis_url=private_redis_url,
        prefix="gateway:confirm",
        fake=fake_llm,
        lease=LEASE,
    )
    try:
        yield group
    finally:
        group.stop()


async def _stream_readers(private_redis_admin: Redis) -> list[dict[str, Any]]:
    return [c for c in await private_redis_admin.client_list() if c.get("cmd") == "xread"]


async def test_killed_feed_connections_delay_no_cross_replica_approval(
    replicas: ReplicaSet, private_redis_admin: Redis
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
            await eventually(lambda: _count_at_least(_stream_readers(private_redis_admin), 2))
            await private_redis_admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
            for client in await _stream_readers(private_redis_admin):
                await private_redis_admin.execute_command("CLIENT", "KILL", "ID", client["id"])
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


async def test_client_pause_is_503_then_200_and_no_call_is_lost_or_run_twice(
    replicas: ReplicaSet, private_redis_admin: Redis
) -> None:
    a, b = replicas.start("a"), replicas.start("b")
    async with (
        aiohttp.ClientSession(base_url=a.url) as on_a,
        aiohttp.ClientSession(base_url=b.url) as on_b,
    ):
        # Before: p1 pending on A, p2 pending on B, p3 running on A (its gate shut).
        await say(on_a, "p1", "write p1")
        await say(on_b, "p2", "write p2")
        await say(on_a, "p3", "write p3")
        p1, p2, p3 = [
            await pending_id(on_a, "p1"),
            await pending_id(on_b, "p2"),
            await pending_id(on_a, "p3"),
        ]
        await decide(on_a, p3)
        await eventually(lambda: _has_run(replicas, "p3"), timeout=20)
        for name in ("p1", "p2", "p4"):
            replicas.open_gate(name)

        await private_redis_admin.execute_command(
            "CLIENT", "PAUSE", int(PAUSE_SECONDS * 1000), "ALL"
        )
        # During: each replica says it is not ready, and why; decisions and a new chat
        # wait for Redis instead of failing or half-writing.
        decided = [
            asyncio.ensure_future(decide(on_b, p1)),  # A's call, decided on B
            asyncio.ensure_future(decide(on_a, p2)),  # B's call, decided on A
            asyncio.ensure_future(say(on_a, "p4", "write p4")),
        ]
        during = await asyncio.gather(_readyz(on_a), _readyz(on_b))
        for status, body in during:
            assert status == 503 and body["store"]["ready"] is False, body
            assert "Redis" in body["store"]["reason"]

        # After: ready again, no restart; everything goes on once.
        await eventually(lambda: _ready(on_a, on_b), timeout=30)
        await asyncio.gather(*decided)
        replicas.open_gate("p3")
        p4 = await pending_id(on_a, "p4")
        await decide(on_b, p4)
        for cid in (p1, p2, p3, p4):
            await eventually(lambda cid=cid: _succeeded(on_a, cid), timeout=30)
            assert (await record(on_a, cid))["execution"]["attempts"] == 1
        assert sorted(replicas.runs_of()) == ["p1", "p2", "p3", "p4"]
    assert a.stop() == 0 and b.stop() == 0


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
