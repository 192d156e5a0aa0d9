"""A conversation and its web chat room survive a restart (issue 23, item 2): ``gateway
serve`` on the SQLite store answers in the web chat, is stopped with SIGTERM and started
again on the same data dir; the model's next request carries the earlier exchange, and the
room reads as it was, its page going on after the number it had.

Before conversations were stored the history lived in the process: the restarted gateway
sent the model the new message alone, and the room started again empty, numbered from 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.fakes.openai_server import FakeOpenAI, text
from tests.process.replica_support import chat_lines, say
from tests.webchat.support import ServeProcess, eventually, next_frame

FIRST = "记住了：蓝色 / noted: blue"
SECOND = "你说过蓝色 / you said blue"


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with FakeOpenAI() as fake:
        fake.script(text(FIRST), text(SECOND))
        yield fake


def serve(tmp_path: Path, model: FakeOpenAI) -> ServeProcess:
    process = ServeProcess(
        tmp_path=tmp_path,
        env={
            "GATEWAY_CONFIRMATION__STORE": "sqlite",
            "GATEWAY_LLM__BASE_URL": model.base_url,
            "GATEWAY_LLM__API_KEY": model.api_key,
            "GATEWAY_LLM__MODEL": "fake-model",
        },
    )
    process.start(timeout=60)
    return process


async def answered(url: str, room: str, line: str) -> bool:
    async with aiohttp.ClientSession(base_url=url) as http:
        return any(line in str(m.get("text")) for m in await chat_lines(http, room))


async def test_a_restarted_gateway_goes_on_with_the_conversation(
    tmp_path: Path, model: FakeOpenAI
) -> None:
    first = serve(tmp_path, model)
    try:
        async with aiohttp.ClientSession(base_url=first.url) as http:
            await say(http, "r1", "我喜欢蓝色 / I like blue")
        await eventually(lambda: answered(first.url, "r1", FIRST), timeout=30)
    finally:
        assert first.stop() == 0, "".join(first.lines)

    second = serve(tmp_path, model)  # the same data dir
    try:
        async with aiohttp.ClientSession(base_url=second.url) as http:
            await say(http, "r1", "我喜欢什么颜色？ / which colour do I like?")
        await eventually(lambda: answered(second.url, "r1", SECOND), timeout=30)
    finally:
        assert second.stop() == 0, "".join(second.lines)

    sent = [(m["role"], str(m.get("content"))) for m in model.requests[-1].messages]
    assert [role for role, _ in sent] == ["system", "user", "assistant", "user"]
    assert "I like blue" in sent[1][1]
    assert sent[2][1] == FIRST
    assert "which colour" in sent[3][1]


async def test_a_restarted_gateway_shows_the_room_as_it_was(tmp_path: Path) -> None:
    env = {"GATEWAY_CONFIRMATION__STORE": "sqlite"}  # the command agent answers /help
    first = ServeProcess(tmp_path=tmp_path, env=env)
    first.start(timeout=60)
    try:
        async with aiohttp.ClientSession(base_url=first.url) as http:
            await say(http, "kept", "/help")

            async def answer_shown() -> list[dict[str, object]] | None:
                lines = await chat_lines(http, "kept")
                return lines if any(m["user"] is None for m in lines) else None

            before = await eventually(answer_shown, timeout=30)
    finally:
        assert first.stop() == 0, "".join(first.lines)

    second = ServeProcess(tmp_path=tmp_path, env=env)  # the same data dir
    second.start(timeout=60)
    try:
        async with aiohttp.ClientSession(base_url=second.url) as http:
            assert await chat_lines(http, "kept") == before
            last = int(str(before[-1]["seq"]))
            # A page open before the restart reconnects after its number: nothing is sent
            # again, and the room's number is not lower than its own (no "restarted" line).
            async with http.ws_connect(f"/ws?session=kept&user=alice&after={last}") as ws:
                hello = await next_frame(ws, lambda f: f["type"] == "hello")
                assert hello["last_seq"] == last
                await ws.send_json({"type": "message", "text": "/help"})
                mine = await next_frame(ws, lambda f: f["type"] == "message")
                assert (mine["seq"], mine["text"]) == (last + 1, "/help")  # numbers go on
    finally:
        assert second.stop() == 0, "".join(second.lines)
