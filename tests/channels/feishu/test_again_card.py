"""重新发起 / Ask again on Feishu (issue 25 item 4), through the real lark-oapi SDK against
the fake platform: an expired card carries the button; another member's click is refused
with a toast saying whose it is; the requester's click asks the same call again as a new
card, and the first card then says where the call went instead of the button."""

from __future__ import annotations

from typing import Any

from gateway.app import build
from gateway.confirm.again import FROM
from gateway.confirm.model import Status
from gateway.texts import Stage
from gateway.texts import again as again_texts
from tests.channels.feishu.conftest import (
    ALICE,
    BOT_MENTION,
    buttons,
    card_sends,
    card_text,
    make_settings,
    wait_pending,
    wait_until,
)
from tests.fakes.feishu import FakeFeishu, card_action_event, message_event
from tests.support import ShiftedClock, pass_deadline

BOB = "ou_bob"
GROUP = "oc_group_again"


def again_buttons(card: Any) -> list[dict[str, Any]]:
    if not isinstance(card, dict):
        return []
    return [b for b in buttons(card) if b.get("element_id") == "btn_again"]


async def test_the_requester_asks_an_expired_card_again(tmp_path: Any, fake: FakeFeishu) -> None:
    clock = ShiftedClock()
    settings = make_settings(tmp_path, fake)
    async with await build(settings, clock=clock) as gw:
        await fake.wait_connected()
        fake.send_frame(
            message_event(
                chat_id=GROUP,
                chat_type="group",
                sender=ALICE,
                text="@_user_1 /sql DELETE FROM orders WHERE id = 6",
                mentions=[BOT_MENTION],
            )
        )
        [conf] = await wait_pending(gw)
        sent = await fake.wait_request(lambda r: r in card_sends(fake), what="the card")
        mid = sent.message_id
        assert mid is not None
        assert again_buttons(fake.card(mid)) == []  # pending: approve and reject only
        await pass_deadline(gw.confirmations, clock, conf.id)
        await wait_until(lambda: again_buttons(fake.card(mid)) != [], what="the again button")
        card = fake.card(mid)
        assert Stage.EXPIRED.value in card_text(card)
        [button] = again_buttons(card)
        assert button["text"]["content"] == again_texts.AGAIN_BUTTON
        value = button["behaviors"][0]["value"]
        assert value == {"confirmation_id": conf.id, "again": True}

        # Another member's click: refused, said in a toast; nothing is asked.
        ack = await fake.wait_ack(
            fake.send_frame(
                card_action_event(
                    operator=BOB, value=value, open_message_id=mid, open_chat_id=GROUP
                )
            )
        )
        assert ack.data["toast"]["type"] == "warning"
        assert f"only {ALICE}" in ack.data["toast"]["content"]
        assert await gw.confirmations.list(status=Status.PENDING) == []

        ack = await fake.wait_ack(
            fake.send_frame(
                card_action_event(
                    operator=ALICE, value=value, open_message_id=mid, open_chat_id=GROUP
                )
            )
        )
        assert ack.data["toast"]["type"] == "success"
        [new] = await wait_pending(gw)
        assert new.id != conf.id and new.details[FROM] == conf.id
        assert new.tool_call.args == conf.tool_call.args
        # The answer's card and the patched card say where it went, with no button left.
        assert new.id in card_text(ack.data["card"]["data"])
        await wait_until(lambda: new.id in card_text(fake.card(mid)), what="the link on the card")
        assert again_buttons(fake.card(mid)) == []
        await wait_until(
            lambda: len(card_sends(fake)) == 2, what="the new question's card in the group"
        )
