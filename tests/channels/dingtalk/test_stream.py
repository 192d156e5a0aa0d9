"""Stream mode end to end: the real dingtalk-stream SDK, the real gateway, a fake DingTalk."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp

from config.settings import Settings
from gateway.app import Gateway, build
from gateway.confirm.model import Status
from tests.channels.dingtalk.conftest import (
    make_settings,
    order_ids,
    wait_pending,
    wait_status,
    webhook_texts,
)
from tests.fakes.dingtalk import FakeDingTalk

CARD_PATH = "/v1.0/card/instances/createAndDeliver"


async def test_dm_delete_card_click_approves_and_ack_carries_card(
    gateway: Gateway, fake: FakeDingTalk, settings: Settings
) -> None:
    assert 3 in order_ids(settings)
    frame = fake.send_chatbot_message(
        text="/sql DELETE FROM orders WHERE id = 3", sender_staff_id="alice"
    )
    ack = await fake.wait_ack(frame)
    assert ack["code"] == 200

    [conf] = await wait_pending(gateway)
    [card_req] = await fake.wait_requests(CARD_PATH)
    assert card_req.body["outTrackId"] == f"gwconf-{conf.id}"
    assert card_req.body["openSpaceId"] == "dtv1.card//IM_ROBOT.alice"
    assert card_req.body["callbackType"] == "STREAM"
    assert card_req.headers["x-acs-dingtalk-access-token"].startswith("tok-")
    params = card_req.body["cardData"]["cardParamMap"]
    assert params["status"] == "pending"
    assert "DELETE FROM orders WHERE id = 3" in params["markdown"]
    await fake.wait_until(
        lambda: any(f"确认 {conf.id} / 取消 {conf.id}" in t for t in webhook_texts(fake)),
        what="the typed-reply hint",
    )

    click = fake.send_card_callback(
        out_track_id=f"gwconf-{conf.id}", user_id="alice", action_id="approve"
    )
    click_ack = await fake.wait_ack(click)
    response = json.loads(click_ack["data"])["response"]
    assert response["cardData"]["cardParamMap"]["status"] == "approved"
    assert response["cardData"]["cardParamMap"]["sys_full_json_obj"] == '{"msgButtons": []}'

    done = await wait_status(gateway, conf.id, Status.APPROVED)
    assert done.decided_by == "alice"
    assert done.decided_via == "card"
    await fake.wait_until(lambda: 3 not in order_ids(settings), what="row 3 deleted")
    card = fake.card(f"gwconf-{conf.id}")
    assert card is not None
    assert card["status"] == "approved"


async def test_group_requester_text_approves_other_member_does_not(
    gateway: Gateway, fake: FakeDingTalk, settings: Settings
) -> None:
    group = {"conversation_type": "2", "conversation_id": "cg-1", "session": "g1"}
    fake.send_chatbot_message(
        text=" /sql DELETE FROM orders WHERE id = 4", sender_staff_id="alice", **group
    )
    [conf] = await wait_pending(gateway)
    [card_req] = await fake.wait_requests(CARD_PATH)
    assert card_req.body["openSpaceId"] == "dtv1.card//IM_GROUP.cg-1"
    assert card_req.body["imGroupOpenDeliverModel"]["robotCode"] == fake.client_id

    # Another member's 确认 is not a decision, and they are told so.
    fake.send_chatbot_message(text=" 确认", sender_staff_id="mallory", **group)
    await fake.wait_until(
        lambda: any("仅发起人或审批人可操作" in t for t in webhook_texts(fake)),
        what="the not-allowed answer",
    )
    assert (await wait_status(gateway, conf.id, Status.PENDING)).decided_by is None
    assert 4 in order_ids(settings)

    fake.send_chatbot_message(text=" 确认", sender_staff_id="alice", **group)
    done = await wait_status(gateway, conf.id, Status.APPROVED)
    assert done.decided_by == "alice"
    assert done.decided_via == "text"
    await fake.wait_until(lambda: 4 not in order_ids(settings), what="row 4 deleted")
    # The decision made elsewhere updates the card for everyone with PUT, and so does the
    # run's end.
    put, ended = await fake.wait_requests("/v1.0/card/instances", 2, method="PUT")
    assert put.body["outTrackId"] == ended.body["outTrackId"] == f"gwconf-{conf.id}"
    assert put.body["cardData"]["cardParamMap"]["stage"] == "approved"
    assert ended.body["cardData"]["cardParamMap"]["stage"] == "done"
    assert fake.card(f"gwconf-{conf.id}")["status"] == "approved"  # type: ignore[index]


async def test_group_without_mention_is_ignored_unless_policy_open(
    gateway: Gateway, fake: FakeDingTalk
) -> None:
    group = {"conversation_type": "2", "conversation_id": "cg-2", "session": "g2"}
    fake.send_chatbot_message(text="/help", is_in_at_list=False, **group)
    fake.send_chatbot_message(text="/pending", is_in_at_list=True, **group)
    # Messages of one chat are answered in order, so once /pending is answered the
    # unmentioned /help would have been answered already.
    await fake.wait_until(
        lambda: any("没有待确认" in t for t in webhook_texts(fake)), what="/pending answer"
    )
    assert not any("/sql" in t for t in webhook_texts(fake))


async def test_same_msg_id_twice_runs_once(gateway: Gateway, fake: FakeDingTalk) -> None:
    payload = fake.chatbot_payload(text="/sql DELETE FROM orders WHERE id = 5", msg_id="dup-1")
    first = fake.send_chatbot_message(payload=payload)
    # A redelivery: DingTalk sends the same message in a new frame.
    second = fake.send_chatbot_message(payload=payload)
    # And the very same frame again (the SDK replays its cached ack for those).
    fake.send_chatbot_message(payload=payload, frame_id=first)
    await fake.wait_until(lambda: len(fake.acks_for(first)) == 2, what="both acks of frame 1")
    await fake.wait_ack(second)
    # Every ack is sent after the message was handed to the gateway loop; a message in
    # another chat answered afterwards means the copies were handled before it.
    fake.send_chatbot_message(text="/pending", conversation_id="cid-other", session="s2")
    await fake.wait_until(
        lambda: any("没有待确认" in t for t in webhook_texts(fake)), what="/pending answer"
    )
    assert len(await wait_pending(gateway)) == 1
    # The card goes out on its own chat's turn: other chats' answers may be sent first.
    assert len(await fake.wait_requests(CARD_PATH)) == 1
    assert len(fake.acks_for(first)) == 2


async def test_expired_session_webhook_falls_back_to_robot_openapi(
    gateway: Gateway, fake: FakeDingTalk
) -> None:
    fake.send_chatbot_message(text="/help", sender_staff_id="bob", webhook_valid_for=-10)
    [oto] = await fake.wait_requests("/v1.0/robot/oToMessages/batchSend")
    assert oto.body["userIds"] == ["bob"]
    assert oto.body["robotCode"] == fake.client_id
    assert oto.body["msgKey"] == "sampleText"
    assert "/sql" in json.loads(oto.body["msgParam"])["content"]
    assert oto.headers["x-acs-dingtalk-access-token"].startswith("tok-")

    fake.send_chatbot_message(
        text="/help", conversation_type="2", conversation_id="cg-3", webhook_valid_for=30
    )
    [grp] = await fake.wait_requests("/v1.0/robot/groupMessages/send")
    assert grp.body["openConversationId"] == "cg-3"
    # The access token is fetched once and cached; no session webhook was used.
    assert len(fake.requests("/v1.0/oauth2/accessToken")) == 1
    assert fake.requests("/robot/sendBySession") == []


async def test_send_retries_on_429_and_5xx_then_dead_letters(
    gateway: Gateway, fake: FakeDingTalk
) -> None:
    path = "/v1.0/robot/oToMessages/batchSend"
    fake.inject("POST", path, 429)
    fake.inject("POST", path, 503)
    fake.send_chatbot_message(text="/help", sender_staff_id="carol", webhook_valid_for=-1)
    sent = await fake.wait_requests(path, 3)
    assert [r.status for r in sent] == [429, 503, 200]

    fake.inject("POST", path, 500, times=50)
    fake.send_chatbot_message(text="/pending", sender_staff_id="carol", webhook_valid_for=-1)
    channel = gateway.channels.channels["dingtalk"]
    await fake.wait_until(lambda: len(channel.dead_letters) == 1, what="a dead letter")  # type: ignore[attr-defined]
    assert gateway.http is not None
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{gateway.http.url}/api/channels/dingtalk/failed") as resp,
    ):
        assert resp.status == 200
        body = await resp.json()
    assert body["channel"] == "dingtalk"
    [entry] = body["failed"]
    assert entry["chat_id"] == "cid-1"
    assert "500" in str(entry["error"])
    assert entry["attempts"] == 4
    # send_attempts (default 4) tries in all, not more: the manager does not retry again.
    assert len(fake.requests(path)) == 3 + 4


async def test_disconnect_reconnects_and_stop_is_bounded(
    settings: Settings, fake: FakeDingTalk
) -> None:
    gw = await build(settings)
    await gw.start()
    try:
        await fake.wait_connected(1)
        # The fake sees the socket before the SDK's client marks itself connected.
        channel = gw.channels.channels["dingtalk"]
        await fake.wait_until(lambda: channel.ready, what="the channel ready")
        fake.send_system("ping", {"opaque": "p1"})
        fake.send_system("disconnect")
        await fake.wait_connected(2)
        # A fresh ticket per connection: the open call was made again.
        assert len(fake.open_bodies) == 2
        frame = fake.send_chatbot_message(text="/pending")
        await fake.wait_ack(frame)
        await fake.wait_until(
            lambda: any("没有待确认" in t for t in webhook_texts(fake)), what="/pending answer"
        )
        sdk_thread = channel._runner.thread  # type: ignore[attr-defined]
    finally:
        # Bounded: stop_timeout_seconds for the stream, plus the gateway's own drains.
        async with asyncio.timeout(settings.channels.dingtalk.stop_timeout_seconds + 10):
            await gw.stop()
    assert not sdk_thread.alive
    assert fake.live_connections == 0
    ping_acks = [a for a in fake.acks if a.get("data") == '{"opaque": "p1"}']
    assert len(ping_acks) == 1


async def test_stop_is_bounded_while_the_connection_open_hangs(
    tmp_path: Path, fake: FakeDingTalk
) -> None:
    settings = make_settings(tmp_path, fake, stop_timeout_seconds=1.0, request_timeout_seconds=3.0)
    open_path = "/v1.0/gateway/connections/open"
    fake.inject("POST", open_path, 200, times=10, delay=30)
    gw = await build(settings)
    await gw.start()
    try:
        await fake.wait_until(lambda: fake.arrived(open_path), what="the hanging open call")
        sdk_thread = gw.channels.channels["dingtalk"]._runner.thread  # type: ignore[attr-defined]
        assert not gw.channels.channels["dingtalk"].ready
    finally:
        async with asyncio.timeout(settings.channels.dingtalk.stop_timeout_seconds + 10):
            await gw.stop()
    # The SDK's start() sat in a blocking call; stop() cancelled it and the thread ended.
    await fake.wait_until(lambda: not sdk_thread.alive, within=2, what="the stream thread")
    assert fake.connections_opened == 0


async def test_revoked_token_is_fetched_again(gateway: Gateway, fake: FakeDingTalk) -> None:
    path = "/v1.0/robot/oToMessages/batchSend"
    fake.send_chatbot_message(text="/help", webhook_valid_for=-1)
    await fake.wait_requests(path, 1)
    fake.revoke_tokens()
    fake.send_chatbot_message(text="/pending", webhook_valid_for=-1)
    sent = await fake.wait_requests(path, 3)
    assert [r.status for r in sent] == [200, 401, 200]
    assert len(fake.requests("/v1.0/oauth2/accessToken")) == 2
    assert (
        sent[1].headers["x-acs-dingtalk-access-token"]
        != sent[2].headers["x-acs-dingtalk-access-token"]
    )


async def test_old_messages_are_skipped(gateway: Gateway, fake: FakeDingTalk) -> None:
    fake.send_chatbot_message(text="/help", created_ago=3600)
    fake.send_chatbot_message(text="/pending")
    await fake.wait_until(
        lambda: any("没有待确认" in t for t in webhook_texts(fake)), what="/pending answer"
    )
    assert len(webhook_texts(fake)) == 1
