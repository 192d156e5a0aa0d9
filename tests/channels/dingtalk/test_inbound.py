"""Reading chatbot messages and checking HTTP robot signatures (no network)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import pytest

from channels.dingtalk.cards import confirmation_id_from, out_track_id, parse_card_callback
from channels.dingtalk.inbound import (
    parse_chatbot_message,
    robot_signature,
    verify_robot_request,
)
from gateway.confirm.model import Decision
from tests.fakes.dingtalk import FakeDingTalk

SECRET = "ding-secret"


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


def test_message_without_ids_is_unreadable() -> None:
    data = _payload(text="x")
    del data["msgId"]
    assert parse_chatbot_message(data) is None


def test_signature_matches_the_documented_formula() -> None:
    ts = "1700000000000"
    expected = base64.b64encode(
        hmac.new(SECRET.encode(), f"{ts}\n{SECRET}".encode(), hashlib.sha256).digest()
    ).decode()
    assert robot_signature(ts, SECRET) == expected


@pytest.mark.parametrize(
    ("timestamp_offset", "good_sign", "problem"),
    [
        (0, True, None),
        (0, False, "bad signature"),
        (-301, True, "timestamp outside the allowed window"),
        (301, True, "timestamp outside the allowed window"),
    ],
)
def test_verify_robot_request(timestamp_offset: int, good_sign: bool, problem: str | None) -> None:
    now = 1_700_000_000.0
    ts = str(int((now + timestamp_offset) * 1000))
    sign = robot_signature(ts, SECRET) if good_sign else robot_signature(ts, "other")
    assert (
        verify_robot_request(timestamp=ts, sign=sign, secret=SECRET, window_seconds=300, now=now)
        == problem
    )


def test_verify_robot_request_needs_both_headers() -> None:
    assert verify_robot_request(timestamp=None, sign="x", secret=SECRET, window_seconds=300)
    assert verify_robot_request(timestamp="1", sign=None, secret=SECRET, window_seconds=300)


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
