"""Reading chatbot messages and card callbacks (no network)."""

from __future__ import annotations

import json
import time

import pytest

from channels.dingtalk.cards import confirmation_id_from, out_track_id, parse_card_callback
from channels.dingtalk.inbound import parse_chatbot_message
from channels.payloads import MalformedEvent
from gateway.confirm.model import Decision
from tests.fakes.dingtalk import FakeDingTalk


def _payload(**kw: object) -> dict[str, object]:
    # The fake builds payloads without running its server.
    return FakeDingTalk().chatbot_payload(**kw)  # type: ignore[arg-type]


def test_one_to_one_text() -> None:
    event = parse_chatbot_message(_payload(text="  /sql SELECT 1 ", sender_staff_id="u1"))
    assert event is not None
    assert not event.is_group
    assert event.sender_id == "u1"
    assert event.text == "/sql SELECT 1"
    assert event.session_webhook is not None
    assert event.session_webhook_expires_at is not None
    assert event.session_webhook_expires_at > time.time()


def test_group_mention_leaves_leading_space_which_is_stripped() -> None:
    event = parse_chatbot_message(
        _payload(text=" 确认", conversation_type="2", is_in_at_list=True, conversation_id="cg")
    )
    assert event is not None
    assert event.is_group
    assert event.is_in_at_list
    assert event.text == "确认"
    assert event.conversation_id == "cg"


def test_rich_text_joins_text_parts() -> None:
    data = _payload(text="hello", msgtype="richText")
    data["content"] = {"richText": [{"text": "/sql "}, {"downloadCode": "x"}, {"text": "SELECT 1"}]}
    event = parse_chatbot_message(data)
    assert event is not None
    assert event.text == "/sql SELECT 1"


def test_picture_has_no_text() -> None:
    data = _payload(text="", msgtype="picture")
    data["content"] = {"downloadCode": "abc"}
    event = parse_chatbot_message(data)
    assert event is not None
    assert event.text is None


def test_message_without_ids_is_malformed() -> None:
    data = _payload(text="x")
    del data["msgId"]
    with pytest.raises(MalformedEvent, match="msgId"):
        parse_chatbot_message(data)


def test_out_track_id_round_trip_and_foreign_cards() -> None:
    assert out_track_id("K7Q2") == "gwconf-K7Q2"
    assert confirmation_id_from("gwconf-K7Q2") == "K7Q2"
    assert confirmation_id_from("gwconf-k7q2") == "K7Q2"
    assert confirmation_id_from("somebody-elses-card") is None


@pytest.mark.parametrize(
    ("private", "decision"),
    [
        ({"actionIds": ["approve"], "params": {}}, Decision.APPROVE),
        ({"actionIds": ["reject"]}, Decision.REJECT),
        # The standard template's request buttons echo only their params.
        ({"actionIds": [], "params": {"id": "reject"}}, Decision.REJECT),
        ({"actionIds": ["something"], "params": {}}, None),
    ],
)
def test_card_callback_decision(private: dict[str, object], decision: Decision | None) -> None:
    click = parse_card_callback(
        {
            "outTrackId": "gwconf-AB12",
            "userId": "u1",
            "content": json.dumps({"cardPrivateData": private}),
        }
    )
    assert click.confirmation_id == "AB12"
    assert click.user_id == "u1"
    assert click.decision == decision
