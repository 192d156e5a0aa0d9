"""A call that needs two approvers on DingTalk (issue 25), through the real dingtalk-stream
client against the fake platform: the first approval (a card click) updates every card
(the group's and each approver's one-to-one card) with "1/2 已批准", buttons kept; the
second, typed in a one-to-one chat, approves and every card shows it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from channels.dingtalk.cards import out_track_id
from config.settings import Settings
from gateway.app import Gateway
from gateway.confirm.model import ExecState, Status
from tests.channels.dingtalk.conftest import make_settings, order_ids, shown, wait_pending
from tests.channels.dingtalk.test_direct_chats import CARD_PATH, GROUP, button_ids, direct
from tests.fakes.dingtalk import FakeDingTalk
from tests.support import wait_record

TWO = {"rules": [{"name": "two", "tool": "sql_modify", "approvals": 2}]}


@pytest.fixture
def settings(tmp_path: Path, fake: FakeDingTalk) -> Settings:
    return make_settings(tmp_path, fake, approvers=["bob", "carol"], policy=TWO)


async def test_two_approvers_every_card_shows_the_tally_then_the_approval(
    gateway: Gateway, fake: FakeDingTalk, settings: Settings
) -> None:
    fake.send_chatbot_message(
        text="/sql DELETE FROM orders WHERE id = 3", sender_staff_id="alice", **GROUP
    )
    [conf] = await wait_pending(gateway)
    assert conf.approvals == 2
    await fake.wait_requests(CARD_PATH, 3)
    tracks = [out_track_id(conf.id)] + [
        out_track_id(conf.id, direct_to=who) for who in ("bob", "carol")
    ]
    await wait_record(gateway, conf.id, lambda c: len(c.prompt_refs) == 3, what="refs")

    clicked = fake.send_card_callback(out_track_id=tracks[0], user_id="bob", action_id="approve")
    response = json.loads((await fake.wait_ack(clicked))["data"])["response"]
    tally = "1/2 已批准：bob / approved 1 of 2: bob"
    assert tally in response["privateData"]["bob"]["cardParamMap"]["tips"]
    for track in tracks:
        await fake.wait_until(
            lambda t=track: tally in shown((fake.card(t) or {}).get("markdown", "")),
            what=f"card {track} shows the tally",
        )
        card = fake.card(track) or {}
        assert card["status"] == "pending"
        assert "approve" in button_ids(card)
    assert 3 in order_ids(settings)

    fake.send_chatbot_message(text=f"确认 {conf.id}", sender_staff_id="carol", **direct("carol"))
    ran = await wait_record(
        gateway, conf.id, lambda c: c.execution.state.is_final, what="the run to end"
    )
    assert ran.status is Status.APPROVED
    assert [v.actor for v in ran.votes] == ["bob", "carol"]
    assert (ran.execution.state, ran.execution.attempts) == (ExecState.SUCCEEDED, 1)
    for track in tracks:
        await fake.wait_until(
            lambda t=track: (fake.card(t) or {}).get("status") == "approved",
            what=f"card {track} approved",
        )
        # No decision is left to make; the group card may offer undo once the run ended.
        assert set(button_ids(fake.card(track) or {})) <= {"undo"}
