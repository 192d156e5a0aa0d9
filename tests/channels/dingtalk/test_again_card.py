"""重新发起 / Ask again on DingTalk (issue 25 item 4), through the real dingtalk-stream
SDK against the fake platform: an expired card carries the button; another member's click
is refused (privately and in the chat); the requester's click asks the same call again as
a new card, and the first card then says where the call went, with no button left."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.app import build
from gateway.confirm.again import FROM
from gateway.confirm.model import Status
from tests.channels.dingtalk.conftest import make_settings, wait_pending, wait_status, webhook_texts
from tests.fakes.dingtalk import FakeDingTalk
from tests.support import ShiftedClock, pass_deadline, wait_record

CARD_PATH = "/v1.0/card/instances/createAndDeliver"
GROUP = {"conversation_type": "2", "conversation_id": "cg-again", "session": "gagain"}


async def test_the_requester_asks_an_expired_card_again(tmp_path: Path, fake: FakeDingTalk) -> None:
    clock = ShiftedClock()
    async with await build(make_settings(tmp_path, fake), clock=clock) as gw:
        await fake.wait_connected()
        fake.send_chatbot_message(
            text="/sql DELETE FROM orders WHERE id = 6", sender_staff_id="alice", **GROUP
        )
        [conf] = await wait_pending(gw)
        await fake.wait_requests(CARD_PATH)
        await wait_record(gw, conf.id, lambda c: bool(c.prompt_refs), what="the card's ref")
        await pass_deadline(gw.confirmations, clock, conf.id)
        await wait_status(gw, conf.id, Status.EXPIRED)
        [put] = await fake.wait_requests("/v1.0/card/instances", method="PUT")
        buttons = json.loads(put.body["cardData"]["cardParamMap"]["sys_full_json_obj"])
        [button] = buttons["msgButtons"]
        assert button["id"] == "again" and button["text"] == "重新发起 / Ask again"
        track = f"gwconf-{conf.id}"

        refused = fake.send_card_callback(out_track_id=track, user_id="mallory", action_id="again")
        response = json.loads((await fake.wait_ack(refused))["data"])["response"]
        assert "cardData" not in response
        assert "only alice" in response["privateData"]["mallory"]["cardParamMap"]["tips"]
        await fake.wait_until(
            lambda: any("mallory: 仅发起人 alice 可以重新发起" in t for t in webhook_texts(fake)),
            what="the refusal in the chat",
        )
        assert await gw.confirmations.list(status=Status.PENDING) == []

        asked = fake.send_card_callback(out_track_id=track, user_id="alice", action_id="again")
        response = json.loads((await fake.wait_ack(asked))["data"])["response"]
        [new] = await wait_pending(gw)
        assert new.id != conf.id and new.details[FROM] == conf.id
        assert new.tool_call.args == conf.tool_call.args
        params = response["cardData"]["cardParamMap"]
        assert new.id in params["tips"]
        assert json.loads(params["sys_full_json_obj"]) == {"msgButtons": []}
        assert new.id in response["privateData"]["alice"]["cardParamMap"]["tips"]
        await fake.wait_requests(CARD_PATH, 2)  # the new question's card
