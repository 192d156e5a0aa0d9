"""Input that once broke a room: deeply nested JSON and lone surrogates, REST and WebSocket."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import WSCloseCode

from gateway.app import Gateway
from tests.webchat.support import next_frame

LONE = '{"type": "message", "text": "before \\ud800 after"}'


@asynccontextmanager
async def tab(
    http: aiohttp.ClientSession, room: str, user: str
) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    async with http.ws_connect(f"/ws?session={room}&user={user}") as ws:
        await next_frame(ws, lambda f: f["type"] == "hello")
        yield ws


async def _history(http: aiohttp.ClientSession, room: str) -> list[dict[str, Any]]:
    async with http.get(f"/api/chat/{room}/messages") as resp:
        assert resp.status == 200
        messages: list[dict[str, Any]] = (await resp.json())["messages"]
        return messages


async def _joins_and_replays(http: aiohttp.ClientSession, room: str) -> list[str]:
    """A new tab joins and reads the whole history: what people said in it."""
    said = []
    async with tab(http, room, "newcomer") as ws:
        await ws.send_json({"type": "ping"})
        while (frame := await next_frame(ws, lambda f: f["type"] in ("message", "pong")))[
            "type"
        ] == "message":
            if frame["user"] is not None:
                said.append(frame["text"])
    return said


async def test_a_lone_surrogate_over_rest_is_refused_and_the_room_keeps_working(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    bad = b'{"user": "alice", "text": "before \\ud800 after"}'
    async with http.post(
        "/api/chat/surr/messages", data=bad, headers={"Content-Type": "application/json"}
    ) as resp:
        assert resp.status == 400
        assert "surrogate" in (await resp.json())["error"]
    async with http.post(
        "/api/chat/surr/messages", json={"user": "alice", "text": "good 😀"}
    ) as resp:
        assert resp.status == 202
    # The history never held it: a tab joining now replays the room, and works.
    assert await _joins_and_replays(http, "surr") == ["good 😀"]


async def test_a_lone_surrogate_over_the_socket_is_an_error_frame(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    async with tab(http, "surr-ws", "alice") as ws:
        await ws.send_str(LONE)
        error = await next_frame(ws, lambda f: f["type"] == "error")
        assert error["error"].startswith("无法读取这条消息")
        assert "surrogate" in error["error"]
        # The socket goes on.
        await ws.send_json({"type": "message", "text": "good"})
        await next_frame(ws, lambda f: f.get("kind") == "text" and f["user"] == "alice")
    assert await _joins_and_replays(http, "surr-ws") == ["good"]


@pytest.mark.parametrize("depth", [60_000, 20_000])
async def test_deep_json_on_the_socket_is_an_error_frame(
    gateway: Gateway, http: aiohttp.ClientSession, depth: int
) -> None:
    async with tab(http, "deep", "alice") as ws, tab(http, "deep", "bob") as bob:
        await ws.send_str('{"type": "message", "text": "x", "more": ' + "[" * depth)
        error = await next_frame(ws, lambda f: f["type"] == "error")
        assert "nested deeper than" in error["error"]
        await ws.send_json({"type": "message", "text": "still here"})
        seen = await next_frame(bob, lambda f: f.get("kind") == "text" and f["user"] == "alice")
        assert seen["text"] == "still here"


async def test_a_frame_beyond_the_size_limit_closes_only_that_socket(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    async with tab(http, "big", "mallory") as ws:
        await ws.send_str("[" * 100_000)
        closed = await ws.receive(timeout=10)
        assert closed.type is aiohttp.WSMsgType.CLOSE
        assert closed.data == WSCloseCode.MESSAGE_TOO_BIG
    async with tab(http, "big", "alice") as ws:
        await ws.send_json({"type": "message", "text": "the room works"})
        await next_frame(ws, lambda f: f.get("kind") == "text" and f["user"] == "alice")


async def test_a_lone_surrogate_from_the_gateway_side_does_not_break_the_room(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    # Not from the edge (a model's answer could hold one): escaped on the wire instead.
    channel = gateway.channels.channels["webchat"]
    from gateway.bus import OutboundMessage

    async with tab(http, "model", "alice") as ws:
        await channel.send(OutboundMessage(channel="webchat", chat_id="model", text="a\ud800b"))
        frame = await next_frame(ws, lambda f: f["type"] == "message")
        assert frame["text"] == "a\ud800b"
    async with tab(http, "model", "bob") as ws:
        replayed = await next_frame(ws, lambda f: f["type"] == "message")
        assert replayed["text"] == "a\ud800b"
    assert json.dumps(replayed)  # a plain str again on the client side
