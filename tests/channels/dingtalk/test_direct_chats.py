"""Approvers' direct chats and grant buttons on DingTalk (issue 15, items 2 and 4), through
the real dingtalk-stream client against the fake platform.

A four-eyes or critical call also goes to each approver's one-to-one chat with the robot:
a card of its own (``IM_ROBOT.<staff id>``, its own outTrackId) and the typed-reply line by
``oToMessages/batchSend``. A decision in any copy settles the call and every card is
updated; the group card's "skip asking for 30 min" button approves and grants.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from channels.dingtalk.cards import out_track_id
from channels.dingtalk.verify import robot_signature
from config.settings import Settings
from gateway import texts
from gateway.app import Gateway, build
from gateway.confirm.model import ExecState, Status
from gateway.texts import approvers as approver_texts
from tests.channels.dingtalk.conftest import (
    make_settings,
    order_ids,
    shown,
    wait_pending,
    wait_status,
    webhook_texts,
)
from tests.fakes.dingtalk import FakeDingTalk
from tests.support import wait_record

CARD_PATH = "/v1.0/card/instances/createAndDeliver"
GROUP = {"conversation_type": "2", "conversation_id": "cg-ops", "session": "g-ops"}


def direct(staff_id: str) -> dict[str, Any]:
    """Where a staff id's messages to the robot come from: their one-to-one chat."""
    return {"conversation_type": "1", "conversation_id": f"c1-{staff_id}", "session": staff_id}


def button_ids(params: dict[str, Any]) -> list[str]:
    return [b["id"] for b in json.loads(params["sys_full_json_obj"])["msgButtons"]]


@pytest.fixture
def settings(tmp_path: Path, fake: FakeDingTalk) -> Settings:
    # Medium-risk calls need a second person; bob and carol approve on DingTalk.
    return make_settings(
        tmp_path, fake, approvers=["bob", "carol"], policy={"four_eyes_risks": ["medium"]}
    )


async def test_four_eyes_call_reaches_each_approver_and_one_dm_settles_every_card(
    gateway: Gateway, fake: FakeDingTalk, settings: Settings
) -> None:
    fake.send_chatbot_message(
        text="/sql DELETE FROM orders WHERE id = 3", sender_staff_id="alice", **GROUP
    )
    [conf] = await wait_pending(gateway)
    assert conf.four_eyes
    await fake.wait_requests(CARD_PATH, 3)
    group_track = out_track_id(conf.id)
    tracks = {who: out_track_id(conf.id, direct_to=who) for who in ("bob", "carol")}
    assert fake.cards_in(f"dtv1.card//IM_GROUP.{GROUP['conversation_id']}").keys() == {group_track}
    assert "approve_grant" not in button_ids(fake.cards[group_track])  # never on four-eyes
    for who, track in tracks.items():
        [(got, params)] = fake.cards_in(f"dtv1.card//IM_ROBOT.{who}").items()
        assert got == track
        assert button_ids(params) == ["approve", "reject"]
        assert approver_texts.direct_intro(conf) in shown(params["markdown"])
        assert params["tips"] == approver_texts.direct_reply_hint(conf)
    # The typed-reply line went to both in one robot one-to-one send.
    [hint] = await fake.wait_until(lambda: fake.one_to_one_sends(), what="the reply line")
    assert sorted(hint["userIds"]) == ["bob", "carol"]
    assert hint["msgParam"] == {"content": approver_texts.direct_reply_hint(conf)}
    refs = {
        "dingtalk_card": group_track,
        "dingtalk_dm:bob": tracks["bob"],
        "dingtalk_dm:carol": tracks["carol"],
    }
    await wait_record(gateway, conf.id, lambda c: dict(c.prompt_refs) == refs, what="refs")

    # Bob answers in his one-to-one chat, by id.
    fake.send_chatbot_message(text=f"确认 {conf.id}", sender_staff_id="bob", **direct("bob"))
    done = await wait_status(gateway, conf.id, Status.APPROVED)
    assert done.decided_by == "bob"
    await fake.wait_until(lambda: 3 not in order_ids(settings), what="row 3 deleted")
    for track in refs.values():
        await fake.wait_until(
            lambda t=track: (fake.card(t) or {}).get("status") == "approved",
            what=f"card {track} updated",
        )
        # No decision left; once done, the group's card offers 撤销 Undo (docs/undo.md).
        assert button_ids(fake.card(track) or {}) in ([], ["undo"])

    # Carol clicks her copy afterwards: told it is settled; the call ran once.
    late = fake.send_card_callback(
        out_track_id=tracks["carol"], user_id="carol", action_id="approve"
    )
    response = json.loads((await fake.wait_ack(late))["data"])["response"]
    assert "already approved by bob" in response["privateData"]["carol"]["cardParamMap"]["tips"]
    ran = await wait_record(
        gateway, conf.id, lambda c: c.execution.state.is_final, what="the run to end"
    )
    assert (ran.execution.state, ran.execution.attempts) == (ExecState.SUCCEEDED, 1)
    events = await gateway.confirmations.store.events(conf.id)
    assert [e.kind for e in events].count("started") == 1


