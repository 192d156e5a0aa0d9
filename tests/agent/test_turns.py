"""Turns do not block the room, and a turn survives a restart (issue 12, item 6).

Real gateways (gateway.app) with the model agent against the loopback OpenAI fake.
"""

from __future__ import annotations

import time
from pathlib import Path

from gateway.app import build
from gateway.bus import PublishResult
from gateway.confirm.model import ExecState, Instance, Status
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from tests.agent.conftest import (
    GatewayFactory,
    RecordingChannel,
    make_settings,
    order_rows,
    say,
)
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls


async def test_member_b_is_answered_while_member_a_s_call_is_pending(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(("sql_modify", {"sql": "DELETE FROM orders WHERE id = 5"})),
        text("你好 bob / hello bob"),
        text("订单 5 已删除 / order 5 deleted"),
    )
    gw, chat = await start_gateway()
    await say(gw, "删除订单 5", sender="alice", is_group=True)
    prompt = await chat.wait_prompt()
    # Bob's message in the same group goes to the model while Alice's call waits.
    assert await say(gw, "你好", sender="bob", is_group=True) is PublishResult.QUEUED
    await chat.wait_text("你好 bob")
    record = await gw.confirmations.get(prompt.id)
    assert record is not None and record.status is Status.PENDING
    assert await say(gw, "确认", sender="alice", is_group=True) is PublishResult.INTERCEPTED
    await chat.wait_text("订单 5 已删除")
    assert 5 not in order_rows(gw.settings)
    # Both exchanges are in the group's history, each whole.
    history = await gw.agent.history("test:room1")  # type: ignore[attr-defined]
    roles = [m["role"] for m in history]
    assert roles == ["user", "assistant", "user", "assistant", "tool", "assistant"]


async def test_an_approved_call_whose_turn_died_goes_back_to_the_model(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(("sql_modify", {"sql": "DELETE FROM orders WHERE id = 5"})),
        text("订单 5 已删除 / order 5 deleted"),
    )
    settings = make_settings(tmp_path, fake_llm)
    first = await build(settings, serve_http=False)
    chat1 = RecordingChannel()
    first.channels.add(chat1)
    await first.start()
    await say(first, "删除订单 5")
    prompt = await chat1.wait_prompt()
    asked = await first.store.get(prompt.id)
    assert asked is not None and asked.continuation is not None
    assert asked.continuation["tool_call_id"] == prompt.tool_call.call_id
    assert asked.owner == first.confirmations.instance.id
    await first.stop()

    # What the first process left in a durable store when it died: the record as it was,
    # and a heartbeat that stopped 100 s ago.
    store = MemoryConfirmationStore()
    await store.create(asked)
    gone = Instance(
        id=asked.owner, pid=1, host="gone", started_at=time.time() - 200, seen_at=time.time() - 100
    )
    await store.heartbeat(gone, lease=settings.confirmation.lease_seconds)

    second = await build(settings, serve_http=False, store=store)
    chat2 = RecordingChannel()
    second.channels.add(chat2)
    await second.start()
    try:
        reposted = await chat2.wait_prompt()  # shown again after the restart
        assert reposted.id == asked.id
        assert await say(second, "确认") is PublishResult.INTERCEPTED
        await chat2.wait_text("订单 5 已删除")
        assert 5 not in order_rows(settings)
        resumed = (await fake_llm.wait_requests(2))[1]
        assert "DELETE: 1 行 / 1 row" in resumed.tool_results()[prompt.tool_call.call_id]
        assert resumed.messages[-2]["tool_calls"][0]["id"] == prompt.tool_call.call_id
        final = await store.get(asked.id)
        assert final is not None and final.execution.state is ExecState.SUCCEEDED
        assert final.owner == second.confirmations.instance.id
    finally:
        await second.stop()


async def test_with_keep_pending_a_members_next_message_waits_for_their_parked_turn(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    """The asking turn ended when its call was asked; the member's next message still
    waits until that turn has gone on and answered (its state is the stored call)."""
    fake_llm.script(
        tool_calls(("sql_modify", {"sql": "DELETE FROM orders WHERE id = 5"})),
        text("订单 5 已删除 / order 5 deleted"),
        text("在的 / here"),
    )
    gw, chat = await start_gateway(confirmation={"on_other_message": "keep_pending"})
    await say(gw, "删除订单 5")
    prompt = await chat.wait_prompt()
    assert await say(gw, "还在吗") is PublishResult.QUEUED
    await chat.wait_text(prompt.id)  # "still waiting for a decision on ..."
    assert await say(gw, "确认") is PublishResult.INTERCEPTED
    await chat.wait_text("订单 5 已删除")
    await chat.wait_text("在的")
    third = (await fake_llm.wait_requests(3))[2]
    # The waiting message reached the model after the parked exchange, whole.
    assert [m["role"] for m in third.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert third.messages[-1]["content"] == "还在吗"
    assert 5 not in order_rows(gw.settings)
