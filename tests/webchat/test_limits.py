"""Web chat bounds: history by count and bytes (per room, in total), messages per sender."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from channels.webchat.limits import SenderRateLimit, SlowDown
from channels.webchat.rooms import ENTRY_OVERHEAD_BYTES, Rooms
from gateway import texts
from tests.webchat.support import base_url, make_settings, next_frame, running_gateway

KIB = 1024


def _rooms(*, room_bytes: int = 64 * KIB, total_bytes: int = 1 << 20) -> Rooms:
    return Rooms(max_rooms=100, history_size=500, room_bytes=room_bytes, total_bytes=total_bytes)


def _say(rooms: Rooms, room: str, text: str) -> None:
    rooms.append(rooms.get(room), kind="text", text=text, at=0.0, user="u")


def test_a_room_keeps_its_newest_entries_within_its_bytes() -> None:
    rooms = _rooms(room_bytes=64 * KIB)
    for i in range(100):
        _say(rooms, "r", f"{i:03d}" + "测" * 1000)  # ~3.5 KiB each in UTF-8
    room = rooms.get("r")
    assert room.bytes <= 64 * KIB
    assert rooms.bytes == room.bytes
    kept = [e.text[:3] for e in room.entries]
    assert kept == [f"{i:03d}" for i in range(100 - len(kept), 100)]
    assert 10 < len(kept) < 20
    assert room.last_seq == 100


def test_the_count_bound_still_holds() -> None:
    rooms = Rooms(max_rooms=10, history_size=10, room_bytes=1 << 20, total_bytes=1 << 20)
    for i in range(25):
        _say(rooms, "r", str(i))
    assert [e.text for e in rooms.get("r").entries] == [str(i) for i in range(15, 25)]


def test_a_poll_gets_what_came_after_its_number_of_what_is_kept() -> None:
    # Room.after counts back from the newest entry (issue 14: it read the whole history).
    rooms = Rooms(max_rooms=10, history_size=10, room_bytes=1 << 20, total_bytes=1 << 20)
    room = rooms.get("r")
    assert room.after(0) == []
    for i in range(25):
        _say(rooms, "r", str(i))
    assert [e.seq for e in room.after(22)] == [23, 24, 25]
    assert room.after(25) == []
    assert [e.seq for e in room.after(3)] == list(range(16, 26))  # older ones were dropped
    assert [e.seq for e in room.after(0)] == list(range(16, 26))
    assert [e.seq for e in room.after(99)] == list(range(16, 26))  # a number from before a restart


def test_over_the_total_the_oldest_entry_of_any_room_goes_first() -> None:
    entry = 10 * KIB
    text = "x" * (entry - ENTRY_OVERHEAD_BYTES)
    rooms = _rooms(room_bytes=1 << 20, total_bytes=10 * entry)
    for _ in range(6):
        _say(rooms, "a", text)
        _say(rooms, "b", text)
    # 12 entries written, room for 10: a's first and b's first went, nothing else.
    assert rooms.bytes == 10 * entry
    assert [e.seq for e in rooms.get("a").entries] == [2, 3, 4, 5, 6]
    assert [e.seq for e in rooms.get("b").entries] == [2, 3, 4, 5, 6]
    for _ in range(5):
        _say(rooms, "c", text)
    # Five more: a2, b2, a3, b3, a4 went, in the order they were written.
    assert [e.seq for e in rooms.get("a").entries] == [5, 6]
    assert [e.seq for e in rooms.get("b").entries] == [4, 5, 6]
    assert len(rooms.get("c").entries) == 5
    assert rooms.bytes == sum(r.bytes for r in rooms) == 10 * entry


def test_an_evicted_room_gives_its_bytes_back() -> None:
    rooms = Rooms(max_rooms=2, history_size=500, room_bytes=1 << 20, total_bytes=1 << 20)
    _say(rooms, "a", "x" * 1000)
    _say(rooms, "b", "y" * 1000)
    _say(rooms, "c", "z" * 1000)  # "a" is idle and least recently used: dropped
    assert len(rooms) == 2
    assert rooms.bytes == sum(r.bytes for r in rooms)


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
