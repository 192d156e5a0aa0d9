"""Sending: token refresh, retry with backoff, idempotency keys, the dead-letter list."""

from __future__ import annotations

import time
from pathlib import Path

import aiohttp

from config.settings import Settings
from gateway.app import Gateway, build
from tests.channels.feishu.conftest import ALICE, make_settings, sent_texts, wait_until
from tests.fakes.feishu import (
    INVALID_TOKEN_CODE,
    RATE_LIMIT_CODE,
    FakeFeishu,
    RecordedRequest,
    message_event,
)

P2P = "oc_p2p_out"


def _sends(fake: FakeFeishu) -> list[RecordedRequest]:
    # Answers go out as replies to the asking message (or as new messages).
    return fake.requests_for("create", "reply")


def _ask_help(fake: FakeFeishu) -> None:
    fake.send_frame(message_event(chat_id=P2P, sender=ALICE, text="/help"))


async def _failed(gateway: Gateway) -> list[dict]:  # type: ignore[type-arg]
    assert gateway.http is not None
    async with (
        aiohttp.ClientSession() as session,
        session.get(gateway.http.url + "/api/channels/feishu/failed") as resp,
    ):
        assert resp.status == 200
        return list((await resp.json())["failed"])


async def test_expired_token_is_refreshed_and_the_send_retried(
    gateway: Gateway, fake: FakeFeishu
) -> None:
    tokens_before = len(fake.requests_for("token"))
    fake.expire_tokens()
    _ask_help(fake)
    await wait_until(lambda: any("/sql" in t for t in sent_texts(fake)), what="/help answer")
    creates = _sends(fake)
    assert [r.code for r in creates] == [INVALID_TOKEN_CODE, 0]
    assert len(fake.requests_for("token")) == tokens_before + 1
    assert creates[0].headers["Authorization"] != creates[1].headers["Authorization"]
    # One idempotency key for both attempts: Feishu delivers at most one of them.
    assert creates[0].body["uuid"] == creates[1].body["uuid"]
    assert await _failed(gateway) == []


async def test_rate_limit_is_retried_with_the_same_uuid(gateway: Gateway, fake: FakeFeishu) -> None:
    fake.fail("reply", status=429, code=RATE_LIMIT_CODE, times=2)
    _ask_help(fake)
    await wait_until(lambda: any("/sql" in t for t in sent_texts(fake)), what="/help answer")
    creates = _sends(fake)
    assert [r.status for r in creates] == [429, 429, 200]
    assert len({r.body["uuid"] for r in creates}) == 1
    assert await _failed(gateway) == []


async def test_permanent_failure_lands_in_the_dead_letter_list(
    gateway: Gateway, fake: FakeFeishu
) -> None:
    for op in ("reply", "create"):
        fake.fail(op, status=400, code=230002, msg="Bot is not in the chat")
    _ask_help(fake)
    channel = gateway.channels.channels["feishu"]
    await wait_until(lambda: len(channel.dead_letters) == 1, what="dead letter")  # type: ignore[attr-defined]
    [entry] = await _failed(gateway)
    assert entry["chat_id"] == P2P
    assert entry["code"] == 230002
    assert entry["attempts"] == 1  # not retryable: no second try
    assert "/sql" in entry["text"]
    # The reply failed for good, then the plain-message fallback did too; nothing more.
    assert [r.op for r in _sends(fake)] == ["reply", "create"]


async def test_rate_limit_that_never_ends_is_dead_lettered(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    attempts = settings.channels.feishu.retry_attempts
    fake.fail("reply", status=429, code=RATE_LIMIT_CODE, times=attempts)
    _ask_help(fake)
    channel = gateway.channels.channels["feishu"]
    await wait_until(lambda: len(channel.dead_letters) == 1, what="dead letter")  # type: ignore[attr-defined]
    [entry] = await _failed(gateway)
    assert entry["attempts"] == attempts
    assert entry["status"] == 429
    assert len(_sends(fake)) == attempts


async def test_sends_to_one_chat_are_paced_under_5_per_second(
    gateway: Gateway, fake: FakeFeishu
) -> None:
    asked_at = time.monotonic()
    for _ in range(3):
        _ask_help(fake)
    await wait_until(lambda: len(_sends(fake)) >= 3, what="three answers")
    # Feishu allows 5 messages per second per chat; the channel starts sends to one chat
    # >= 0.22 s apart, so the third cannot arrive before 0.44 s after the questions.
    # (A lower bound only: a slow machine cannot make this fail. Arrival gaps between
    # single sends are not compared: the first send may be delayed by connection setup.)
    # 5 per second: the third send of a burst goes out no sooner than 0.4 s after the first.
    assert _sends(fake)[2].at - asked_at >= 0.4


# Relies on the server's require_admin middleware (every /api/ path): the channel has no
# token check of its own.
async def test_dead_letters_need_the_admin_token_when_one_is_set(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    settings = make_settings(tmp_path, fake, admin_token="s3cret-admin")
    async with await build(settings) as gw, aiohttp.ClientSession() as session:
        assert gw.http is not None
        url = gw.http.url + "/api/channels/feishu/failed"
        async with session.get(url) as resp:
            assert resp.status == 401
        headers = {"Authorization": "Bearer s3cret-admin"}
        async with session.get(url, headers=headers) as resp:
            assert resp.status == 200
            assert await resp.json() == {"channel": "feishu", "failed": []}
