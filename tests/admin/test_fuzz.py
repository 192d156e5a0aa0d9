"""Property tests: whatever a client sends to the REST API, the answer is never a 5xx.

Runs against a real ``gateway serve`` subprocess, so the whole stack (aiohttp parsing,
middleware, handlers, the bus and the agent behind the chat endpoint) is exercised.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webchat.support import ServeProcess

TOKEN = "fuzz-token-0123456789"
FUZZ = settings(
    max_examples=120,
    deadline=None,
    database=None,  # no .hypothesis/ directory in the working tree
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    process = ServeProcess(
        tmp_path=tmp_path_factory.mktemp("fuzz"),
        env={
            "GATEWAY_ADMIN__TOKEN": TOKEN,
            "GATEWAY_CHANNELS__WEBCHAT__MAX_TEXT_LENGTH": "300",
            # Fuzzed waits are honoured up to this cap: keeps the run short.
            "GATEWAY_CHANNELS__WEBCHAT__MAX_LONG_POLL_SECONDS": "0.2",
        },
    )
    process.start()
    yield process
    process.stop()
    # Client mistakes are not the operator's problem: nothing at error level.
    assert process.error_lines() == []


def call(
    daemon: ServeProcess,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    token: bool = True,
    content_type: str = "application/json",
) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(daemon.url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    headers = {"Content-Type": content_type}
    if token:
        headers["Authorization"] = f"Bearer {TOKEN}"
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def check(status: int, payload: bytes, path: str) -> None:
    assert status < 500, (status, path, payload[:300])
    if status >= 400 and path.startswith("/api/"):
        # Every refusal under /api/ is JSON that names the problem.
        assert json.loads(payload)["error"], payload


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
decision_bodies = st.fixed_dictionaries(
    {},
    optional={
        "decision": st.sampled_from(["approve", "reject", "", "APPROVE"]) | json_values,
        "actor": st.text(max_size=200) | json_values,
        "reason": st.text(max_size=1200) | json_values,
    },
)
chat_bodies = st.fixed_dictionaries(
    {},
    optional={
        "user": st.from_regex(r"[\w.@-]{1,70}", fullmatch=True) | json_values,
        "text": st.text(max_size=400) | json_values,
    },
)
keyword_bodies = st.fixed_dictionaries(
    {},
    optional={
        "confirm": st.lists(st.text(max_size=70), max_size=5) | json_values,
        "cancel": st.lists(st.text(max_size=70), max_size=5) | json_values,
    },
)
segments = st.text(min_size=1, max_size=80).map(lambda s: urllib.parse.quote(s, safe=""))
raw_bodies = st.binary(max_size=300)


def encode(value: Any) -> bytes:
    return json.dumps(value).encode()


@FUZZ
@given(cid=segments, body=decision_bodies | json_values)
def test_decision_endpoint(daemon: ServeProcess, cid: str, body: Any) -> None:
    path = f"/api/confirmations/{cid}/decision"
    status, payload = call(daemon, "POST", path, encode(body))
    check(status, payload, path)


@FUZZ
@given(room=segments, body=chat_bodies | json_values)
def test_chat_post_endpoint(daemon: ServeProcess, room: str, body: Any) -> None:
    path = f"/api/chat/{room}/messages"
    status, payload = call(daemon, "POST", path, encode(body), token=False)
    check(status, payload, path)
    if status == 202:
        assert json.loads(payload)["message_id"]


@FUZZ
@given(
    room=segments,
    after=st.text(max_size=12) | st.integers().map(str),
    wait=st.text(max_size=8) | st.floats().map(str),
    user=st.text(max_size=70),
)
def test_chat_poll_endpoint(
    daemon: ServeProcess, room: str, after: str, wait: str, user: str
) -> None:
    query = urllib.parse.urlencode({"after": after, "wait": wait, "user": user})
    path = f"/api/chat/{room}/messages?{query}"
    status, payload = call(daemon, "GET", path, token=False)
    check(status, payload, path)


@FUZZ
@given(body=keyword_bodies | json_values)
def test_keywords_endpoint(daemon: ServeProcess, body: Any) -> None:
    status, payload = call(daemon, "PUT", "/api/keywords", encode(body))
    check(status, payload, "/api/keywords")
    # Whatever happened, the words in force are still a valid pair of lists.
    status, payload = call(daemon, "GET", "/api/keywords")
    assert status == 200
    words = json.loads(payload)
    assert words["confirm"] and words["cancel"]
    assert not set(words["confirm"]) & set(words["cancel"])


@FUZZ
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
    path=st.sampled_from(
        [
            "/api/confirmations",
            "/api/confirmations/K7Q2",
            "/api/confirmations/K7Q2/decision",
            "/api/keywords",
            "/api/chat/lobby/messages",
            "/api/openapi.json",
        ]
    ),
    query=st.dictionaries(
        st.sampled_from(["status", "session", "limit", "after", "wait", "user"]),
        st.text(max_size=20),
        max_size=3,
    ),
    body=raw_bodies,
    content_type=st.sampled_from(["application/json", "text/plain", "application/x-www-form"]),
)
def test_any_method_any_bytes(
    daemon: ServeProcess,
    method: str,
    path: str,
    query: dict[str, str],
    body: bytes,
    content_type: str,
) -> None:
    full = f"{path}?{urllib.parse.urlencode(query)}" if query else path
    status, payload = call(daemon, method, full, body, content_type=content_type)
    check(status, payload, path)
