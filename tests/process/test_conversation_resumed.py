"""The conversation goes on where a turn was resumed elsewhere (issue 23, item 2).

Three real ``gateway serve`` replicas on one Redis: A asks for a call and is killed with
``SIGKILL``; B adopts it, the call is approved there and B's model turn goes on with the
result. A follow-up then reaches C, started afterwards: the model is sent the whole turn
as B finished it. Before conversations were stored, C started from the follow-up alone.

And a turn whose call ended on a replica that died before the turn said anything goes on
on another: before going on was stored, nobody did (the long chaos run). For an approved
call that ran there, the other goes on from the stored result without running it again:
before, it found the call claimed already and said nothing (the loaded suite's chaos run).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.fakes.openai_server import Answer, FakeOpenAI, hold, text
from tests.process.replica_support import (
    ReplicaSet,
    chat_lines,
    decide,
    pending_id,
    respond,
    say,
)
from tests.services import REDIS_URL, redis_prefix
from tests.webchat.support import eventually

pytestmark = pytest.mark.services

LEASE = 3.0
THANKS = "不客气 / you're welcome"


def model(body: dict[str, Any]) -> Answer:
    """``respond``, and a plain answer to a thank-you."""
    if "thanks" in str(body["messages"][-1].get("content")):
        return text(THANKS)
    return respond(body)


@pytest.fixture
def fake_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with FakeOpenAI() as server:
        server.script(*[model] * 10)
        yield server


@pytest.fixture
async def replicas(tmp_path: Path, fake_llm: FakeOpenAI) -> AsyncIterator[ReplicaSet]:
    async with redis_prefix() as prefix:
        group = ReplicaSet(tmp_path, redis_url=REDIS_URL, prefix=prefix, fake=fake_llm, lease=LEASE)
        try:
            yield group
        finally:
            group.stop()


async def said(http: aiohttp.ClientSession, room: str, fragment: str) -> bool:
    return any(fragment in str(m.get("text")) for m in await chat_lines(http, room))


async def test_a_follow_up_on_a_third_replica_carries_the_turn_resumed_on_another(
    replicas: ReplicaSet, fake_llm: FakeOpenAI
) -> None:
    a, b = replicas.start("a"), replicas.start("b")
    replicas.open_gate("c1")
    async with aiohttp.ClientSession(base_url=a.url) as on_a:
        await say(on_a, "conv", "write c1")
        cid = await pending_id(on_a, "conv")
    a.kill_9()
    async with aiohttp.ClientSession(base_url=b.url) as on_b:
        await decide(on_b, cid)
        await eventually(lambda: said(on_b, "conv", "done: wrote c1"), timeout=LEASE + 20)

    c = replicas.start("c")
    async with aiohttp.ClientSession(base_url=c.url) as on_c:
        await say(on_c, "conv", "thanks")
        await eventually(lambda: said(on_c, "conv", THANKS), timeout=20)

    sent = next(r for r in fake_llm.requests if "thanks" in str(r.messages[-1].get("content")))
    roles = [m["role"] for m in sent.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert "write c1" in str(sent.messages[1]["content"])
    assert sent.tool_results() == {sent.messages[2]["tool_calls"][0]["id"]: "wrote c1"}
    assert sent.messages[4]["content"] == "done: wrote c1"
    assert b.stop() == 0 and c.stop() == 0
    assert b.errors() == [] and c.errors() == []


@pytest.mark.parametrize(
    ("decision", "result"),
    [("reject", "reject"), ("approve", "wrote g1")],
)
async def test_a_turn_whose_replica_died_before_it_went_on_goes_on_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decision: str, result: str
) -> None:
    """Rejected, or approved and run: A's model call with the outcome is under way when A
    dies. B goes on from the stored outcome (an approved call is not run again)."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with FakeOpenAI() as fake:
        # The ask; A going on after the decision (never answered: A dies); B going on.
        fake.script(respond, hold(), respond)
        async with redis_prefix() as prefix:
            group = ReplicaSet(tmp_path, redis_url=REDIS_URL, prefix=prefix, fake=fake, lease=LEASE)
            try:
                group.open_gate("g1")
                a, b = group.start("a"), group.start("b")
                async with aiohttp.ClientSession(base_url=a.url) as on_a:
                    await say(on_a, "gone", "write g1")
                    cid = await pending_id(on_a, "gone")
                    await decide(on_a, cid, decision)
                await fake.wait_requests(2)  # A went on: its model call is under way
                a.kill_9()
                async with aiohttp.ClientSession(base_url=b.url) as on_b:

                    async def answers() -> list[str]:
                        lines = [str(m.get("text")) for m in await chat_lines(on_b, "gone")]
                        return [t for t in lines if t.startswith("done: ")]  # not the card's

                    await eventually(answers, timeout=LEASE + 20)
                    assert len(await answers()) == 1
                went_on = fake.requests[2]
                assert went_on.messages[-1]["role"] == "tool"
                assert result in str(went_on.messages[-1]["content"]).lower()
                assert group.runs_of() == (["g1"] if decision == "approve" else [])
                assert b.stop() == 0
                assert b.errors() == []
            finally:
                group.stop()
