"""Stream mode end to end: the real dingtalk-stream SDK, the real gateway, a fake DingTalk."""

from __future__ import annotations

import json

from config.settings import Settings
from gateway.app import Gateway
from gateway.confirm.model import Status
from tests.channels.dingtalk.conftest import (
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
