"""HTTP robot mode on the gateway's own aiohttp server: signature and timestamp checks."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from channels.dingtalk.verify import robot_signature
from gateway.app import Gateway, build
from gateway.confirm.model import Status
from tests.channels.dingtalk.conftest import make_settings, wait_pending, wait_status, webhook_texts
from tests.fakes.dingtalk import FakeDingTalk


@pytest.fixture
async def http_gateway(tmp_path: Path, fake: FakeDingTalk) -> AsyncIterator[Gateway]:
    settings = make_settings(tmp_path, fake, mode="http", signature_window_seconds=300)
    async with await build(settings) as gw:
        yield gw


async def _post(
    gw: Gateway, body: dict[str, object], *, timestamp: str, sign: str
) -> tuple[int, object]:
    assert gw.http is not None
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{gw.http.url}/webhook/dingtalk",
            data=json.dumps(body),
            headers={"Content-Type": "application/json", "timestamp": timestamp, "sign": sign},
        ) as resp,
    ):
        return resp.status, await resp.json()


def _now_ms() -> str:
    return str(int(time.time() * 1000))


async def test_good_signature_is_accepted_and_answered(
    http_gateway: Gateway, fake: FakeDingTalk
) -> None:
    ts = _now_ms()
    body = fake.chatbot_payload(text="/sql DELETE FROM orders WHERE id = 1", sender_staff_id="u9")
    status, _ = await _post(
        http_gateway, body, timestamp=ts, sign=robot_signature(ts, fake.client_secret)
    )
    assert status == 200
    [conf] = await wait_pending(http_gateway)
    # No stream connection in HTTP mode, so no card (its buttons would be dead): text.
    await fake.wait_until(
        lambda: any(f"[{conf.id}]" in t for t in webhook_texts(fake)), what="text prompt"
    )
    assert fake.requests("/v1.0/card/instances/createAndDeliver") == []
    assert fake.open_bodies == []


async def test_bad_signature_is_401_and_not_handled(
    http_gateway: Gateway, fake: FakeDingTalk
) -> None:
    ts = _now_ms()
    body = fake.chatbot_payload(text="/help")
    status, answer = await _post(http_gateway, body, timestamp=ts, sign=robot_signature(ts, "nope"))
    assert status == 401
    assert answer == {"error": "bad signature"}
    status, _ = await _post(http_gateway, body, timestamp=ts, sign="")
    assert status == 401
    await _only_a_good_request_is_answered(http_gateway, fake)


async def test_stale_timestamp_is_rejected(http_gateway: Gateway, fake: FakeDingTalk) -> None:
    stale = str(int((time.time() - 301) * 1000))
    body = fake.chatbot_payload(text="/help")
    # Correctly signed, but outside the 300 s window: a replayed capture.
    status, answer = await _post(
        http_gateway, body, timestamp=stale, sign=robot_signature(stale, fake.client_secret)
    )
    assert status == 401
    assert answer == {"error": "timestamp outside the allowed window"}
    await _only_a_good_request_is_answered(http_gateway, fake)


async def _only_a_good_request_is_answered(gw: Gateway, fake: FakeDingTalk) -> None:
    """Nothing rejected reached the agent: a good request afterwards is the only one answered."""
    ts = _now_ms()
    good = fake.chatbot_payload(text="/pending")
    status, _ = await _post(gw, good, timestamp=ts, sign=robot_signature(ts, fake.client_secret))
    assert status == 200
    await fake.wait_until(lambda: webhook_texts(fake), what="an answer")
    texts = webhook_texts(fake)
    assert len(texts) == 1
    assert "没有待确认" in texts[0]


async def test_a_redelivered_message_is_answered_once(
    http_gateway: Gateway, fake: FakeDingTalk
) -> None:
    # DingTalk posts again when the first answer was late; the same msgId, a new signature.
    body = fake.chatbot_payload(text="/help", msg_id="http-dup-1")
    for _ in range(2):
        ts = _now_ms()
        status, _ = await _post(
            http_gateway, body, timestamp=ts, sign=robot_signature(ts, fake.client_secret)
        )
        assert status == 200
    ts = _now_ms()
    after = fake.chatbot_payload(text="/pending")
    await _post(http_gateway, after, timestamp=ts, sign=robot_signature(ts, fake.client_secret))
    # One conversation's answers go out in order: a second /help answer would come first.
    await fake.wait_until(
        lambda: any("没有待确认" in t for t in webhook_texts(fake)), what="/pending answer"
    )
    assert sum("/sql" in t for t in webhook_texts(fake)) == 1


async def test_a_captured_header_pair_cannot_carry_another_body(
    http_gateway: Gateway, fake: FakeDingTalk
) -> None:
    # DingTalk signs the timestamp, not the body: a pair seen once (a log, a proxy) must
    # not approve a held call when sent again with a body of the attacker's choosing.
    ts = _now_ms()
    sign = robot_signature(ts, fake.client_secret)
    ask = fake.chatbot_payload(text="/sql DELETE FROM orders WHERE id = 1", sender_staff_id="u9")
    assert (await _post(http_gateway, ask, timestamp=ts, sign=sign))[0] == 200
    [conf] = await wait_pending(http_gateway)
    forged = fake.chatbot_payload(text=f"确认 {conf.id}", sender_staff_id="u9")
    status, answer = await _post(http_gateway, forged, timestamp=ts, sign=sign)
    assert (status, answer) == (401, {"error": "timestamp and sign already used"})
    # Refused before anything was read: the confirmation is still waiting.
    assert http_gateway.confirmations is not None
    current = await http_gateway.confirmations.get(conf.id)
    assert current is not None and current.status is Status.PENDING
    # The same words with a pair of their own decide it.
    ts = str(int(ts) + 1)
    good = fake.chatbot_payload(text=f"确认 {conf.id}", sender_staff_id="u9")
    status, _ = await _post(
        http_gateway, good, timestamp=ts, sign=robot_signature(ts, fake.client_secret)
    )
    assert status == 200
    await wait_status(http_gateway, conf.id, Status.APPROVED)


@pytest.mark.parametrize(
    "raw", [b"[" * 100_000, b'{"msgId": "m", "text": {"content": "\\ud800"}}', b"not json"]
)
async def test_deep_or_broken_json_is_400_not_500(
    http_gateway: Gateway, fake: FakeDingTalk, raw: bytes
) -> None:
    assert http_gateway.http is not None
    ts = _now_ms()
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{http_gateway.http.url}/webhook/dingtalk",
            data=raw,
            headers={
                "Content-Type": "application/json",
                "timestamp": ts,
                "sign": robot_signature(ts, fake.client_secret),
            },
        ) as resp,
    ):
        assert resp.status == 400
        assert (await resp.json())["error"].startswith("body")
    await _only_a_good_request_is_answered(http_gateway, fake)
