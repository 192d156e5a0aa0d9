"""Reminders and escalation on Feishu, through the real lark-oapi long connection against
the fake platform (gateway/confirm/nudges.py).

A reminder @-mentions for real (a post's ``at`` elements, never a tag in text); an
escalated call reaches each approver's direct chat and the escalation chat as cards that
decide like any copy, and every copy shows the outcome. The clock is injected.
"""

from __future__ import annotations

from typing import Any

from gateway.app import Gateway, build
from gateway.confirm.model import Status
from gateway.confirm.views import ESCALATED_REF, escalation_ref
from gateway.texts import approvers as approver_texts
from tests.channels.feishu.conftest import (
    ALICE,
    BOT_MENTION,
    buttons,
    card_sends,
    card_text,
    make_settings,
    order_ids,
    wait_pending,
    wait_status,
    wait_until,
)
from tests.fakes.feishu import FakeFeishu, RecordedRequest, card_action_event, message_event
from tests.support import ShiftedClock, wait_record

BOB = "ou_bob"
GROUP = "oc_group_nudge"
ESCALATION_CHAT = "oc_oncall"


def group_msg(sender: str, text: str) -> dict[str, Any]:
    return message_event(
        chat_id=GROUP,
        chat_type="group",
        sender=sender,
        text=f"@_user_1 {text}",
        mentions=[BOT_MENTION],
    )


async def time_passes(gw: Gateway, clock: ShiftedClock, seconds: float, cid: str) -> None:
    """``seconds`` go by for pending ``cid``: its timers armed again from the stored times."""
    assert gw.confirmations is not None
    record = await gw.confirmations.get(cid)
    assert record is not None
    clock.offset += seconds
    gw.confirmations.nudges.arm(record)


def mentions_in(send: RecordedRequest) -> list[str]:
    """The open_ids a post @-mentions (its ``at`` elements)."""
    content = send.content or {}
    lines = content.get("zh_cn", {}).get("content", [])
    return [el["user_id"] for line in lines for el in line if el.get("tag") == "at"]


async def admin_get(gw: Gateway, path: str) -> str:
    """An admin page (loopback without a token: no login needed)."""
    import aiohttp

    assert gw.http is not None
    async with aiohttp.ClientSession() as http, http.get(f"{gw.http.url}{path}") as r:
        assert r.status == 200, await r.text()
        return await r.text()


def to(send: RecordedRequest, chat: str) -> bool:
    return isinstance(send.body, dict) and send.body.get("receive_id") == chat


def post_text(send: RecordedRequest) -> str:
    content = send.content or {}
    lines = content.get("zh_cn", {}).get("content", [])
    return "\n".join("".join(el.get("text", "") for el in line) for line in lines)


async def test_a_reminder_mentions_the_requester_and_the_approvers_for_real(
    tmp_path: Any, fake: FakeFeishu
) -> None:
    settings = make_settings(
        tmp_path,
        fake,
        approvers=[BOB],
        policy={"four_eyes_risks": ["medium"]},
        # A web chat name among the approvers: decides, but is no Feishu id to mention.
        confirmation={"remind_before_seconds": 60, "approvers": ["carol-web"]},
    )
    clock = ShiftedClock()
    async with await build(settings, clock=clock) as gw:
        await fake.wait_connected()
        fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 3"))
        [conf] = await wait_pending(gw)
        await fake.wait_request(lambda r: r in card_sends(fake), what="the card")
        await time_passes(gw, clock, 250, conf.id)
        reminder = await fake.wait_request(
            lambda r: to(r, GROUP) and "仍在等待确认" in post_text(r),
            what="the reminder",
        )
        assert reminder.body["msg_type"] == "post"
        assert mentions_in(reminder) == [ALICE, BOB]
        assert conf.id in post_text(reminder) and "still waiting" in post_text(reminder)
        assert "<at" not in post_text(reminder)  # mentions only as elements
        assert gw.confirmations is not None
        kinds = [e.kind for e in await gw.confirmations.store.events(conf.id)]
        assert kinds.count("reminded") == 1


