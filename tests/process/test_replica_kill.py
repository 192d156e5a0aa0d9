"""kill -9 one of two replicas on Redis (issue 13): nothing it held is lost or run twice.

Two real ``gateway serve`` processes share one Redis under this test's prefix, each with
its own web chat; replica A asks, replica A dies with ``SIGKILL``, and replica B must
finish what A held: a pending call approved on B runs once, within the lease + 2 s (the
issue's bound, waited for as B's ``executed`` event); a call A was running is reported
interrupted in the chat, or, for a tool promised idempotent, run once more by B; an
approved call A never started is claimed and run once by B.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from gateway import texts
from gateway.confirm.model import Confirmation
from tests.fakes.openai_server import FakeOpenAI
from tests.process.replica_support import (
    ReplicaSet,
    chat_lines,
    decide,
    next_event,
    pending_id,
    say,
    script_model,
    trail,
)
from tests.services import REDIS_URL, redis_prefix
from tests.webchat.support import eventually

pytestmark = pytest.mark.services

LEASE = 3.0


@pytest.fixture
def fake_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with FakeOpenAI() as server:
        script_model(server, 20)
        yield server


@pytest.fixture
async def replicas(tmp_path: Path, fake_llm: FakeOpenAI) -> AsyncIterator[ReplicaSet]:
    async with redis_prefix() as prefix:
        group = ReplicaSet(tmp_path, redis_url=REDIS_URL, prefix=prefix, fake=fake_llm, lease=LEASE)
        try:
            yield group
        finally:
            group.stop()


async def test_a_pending_call_of_a_killed_replica_approved_on_another_runs_once(
    replicas: ReplicaSet,
) -> None:
    a, b = replicas.start("a"), replicas.start("b")
    replicas.open_gate("k1")
    async with (
        aiohttp.ClientSession(base_url=a.url) as on_a,
        aiohttp.ClientSession(base_url=b.url) as on_b,
    ):
        await say(on_a, "kill1", "write k1")
        cid = await pending_id(on_a, "kill1")
        async with on_b.get("/api/events") as feed_b:
            a.kill_9()
            await decide(on_b, cid)
            executed = await next_event(feed_b, "executed", cid=cid, timeout=LEASE + 2)
        ex = executed["data"]["confirmation"]["execution"]
        assert ex["state"] == "succeeded" and ex["attempts"] == 1
        assert ex["result"] == "wrote k1"
        assert replicas.runs_of() == ["k1"]
        kinds = await trail(on_b, cid)
        assert kinds.count("claimed") == kinds.count("started") == 1
        # The model's turn goes on in B with the result, in the same chat.
        await eventually(lambda: _said(on_b, "kill1", "done: wrote k1"), timeout=20)
    assert b.stop() == 0
    assert b.errors() == []


async def test_a_call_running_on_a_killed_replica_is_reported_interrupted(
    replicas: ReplicaSet,
) -> None:
    a, b = replicas.start("a"), replicas.start("b")
    async with (
        aiohttp.ClientSession(base_url=a.url) as on_a,
        aiohttp.ClientSession(base_url=b.url) as on_b,
    ):
        await say(on_a, "kill2", "write k2")  # its gate stays shut: it runs until killed
        cid = await pending_id(on_a, "kill2")
        await decide(on_a, cid)
        await eventually(lambda: _ran(replicas, ["k2"]), timeout=20)
        async with on_b.get("/api/events") as feed_b:
            a.kill_9()
            executed = await next_event(feed_b, "executed", cid=cid, timeout=LEASE + 10)
        final = Confirmation.from_dict(executed["data"]["confirmation"])
        assert final.execution.state.value == "interrupted"
        told = texts.interrupted(final)
        await eventually(lambda: _said(on_b, "kill2", told), timeout=10)
        assert [m["text"] for m in await chat_lines(on_b, "kill2")].count(told) == 1
        kinds = await trail(on_b, cid)
        assert kinds.count("started") == 1 and kinds[-1] == "interrupted"
        assert replicas.runs_of() == ["k2"]  # never re-run
    assert b.stop() == 0
    assert b.errors() == []


async def test_an_idempotent_call_running_on_a_killed_replica_runs_once_more_on_another(
    replicas: ReplicaSet,
) -> None:
    a, b = replicas.start("a"), replicas.start("b")
    async with (
        aiohttp.ClientSession(base_url=a.url) as on_a,
        aiohttp.ClientSession(base_url=b.url) as on_b,
    ):
        await say(on_a, "kill4", "put k4")  # idempotent; its gate shut until A is dead
        cid = await pending_id(on_a, "kill4")
        await decide(on_a, cid)
        await eventually(lambda: _ran(replicas, ["k4"]), timeout=20)
        async with on_b.get("/api/events") as feed_b:
            a.kill_9()
            replicas.open_gate("k4")
            executed = await next_event(feed_b, "executed", cid=cid, timeout=LEASE + 10)
        ex = executed["data"]["confirmation"]["execution"]
        assert ex["state"] == "succeeded" and ex["attempts"] == 2
        assert replicas.runs_of() == ["k4", "k4"]
        # The model's turn goes on in B with the result.
        await eventually(lambda: _said(on_b, "kill4", "done: wrote k4"), timeout=20)
    assert b.stop() == 0
    assert b.errors() == []


async def test_an_approval_taken_on_b_runs_on_b_while_the_asker_is_frozen_then_killed(
    replicas: ReplicaSet,
) -> None:
    a, b = replicas.start("a"), replicas.start("b")
    replicas.open_gate("k3")
    async with (
        aiohttp.ClientSession(base_url=a.url) as on_a,
        aiohttp.ClientSession(base_url=b.url) as on_b,
    ):
        await say(on_a, "kill3", "write k3")
        cid = await pending_id(on_a, "kill3")
        # The process that asked does nothing more for it: the one that takes the decision
        # goes on with it, whatever became of the asker.
        a.freeze()
        async with on_b.get("/api/events") as feed_b:
            await decide(on_b, cid)
            executed = await next_event(feed_b, "executed", cid=cid, timeout=LEASE + 10)
        a.kill_9()
        ex = executed["data"]["confirmation"]["execution"]
        assert ex["state"] == "succeeded" and ex["attempts"] == 1
        assert replicas.runs_of() == ["k3"]
        kinds = await trail(on_b, cid)
        assert kinds.count("claimed") == 1
    assert b.stop() == 0
    assert b.errors() == []


async def _said(http: aiohttp.ClientSession, room: str, line: str) -> bool:
    return any(m["text"] == line for m in await chat_lines(http, room))


async def _ran(replicas: ReplicaSet, names: list[str]) -> bool:
    return replicas.runs_of() == names
