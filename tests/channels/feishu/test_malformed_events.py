"""Signed Feishu events with a field of the wrong type (issue 27: ``message.mentions`` as a
number was HTTP 500, a TypeError in channels/feishu/inbound.py).

Each one, over the webhook (encrypted and signed) and the long connection (the real
lark-oapi client against the fake): a 400 / an acknowledgement, one log line naming the
field, nothing else lost: the next good event is answered.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog

from config.settings import Settings
from gateway.app import Gateway
from tests.channels.feishu.conftest import ALICE, make_settings
from tests.fakes.feishu import FakeFeishu, card_action_event, message_event, webhook_request

ENCRYPT_KEY = "malformed-encrypt-key"
TOKEN = "malformed-verification-token"

Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    """Set ``event.<path>`` (dotted) to ``value``."""

    def mutate(payload: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = payload["event"]
        for key in parents:
            node = node[key]
        node[last] = value

    return mutate


def _drop(path: str) -> Mutation:
    def mutate(payload: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = payload["event"]
        for key in parents:
            node = node[key]
        del node[last]

    return mutate


# (what is wrong, how, the field the answer names)
MESSAGE_CASES = [
    ("mentions a number", _set("message.mentions", 5), "event.message.mentions"),
    ("mentions a boolean", _set("message.mentions", True), "event.message.mentions"),
    ("a mention not an object", _set("message.mentions", [7]), "event.message.mentions.0"),
    ("a mention key a number", _set("message.mentions", [{"key": 1}]), "mentions.0.key"),
    ("message_id a number", _set("message.message_id", 42), "event.message.message_id"),
    ("no chat_id", _drop("message.chat_id"), "event.message.chat_id"),
    ("create_time a number", _set("message.create_time", 1), "event.message.create_time"),
    ("create_time not digits", _set("message.create_time", "soon"), "message.create_time"),
    ("content an object", _set("message.content", {"text": "hi"}), "event.message.content"),
    ("sender_id a string", _set("sender.sender_id", "ou_x"), "event.sender.sender_id"),
    ("sender_type a list", _set("sender.sender_type", []), "event.sender.sender_type"),
]
CARD_CASES = [
    ("operator open_id a number", _set("operator.open_id", 5), "event.operator.open_id"),
    ("no operator", _drop("operator"), "event.operator"),
    ("action a list", _set("action", []), "event.action"),
    ("context a string", _set("context", "oc_x"), "event.context"),
    ("open_message_id a bool", _set("context.open_message_id", False), "open_message_id"),
]


def _message() -> dict[str, Any]:
    mention = {"key": "@_user_1", "open_id": "ou_bob", "name": "Bob"}
    return message_event(
        chat_id="oc_bad", sender=ALICE, text="@_user_1 /help", mentions=[mention], token=TOKEN
    )


def _click() -> dict[str, Any]:
    return card_action_event(
        operator=ALICE,
        value={"confirmation_id": "K7Q2", "decision": "approve"},
        open_message_id="om_card",
        open_chat_id="oc_bad",
        token=TOKEN,
    )


def _broken(make: Callable[[], dict[str, Any]], mutate: Mutation) -> dict[str, Any]:
    payload = copy.deepcopy(make())
    mutate(payload)
    return payload


def _good() -> tuple[str, dict[str, Any]]:
    mid = "om_good_" + uuid.uuid4().hex[:10]
    event = message_event(
        chat_id="oc_good_" + mid, sender=ALICE, text="/pending", message_id=mid, token=TOKEN
    )
    return mid, event


def _warnings(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e.get("log_level") in ("warning", "error", "critical")]


async def _answered(fake: FakeFeishu, mid: str) -> None:
    await fake.wait_until(
        lambda: mid in {r.match.get("mid") for r in fake.requests_for("reply")},
        within=10,
        what=f"an answer to {mid}",
    )


# ---------------------------------------------------------------------------- webhook


@pytest.fixture
def settings(tmp_path: Path, fake: FakeFeishu) -> Settings:
    return make_settings(
        tmp_path, fake, mode="webhook", encrypt_key=ENCRYPT_KEY, verification_token=TOKEN
    )


@pytest.fixture
async def post(
    gateway: Gateway,
) -> AsyncIterator[Callable[[dict[str, Any], str], Any]]:
    assert gateway.http is not None
    base = gateway.http.url

    async with aiohttp.ClientSession() as session:

        async def send(payload: dict[str, Any], path: str) -> tuple[int, Any]:
            headers, body = webhook_request(payload, encrypt_key=ENCRYPT_KEY)
            async with session.post(base + path, data=body, headers=headers) as resp:
                return resp.status, json.loads(await resp.text() or "null")

        yield send


@pytest.mark.parametrize(
    ("path", "make", "cases"),
    [
        ("/webhook/feishu/event", _message, MESSAGE_CASES),
        ("/webhook/feishu/card", _click, CARD_CASES),
    ],
    ids=["message", "card"],
)
async def test_a_signed_event_with_a_wrong_field_is_400_and_one_log_line(
    fake: FakeFeishu,
    post: Callable[[dict[str, Any], str], Any],
    path: str,
    make: Callable[[], dict[str, Any]],
    cases: list[tuple[str, Mutation, str]],
) -> None:
    for what, mutate, field in cases:
        with structlog.testing.capture_logs() as logs:
            status, answer = await post(_broken(make, mutate), path)
        assert status == 400, (what, status, answer)
        assert field in answer["msg"], (what, answer)
        [line] = _warnings(logs)
        assert line["event"] == "feishu.webhook_rejected", (what, line)
        assert field in line["reason"], (what, line)
        # Nothing else is lost: the next good event is stored and answered.
        mid, good = _good()
        assert (await post(good, "/webhook/feishu/event"))[0] == 200, what
        await _answered(fake, mid)


# ---------------------------------------------------------------------- long connection


@pytest.mark.parametrize(
    ("frame_type", "make", "cases"),
    [("event", _message, MESSAGE_CASES), ("card", _click, CARD_CASES)],
    ids=["message", "card"],
)
async def test_a_wrong_field_on_the_long_connection_is_acked_and_logged_once(
    tmp_path: Path,
    fake: FakeFeishu,
    frame_type: str,
    make: Callable[[], dict[str, Any]],
    cases: list[tuple[str, Mutation, str]],
) -> None:
    from gateway.app import build

    async with await build(make_settings(tmp_path, fake)):
        await fake.wait_connected()
        for what, mutate, field in cases:
            with structlog.testing.capture_logs() as logs:
                frame = fake.send_frame(_broken(make, mutate), frame_type=frame_type)
                ack = await fake.wait_ack(frame)
            # Acknowledged (code 500 would make Feishu redeliver it, as malformed), no card.
            assert (ack.code, ack.data) == (200, None), (what, ack)
            [line] = _warnings(logs)
            assert line["event"] == "feishu.malformed_event", (what, line)
            assert field in line["error"], (what, line)
            mid, good = _good()
            assert (await fake.wait_ack(fake.send_frame(good))).code == 200, what
            await _answered(fake, mid)


@pytest.mark.parametrize("payload", [b"[1, 2]", b"not json", b"[" * 10_000], ids=str)
async def test_a_frame_that_is_not_a_json_object_is_acked_and_logged_once(
    tmp_path: Path, fake: FakeFeishu, payload: bytes
) -> None:
    from gateway.app import build

    async with await build(make_settings(tmp_path, fake)):
        await fake.wait_connected()
        with structlog.testing.capture_logs() as logs:
            ack = await fake.wait_ack(fake.send_frame(payload))
        assert ack.code == 200
        [line] = _warnings(logs)
        assert line["event"] == "feishu.malformed_event"
        assert line["error"].startswith("frame payload")
        mid, good = _good()
        fake.send_frame(good)
        await _answered(fake, mid)