async def test_an_escalated_call_reaches_the_approver_and_the_escalation_chat_and_decides(
    tmp_path: Any, fake: FakeFeishu
) -> None:
    settings = make_settings(
        tmp_path,
        fake,
        approvers=[BOB],
        escalation_chat=ESCALATION_CHAT,
        confirmation={"escalate_after_seconds": 120},
    )
    clock = ShiftedClock()
    async with await build(settings, clock=clock) as gw:
        await fake.wait_connected()
        fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 4"))
        [conf] = await wait_pending(gw)
        assert not conf.four_eyes  # escalation copies go out for any call
        group = await fake.wait_request(lambda r: r in card_sends(fake), what="the card")
        assert fake.direct_sends(BOB) == []  # not before the escalation
        await time_passes(gw, clock, 125, conf.id)
        bob = await fake.wait_request(lambda r: r in fake.direct_sends(BOB), what="bob's copy")
        oncall = await fake.wait_request(
            lambda r: r in card_sends(fake) and to(r, ESCALATION_CHAT),
            what="the escalation chat's copy",
        )
        escalated = await wait_record(
            gw,
            conf.id,
            lambda c: escalation_ref("feishu", ESCALATION_CHAT) in c.prompt_refs,
            what="the copies' refs",
        )
        assert ESCALATED_REF in escalated.prompt_refs
        for send in (bob, oncall):
            assert approver_texts.direct_intro(escalated) in card_text(send.content)
            assert "escalated" in approver_texts.direct_intro(escalated)
        # The admin page marks it, and says whose direct chat got it; so does its own page.
        page = await admin_get(gw, "/admin/part/pending")
        assert 'class="tag escalated"' in page and "已升级" in page and BOB in page
        detail = await admin_get(gw, f"/admin/confirmations/{conf.id}")
        assert 'class="escalated"' in detail and 'data-kind="escalated"' in detail
        # The group that asked is told.
        await fake.wait_request(
            lambda r: to(r, GROUP) and "⏫" in post_text(r),
            what="the group told",
        )
        # Bob decides with a click in the escalation chat.
        approve = next(
            b["behaviors"][0]["value"]
            for b in buttons(oncall.content)
            if b["element_id"] == "btn_approve"
        )
        assert oncall.message_id is not None
        ack = await fake.wait_ack(
            fake.send_frame(
                card_action_event(
                    operator=BOB,
                    value=approve,
                    open_message_id=oncall.message_id,
                    open_chat_id=ESCALATION_CHAT,
                )
            )
        )
        assert ack.data["toast"]["type"] == "success"
        done = await wait_status(gw, conf.id, Status.APPROVED)
        assert done.decided_by == BOB
        await wait_until(lambda: 4 not in order_ids(settings), what="row 4 deleted")
        for send in (group, bob, oncall):
            assert send.message_id is not None
            await wait_until(
                lambda m=send.message_id: "已批准" in card_text(fake.card(m)),
                what=f"copy {send.message_id} patched",
            )
        assert gw.confirmations is not None
        kinds = [e.kind for e in await gw.confirmations.store.events(conf.id)]
        assert kinds.count("escalated") == 1


async def test_a_typed_reply_in_the_escalation_chat_decides_by_id(
    tmp_path: Any, fake: FakeFeishu
) -> None:
    settings = make_settings(
        tmp_path,
        fake,
        approvers=[BOB],
        escalation_chat=ESCALATION_CHAT,
        confirmation={"escalate_after_seconds": 120},
    )
    clock = ShiftedClock()
    async with await build(settings, clock=clock) as gw:
        await fake.wait_connected()
        fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 5"))
        [conf] = await wait_pending(gw)
        await time_passes(gw, clock, 125, conf.id)
        await wait_record(
            gw,
            conf.id,
            lambda c: escalation_ref("feishu", ESCALATION_CHAT) in c.prompt_refs,
            what="the escalation copy",
        )
        fake.send_frame(
            message_event(
                chat_id=ESCALATION_CHAT,
                chat_type="group",
                sender=BOB,
                text=f"@_user_1 取消 {conf.id} 先别删",
                mentions=[BOT_MENTION],
            )
        )
        done = await wait_status(gw, conf.id, Status.REJECTED)
        assert done.decided_by == BOB and done.reason == "先别删"
        assert 5 in order_ids(settings)