async def test_a_click_in_a_direct_card_settles_and_updates_the_group_card(
    gateway: Gateway, fake: FakeDingTalk, settings: Settings
) -> None:
    fake.send_chatbot_message(
        text="/sql DELETE FROM orders WHERE id = 4", sender_staff_id="alice", **GROUP
    )
    [conf] = await wait_pending(gateway)
    await fake.wait_requests(CARD_PATH, 3)
    await wait_record(gateway, conf.id, lambda c: len(c.prompt_refs) == 3, what="refs")
    click = fake.send_card_callback(
        out_track_id=out_track_id(conf.id, direct_to="carol"),
        user_id="carol",
        action_id="",
        params={"action": "reject", "id": "reject"},
    )
    response = json.loads((await fake.wait_ack(click))["data"])["response"]
    assert response["cardData"]["cardParamMap"]["status"] == "rejected"
    await wait_status(gateway, conf.id, Status.REJECTED)
    for track in (out_track_id(conf.id), out_track_id(conf.id, direct_to="bob")):
        await fake.wait_until(
            lambda t=track: (fake.card(t) or {}).get("status") == "rejected",
            what=f"card {track} updated",
        )
    assert 4 in order_ids(settings)


async def test_http_mode_sends_text_copies_and_tells_them_the_outcome(
    tmp_path: Path, fake: FakeDingTalk
) -> None:
    # No stream, so no cards (their buttons would be dead): the copies are text.
    settings = make_settings(tmp_path, fake, mode="http", approvers=["bob"])
    async with await build(settings) as gw:
        await _post(gw, fake, fake.chatbot_payload(text="/sql DELETE FROM orders", **_as("alice")))
        [conf] = await wait_pending(gw)
        [copy] = await fake.wait_until(lambda: fake.one_to_one_sends("bob"), what="bob's copy")
        assert copy["msgKey"] == "sampleMarkdown"
        assert approver_texts.direct_intro(conf) in shown(copy["msgParam"]["text"])
        await wait_record(
            gw, conf.id, lambda c: c.prompt_refs.get("dingtalk_dm:bob") == "text", what="ref"
        )
        bob = {**_as("bob"), **direct("bob")}
        await _post(gw, fake, fake.chatbot_payload(text=f"取消 {conf.id}", **bob))
        await wait_status(gw, conf.id, Status.REJECTED)
        await fake.wait_until(
            lambda: len(fake.one_to_one_sends("bob")) == 2, what="the outcome in bob's chat"
        )
        outcome = fake.one_to_one_sends("bob")[1]["msgParam"]["content"]
        assert outcome.startswith(f"🚫 [{conf.id}] bob 已拒绝")


def _as(staff_id: str) -> dict[str, Any]:
    return {"sender_staff_id": staff_id, **GROUP}


