"""Confirmation cards: expiry, clicks by people who may not decide, rejection, fallback."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from channels.dingtalk.cards import (
    card_params,
    confirmation_id_from,
    out_track_id,
    parse_card_callback,
)
from config.settings import Settings
from gateway import texts
from gateway.app import Gateway, build
from gateway.confirm.model import Confirmation, Decision, Risk, Status, ToolCall
from tests.channels.dingtalk.conftest import (
    make_settings,
    order_ids,
    wait_pending,
    wait_status,
    webhook_texts,
)
from tests.fakes.dingtalk import FakeDingTalk
from tests.support import ShiftedClock, pass_deadline, wait_record

CARD_PATH = "/v1.0/card/instances/createAndDeliver"


async def test_timeout_while_card_open_updates_card_to_expired(
    tmp_path: Path, fake: FakeDingTalk
) -> None:
    settings = make_settings(tmp_path, fake)
    clock = ShiftedClock()  # the deadline passes once the card is out, not on a timer
    async with await build(settings, clock=clock) as gw:
        await fake.wait_connected()
        fake.send_chatbot_message(text="/sql DELETE FROM orders WHERE id = 6")
        [conf] = await wait_pending(gw)
        await fake.wait_requests(CARD_PATH)
        await wait_record(gw, conf.id, lambda c: bool(c.prompt_refs), what="the card's ref")
        assert gw.confirmations is not None
        await pass_deadline(gw.confirmations, clock, conf.id)
        await wait_status(gw, conf.id, Status.EXPIRED)
        [put] = await fake.wait_requests("/v1.0/card/instances", method="PUT")
        params = put.body["cardData"]["cardParamMap"]
        assert params["status"] == "expired"
        # No decision left; only 重新发起 / Ask again (gateway/confirm/again.py).
        buttons = json.loads(params["sys_full_json_obj"])["msgButtons"]
        assert [b["id"] for b in buttons] == ["again"]
        # The chat is told in words too.
        await fake.wait_until(
            lambda: any("已过期" in t for t in webhook_texts(fake)), what="expiry notice"
        )
        assert 6 in order_ids(settings)
        # A click on the expired card changes nothing and shows the final state.
        click = fake.send_card_callback(
            out_track_id=f"gwconf-{conf.id}", user_id="staff-1", action_id="approve"
        )
        response = json.loads((await fake.wait_ack(click))["data"])["response"]
        assert response["cardData"]["cardParamMap"]["status"] == "expired"
        assert 6 in order_ids(settings)


async def test_click_by_someone_who_may_not_decide_changes_nothing(
    gateway: Gateway, fake: FakeDingTalk, settings: Settings
) -> None:
    group = {"conversation_type": "2", "conversation_id": "cg-9", "session": "g9"}
    fake.send_chatbot_message(
        text="/sql DELETE FROM orders WHERE id = 7", sender_staff_id="alice", **group
    )
    [conf] = await wait_pending(gateway)
    await fake.wait_requests(CARD_PATH)
    track = f"gwconf-{conf.id}"

    click = fake.send_card_callback(out_track_id=track, user_id="mallory", action_id="approve")
    ack = await fake.wait_ack(click)
    response = json.loads(ack["data"])["response"]
    assert "cardData" not in response
    assert "仅发起人或审批人可操作" in response["privateData"]["mallory"]["cardParamMap"]["tips"]
    await fake.wait_until(
        lambda: any("mallory: 仅发起人或审批人可操作" in t for t in webhook_texts(fake)),
        what="the not-allowed message in the chat",
    )
    assert (await wait_status(gateway, conf.id, Status.PENDING)).status is Status.PENDING
    assert fake.card(track)["status"] == "pending"  # type: ignore[index]
    assert 7 in order_ids(settings)


async def test_reject_click_rejects_and_tool_does_not_run(
    gateway: Gateway, fake: FakeDingTalk, settings: Settings
) -> None:
    fake.send_chatbot_message(text="/sql DELETE FROM orders WHERE id = 8")
    [conf] = await wait_pending(gateway)
    await fake.wait_requests(CARD_PATH)
    click = fake.send_card_callback(
        out_track_id=f"gwconf-{conf.id}",
        user_id="staff-1",
        action_id="",
        # The standard template's request buttons report their params, not actionIds.
        params={"action": "reject", "id": "reject"},
    )
    response = json.loads((await fake.wait_ack(click))["data"])["response"]
    assert response["cardData"]["cardParamMap"]["status"] == "rejected"
    await wait_status(gateway, conf.id, Status.REJECTED)
    assert 8 in order_ids(settings)


async def test_card_delivery_failure_falls_back_to_text_prompt(
    gateway: Gateway, fake: FakeDingTalk, settings: Settings
) -> None:
    fake.inject("POST", CARD_PATH, 403, times=10, body={"code": "Forbidden.AccessDenied"})
    fake.send_chatbot_message(text="/sql DELETE FROM orders WHERE id = 2")
    [conf] = await wait_pending(gateway)
    await fake.wait_until(
        lambda: any(
            f"需要确认 Confirmation required [{conf.id}]" in t for t in webhook_texts(fake)
        ),
        what="the text prompt",
    )
    # 403 is not retried.
    assert len(fake.requests(CARD_PATH)) == 1
    fake.send_chatbot_message(text=f"确认 {conf.id}")
    await wait_status(gateway, conf.id, Status.APPROVED)
    await fake.wait_until(lambda: 2 not in order_ids(settings), what="row 2 deleted")
    # No card was delivered, so none is updated.
    assert fake.requests("/v1.0/card/instances", method="PUT") == []


async def test_configured_template_id_is_used(tmp_path: Path, fake: FakeDingTalk) -> None:
    settings = make_settings(tmp_path, fake, card_template_id="my-approval.schema")
    async with await build(settings) as gw:
        await fake.wait_connected()
        fake.send_chatbot_message(text="/sql DELETE FROM orders WHERE id = 1")
        [conf] = await wait_pending(gw)
        [req] = await fake.wait_requests(CARD_PATH)
        assert req.body["cardTemplateId"] == "my-approval.schema"
        params = req.body["cardData"]["cardParamMap"]
        assert params["confirmation_id"] == conf.id
        assert params["pending"] == "true"
        assert all(isinstance(v, str) for v in params.values())


def test_grant_button_only_where_a_grant_can_apply_and_its_click_reads_back() -> None:
    base = Confirmation(
        id="K7Q2",
        session_key="dingtalk:cg",
        channel="dingtalk",
        chat_id="cg",
        requester="alice",
        is_group=True,
        tool_call=ToolCall(name="sql_modify", args={"sql": "x"}, call_id="c1"),
        summary="DELETE orders",
        created_at=1.0,
        expires_at=301.0,
    )

    def ids(c: Confirmation, **kw: bool) -> list[str]:
        params = card_params(c, now=2.0, **kw)
        return [b["id"] for b in json.loads(params["sys_full_json_obj"])["msgButtons"]]

    assert ids(base) == ["approve", "approve_grant", "reject"]
    assert ids(replace(base, risk=Risk.CRITICAL)) == ["approve", "reject"]
    assert ids(replace(base, four_eyes=True)) == ["approve", "reject"]
    # The requester's own one-to-one four-eyes card only withdraws; an approver's copy decides.
    alone = replace(base, four_eyes=True, is_group=False)
    assert ids(alone) == ["reject"]
    assert ids(alone, direct=True) == ["approve", "reject"]

    track = out_track_id("K7Q2", direct_to="$:LWCP_v1:$odd/id")
    assert track.startswith("gwconf-K7Q2_dm_") and "/" not in track
    assert confirmation_id_from(track) == "K7Q2"
    grant = parse_card_callback(
        {
            "outTrackId": track,
            "userId": "bob",
            "content": json.dumps(
                {"cardPrivateData": {"actionIds": [], "params": {"action": "approve_grant"}}}
            ),
        }
    )
    assert (grant.confirmation_id, grant.decision, grant.grant_minutes) == (
        "K7Q2",
        Decision.APPROVE,
        texts.GRANT_MINUTES_BUTTON,
    )
