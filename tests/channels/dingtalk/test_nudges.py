"""Reminders and escalation on DingTalk, through the real dingtalk-stream client against
the fake platform (gateway/confirm/nudges.py).

A reminder through the conversation's session webhook @-mentions for real (``at.atUserIds``
and ``@<staff id>`` in the text); an escalated call reaches each approver's one-to-one chat
and the escalation group as cards of their own that decide like any copy, and every card
shows the outcome. The clock is injected.
"""

from __future__ import annotations

from pathlib import Path

from channels.dingtalk.cards import out_track_id
from config.settings import Settings
from gateway.app import Gateway, build
from gateway.confirm.model import Status
from gateway.confirm.views import escalation_ref
from gateway.texts import approvers as approver_texts
from tests.channels.dingtalk.conftest import (
    make_settings,
    order_ids,
    shown,
    wait_pending,
    wait_status,
)
from tests.fakes.dingtalk import FakeDingTalk
from tests.support import ShiftedClock, wait_record

GROUP = {"conversation_type": "2", "conversation_id": "cg-ops", "session": "g-ops"}
ONCALL = "cg-oncall"


def with_nudges(settings: Settings, **nudges: float) -> Settings:
    settings.confirmation = settings.confirmation.model_copy(update=nudges)
    return settings


async def time_passes(gw: Gateway, clock: ShiftedClock, seconds: float, cid: str) -> None:
    """``seconds`` go by for pending ``cid``: its timers armed again from the stored times."""
    assert gw.confirmations is not None
    record = await gw.confirmations.get(cid)
    assert record is not None
    clock.offset += seconds
    gw.confirmations.nudges.arm(record)


async def test_a_reminder_mentions_the_requester_and_the_approvers_for_real(
    tmp_path: Path, fake: FakeDingTalk
) -> None:
    settings = make_settings(
        tmp_path, fake, approvers=["bob"], policy={"four_eyes_risks": ["medium"]}
    )
    with_nudges(settings, remind_before_seconds=60, approvers=["carol-web"])
    clock = ShiftedClock()
    async with await build(settings, clock=clock) as gw:
        await fake.wait_connected()
        fake.send_chatbot_message(
            text="/sql DELETE FROM orders WHERE id = 3", sender_staff_id="alice", **GROUP
        )
        [conf] = await wait_pending(gw)
        await time_passes(gw, clock, 250, conf.id)
        [hook] = await fake.wait_until(
            lambda: [
                r
                for r in fake.requests("/robot/sendBySession")
                if "仍在等待确认" in str((r.body or {}).get("text"))
            ],
            what="the reminder",
        )
        body = hook.body or {}
        assert body["at"] == {"atUserIds": ["alice", "bob"], "isAtAll": False}
        content = body["text"]["content"]
        assert content.startswith("@alice @bob\n")
        assert conf.id in content and "still waiting" in content
        assert gw.confirmations is not None
        kinds = [e.kind for e in await gw.confirmations.store.events(conf.id)]
        assert kinds.count("reminded") == 1


async def test_an_escalated_call_reaches_the_approver_and_the_escalation_group_and_decides(
    tmp_path: Path, fake: FakeDingTalk
) -> None:
    settings = make_settings(tmp_path, fake, approvers=["bob"], escalation_chat=ONCALL)
    with_nudges(settings, escalate_after_seconds=120)
    clock = ShiftedClock()
    async with await build(settings, clock=clock) as gw:
        await fake.wait_connected()
        fake.send_chatbot_message(
            text="/sql DELETE FROM orders WHERE id = 4", sender_staff_id="alice", **GROUP
        )
        [conf] = await wait_pending(gw)
        assert not conf.four_eyes  # escalation copies go out for any call
        group_track = out_track_id(conf.id)
        await fake.wait_until(lambda: fake.card(group_track), what="the group card")
        assert fake.cards_in("dtv1.card//IM_ROBOT.bob") == {}  # not before the escalation
        await time_passes(gw, clock, 125, conf.id)
        bob_track = out_track_id(conf.id, direct_to="bob")
        oncall_track = out_track_id(conf.id, direct_to=escalation_ref("dingtalk", ONCALL))
        await fake.wait_until(
            lambda: fake.cards_in(f"dtv1.card//IM_GROUP.{ONCALL}"), what="the oncall card"
        )
        assert set(fake.cards_in(f"dtv1.card//IM_GROUP.{ONCALL}")) == {oncall_track}
        assert set(fake.cards_in("dtv1.card//IM_ROBOT.bob")) == {bob_track}
        record = await wait_record(
            gw,
            conf.id,
            lambda c: c.prompt_refs.get(escalation_ref("dingtalk", ONCALL)) == oncall_track,
            what="the escalation card's ref",
        )
        oncall = fake.card(oncall_track) or {}
        assert approver_texts.direct_intro(record) in shown(oncall["markdown"])
        # Bob approves with a click in the escalation group.
        fake.send_card_callback(out_track_id=oncall_track, user_id="bob", action_id="approve")
        done = await wait_status(gw, conf.id, Status.APPROVED)
        assert done.decided_by == "bob"
        await fake.wait_until(lambda: 4 not in order_ids(settings), what="row 4 deleted")
        for track in (group_track, bob_track, oncall_track):
            await fake.wait_until(
                lambda t=track: (fake.card(t) or {}).get("status") == "approved",
                what=f"card {track} updated",
            )
        assert gw.confirmations is not None
        kinds = [e.kind for e in await gw.confirmations.store.events(conf.id)]
        assert kinds.count("escalated") == 1
