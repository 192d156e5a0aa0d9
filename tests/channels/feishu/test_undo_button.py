"""撤销 Undo on Feishu (docs/undo.md): a done change's card offers the button; its click,
through the real lark-oapi SDK against the fake platform, asks for a held sql_undo in the
chat as the clicker's own ``撤销 K7Q2`` would; approved, the row is back."""

from __future__ import annotations

from typing import Any

from config.settings import Settings
from gateway.app import Gateway
from gateway.confirm.model import ExecState, Status
from tests.channels.feishu.conftest import ALICE, MALLORY, buttons, card_sends, wait_until
from tests.fakes.feishu import FakeFeishu, card_action_event, message_event
from tests.support import order_ids, wait_pending, wait_record, wait_status


def undo_buttons(card: Any) -> list[dict[str, Any]]:
    return [b for b in buttons(card) if b.get("element_id") == "btn_undo"]


async def test_the_undo_button_asks_a_held_undo_that_restores_the_row(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    chat = fake.p2p_chat(ALICE)
    fake.send_frame(
        message_event(chat_id=chat, sender=ALICE, text="/sql DELETE FROM orders WHERE id = 3")
    )
    [change] = await wait_pending(gateway)
    sent = await fake.wait_request(lambda r: r in card_sends(fake), what="the card")
    card_id = sent.message_id or ""
    assert undo_buttons(fake.card(card_id)) == []  # nothing to undo while it waits
    approve = card_action_event(
        operator=ALICE,
        value={"confirmation_id": change.id, "decision": "approve"},
        open_message_id=card_id,
        open_chat_id=chat,
    )
    await fake.wait_ack(fake.send_frame(approve))
    await wait_record(
        gateway, change.id, lambda c: c.execution.state is ExecState.SUCCEEDED, what="the run"
    )
    assert 3 not in order_ids(settings)
    await wait_until(lambda: undo_buttons(fake.card(card_id)) != [], what="the Undo button")
    [button] = undo_buttons(fake.card(card_id))
    value = button["behaviors"][0]["value"]

    # Someone who could not have decided the change is told so, and nothing is asked.
    refused = card_action_event(
        operator=MALLORY, value=value, open_message_id=card_id, open_chat_id=chat
    )
    await fake.wait_ack(fake.send_frame(refused))

    click = card_action_event(
        operator=ALICE, value=value, open_message_id=card_id, open_chat_id=chat
    )
    ack = await fake.wait_ack(fake.send_frame(click))
    assert "undo asked" in ack.data["toast"]["content"]
    undo = next(c for c in await wait_pending(gateway) if c.tool_call.name == "sql_undo")
    assert undo.tool_call.args == {"confirmation_id": change.id}
    assert undo.requester == ALICE
    assert 3 not in order_ids(settings)  # held: nothing restored before approval
    fake.send_frame(message_event(chat_id=chat, sender=ALICE, text=f"确认 {undo.id}"))
    await wait_status(gateway, undo.id, Status.APPROVED)
    await wait_until(lambda: 3 in order_ids(settings), what="order 3 back")
    assert [c.requester for c in await gateway.confirmations.list()].count(MALLORY) == 0
