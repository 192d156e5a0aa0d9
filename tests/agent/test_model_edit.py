"""The model learns what actually ran when an operator edits its call before approving it
(the decision through the real HTTP server, the model through the loopback OpenAI fake)."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from gateway.app import build
from gateway.bus import OutboundKind
from tests.agent.conftest import RecordingChannel, make_settings, order_rows, say
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls

TOKEN = "model-edit-token-0123456789"


async def test_the_tool_result_says_the_call_was_edited_and_what_ran(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    asked = {"sql": "DELETE FROM orders WHERE id = 5"}
    fake_llm.script(tool_calls(("sql_modify", asked)), text("好的 / done"))
    gw = await build(make_settings(tmp_path, fake_llm, admin={"token": TOKEN}))
    chat = RecordingChannel()
    gw.channels.add(chat)
    await gw.start()
    try:
        await say(gw, "删除订单 5")
        prompt = await chat.wait_prompt()
        assert gw.http is not None
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession(base_url=gw.http.url, headers=headers) as admin:
            body = {
                "decision": "approve",
                "actor": "oncall",
                "arguments": {"sql": "DELETE FROM orders WHERE id = 6"},
            }
            async with admin.post(f"/api/confirmations/{prompt.id}/decision", json=body) as r:
                assert r.status == 200, await r.text()
        await chat.wait_text("好的")
    finally:
        fake_llm.release()
        await gw.stop()

    rows = order_rows(gw.settings)
    assert 6 not in rows and 5 in rows
    second = (await fake_llm.wait_requests(2))[1]
    # The model's own call stays as it made it; its result says what ran instead.
    assistant = second.messages[-2]
    assert assistant["tool_calls"][0]["id"] == prompt.tool_call.call_id
    result = second.tool_results()[prompt.tool_call.call_id]
    assert result.startswith("Note: oncall edited the arguments before approving.")
    assert "DELETE FROM orders WHERE id = 6" in result
    assert "not what you proposed" in result and "id = 5" in result
    assert "DELETE: 1 行 / 1 row" in result
    # The chat saw the edit: the card's update names who changed what.
    update = next(m for m in chat.sent if m.kind is OutboundKind.CONFIRMATION_UPDATE)
    assert update.text.startswith(f"✏️ [{prompt.id}] oncall")
    assert "'DELETE FROM orders WHERE id = 5' → 'DELETE FROM orders WHERE id = 6'" in update.text
