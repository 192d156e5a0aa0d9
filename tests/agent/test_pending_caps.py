"""A call past the pending cap is not held: the model gets a tool result that says so
(issue 22, item 10), the chat is told, and the store keeps no record of it."""

from __future__ import annotations

from gateway import texts
from gateway.confirm.model import Status
from tests.agent.conftest import GatewayFactory, say
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls


async def test_past_the_session_cap_the_model_hears_the_call_was_not_held(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(("sql_modify", {"sql": "DELETE FROM orders WHERE id = 1"})),
        tool_calls(("sql_modify", {"sql": "DELETE FROM orders WHERE id = 2"})),
        text("好的，先等前一个确认 / waiting for the first one"),
    )
    gw, chat = await start_gateway(confirmation={"max_pending_per_session": 1})
    await say(gw, "删除订单 1", sender="alice", is_group=True)
    held = await chat.wait_prompt()
    # Another member of the same chat: their turn runs beside alice's waiting one.
    await say(gw, "删除订单 2", sender="bob", is_group=True)
    await chat.wait_text(texts.PENDING_LIMIT_SESSION.format(limit=1, tool="sql_modify"))
    await chat.wait_text("waiting for the first one")

    request = (await fake_llm.wait_requests(3))[2]
    (result,) = request.tool_results().values()
    assert result.startswith("This call was not held for approval and did not run")
    assert "confirmation.max_pending_per_session (1)" in result
    assert [c.id for c in await gw.store.list(limit=100)] == [held.id]
    assert await gw.store.count(Status.PENDING) == 1
