"""Web chat bounds: messages per sender and client address.

The history's bounds (count and bytes per room, bytes in total, rooms) are the room
store's: tests/storage/test_rooms_contract.py, on every backend."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from channels.webchat.limits import SenderRateLimit, SlowDown
from gateway import texts
from tests.webchat.support import base_url, make_settings, next_frame, running_gateway


def test_rate_limit_allows_a_burst_then_one_message_per_interval() -> None:
    now = [0.0]
    limit = SenderRateLimit(per_minute=30, clock=lambda: now[0])
    for _ in range(30):
        limit.take("alice")
    with pytest.raises(SlowDown) as refused:
        limit.take("alice")
    assert refused.value.retry_after == 2  # 30 a minute: one every 2 s
    limit.take("bob")  # others are not affected
    now[0] += 2.0
    limit.take("alice")
    with pytest.raises(SlowDown):
        limit.take("alice")
    now[0] += 60.0
    for _ in range(30):
        limit.take("alice")


def test_rate_limit_zero_is_off() -> None:
    limit = SenderRateLimit(per_minute=0)
    for _ in range(1000):
        limit.take("alice")


async def test_a_fast_sender_is_told_to_slow_down_and_others_go_on(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, channels={"webchat": {"messages_per_minute": 3}})
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        for i in range(3):
            async with http.post(
                "/api/chat/lobby/messages", json={"user": "alice", "text": f"hi {i}"}
            ) as resp:
                assert resp.status == 202
        async with http.post(
            "/api/chat/lobby/messages", json={"user": "alice", "text": "too fast"}
        ) as resp:
            assert resp.status == 429
            assert resp.headers["Retry-After"] == "20"
            body = await resp.json()
        assert body["error"] == texts.WEBCHAT_SLOW_DOWN.format(limit=3, seconds=20)
        assert body["error"].startswith("请稍慢一点")

        # Over the WebSocket: the same words, to that tab, and the tab keeps working.
        async with http.ws_connect("/ws?session=lobby&user=alice") as ws:
            await ws.send_json({"type": "message", "text": "still too fast"})
            error = await next_frame(ws, lambda f: f["type"] == "error")
            assert error["error"].startswith("请稍慢一点")
            await ws.send_json({"type": "ping"})
            await next_frame(ws, lambda f: f["type"] == "pong")

        async with http.post(
            "/api/chat/lobby/messages", json={"user": "bob", "text": "hello"}
        ) as resp:
            assert resp.status == 202
        async with http.get("/api/chat/lobby/messages") as resp:
            history = (await resp.json())["messages"]
        said = [m["text"] for m in history if m["user"] is not None]
        assert said == ["hi 0", "hi 1", "hi 2", "hello"]


async def test_rotating_names_from_one_address_meet_the_address_limit(tmp_path: Path) -> None:
    # Issue 22: the limit was per typed name only, so a new name each message was never
    # slowed (1,500 held calls in 46 s).
    settings = make_settings(
        tmp_path,
        server={"trusted_proxies": ["127.0.0.1"]},  # X-Forwarded-For names the client
        channels={"webchat": {"messages_per_minute": 3, "messages_per_minute_per_address": 5}},
    )
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        for i in range(5):
            async with http.post(
                "/api/chat/lobby/messages", json={"user": f"name{i}", "text": "hi"}
            ) as resp:
                assert resp.status == 202
        async with http.post(
            "/api/chat/lobby/messages", json={"user": "name5", "text": "hi"}
        ) as resp:
            assert resp.status == 429
            assert resp.headers["Retry-After"] == "12"  # 5 a minute: one every 12 s
            body = await resp.json()
        assert body["error"] == texts.WEBCHAT_SLOW_DOWN.format(limit=5, seconds=12)
        # Over the WebSocket from the same address: the same limit.
        async with http.ws_connect("/ws?session=lobby&user=name6") as ws:
            await ws.send_json({"type": "message", "text": "hi"})
            error = await next_frame(ws, lambda f: f["type"] == "error")
            assert error["error"] == body["error"]
        # Another client (as the trusted proxy forwards it) is not slowed.
        async with http.post(
            "/api/chat/lobby/messages",
            json={"user": "name7", "text": "hi"},
            headers={"X-Forwarded-For": "203.0.113.5"},
        ) as resp:
            assert resp.status == 202


def test_the_address_limit_counts_nothing_when_the_name_is_over() -> None:
    now = [0.0]
    limit = SenderRateLimit(per_minute=1, per_address_minute=2, clock=lambda: now[0])
    limit.take("alice", address="a")
    with pytest.raises(SlowDown) as refused:
        limit.take("alice", address="a")
    assert refused.value.limit == 1
    limit.take("bob", address="a")  # the refused message took no token of the address
    with pytest.raises(SlowDown) as refused:
        limit.take("carol", address="a")
    assert refused.value.limit == 2
