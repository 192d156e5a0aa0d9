"""Ask again with a model turn, end to end: the real gateway, the model agent against the
loopback OpenAI fake, a plugin tool (tests/confirm/again_tools.py).

- A run that finds the data changed since its approval (``EffectChangedError``) is failed
  with its message, the chat hears the new numbers, and the call is asked again as a new
  confirmation linked to the first, with a fresh preview; the parked turn waits on it and
  goes on with its result, not with the failure.
- A call asked again after it expired runs once approved, the chat reads the result, and
  the model sees the call and its result on the next message.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.app import Gateway, build
from gateway.bus import OutboundKind
from gateway.confirm.again import FROM, LINK
from gateway.confirm.model import ExecState, Status
from tests.agent.conftest import RecordingChannel, make_settings, say
from tests.confirm import again_tools
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.support import ShiftedClock, pass_deadline, wait_record

PLUGINS = {"plugins": ["tests.confirm.again_tools"]}


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # httpx (inside the openai SDK) honours *_PROXY: loopback must never go through one.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(autouse=True)
def _table() -> Iterator[None]:
    again_tools.STATE.update(rows=3, runs=0, drift_runs=1)
    yield
    again_tools.STATE.update(rows=3, runs=0, drift_runs=1)


@pytest.fixture
async def started(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> AsyncIterator[tuple[Gateway, RecordingChannel, ShiftedClock]]:
    clock = ShiftedClock()
    gw = await build(
        make_settings(tmp_path, fake_llm, tools=PLUGINS), serve_http=False, clock=clock
    )
    chat = RecordingChannel()
    gw.channels.add(chat)
    await gw.start()
    try:
        yield gw, chat, clock
    finally:
        fake_llm.release()
        await gw.stop()


async def test_a_drifted_run_is_asked_again_and_the_turn_waits_for_it(
    started: tuple[Gateway, RecordingChannel, ShiftedClock], fake_llm: FakeOpenAI
) -> None:
    gw, chat, _ = started
    fake_llm.script(
        tool_calls(("archive_orders", {"status": 1})),
        text("已归档 / archived"),
    )
    await say(gw, "归档状态 1 的订单")
    first = await chat.wait_prompt()
    assert "archive 3 rows" in first.summary
    again_tools.STATE["rows"] = 5  # more rows match between the question and the run
    await say(gw, "确认")
    # The chat hears the new numbers, then the new question with a fresh preview.
    told = await chat.wait_text("5 rows now")
    assert first.id in told.text and "the data changed since approval" in told.text
    new = await chat.wait_prompt(2)
    assert new.id != first.id
    assert new.details[FROM] == first.id
    assert "archive 5 rows" in new.summary
    assert new.details["effects"][0]["total"] == 5
    assert new.tool_call == first.tool_call  # the same call; the turn waits on it
    linked = await wait_record(gw, first.id, lambda c: LINK in c.details, what="the link")
    assert linked.execution.state is ExecState.FAILED
    assert "the data changed since approval" in (linked.execution.result or "")
    assert linked.details[LINK]["id"] == new.id and linked.details[LINK]["via"] == "drift"
    # The turn did not go on with the failure: the model was not asked again yet.
    assert len(fake_llm.requests) == 1
    await say(gw, "确认")
    await chat.wait_text("已归档")
    assert again_tools.STATE["runs"] == 2
    result = next(iter(fake_llm.requests[1].tool_results().values()))
    assert "archived 5 rows" in result
    done = await gw.confirmations.get(new.id)
    assert done is not None and done.execution.state is ExecState.SUCCEEDED
    trail = [e.kind for e in await gw.confirmations.store.events(first.id)]
    assert "asked_again" in trail and trail.index("finished") < trail.index("asked_again")


async def test_an_expired_call_asked_again_tells_the_chat_and_the_model(
    started: tuple[Gateway, RecordingChannel, ShiftedClock], fake_llm: FakeOpenAI
) -> None:
    gw, chat, clock = started
    again_tools.STATE["drift_runs"] = 0
    fake_llm.script(
        tool_calls(("archive_orders", {"status": 2})),
        text("没人确认，已放弃 / nobody confirmed; dropped"),
        text("已经归档了 / it is archived"),
    )
    await say(gw, "归档状态 2 的订单")
    first = await chat.wait_prompt()
    await pass_deadline(gw.confirmations, clock, first.id)
    await chat.wait_text("没人确认")
    await say(gw, f"重新发起 {first.id}")
    new = await chat.wait_prompt(2)
    assert new.details[FROM] == first.id and new.status is Status.PENDING
    await say(gw, "确认")
    await chat.wait_text("archived 3 rows")
    assert len(fake_llm.requests) == 2  # the result is told; the model is not asked here
    await say(gw, "归档好了吗")
    await chat.wait_text("已经归档了")
    messages = fake_llm.requests[2].messages
    calls = [m for m in messages if m.get("tool_calls")]
    assert calls[-1]["tool_calls"][0]["id"] == new.tool_call.call_id
    assert calls[-1]["tool_calls"][0]["function"]["name"] == "archive_orders"
    results = fake_llm.requests[2].tool_results()
    assert "archived 3 rows" in results[new.tool_call.call_id]
    assert "expired" in results[first.tool_call.call_id]
    assert [m["role"] for m in messages][-1] == "user"
    assert chat.sent[-1].kind is OutboundKind.TEXT
