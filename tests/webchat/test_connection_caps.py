"""Open WebSockets and waiting long polls are capped over all and per client address
(issue 22, item 7): one client held ~1,000 idle sockets, the process ran out of file
descriptors and /healthz, admin requests and webhooks timed out.

A real server and real sockets: past a cap a new one is refused before the upgrade, with a
status and a JSON error naming the setting, while /healthz keeps answering.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from channels.webchat.channel import WebChatChannel
from gateway import texts
from gateway.app import Gateway
from tests.webchat.support import base_url, eventually, make_settings, running_gateway


@asynccontextmanager
async def _gateway(tmp_path: Path, **webchat: Any) -> AsyncIterator[Gateway]:
    settings = make_settings(
        tmp_path,
        # The test client is the trusted proxy: X-Forwarded-For names other clients.
        server={"trusted_proxies": ["127.0.0.1"]},
        channels={"webchat": webchat},
    )
    async with running_gateway(settings) as gw:
        yield gw


def _webchat(gw: Gateway) -> WebChatChannel:
    channel = gw.channels.channels["webchat"]
    assert isinstance(channel, WebChatChannel)
    return channel


async def _async(value: bool) -> bool:
    return value


def _from(address: str | None) -> dict[str, str]:
    return {} if address is None else {"X-Forwarded-For": address}


async def _open(
    http: aiohttp.ClientSession, stack: AsyncExitStack, room: str, address: str | None = None
) -> aiohttp.ClientWebSocketResponse:
    ws = await stack.enter_async_context(
        http.ws_connect(f"/ws?session={room}&user=u", headers=_from(address))
    )
    hello = await ws.receive_json(timeout=10)
    assert hello["type"] == "hello"
    return ws


async def _refused(
    http: aiohttp.ClientSession, room: str, address: str | None, status: int
) -> dict[str, Any]:
    """A WebSocket handshake refused with ``status``; the JSON body of the same refusal."""
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        async with http.ws_connect(f"/ws?session={room}&user=u", headers=_from(address)):
            pass
    assert refused.value.status == status
    async with http.get(f"/ws?session={room}&user=u", headers=_from(address)) as resp:
        assert resp.status == status
        body: dict[str, Any] = await resp.json()
        return body


async def _healthy(http: aiohttp.ClientSession) -> None:
    async with http.get("/healthz", timeout=aiohttp.ClientTimeout(total=10)) as resp:
        assert resp.status == 200


async def test_websockets_past_the_per_address_cap_are_refused_and_healthz_answers(
    tmp_path: Path,
) -> None:
    async with (
        _gateway(tmp_path, max_sockets_per_address=3) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
        AsyncExitStack() as stack,
    ):
        # One room each: the per-room cap (50) is not what refuses them.
        held = [await _open(http, stack, f"room{i}") for i in range(3)]
        body = await _refused(http, "room9", None, 429)
        assert body["limit"] == "channels.webchat.max_sockets_per_address"
        assert body["error"] == texts.WEBCHAT_TOO_MANY_CONNECTIONS.format(
            limit=3, setting="channels.webchat.max_sockets_per_address"
        )
        await _healthy(http)
        # Another client address is not this one's cap.
        await _open(http, stack, "room9", "203.0.113.7")
        assert _webchat(gw).open_sockets.open == 4
        # One closed: the address may open one again.
        await held[0].close()
        await eventually(lambda: _async(_webchat(gw).open_sockets.open == 3))
        await _open(http, stack, "room0")
        for ws in held[1:]:
            await ws.send_json({"type": "ping"})
            assert (await ws.receive_json(timeout=10))["type"] == "pong"


async def test_websockets_past_the_overall_cap_are_refused_with_503(tmp_path: Path) -> None:
    async with (
        _gateway(tmp_path, max_sockets=4, max_sockets_per_address=2) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
        AsyncExitStack() as stack,
    ):
        for i in range(4):
            await _open(http, stack, "lobby", f"198.51.100.{i}")
        body = await _refused(http, "lobby", "198.51.100.9", 503)
        assert body["limit"] == "channels.webchat.max_sockets"
        await _healthy(http)
        assert _webchat(gw).open_sockets.open == 4


async def _poll(http: aiohttp.ClientSession, room: str, address: str | None) -> int:
    async with http.get(
        f"/api/chat/{room}/messages?after=0&wait=30", headers=_from(address)
    ) as resp:
        await resp.read()
        return resp.status


async def test_long_polls_past_their_caps_are_refused_and_healthz_answers(
    tmp_path: Path,
) -> None:
    async with (
        _gateway(tmp_path, max_long_polls=3, max_long_polls_per_address=2) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        channel = _webchat(gw)
        polls = [asyncio.create_task(_poll(http, f"room{i}", None)) for i in range(2)]
        await eventually(lambda: _async(channel.long_polls.open == 2))
        async with http.get("/api/chat/room5/messages?wait=30") as resp:
            assert resp.status == 429
            body = await resp.json()
        assert body["limit"] == "channels.webchat.max_long_polls_per_address"
        assert body["error"].startswith("打开的连接过多")
        # A poll that does not wait holds nothing: still answered.
        async with http.get("/api/chat/room5/messages") as resp:
            assert resp.status == 200
        polls.append(asyncio.create_task(_poll(http, "room2", "203.0.113.1")))
        await eventually(lambda: _async(channel.long_polls.open == 3))
        async with http.get(
            "/api/chat/room5/messages?wait=30", headers=_from("203.0.113.2")
        ) as resp:
            assert resp.status == 503
            assert (await resp.json())["limit"] == "channels.webchat.max_long_polls"
        await _healthy(http)
        # A message wakes the waiting polls: they answer and give their places back.
        for room in ("room0", "room1", "room2"):
            async with http.post(
                f"/api/chat/{room}/messages", json={"user": "u", "text": "hi"}
            ) as resp:
                assert resp.status == 202
        assert await asyncio.gather(*polls) == [200, 200, 200]
        assert channel.long_polls.open == 0
