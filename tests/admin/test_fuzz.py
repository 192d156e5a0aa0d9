"""Property tests: whatever a client sends to an endpoint that parses input, never a 5xx.

The gateway runs in this process (``build()`` on port 0) and hypothesis drives it through
one keep-alive HTTP session, so thousands of cases fit in CI time. Every case goes through
the whole stack: aiohttp parsing, the middlewares, the handlers, the bus and the agent.
"""

from __future__ import annotations

import io
import json
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.app import Gateway, build
from gateway.logs import configure_logging
from tests.fuzzing import examples
from tests.webchat.support import base_url, make_settings

TOKEN = "fuzz-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FUZZ = settings(
    max_examples=examples(800),
    deadline=None,
    database=None,  # no .hypothesis/ directory in the working tree
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    yield stream
    configure_logging("info", "json")  # back to stderr
    # Client mistakes are not the operator's problem: nothing at error level.
    errors = [line for line in stream.getvalue().splitlines() if '"level":"error"' in line]
    assert errors == []


@pytest.fixture
async def http(tmp_path: Path, logs: io.StringIO) -> AsyncIterator[aiohttp.ClientSession]:
    settings = make_settings(
        tmp_path,
        admin={"token": TOKEN},
        # Fuzzed waits are honoured up to this cap: keeps the run short.
        channels={"webchat": {"max_text_length": 300, "max_long_poll_seconds": 0.01}},
    )
    gateway: Gateway = await build(settings)
    async with gateway, aiohttp.ClientSession(base_url=base_url(gateway)) as session:
        yield session
        # The server keeps answering.
        async with session.get("/healthz") as resp:
            assert resp.status == 200


async def call(
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    token: bool = True,
    content_type: str = "application/json",
) -> tuple[int, bytes]:
    headers = {"Content-Type": content_type, **(AUTH if token else {})}
    async with http.request(method, path, data=body, headers=headers) as resp:
        return resp.status, await resp.read()


def check(status: int, payload: bytes, path: str) -> None:
    assert status < 500, (status, path, payload[:300])
    if status >= 400 and path.startswith("/api/"):
        # Every refusal under /api/ is JSON that names the problem.
        assert json.loads(payload)["error"], payload


# Text with lone surrogates now and then: they must be refused, never stored.
surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
texts = st.text(max_size=40) | st.text(st.characters() | surrogates, max_size=10)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
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
# Bytes as sent: JSON escapes (\ud800), raw UTF-8 with surrogates, deep nesting, garbage.
deep = st.integers(min_value=60, max_value=200_000).map(lambda n: b"[" * n + b"]" * (n % 3))


def bodies(values: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return (
        values.map(lambda v: json.dumps(v).encode())
        | values.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        | deep
        | st.binary(max_size=300)
    )


@FUZZ
@given(cid=segments, body=bodies(decision_bodies | json_values))
async def test_decision_endpoint(http: aiohttp.ClientSession, cid: str, body: bytes) -> None:
    path = f"/api/confirmations/{cid}/decision"
    status, payload = await call(http, "POST", path, body)
    check(status, payload, path)


@FUZZ
@given(room=segments, body=bodies(chat_bodies | json_values))
async def test_chat_post_endpoint(http: aiohttp.ClientSession, room: str, body: bytes) -> None:
    path = f"/api/chat/{room}/messages"
    status, before = await call(http, "GET", path, token=False)
    status, payload = await call(http, "POST", path, body, token=False)
    check(status, payload, path)
    if status == 202:
        # Taken means kept: the message is in the room's history.
        message_id = json.loads(payload)["message_id"]
        after = json.loads(before)["last_seq"]
        status, history = await call(http, "GET", f"{path}?after={after}", token=False)
        assert status == 200
        assert message_id in [m.get("message_id") for m in json.loads(history)["messages"]]


@FUZZ
@given(
    room=segments,
    after=st.text(max_size=12) | st.integers().map(str),
    wait=st.text(max_size=8) | st.floats().map(str),
    user=texts,
)
async def test_chat_poll_endpoint(
    http: aiohttp.ClientSession, room: str, after: str, wait: str, user: str
) -> None:
    query = urllib.parse.urlencode(
        {"after": after, "wait": wait, "user": user}, errors="surrogatepass"
    )
    path = f"/api/chat/{room}/messages?{query}"
    status, payload = await call(http, "GET", path, token=False)
    check(status, payload, path)


@FUZZ
@given(body=bodies(keyword_bodies | json_values))
async def test_keywords_endpoint(http: aiohttp.ClientSession, body: bytes) -> None:
    status, payload = await call(http, "PUT", "/api/keywords", body)
    check(status, payload, "/api/keywords")
    # Whatever happened, the words in force are still a valid pair of lists.
    status, payload = await call(http, "GET", "/api/keywords")
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
    body=bodies(json_values),
    content_type=st.sampled_from(["application/json", "text/plain", "application/x-www-form"]),
)
async def test_any_method_any_bytes(
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    query: dict[str, str],
    body: bytes,
    content_type: str,
) -> None:
    full = f"{path}?{urllib.parse.urlencode(query)}" if query else path
    status, payload = await call(http, method, full, body, content_type=content_type)
    check(status, payload, path)
