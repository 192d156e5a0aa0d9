"""A conversation and its web chat room survive a restart (issue 23, item 2): ``gateway
serve`` on the SQLite store answers in the web chat, is stopped with SIGTERM and started
again on the same data dir; the model's next request carries the earlier exchange, and the
room reads as it was, its page going on after the number it had.

Before conversations were stored the history lived in the process: the restarted gateway
sent the model the new message alone, and the room started again empty, numbered from 1.

A turn whose call ended just before a ``kill -9`` (the model not yet answered) goes on
after the restart: going on is stored in the inbox before it starts.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.fakes.openai_server import FakeOpenAI, hold, text
from tests.process.replica_support import PLUGIN, chat_lines, decide, pending_id, respond, say
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


async def test_a_turn_cut_off_by_kill_9_before_it_went_on_goes_on_after_the_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    (tmp_path / "replica_tools.py").write_text(PLUGIN, encoding="utf-8")
    (tmp_path / "runs").mkdir()
    home = tmp_path / "home"
    home.mkdir()
    with FakeOpenAI() as fake:
        # The ask; going on after the rejection (never answered: killed); after the restart.
        fake.script(respond, hold(), respond)
        env = {
            "PYTHONPATH": str(tmp_path),
            "REPLICA_RUNS_DIR": str(tmp_path / "runs"),
            "GATEWAY_CONFIRMATION__STORE": "sqlite",
            "GATEWAY_TOOLS__PLUGINS": '["replica_tools"]',
            "GATEWAY_LLM__BASE_URL": fake.base_url,
            "GATEWAY_LLM__API_KEY": fake.api_key,
            "GATEWAY_LLM__MODEL": "fake-model",
        }
        first = ServeProcess(tmp_path=home, env=env)
        first.start(timeout=60)
        try:
            async with aiohttp.ClientSession(base_url=first.url) as http:
                await say(http, "k", "write k1")
                await decide(http, await pending_id(http, "k"), "reject")
            await fake.wait_requests(2)  # the turn went on: its model call is under way
        finally:
            assert first.proc is not None
            first.proc.send_signal(signal.SIGKILL)
            assert first.stop() == -signal.SIGKILL
        second = ServeProcess(tmp_path=home, env=env)
        second.start(timeout=60)
        try:
            await eventually(lambda: answered(second.url, "k", "done: "), timeout=30)
            async with aiohttp.ClientSession(base_url=second.url) as http:
                lines = [str(m.get("text")) for m in await chat_lines(http, "k")]
            assert sum("done: " in line for line in lines) == 1
            assert fake.requests[2].messages[-1]["role"] == "tool"
        finally:
            assert second.stop() == 0, "".join(second.lines)
