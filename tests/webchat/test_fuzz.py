"""Fuzzing the web chat, REST and WebSocket, in process: never a 5xx, never an error log,
the socket and the room keep working, and valid messages in between are all answered."""

from __future__ import annotations

import json
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from tests.channels.fuzz_support import FUZZ, GatewayOnLoop, problems
from tests.channels.test_fuzz import any_text, json_values, mutated, nasty
from tests.webchat.support import make_settings

# hypothesis runs inside the tests' bodies (one gateway for every case).
pytestmark = pytest.mark.fuzz

CLOSE_CODES = {aiohttp.WSCloseCode.UNSUPPORTED_DATA, aiohttp.WSCloseCode.MESSAGE_TOO_BIG}


@pytest.fixture
def chat(tmp_path: Path) -> Iterator[GatewayOnLoop]:
    settings = make_settings(
        tmp_path,
        channels={
            "webchat": {
                "max_text_length": 300,
                "messages_per_minute": 0,
                "messages_per_minute_per_address": 0,
                # Fuzzed waits are honoured up to this: keeps every case short.
                "max_long_poll_seconds": 0.01,
            }
        },
    )
    on_loop = GatewayOnLoop(settings)
    try:
        yield on_loop
    finally:
        on_loop.close()


def _check(status: int, answer: bytes, what: Any) -> None:
    assert status < 500, (status, answer[:300], what)
    if status >= 400:
        assert json.loads(answer)["error"], answer


async def _say(on_loop: GatewayOnLoop, room: str, user: str, text: str) -> None:
    body = json.dumps({"user": user, "text": text}).encode()
    status, answer = await on_loop.post(
        f"/api/chat/{room}/messages", body, {"Content-Type": "application/json"}
    )
    assert status == 202, answer


async def _answered(on_loop: GatewayOnLoop, room: str) -> bool:
    status, answer = await on_loop.get(f"/api/chat/{room}/messages")
    assert status == 200
    return any(m["user"] is None for m in json.loads(answer)["messages"])


async def _wait_answered(on_loop: GatewayOnLoop, rooms: list[str]) -> None:
    """Until each room has the gateway's answer, as long as answers keep coming: a room
    answered is not asked again, and only 1,500 rounds (30 s and more) without a new answer
    fail (the long run leaves a backlog of over a thousand rooms behind)."""
    import asyncio

    waiting, rounds_without_answer = list(rooms), 0
    while waiting:
        still = [room for room in waiting if not await _answered(on_loop, room)]
        rounds_without_answer = 0 if len(still) < len(waiting) else rounds_without_answer + 1
        if rounds_without_answer > 1500:
            raise AssertionError(f"{len(still)} valid messages not answered, in {still[:5]}...")
        waiting = still
        await asyncio.sleep(0.02)


def _wait_all_answered(chat: GatewayOnLoop, rooms: list[str]) -> None:
    chat.run(_wait_answered(chat, rooms), timeout=None)


names = any_text | st.sampled_from(["lobby", "alice", "a" * 65, "房间", "a/b", "..", "%00"])
rest_cases = st.one_of(
    st.tuples(st.just("post"), names, json_values.map(json.dumps)),
    st.tuples(st.just("post"), names, nasty),
    st.tuples(
        st.just("post"), st.just("lobby"), mutated({"user": "ann", "text": "hi"}).map(json.dumps)
    ),
    st.tuples(
        st.just("get"),
        names,
        st.dictionaries(
            st.sampled_from(["after", "wait", "user"]),
            any_text | st.sampled_from(["-1", "1e9", "nan", "inf", "0.01", "99999999999999999999"]),
            max_size=3,
        ).map(lambda q: urllib.parse.urlencode(q, errors="surrogatepass")),
    ),
)


