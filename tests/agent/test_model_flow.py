"""The model agent end to end: approve, reject with a reason, feedback, several calls."""

from __future__ import annotations

from gateway import texts
from gateway.bus import OutboundKind, PublishResult
from gateway.confirm.model import Status
from tests.agent.conftest import GatewayFactory, order_rows, say
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls


async def test_approve_runs_the_tool_and_the_result_goes_back_to_the_model(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(("sql_modify", {"sql": "DELETE FROM orders WHERE id = 5"})),
        text("订单 5 已删除 / order 5 deleted"),
    )
    gw, chat = await start_gateway()
    assert await say(gw, "删除订单 5") is PublishResult.QUEUED

    prompt = await chat.wait_prompt()
    assert prompt.tool_call.args == {"sql": "DELETE FROM orders WHERE id = 5"}
    assert prompt.details["rows_affected"] == 1
    assert prompt.details["policy_rule"] == "tool default (confirm)"
    assert 5 in order_rows(gw.settings), "nothing runs before a person approves"
    first = fake_llm.requests[0]
    assert first.body["model"] == "fake-model"
    assert {t["function"]["name"] for t in first.body["tools"]} >= {"sql_query", "sql_modify"}
    assert first.messages[0]["role"] == "system"
    assert first.messages[-1] == {"role": "user", "content": "删除订单 5"}

    assert await say(gw, "确认") is PublishResult.INTERCEPTED
    await chat.wait_text("订单 5 已删除")
    assert 5 not in order_rows(gw.settings)

    second = (await fake_llm.wait_requests(2))[1]
    results = second.tool_results()
    assert list(results) == [prompt.tool_call.call_id]
    assert "DELETE: 1 行 / 1 row" in results[prompt.tool_call.call_id]
    # The assistant's own call is in the conversation right before its result.
    assistant = second.messages[-2]
    assert assistant["tool_calls"][0]["id"] == prompt.tool_call.call_id
    assert fake_llm.remaining == 0


