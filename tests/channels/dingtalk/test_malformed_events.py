"""DingTalk payloads with a field of the wrong type (issue 27; the Feishu ``mentions`` bug's
class): a signed HTTP robot callback gets 400, a stream frame is acknowledged (the real
dingtalk-stream SDK against the fake), each with one log line naming the field, and the
next good message is answered.

Before the shape check, ``actionIds`` as a number was a TypeError logged with a traceback
on every click, a chatbot message that was not a JSON object was answered "not stored"
(and so redelivered forever), and wrong-typed fields were read through ``str()``.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog

from channels.dingtalk.verify import robot_signature
from gateway.app import Gateway, build
from tests.channels.dingtalk.conftest import make_settings
from tests.fakes.dingtalk import CARD_CALLBACK_TOPIC, CHATBOT_TOPIC, FakeDingTalk

Mutation = Callable[[dict[str, Any]], Any]


def _set(key: str, value: Any) -> Mutation:
    def mutate(payload: dict[str, Any]) -> Any:
        payload[key] = value
        return payload

    return mutate


def _drop(*keys: str) -> Mutation:
    def mutate(payload: dict[str, Any]) -> Any:
        for key in keys:
            payload.pop(key, None)
        return payload

    return mutate


def _rich(content: Any) -> Mutation:
    def mutate(payload: dict[str, Any]) -> Any:
        payload.pop("text", None)
        return payload | {"msgtype": "richText", "content": content}

    return mutate


def _private(private: Any) -> Mutation:
    return _set("content", json.dumps({"cardPrivateData": private}))


# (what is wrong, how, the field the log line names)
MESSAGE_CASES = [
    ("msgId a number", _set("msgId", 42), "msgId"),
    ("conversationType a number", _set("conversationType", 2), "conversationType"),
    ("isInAtList a string", _set("isInAtList", "yes"), "isInAtList"),
    ("createAt a string", _set("createAt", "now"), "createAt"),
    ("text a string", _set("text", "hi"), "text"),
    ("text.content a number", _set("text", {"content": 5}), "text.content"),
    ("richText a number", _rich({"richText": 5}), "richText"),
    ("a richText item's text a list", _rich({"richText": [{"text": []}]}), "richText.0.text"),
    ("no sender", _drop("senderStaffId", "senderId"), "senderStaffId"),
    ("sessionWebhook a number", _set("sessionWebhook", 1), "sessionWebhook"),
    ("not an object", lambda payload: [payload], "the body: not a JSON object"),
]
CARD_CASES = [
    ("actionIds a number", _private({"actionIds": 5}), "actionIds"),
    ("actionIds of numbers", _private({"actionIds": [1]}), "actionIds.0"),
    ("params.action a number", _private({"params": {"action": 5}}), "params.action"),
    ("content not JSON", _set("content", "{not json"), "content"),
    ("content a number", _set("content", 7), "content"),
    ("userId a number", _set("userId", 5), "userId"),
]


def _warnings(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e.get("log_level") in ("warning", "error", "critical")]


def _click(track: str = "gwconf-K7Q2") -> dict[str, Any]:
    private = {"actionIds": ["approve"], "params": {}}
    return {
        "type": "actionCallback",
        "outTrackId": track,
        "userId": "alice",
        "content": json.dumps({"cardPrivateData": private}),
    }


async def _answered(fake: FakeDingTalk, session: str) -> None:
    await fake.wait_until(
        lambda: session in {r.query.get("session") for r in fake.requests("/robot/sendBySession")},
        within=10,
        what=f"an answer in session {session}",
    )


def _good(fake: FakeDingTalk) -> tuple[str, dict[str, Any]]:
    session = "good-" + uuid.uuid4().hex[:10]
    payload = fake.chatbot_payload(
        text="/pending", conversation_id="cid-" + session, session=session
    )
    return session, payload


# --------------------------------------------------------------------------- stream


@pytest.mark.parametrize(
    ("topic", "cases"),
    [(CHATBOT_TOPIC, MESSAGE_CASES), (CARD_CALLBACK_TOPIC, CARD_CASES)],
    ids=["message", "card"],
)
async def test_a_wrong_field_on_the_stream_is_acked_and_logged_once(
    tmp_path: Path, fake: FakeDingTalk, topic: str, cases: list[tuple[str, Mutation, str]]
) -> None:
    async with await build(make_settings(tmp_path, fake)):
        await fake.wait_connected()
        for what, mutate, field in cases:
            base = fake.chatbot_payload(text="/help") if topic == CHATBOT_TOPIC else _click()
            with structlog.testing.capture_logs() as logs:
                ack = await fake.wait_ack(fake.send_callback(topic, mutate(copy.deepcopy(base))))
            # Acknowledged: a failure ack would bring the same malformed frame back.
            assert ack["code"] == 200, (what, ack)
            [line] = _warnings(logs)
            assert line["event"] == "dingtalk.malformed_event", (what, line)
            assert field in line["error"], (what, line)
            session, good = _good(fake)
            assert (await fake.wait_ack(fake.send_chatbot_message(payload=good)))["code"] == 200
            await _answered(fake, session)


# -------------------------------------------------------------------- HTTP robot mode


async def test_a_signed_callback_with_a_wrong_field_is_400_and_one_log_line(
    tmp_path: Path, fake: FakeDingTalk
) -> None:
    gateway: Gateway
    async with (
        await build(make_settings(tmp_path, fake, mode="http")) as gateway,
        aiohttp.ClientSession() as http,
    ):
        assert gateway.http is not None
        url = gateway.http.url + "/webhook/dingtalk"
        stamp = int(time.time() * 1000)

        async def post(body: Any) -> tuple[int, Any]:
            nonlocal stamp
            stamp += 1  # each (timestamp, sign) pair is accepted once
            headers = {
                "timestamp": str(stamp),
                "sign": robot_signature(str(stamp), fake.client_secret),
            }
            async with http.post(url, data=json.dumps(body), headers=headers) as resp:
                return resp.status, await resp.json()

        for what, mutate, field in MESSAGE_CASES:
            with structlog.testing.capture_logs() as logs:
                status, answer = await post(mutate(fake.chatbot_payload(text="/help")))
            assert status == 400, (what, status, answer)
            assert field in answer["error"], (what, answer)
            [line] = _warnings(logs)
            assert line["event"] == "dingtalk.malformed_event", (what, line)
            assert field in line["error"], (what, line)
            session, good = _good(fake)
            assert (await post(good))[0] == 200, what
            await _answered(fake, session)
