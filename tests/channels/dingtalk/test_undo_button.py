"""撤销 Undo on DingTalk (docs/undo.md): a done change's card offers the button; its click,
through the real dingtalk-stream SDK against the fake platform, asks for a held sql_undo
in the chat as the clicker's own ``撤销 K7Q2`` would; approved, the row is back."""

from __future__ import annotations

import json
from typing import Any

from channels.dingtalk.cards import out_track_id
from config.settings import Settings
from gateway.app import Gateway
from gateway.confirm.model import ExecState, Status
from tests.channels.dingtalk.conftest import order_ids, wait_pending, wait_status
from tests.fakes.dingtalk import FakeDingTalk
from tests.support import wait_record


def undo_buttons(params: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not params:
        return []
    return [b for b in json.loads(params["sys_full_json_obj"])["msgButtons"] if b["id"] == "undo"]


async def test_the_undo_button_asks_a_held_undo_that_restores_the_row(
    gateway: Gateway, fake: FakeDingTalk, settings: Settings
) -> None:
    fake.send_chatbot_message(text="/sql DELETE FROM orders WHERE id = 5")
    [change] = await wait_pending(gateway)
    track = out_track_id(change.id)
    await wait_record(gateway, change.id, lambda c: bool(c.prompt_refs), what="the card")
    assert undo_buttons(fake.card(track)) == []  # nothing to undo while it waits
    await fake.wait_ack(
        fake.send_card_callback(out_track_id=track, user_id="staff-1", action_id="approve")
    )
    await wait_record(
        gateway, change.id, lambda c: c.execution.state is ExecState.SUCCEEDED, what="the run"
    )
    assert 5 not in order_ids(settings)
    await fake.wait_until(lambda: undo_buttons(fake.card(track)) != [], what="the Undo button")

    click = fake.send_card_callback(out_track_id=track, user_id="staff-1", action_id="undo")
    response = json.loads((await fake.wait_ack(click))["data"])["response"]
    assert "undo asked" in response["privateData"]["staff-1"]["cardParamMap"]["tips"]
    undo = next(c for c in await wait_pending(gateway) if c.tool_call.name == "sql_undo")
    assert undo.tool_call.args == {"confirmation_id": change.id}
    assert 5 not in order_ids(settings)  # held: nothing restored before approval
    await fake.wait_ack(
        fake.send_card_callback(
            out_track_id=out_track_id(undo.id), user_id="staff-1", action_id="approve"
        )
    )
    await wait_status(gateway, undo.id, Status.APPROVED)
    await fake.wait_until(lambda: 5 in order_ids(settings), what="order 5 back")
