"""Webhook mode end to end: Feishu-encrypted, signed requests to the gateway's HTTP server."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from config.settings import ConfigError, Settings
from gateway.app import Gateway, build
from gateway.confirm.model import Status
from tests.channels.feishu.conftest import (
    ALICE,
    buttons,
    card_sends,
    card_text,
    make_settings,
    order_ids,
    sent_texts,
    wait_pending,
    wait_status,
    wait_until,
)
from tests.fakes.feishu import (
    FakeFeishu,
    card_action_event,
    encrypt,
    message_event,
    signature,
    url_verification,
    webhook_request,
)

ENCRYPT_KEY = "test-encrypt-key"
TOKEN = "test-verification-token"
EVENT_PATH = "/webhook/feishu/event"
CARD_PATH = "/webhook/feishu/card"
P2P = "oc_p2p_webhook"


@pytest.fixture
def settings(tmp_path: Path, fake: FakeFeishu) -> Settings:
    return make_settings(
        tmp_path,
        fake,
        mode="webhook",
        encrypt_key=ENCRYPT_KEY,
        verification_token=TOKEN,
    )


@pytest.fixture
async def http(gateway: Gateway) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    assert gateway.http is not None
    async with aiohttp.ClientSession() as session:
        yield session, gateway.http.url


async def post(
    http: tuple[aiohttp.ClientSession, str],
    payload: dict[str, Any],
    *,
    path: str = EVENT_PATH,
    **signing: Any,
) -> tuple[int, Any]:
    session, base = http
    headers, body = webhook_request(payload, encrypt_key=ENCRYPT_KEY, **signing)
    async with session.post(base + path, data=body, headers=headers) as resp:
        text = await resp.text()
        return resp.status, json.loads(text) if text else None


def delete_event(row: int) -> dict[str, Any]:
    return message_event(
        chat_id=P2P, sender=ALICE, text=f"/sql DELETE FROM orders WHERE id = {row}", token=TOKEN
    )


async def test_url_verification_is_answered(http: tuple[aiohttp.ClientSession, str]) -> None:
    status, body = await post(http, url_verification(challenge="ch-123", token=TOKEN))
    assert (status, body) == (200, {"challenge": "ch-123"})
    status, _ = await post(http, url_verification(challenge="ch-123", token="wrong"))
    assert status == 401


async def test_message_then_card_callback_over_webhook(
    gateway: Gateway,
    fake: FakeFeishu,
    settings: Settings,
    http: tuple[aiohttp.ClientSession, str],
) -> None:
    status, body = await post(http, delete_event(7))
    assert (status, body) == (200, {"msg": "success"})
    [conf] = await wait_pending(gateway)
    send = await fake.wait_request(lambda r: r in card_sends(fake), what="card send")
    assert send.message_id is not None
    click = card_action_event(
        operator=ALICE,
        value={"confirmation_id": conf.id, "decision": "approve"},
        open_message_id=send.message_id,
        open_chat_id=P2P,
        token=TOKEN,
    )
    status, answer = await post(http, click, path=CARD_PATH)
    assert status == 200
    assert answer["toast"]["type"] == "success"
    assert buttons(answer["card"]["data"]) == []
    assert "已批准 / approved" in card_text(answer["card"]["data"])
    await wait_status(gateway, conf.id, Status.APPROVED)
    await wait_until(lambda: 7 not in order_ids(settings), what="row 7 deleted")


async def test_bad_signature_is_401_and_nothing_is_queued(
    gateway: Gateway, fake: FakeFeishu, http: tuple[aiohttp.ClientSession, str]
) -> None:
    status, _ = await post(http, delete_event(1), bad_signature=True)
    assert status == 401
    # Wrong verification token, correctly signed: also refused.
    forged = message_event(chat_id=P2P, sender=ALICE, text="/help", token="not-the-token")
    status, _ = await post(http, forged)
    assert status == 401
    # Garbage is a 400, never a 5xx.
    session, base = http
    async with session.post(base + EVENT_PATH, data=b"not json") as resp:
        assert resp.status == 400
    async with session.post(base + EVENT_PATH, json={"encrypt": "!!!"}) as resp:
        assert resp.status == 400
    # A good request afterwards is the only thing that reached the agent.
    status, _ = await post(
        http, message_event(chat_id=P2P, sender=ALICE, text="/pending", token=TOKEN)
    )
    assert status == 200
    await wait_until(lambda: any("没有待确认" in t for t in sent_texts(fake)), what="/pending")
    assert gateway.confirmations is not None
    assert await gateway.confirmations.list() == []
    assert len(sent_texts(fake)) == 1


async def test_replayed_nonce_and_old_timestamp_are_rejected(
    gateway: Gateway, fake: FakeFeishu, http: tuple[aiohttp.ClientSession, str]
) -> None:
    status, _ = await post(
        http, message_event(chat_id=P2P, sender=ALICE, text="/help", token=TOKEN), nonce="n-1"
    )
    assert status == 200
    status, _ = await post(
        http, message_event(chat_id=P2P, sender=ALICE, text="/help", token=TOKEN), nonce="n-1"
    )
    assert status == 401
    old = int(time.time()) - 3600
    status, _ = await post(
        http, message_event(chat_id=P2P, sender=ALICE, text="/help", token=TOKEN), timestamp=old
    )
    assert status == 401
    # Answers in one chat go out in order: once /pending is answered, an accepted replay
    # of /help would have been answered before it.
    pending = message_event(chat_id=P2P, sender=ALICE, text="/pending", token=TOKEN)
    assert (await post(http, pending))[0] == 200
    await wait_until(lambda: any("没有待确认" in t for t in sent_texts(fake)), what="/pending")
    assert len(sent_texts(fake)) == 2


async def test_a_non_ascii_token_or_signature_is_401_not_500(
    gateway: Gateway, fake: FakeFeishu, http: tuple[aiohttp.ClientSession, str]
) -> None:
    # hmac.compare_digest raises TypeError on a non-ASCII str: that was a 500.
    # A lone surrogate is not text at all: refused before the token is looked at.
    for token, refused in (("令牌", 401), ("\ud800", 400)):
        status, _ = await post(http, url_verification(challenge="c", token=token))
        assert status == refused
        forged = message_event(chat_id=P2P, sender=ALICE, text="/help", token=token)
        status, _ = await post(http, forged)
        assert status == refused
    session, base = http
    headers, body = webhook_request(
        message_event(chat_id=P2P, sender=ALICE, text="/help", token=TOKEN),
        encrypt_key=ENCRYPT_KEY,
    )
    headers["x-lark-signature"] = "签名"
    async with session.post(base + EVENT_PATH, data=body, headers=headers) as resp:
        assert resp.status == 401
    # A non-numeric timestamp, correctly signed: "nan" once passed the window check.
    headers, body = webhook_request(
        message_event(chat_id=P2P, sender=ALICE, text="/help", token=TOKEN),
        encrypt_key=ENCRYPT_KEY,
    )
    nonce = headers["x-lark-request-nonce"]
    headers["x-lark-request-timestamp"] = "nan"
    headers["x-lark-signature"] = signature("nan", nonce, ENCRYPT_KEY, body)
    async with session.post(base + EVENT_PATH, data=body, headers=headers) as resp:
        assert resp.status == 400
    pending = message_event(chat_id=P2P, sender=ALICE, text="/pending", token=TOKEN)
    assert (await post(http, pending))[0] == 200
    await wait_until(lambda: any("没有待确认" in t for t in sent_texts(fake)), what="/pending")
    assert len(sent_texts(fake)) == 1


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000,
        b'{"encrypt": ' + b"[" * 100_000,
        b'{"encrypt": "\\ud800"}',
    ],
)
async def test_deep_or_broken_json_is_400_not_500(
    gateway: Gateway, fake: FakeFeishu, http: tuple[aiohttp.ClientSession, str], raw: bytes
) -> None:
    session, base = http
    for path in (EVENT_PATH, CARD_PATH):
        async with session.post(base + path, data=raw) as resp:
            assert resp.status == 400
            assert "body" in (await resp.json())["msg"]


async def test_deep_or_broken_json_inside_the_encryption_is_400(
    gateway: Gateway, fake: FakeFeishu, http: tuple[aiohttp.ClientSession, str]
) -> None:
    session, base = http
    deep = "[" * 100_000
    lone = '{"schema": "2.0", "header": {"token": "\\ud800"}}'
    for plain in (deep, lone):
        body = json.dumps({"encrypt": encrypt(plain, ENCRYPT_KEY)}).encode()
        headers, _ = webhook_request({}, encrypt_key=ENCRYPT_KEY)
        ts, nonce = headers["x-lark-request-timestamp"], headers["x-lark-request-nonce"]
        headers["x-lark-signature"] = signature(ts, nonce, ENCRYPT_KEY, body)
        async with session.post(base + EVENT_PATH, data=body, headers=headers) as resp:
            assert resp.status == 400
            assert "decrypted body" in (await resp.json())["msg"]
    # Still answering what is good.
    pending = message_event(chat_id=P2P, sender=ALICE, text="/pending", token=TOKEN)
    assert (await post(http, pending))[0] == 200
    await wait_until(lambda: any("没有待确认" in t for t in sent_texts(fake)), what="/pending")


# ---------------------------------------------------------------- issue 22, item 8


def approve_click(conf_id: str, message_id: str) -> dict[str, Any]:
    return card_action_event(
        operator=ALICE,
        value={"confirmation_id": conf_id, "decision": "approve"},
        open_message_id=message_id,
        open_chat_id=P2P,
        token=TOKEN,
    )


async def test_a_card_click_forged_from_the_token_alone_is_refused(
    gateway: Gateway, fake: FakeFeishu, http: tuple[aiohttp.ClientSession, str]
) -> None:
    # Issue 22: the Verification Token travels in every body, so anyone who saw one request
    # can build a click. Without the Encrypt Key's signature it is refused, plain or not.
    assert (await post(http, delete_event(5)))[0] == 200
    [conf] = await wait_pending(gateway)
    send = await fake.wait_request(lambda r: r in card_sends(fake), what="card send")
    assert send.message_id is not None
    click = approve_click(conf.id, send.message_id)
    session, base = http
    async with session.post(base + CARD_PATH, json=click) as resp:
        assert resp.status == 400
    # Encrypted with the key but not signed (no headers), or signed with a guess.
    body = json.dumps({"encrypt": encrypt(json.dumps(click), ENCRYPT_KEY)}).encode()
    async with session.post(base + CARD_PATH, data=body) as resp:
        assert resp.status == 401
    assert (await post(http, click, path=CARD_PATH, bad_signature=True))[0] == 401
    assert gateway.confirmations is not None
    current = await gateway.confirmations.get(conf.id)
    assert current is not None and current.status is Status.PENDING


async def test_a_replayed_signed_card_click_is_refused(
    gateway: Gateway,
    fake: FakeFeishu,
    settings: Settings,
    http: tuple[aiohttp.ClientSession, str],
) -> None:
    assert (await post(http, delete_event(6)))[0] == 200
    [conf] = await wait_pending(gateway)
    send = await fake.wait_request(lambda r: r in card_sends(fake), what="card send")
    assert send.message_id is not None
    # A click with a reject captured on the wire, replayed: the same headers and body.
    headers, body = webhook_request(
        card_action_event(
            operator=ALICE,
            value={"confirmation_id": conf.id, "decision": "reject"},
            open_message_id=send.message_id,
            open_chat_id=P2P,
            token=TOKEN,
        ),
        encrypt_key=ENCRYPT_KEY,
    )
    session, base = http
    async with session.post(base + CARD_PATH, data=body, headers=headers) as resp:
        assert resp.status == 200
    await wait_status(gateway, conf.id, Status.REJECTED)
    for path in (CARD_PATH, EVENT_PATH):
        async with session.post(base + path, data=body, headers=headers) as resp:
            assert resp.status == 401
            assert (await resp.json())["msg"] == "nonce already used"
    # A click signed long ago (outside the replay window) is refused too.
    old = int(time.time()) - 2 * settings.channels.feishu.replay_window_seconds
    assert (
        await post(
            http, approve_click(conf.id, send.message_id), path=CARD_PATH, timestamp=int(old)
        )
    )[0] == 401


async def test_webhook_mode_without_an_encrypt_key_does_not_start(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    # It used to start with only the verification token, and take forged clicks.
    settings = make_settings(tmp_path, fake, mode="webhook", verification_token=TOKEN)
    with pytest.raises(ConfigError, match="encrypt_key") as refused:
        await build(settings)
    assert "GATEWAY_CHANNELS__FEISHU__ENCRYPT_KEY" in str(refused.value)
