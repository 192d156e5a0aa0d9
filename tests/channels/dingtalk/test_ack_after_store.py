"""Invariant 9 on DingTalk: a message is acknowledged only once stored, in both modes.

The inbox's first put fails (a full disk): that delivery gets no success ack, and the
redelivery of it is taken in and answered once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import aiohttp

from channels.dingtalk.verify import robot_signature
from gateway.app import build
from tests.channels.dingtalk.conftest import make_settings, webhook_texts
from tests.fakes.dingtalk import FakeDingTalk
from tests.support import FailingInbox

TEXT = "/ack-after-store"


def answers(fake: FakeDingTalk) -> list[str]:
    return [t for t in webhook_texts(fake) if TEXT in t]


async def test_stream_acks_500_until_the_message_is_stored(
    tmp_path: Path, fake: FakeDingTalk
) -> None:
    inbox = FailingInbox(failures=1)
    payload = fake.chatbot_payload(text=TEXT, msg_id="stream-ack-1")
    async with await build(make_settings(tmp_path, fake), inbox=inbox):
        await fake.wait_connected()
        first = await fake.wait_ack(fake.send_chatbot_message(payload=payload), within=10)
        assert first["code"] == 500
        assert inbox.stored == []
        second = await fake.wait_ack(fake.send_chatbot_message(payload=payload), within=10)
        assert second["code"] == 200
        assert inbox.stored == [("dingtalk", "stream-ack-1")]  # stored before the ack
        await fake.wait_until(lambda: answers(fake), what="the answer")
    assert len(answers(fake)) == 1


async def test_http_mode_answers_503_until_the_message_is_stored(
    tmp_path: Path, fake: FakeDingTalk
) -> None:
    settings = make_settings(tmp_path, fake, mode="http", signature_window_seconds=300)
    inbox = FailingInbox(failures=1)
    body = fake.chatbot_payload(text=TEXT, msg_id="http-ack-1")
    async with await build(settings, inbox=inbox) as gw, aiohttp.ClientSession() as http:
        assert gw.http is not None

        async def deliver() -> int:
            ts = str(int(time.time() * 1000))
            async with http.post(
                f"{gw.http.url}/webhook/dingtalk",
                data=json.dumps(body),
                headers={
                    "Content-Type": "application/json",
                    "timestamp": ts,
                    "sign": robot_signature(ts, fake.client_secret),
                },
            ) as resp:
                return resp.status

        assert await deliver() == 503
        assert inbox.stored == []
        assert await deliver() == 200
        assert inbox.stored == [("dingtalk", "http-ack-1")]
        await fake.wait_until(lambda: answers(fake), what="the answer")
    assert len(answers(fake)) == 1