def test_rest(chat: GatewayOnLoop) -> None:
    valid: list[str] = []

    @FUZZ
    @given(case=rest_cases, then_valid=st.integers(0, 9))
    def one(case: tuple[str, str, str], then_valid: int) -> None:
        method, room, data = case
        path = "/api/chat/" + urllib.parse.quote(room, safe="", errors="surrogatepass")
        if method == "post":
            body = data.encode("utf-8", "surrogatepass")
            headers = {"Content-Type": "application/json"}
            status, answer = chat.run(chat.post(path + "/messages", body, headers))
        else:
            status, answer = chat.run(chat.get(f"{path}/messages?{data}"))
        _check(status, answer, case)
        if then_valid == 0:
            room_name = "valid-" + uuid.uuid4().hex[:12]
            chat.run(_say(chat, room_name, "v", "/pending"))
            valid.append(room_name)

    with structlog.testing.capture_logs() as logs:
        one()
        _wait_all_answered(chat, valid)
    assert valid
    found = problems(logs)
    assert found == [], [(e["event"], str(e.get("error", e.get("exc_info")))[:200]) for e in found]


frames = st.one_of(
    json_values.map(json.dumps),
    nasty,
    any_text,
    mutated({"type": "message", "text": "hello"}).map(json.dumps),
    mutated({"type": "decide", "id": "K7Q2", "decision": "approve", "reason": "ok"}).map(
        json.dumps
    ),
    st.just('{"type": "ping"}'),
)


class Tab:
    """One socket of the fuzzer; opened again when the server hangs up on it."""

    def __init__(self, on_loop: GatewayOnLoop) -> None:
        self.on_loop = on_loop
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.hangups = 0

    async def open(self) -> aiohttp.ClientWebSocketResponse:
        if self.ws is None or self.ws.closed:
            self.ws = await self.on_loop.http.ws_connect(
                self.on_loop.url + "/ws?session=fuzz&user=fuzzer"
            )
        return self.ws

    async def send(self, frame: str) -> None:
        """Send ``frame``, then a ping: the pong says the server read both and goes on."""
        ws = await self.open()
        try:
            await ws.send_str(frame)
            await ws.send_str('{"type": "ping"}')
        except ConnectionResetError:
            pass  # the server hung up while we wrote (a frame past the size limit): read why
        while True:
            msg = await ws.receive(timeout=10)
            if msg.type is aiohttp.WSMsgType.TEXT:
                if json.loads(msg.data)["type"] == "pong":
                    return
                continue
            # Hung up on: only for frames that are not the protocol, with a reason.
            assert msg.type is aiohttp.WSMsgType.CLOSE, msg
            assert msg.data in CLOSE_CODES, msg
            # The protocol's own refusals say why (aiohttp's size limit says it in the code).
            assert msg.extra or msg.data == aiohttp.WSCloseCode.MESSAGE_TOO_BIG, msg
            self.hangups += 1
            await ws.close()
            self.ws = None
            return


def test_websocket(chat: GatewayOnLoop) -> None:
    tab = Tab(chat)
    valid: list[str] = []

    @FUZZ
    @given(frame=frames, then_valid=st.integers(0, 9))
    def one(frame: str, then_valid: int) -> None:
        try:
            chat.run(tab.send(frame))
        except UnicodeEncodeError:
            return  # a lone surrogate the client library cannot put on the wire
        if then_valid == 0:
            room_name = "valid-" + uuid.uuid4().hex[:12]
            chat.run(_say(chat, room_name, "v", "/pending"))
            valid.append(room_name)

    with structlog.testing.capture_logs() as logs:
        one()
        _wait_all_answered(chat, valid)
        # The room the fuzzer wrote in still works for someone joining now.
        ws = chat.run(chat.http.ws_connect(chat.url + "/ws?session=fuzz&user=late"))
        chat.run(ws.send_str('{"type": "ping"}'))
        seen = []
        while (msg := chat.run(ws.receive(timeout=10))).type is aiohttp.WSMsgType.TEXT:
            seen.append(json.loads(msg.data)["type"])
            if seen[-1] == "pong":
                break
        assert seen[0] == "hello" and seen[-1] == "pong"
        chat.run(ws.close())
        if tab.ws is not None:
            chat.run(tab.ws.close())
    assert valid
    found = problems(logs)
    assert found == [], [(e["event"], str(e.get("error", e.get("exc_info")))[:200]) for e in found]
