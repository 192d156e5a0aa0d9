"""Fuzzing both platforms' webhooks: never a 5xx, no valid message lost, the server goes on.

Cases are signed (and encrypted for Feishu) where the platform would, so they get past
verification and reach the parsing; unsigned garbage is mixed in. Between the fuzzed
requests, valid messages go to chats of their own: each must be answered.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from channels.dingtalk.verify import robot_signature
from tests.channels.dingtalk.conftest import make_settings as dingtalk_settings
from tests.channels.feishu.conftest import make_settings as feishu_settings
from tests.channels.fuzz_support import FUZZ, GatewayOnLoop, problems
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.feishu import (
    FakeFeishu,
    card_action_event,
    encrypt,
    message_event,
    signature,
)
from tests.fuzzing import examples

# hypothesis runs inside the tests' bodies (one gateway for every case).
pytestmark = pytest.mark.fuzz

ENCRYPT_KEY = "fuzz-encrypt-key"
TOKEN = "fuzz-verification-token"

# Text with everything in it: control characters, CJK, emoji, and lone surrogates.
any_text = st.text(
    st.characters() | st.characters(categories=["Cs"]) | st.sampled_from('[]{}"\\@/确认取消'),
    max_size=30,
)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)
nasty = st.sampled_from(
    [
        "[" * 100_000,
        '{"a":' * 5_000,
        '"\\ud800"',
        "NaN",
        "1" * 5000,
        "",
        "{",
        "\x00",
    ]
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += _paths(value, (*prefix, i))
    return found


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = doc.copy()
    copy[path[0]] = _replace(doc[path[0]], path[1:], value)
    return copy


@st.composite
def mutated(draw: st.DrawFn, doc: Any) -> Any:
    """``doc`` with one to three of its values (or whole branches) replaced."""
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        doc = _replace(doc, path, draw(json_values | nasty))
    return doc


# ---------------------------------------------------------------------- Feishu


@pytest.fixture
def feishu(tmp_path: Path) -> Iterator[tuple[GatewayOnLoop, FakeFeishu]]:
    with FakeFeishu(app_id="cli_" + uuid.uuid4().hex[:10]) as fake:
        settings = feishu_settings(
            tmp_path, fake, mode="webhook", encrypt_key=ENCRYPT_KEY, verification_token=TOKEN
        )
        on_loop = GatewayOnLoop(settings)
        try:
            yield on_loop, fake
        finally:
            on_loop.close()


def _feishu_request(plain: str, *, sign: bool) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"encrypt": encrypt(plain, ENCRYPT_KEY)}).encode()
    ts, nonce = str(int(time.time())), uuid.uuid4().hex
    headers = {"Content-Type": "application/json"}
    if sign:
        headers |= {
            "X-Lark-Request-Timestamp": ts,
            "X-Lark-Request-Nonce": nonce,
            "X-Lark-Signature": signature(ts, nonce, ENCRYPT_KEY, body),
        }
    return body, headers


def _message(**kw: Any) -> dict[str, Any]:
    return message_event(chat_id="oc_fuzz", sender="ou_fuzz", text="/help", token=TOKEN, **kw)


def _click() -> dict[str, Any]:
    return card_action_event(
        operator="ou_fuzz",
        value={"confirmation_id": "K7Q2", "decision": "approve"},
        open_message_id="om_x",
        open_chat_id="oc_fuzz",
        token=TOKEN,
    )


feishu_cases = st.one_of(
    st.tuples(st.just("raw"), st.binary(max_size=200)),
    st.tuples(st.just("signed"), json_values.map(json.dumps)),
    st.tuples(st.just("signed"), nasty),
    st.tuples(st.just("signed"), mutated(_message()).map(json.dumps)),
    st.tuples(st.just("signed"), mutated(_message(message_type="post")).map(json.dumps)),
    st.tuples(st.just("card"), mutated(_click()).map(json.dumps)),
)


def test_feishu_webhooks(feishu: tuple[GatewayOnLoop, FakeFeishu]) -> None:
    on_loop, fake = feishu
    valid: list[str] = []

    # Fewer than the others: every accepted message is answered through lark-oapi, whose
    # send path costs ~23 ms of CPU per reply (issue 14, the Feishu speed item).
    @settings(FUZZ, max_examples=examples(400))
    @given(case=feishu_cases, then_valid=st.integers(0, 9))
    def one(case: tuple[str, Any], then_valid: int) -> None:
        kind, data = case
        if kind == "raw":
            body, headers = data, {"Content-Type": "application/json"}
        else:
            body, headers = _feishu_request(data, sign=True)
        path = "/webhook/feishu/card" if kind == "card" else "/webhook/feishu/event"
        status, answer = on_loop.run(on_loop.post(path, body, headers))
        assert status < 500, (status, answer[:300], data if kind != "raw" else body[:100])
        if then_valid == 0:
            mid = "om_valid_" + uuid.uuid4().hex[:12]
            event = message_event(
                chat_id="oc_valid_" + mid,
                sender="ou_v",
                text="/pending",
                token=TOKEN,
                message_id=mid,
            )
            status, _ = on_loop.run(
                on_loop.post(
                    "/webhook/feishu/event", *_feishu_request(json.dumps(event), sign=True)
                )
            )
            assert status == 200
            valid.append(mid)

    with structlog.testing.capture_logs() as logs:
        one()
        # Every valid message was answered (a reply to it), and the server still answers.
        on_loop.run(
            fake.wait_until(
                lambda: set(valid) <= {r.match.get("mid") for r in fake.requests_for("reply")},
                within=30,
                what="an answer to every valid message",
            )
        )
        assert on_loop.run(on_loop.get("/healthz"))[0] == 200
    assert valid
    found = problems(logs)
    assert found == [], [
        (e["event"], str(e.get("error", e.get("exc_info", "")))[:200]) for e in found[:5]
    ]


# ---------------------------------------------------------------------- DingTalk


@pytest.fixture
def dingtalk(tmp_path: Path) -> Iterator[tuple[GatewayOnLoop, FakeDingTalk]]:
    with FakeDingTalk() as fake:
        on_loop = GatewayOnLoop(dingtalk_settings(tmp_path, fake, mode="http"))
        try:
            yield on_loop, fake
        finally:
            on_loop.close()


class Signer:
    """A fresh (timestamp, sign) pair per request: each pair is accepted once."""

    def __init__(self, secret: str) -> None:
        self._secret = secret
        self._next = int(time.time() * 1000)

    def headers(self) -> dict[str, str]:
        self._next += 1
        ts = str(self._next)
        return {
            "Content-Type": "application/json",
            "timestamp": ts,
            "sign": robot_signature(ts, self._secret),
        }


def test_dingtalk_http_robot(dingtalk: tuple[GatewayOnLoop, FakeDingTalk]) -> None:
    on_loop, fake = dingtalk
    signer = Signer(fake.client_secret)
    payload = fake.chatbot_payload(text="/help", conversation_id="cid-fuzz")
    group = fake.chatbot_payload(text="/help", conversation_type="2", msgtype="richText")
    cases = st.one_of(
        st.tuples(st.just("raw"), st.binary(max_size=200)),
        st.tuples(st.just("signed"), json_values.map(json.dumps)),
        st.tuples(st.just("signed"), nasty),
        st.tuples(st.just("signed"), mutated(payload).map(json.dumps)),
        st.tuples(st.just("signed"), mutated(group).map(json.dumps)),
    )
    valid: list[str] = []

    @FUZZ
    @given(case=cases, then_valid=st.integers(0, 9))
    def one(case: tuple[str, Any], then_valid: int) -> None:
        kind, data = case
        if kind == "raw":
            body, headers = data, {"Content-Type": "application/json"}
        else:
            body, headers = data.encode("utf-8", "surrogatepass"), signer.headers()
        status, answer = on_loop.run(on_loop.post("/webhook/dingtalk", body, headers))
        assert status < 500, (status, answer[:300], body[:300])
        if kind == "raw":
            assert status in (400, 401)
        if then_valid == 0:
            session = "valid-" + uuid.uuid4().hex[:12]
            good = fake.chatbot_payload(
                text="/pending", conversation_id="cid-" + session, session=session
            )
            status, _ = on_loop.run(
                on_loop.post("/webhook/dingtalk", json.dumps(good).encode(), signer.headers())
            )
            assert status == 200
            valid.append(session)

    with structlog.testing.capture_logs() as logs:
        one()
        on_loop.run(
            fake.wait_until(
                lambda: (
                    set(valid)
                    <= {r.query.get("session") for r in fake.requests("/robot/sendBySession")}
                ),
                within=30,
                what="an answer to every valid message",
            )
        )
        assert on_loop.run(on_loop.get("/healthz"))[0] == 200
    assert valid
    found = problems(logs)
    assert found == [], [(e["event"], str(e.get("error", e.get("exc_info")))[:200]) for e in found]
