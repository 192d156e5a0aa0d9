"""The card's whole life on Feishu (issue 26): pending, approved and running, then done,
failed or interrupted with the short result, on the group's card and on every approver's
direct copy, patched through the real lark-oapi SDK against the fake platform. The card
alone tells what happened; the chat hears the result once, from the turn."""

from __future__ import annotations

from typing import Any

import pytest

from config.settings import Settings
from gateway import texts
from gateway.app import Gateway
from gateway.confirm.model import ExecState
from gateway.texts import Stage
from tests.channels.feishu.conftest import (
    ALICE,
    BOT_MENTION,
    buttons,
    card_sends,
    card_text,
    make_settings,
    sent_texts,
    wait_pending,
    wait_until,
)
from tests.fakes.feishu import FakeFeishu, card_action_event, message_event
from tests.support import demo_db_locked, drop_demo_orders, wait_record

BOB = "ou_bob"
CAROL = "ou_carol"
GROUP = "oc_group_life"
TEMPLATES = {Stage.DONE: "green", Stage.FAILED: "red", Stage.INTERRUPTED: "orange"}


def group_msg(sender: str, text: str) -> dict[str, Any]:
    return message_event(
        chat_id=GROUP,
        chat_type="group",
        sender=sender,
        text=f"@_user_1 {text}",
        mentions=[BOT_MENTION],
    )


def shows(card: Any, stage: Stage) -> bool:
    """The card's header says ``stage`` in its words, in its colour, with no decision
    buttons left (a done change that kept its rows offers only 撤销 Undo: docs/undo.md)."""
    if not isinstance(card, dict):
        return False
    header = card["header"]
    return (
        texts.stage_label(stage) in header["title"]["content"]
        and header["template"] == TEMPLATES[stage]
        and [b["element_id"] for b in buttons(card)] in ([], ["btn_undo"])
    )


@pytest.fixture
def settings(tmp_path: Any, fake: FakeFeishu) -> Settings:
    # Medium-risk calls need a second person: bob and carol get a copy in their direct chat.
    return make_settings(
        tmp_path, fake, approvers=[BOB, CAROL], policy={"four_eyes_risks": ["medium"]}
    )


async def test_every_copy_of_the_card_ends_done_with_its_result(
    gateway: Gateway, fake: FakeFeishu
) -> None:
    fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 3"))
    [conf] = await wait_pending(gateway)
    asked = await wait_record(
        gateway, conf.id, lambda c: len(c.prompt_refs) == 3, what="the group card and two copies"
    )
    fake.send_frame(message_event(chat_id=fake.p2p_chat(BOB), sender=BOB, text=f"确认 {conf.id}"))

    # The turn says the result in the group after the card's update went out (one chat,
    # one order): from then on every copy must already show how the call ended.
    result = f"[{conf.id}] sql_modify 已执行"
    await wait_until(lambda: any(result in t for t in sent_texts(fake)), what="the result line")
    for message_id in asked.prompt_refs.values():
        card = fake.card(message_id)
        assert shows(card, Stage.DONE), card_text(card)
        assert "DELETE: 1 行 / 1 row" in card_text(card)
        assert f"· {BOB}" in card["header"]["title"]["content"]  # who approved it
    # ...and the chat read the result once: the card's update posts nothing in the chat.
    assert sum(result in t for t in sent_texts(fake)) == 1


async def test_the_card_ends_failed_when_the_run_fails(tmp_path: Any, fake: FakeFeishu) -> None:
    from gateway.app import build

    settings = make_settings(tmp_path, fake)
    async with await build(settings) as gw:
        await fake.wait_connected()
        fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 4"))
        [conf] = await wait_pending(gw)
        sent = await fake.wait_request(lambda r: r in card_sends(fake), what="the card")
        assert sent.message_id is not None
        drop_demo_orders(settings)  # approved as asked, it cannot run any more
        click = card_action_event(
            operator=ALICE,
            value={"confirmation_id": conf.id, "decision": "approve"},
            open_message_id=sent.message_id,
            open_chat_id=GROUP,
        )
        await fake.wait_ack(fake.send_frame(click))
        ended = await wait_record(
            gw, conf.id, lambda c: c.execution.state.is_final, what="the run to end"
        )
        assert ended.execution.state is ExecState.FAILED
        await wait_until(
            lambda: shows(fake.card(sent.message_id or ""), Stage.FAILED), what="card failed"
        )
        card = card_text(fake.card(sent.message_id))
        assert ended.execution.result is not None and ended.execution.result in card


async def test_the_card_ends_interrupted_when_its_run_is_cut_off(
    tmp_path: Any, fake: FakeFeishu
) -> None:
    from gateway.app import build

    settings = make_settings(tmp_path, fake)
    async with await build(settings) as gw:
        await fake.wait_connected()
        fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 5"))
        [conf] = await wait_pending(gw)
        sent = await fake.wait_request(lambda r: r in card_sends(fake), what="the card")
        assert sent.message_id is not None
        with demo_db_locked(settings):
            fake.send_frame(group_msg(ALICE, "确认"))
            await wait_record(
                gw, conf.id, lambda c: c.execution.state is ExecState.RUNNING, what="running"
            )
            # As a replica that adopted this one's calls does when its heartbeat lapsed.
            me = gw.confirmations.instance.id
            assert await gw.confirmations.interrupt(conf.id, claimer=me) is not None
            await wait_until(
                lambda: shows(fake.card(sent.message_id or ""), Stage.INTERRUPTED),
                what="card interrupted",
            )
        assert "sql_modify 已中断" in card_text(fake.card(sent.message_id))
