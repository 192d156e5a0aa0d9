"""Invariant 9 on Feishu: an event is acknowledged only once stored, on both transports.

The inbox's first put fails (a full disk): that delivery must not be acknowledged as a
success, and Feishu's redelivery of it is taken in and answered once.
"""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp

from gateway.app import build
from tests.channels.feishu.conftest import ALICE, make_settings, sent_texts, wait_until
from tests.fakes.feishu import FakeFeishu, message_event, webhook_request
from tests.support import FailingInbox

P2P = "oc_p2p_ack"
TEXT = "/ack-after-store"


def answers(fake: FakeFeishu) -> list[str]:
    return [t for t in sent_texts(fake) if TEXT in t]


async def test_long_connection_acks_500_until_the_event_is_stored(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    inbox = FailingInbox(failures=1)
    async with await build(make_settings(tmp_path, fake), inbox=inbox):
        await fake.wait_connected()
        event = message_event(chat_id=P2P, sender=ALICE, text=TEXT)
        message_id = event["event"]["message"]["message_id"]
        assert (await fake.wait_ack(fake.send_frame(event))).code == 500
        assert inbox.stored == []
        assert (await fake.wait_ack(fake.send_frame(event))).code == 200
        assert inbox.stored == [("feishu", message_id)]  # stored before the ack went out
        await wait_until(lambda: answers(fake), what="the answer")
        assert (await fake.wait_ack(fake.send_frame(event))).code == 200  # a duplicate
    assert len(answers(fake)) == 1


async def test_webhook_answers_503_until_the_event_is_stored(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    key, token = "test-encrypt-key", "test-verification-token"
    settings = make_settings(
        tmp_path, fake, mode="webhook", encrypt_key=key, verification_token=token
    )
    inbox = FailingInbox(failures=1)
    event = message_event(chat_id=P2P, sender=ALICE, text=TEXT, token=token)
    message_id = event["event"]["message"]["message_id"]
    async with await build(settings, inbox=inbox) as gw, aiohttp.ClientSession() as session:
        assert gw.http is not None

        async def deliver() -> int:
            headers, body = webhook_request(event, encrypt_key=key)
            async with session.post(
                gw.http.url + "/webhook/feishu/event", data=body, headers=headers
            ) as resp:
                json.loads(await resp.text())
                return resp.status

        assert await deliver() == 503
        assert inbox.stored == []
        assert await deliver() == 200
        assert inbox.stored == [("feishu", message_id)]
        await wait_until(lambda: answers(fake), what="the answer")
        assert await deliver() == 200
    assert len(answers(fake)) == 1