async def _post(gw: Gateway, fake: FakeDingTalk, body: dict[str, Any]) -> None:
    """A signed HTTP robot callback, as DingTalk posts it (its checks: test_http_mode.py)."""
    assert gw.http is not None
    stamp = str(time.time_ns() // 1_000_000)
    headers = {
        "Content-Type": "application/json",
        "timestamp": stamp,
        "sign": robot_signature(stamp, fake.client_secret),
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{gw.http.url}/webhook/dingtalk", json=body, headers=headers) as resp,
    ):
        assert resp.status == 200, await resp.text()


async def test_grant_button_approves_and_the_next_same_call_runs_without_asking(
    tmp_path: Path, fake: FakeDingTalk
) -> None:
    settings = make_settings(tmp_path, fake)
    async with await build(settings) as gw:
        await fake.wait_connected()
        fake.send_chatbot_message(
            text="/sql DELETE FROM orders WHERE id = 5", sender_staff_id="alice", **GROUP
        )
        [conf] = await wait_pending(gw)
        await fake.wait_requests(CARD_PATH)
        params = fake.card(out_track_id(conf.id)) or {}
        [grant_button] = [
            b
            for b in json.loads(params["sys_full_json_obj"])["msgButtons"]
            if b["id"] == "approve_grant"
        ]
        assert grant_button["text"] == texts.GRANT_BUTTON
        assert params["grant_offered"] == "true"
        # The standard template's request buttons echo their params.
        click = fake.send_card_callback(
            out_track_id=out_track_id(conf.id),
            user_id="alice",
            action_id="",
            params=grant_button["params"],
        )
        response = json.loads((await fake.wait_ack(click))["data"])["response"]
        assert response["cardData"]["cardParamMap"]["status"] == "approved"
        await wait_status(gw, conf.id, Status.APPROVED)
        [grant] = await gw.confirmations.grants.live()
        assert (grant.scope, grant.granted_by, grant.granted_via) == ("session", "alice", "card")
        assert round(grant.expires_at - grant.created_at) == 30 * 60
        await fake.wait_until(
            lambda: texts.grant_given(grant) in webhook_texts(fake), what="the grant announced"
        )
        await fake.wait_until(lambda: 5 not in order_ids(settings), what="row 5 deleted")

        fake.send_chatbot_message(
            text="/sql DELETE FROM orders WHERE id = 6", sender_staff_id="alice", **GROUP
        )
        await fake.wait_until(lambda: 6 not in order_ids(settings), what="row 6 deleted unasked")
        await fake.wait_until(
            lambda: (
                texts.grant_used("sql_modify", grant, now=grant.created_at) in webhook_texts(fake)
            ),
            what="the grant named in the chat",
        )
        assert len(await gw.confirmations.list()) == 1  # nobody was asked the second time
        assert len(fake.requests(CARD_PATH)) == 1


async def test_the_requester_cannot_approve_her_own_four_eyes_call_by_click_or_reply(
    gateway: Gateway, fake: FakeDingTalk, settings: Settings
) -> None:
    """Four-eyes on DingTalk. First tests: tests/core/test_confirmations.py::
    test_four_eyes_requester_may_reject_not_approve, tests/agent/test_model_safety.py::
    test_four_eyes_requester_cannot_approve_an_approver_can."""
    fake.send_chatbot_message(
        text="/sql DELETE FROM orders WHERE id = 5", sender_staff_id="alice", **GROUP
    )
    [conf] = await wait_pending(gateway)
    assert conf.four_eyes
    await fake.wait_requests(CARD_PATH, 3)
    group_track = out_track_id(conf.id)

    def told() -> int:
        return sum(texts.FOUR_EYES in t for t in webhook_texts(fake))

    # Her click on the group card: told why, to her alone on the card and in the chat.
    click = fake.send_card_callback(out_track_id=group_track, user_id="alice", action_id="approve")
    response = json.loads((await fake.wait_ack(click))["data"])["response"]
    assert "cardData" not in response
    assert texts.FOUR_EYES in response["privateData"]["alice"]["cardParamMap"]["tips"]
    await fake.wait_until(lambda: told() == 1, what="the four-eyes notice for the click")
    # Her typed 确认: told the same.
    fake.send_chatbot_message(text="确认", sender_staff_id="alice", **GROUP)
    await fake.wait_until(lambda: told() == 2, what="the four-eyes notice for the reply")
    assert (await wait_status(gateway, conf.id, Status.PENDING)).decided_by is None
    assert fake.card(group_track)["status"] == "pending"  # type: ignore[index]
    assert 5 in order_ids(settings)
    # Bob's click is the second person's.
    click = fake.send_card_callback(out_track_id=group_track, user_id="bob", action_id="approve")
    response = json.loads((await fake.wait_ack(click))["data"])["response"]
    assert response["cardData"]["cardParamMap"]["status"] == "approved"
    assert (await wait_status(gateway, conf.id, Status.APPROVED)).decided_by == "bob"
    await fake.wait_until(lambda: 5 not in order_ids(settings), what="row 5 deleted")