async def test_reject_with_reason_reaches_the_model_which_takes_another_tool(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    # The Agno multi-tool flow: rejected with a note, the model picks another call.
    fake_llm.script(
        tool_calls(("sql_modify", {"sql": "DELETE FROM orders WHERE status = 0"})),
        tool_calls(("sql_modify", {"sql": "UPDATE orders SET status = 9 WHERE status = 0"})),
        text("已改为归档 / archived instead"),
    )
    gw, chat = await start_gateway()
    before = order_rows(gw.settings)
    await say(gw, "清理未付款的订单")

    first = await chat.wait_prompt(1)
    assert await say(gw, "取消，不要删除，改成归档") is PublishResult.INTERCEPTED
    second = await chat.wait_prompt(2)
    assert second.tool_call.args["sql"].startswith("UPDATE")

    request = fake_llm.requests[1]
    result = request.tool_results()[first.tool_call.call_id]
    assert "rejected" in result
    assert "不要删除,改成归档" in result
    assert "Do not retry" in result
    assert order_rows(gw.settings) == before, "the rejected DELETE never ran"

    await say(gw, "确认")
    await chat.wait_text("已改为归档")
    after = order_rows(gw.settings)
    assert len(after) == len(before)
    assert {k for k, v in after.items() if v[1] == 9} == {k for k, v in before.items() if v[1] == 0}
    final = await gw.confirmations.get(first.id)  # type: ignore[union-attr]
    assert final is not None
    assert final.status is Status.REJECTED


async def test_free_text_while_pending_is_feedback_and_the_model_answers_it(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(("sql_modify", {"sql": "DELETE FROM orders WHERE id = 1"})),
        tool_calls(("sql_query", {"sql": "SELECT COUNT(*) AS n FROM orders"})),
        text("一共 8 个订单 / 8 orders"),
    )
    gw, chat = await start_gateway()
    await say(gw, "删除订单 1")
    prompt = await chat.wait_prompt()

    # Not a decision word: by default the pending call is rejected with it as feedback,
    # and the message is not queued as a turn of its own.
    assert await say(gw, "先告诉我一共有几个订单") is PublishResult.INTERCEPTED
    await chat.wait_text("一共 8 个订单")

    requests = fake_llm.requests
    assert len(requests) == 3
    feedback = requests[1].tool_results()[prompt.tool_call.call_id]
    assert "先告诉我一共有几个订单" in feedback
    assert "wrote instead of deciding" in feedback
    count = list(requests[2].tool_results().values())[-1]
    assert "8" in count
    assert 1 in order_rows(gw.settings)
    final = await gw.confirmations.get(prompt.id)  # type: ignore[union-attr]
    assert final is not None
    assert final.status is Status.REJECTED
    assert final.feedback


async def test_two_calls_in_one_answer_are_asked_one_after_the_other(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(
            ("sql_modify", {"sql": "DELETE FROM orders WHERE id = 1"}),
            ("sql_modify", {"sql": "DELETE FROM orders WHERE id = 2"}),
        ),
        text("两个都删了 / both deleted"),
    )
    gw, chat = await start_gateway()
    await say(gw, "删除订单 1 和 2")
    first = await chat.wait_prompt(1)
    assert first.tool_call.args["sql"].endswith("id = 1")
    pending = await gw.confirmations.list_pending(first.session_key)  # type: ignore[union-attr]
    assert [c.id for c in pending] == [first.id]

    # A bare 确认 is unambiguous: only one is pending at a time.
    assert await say(gw, "确认") is PublishResult.INTERCEPTED
    second = await chat.wait_prompt(2)
    assert second.tool_call.args["sql"].endswith("id = 2")
    assert await say(gw, "确认") is PublishResult.INTERCEPTED
    await chat.wait_text("两个都删了")

    # In the chat: prompt 1, its approval, then prompt 2 — never two open prompts.
    confirmation_events = [k for k in chat.kinds() if k[1] is not None]
    assert confirmation_events == [
        ("confirmation", first.id),
        ("confirmation_update", first.id),
        ("confirmation", second.id),
        ("confirmation_update", second.id),
    ]
    rows = order_rows(gw.settings)
    assert 1 not in rows
    assert 2 not in rows
    results = fake_llm.requests[1].tool_results()
    assert list(results) == [first.tool_call.call_id, second.tool_call.call_id]
    assert all("DELETE: 1 行 / 1 row" in r for r in results.values())


async def test_rejecting_the_first_of_two_calls_still_asks_the_second(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(
            ("sql_modify", {"sql": "DELETE FROM orders WHERE id = 1"}),
            ("sql_modify", {"sql": "DELETE FROM orders WHERE id = 2"}),
        ),
        text("只删了 2 / only 2 deleted"),
    )
    gw, chat = await start_gateway()
    await say(gw, "删除订单 1 和 2")
    await chat.wait_prompt(1)
    await say(gw, "取消")
    await chat.wait_prompt(2)
    await say(gw, "确认")
    await chat.wait_text("只删了 2")
    rows = order_rows(gw.settings)
    assert 1 in rows
    assert 2 not in rows


async def test_feedback_on_the_first_of_two_calls_skips_the_second(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(
            ("sql_modify", {"sql": "DELETE FROM orders WHERE id = 1"}),
            ("sql_modify", {"sql": "DELETE FROM orders WHERE id = 2"}),
        ),
        text("好的，先不删 / ok, nothing deleted"),
    )
    gw, chat = await start_gateway()
    await say(gw, "删除订单 1 和 2")
    await chat.wait_prompt(1)
    await say(gw, "等一下，先看看这两个订单是谁的")
    await chat.wait_text("先不删")
    prompts = [m for m in chat.sent if m.kind is OutboundKind.CONFIRMATION]
    assert len(prompts) == 1, "the person redirected: the second call is not asked"
    results = list(fake_llm.requests[1].tool_results().values())
    assert "等一下" in results[0]
    assert results[1].startswith("Not run")
    assert {1, 2} <= set(order_rows(gw.settings))


async def test_slash_commands_still_work_with_a_model(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    gw, chat = await start_gateway()
    await say(gw, "/pending")
    await chat.wait_text(texts.NO_PENDING)
    await say(gw, "/sql DELETE FROM orders WHERE id = 8")
    prompt = await chat.wait_prompt()
    assert prompt.tool_call.name == "sql_modify"
    await say(gw, "确认")
    await chat.wait_text("DELETE: 1 行 / 1 row")
    assert fake_llm.requests == [], "commands never reach the model"


async def test_an_empty_answer_is_reported(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(text(""))
    gw, chat = await start_gateway()
    await say(gw, "hi")
    await chat.wait_text(texts.MODEL_EMPTY_REPLY)
