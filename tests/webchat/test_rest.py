"""The web chat REST API against a real gateway on a loopback port."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from tests.webchat.support import base_url, eventually, order_exists

DELETE_3 = "/sql DELETE FROM orders WHERE id = 3"
JSON = {"Content-Type": "application/json"}


async def poll(
    http: aiohttp.ClientSession, room: str, *, after: int = 0, **params: Any
) -> dict[str, Any]:
    async with http.get(
        f"/api/chat/{room}/messages", params={"after": str(after), **params}
    ) as resp:
        assert resp.status == 200, await resp.text()
        body: dict[str, Any] = await resp.json()
        return body


async def say(http: aiohttp.ClientSession, room: str, user: str, text: str) -> str:
    async with http.post(f"/api/chat/{room}/messages", json={"user": user, "text": text}) as resp:
        assert resp.status == 202, await resp.text()
        body = await resp.json()
        return str(body["message_id"])


async def wait_for_kind(
    http: aiohttp.ClientSession, room: str, kind: str, status: str | None = None
) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        for m in (await poll(http, room))["messages"]:
            if m["kind"] == kind and (status is None or m["confirmation"]["status"] == status):
                return dict(m)
        return None

    return await eventually(probe)


async def test_page_is_served_with_a_strict_policy(http: aiohttp.ClientSession) -> None:
    async with http.get("/") as resp:
        assert resp.status == 200
        html = await resp.text()
        assert "default-src 'self'" in resp.headers["Content-Security-Policy"]
    assert "网关聊天" in html
    assert "Gateway chat" in html
    async with http.get("/static/app.js") as resp:
        assert resp.status == 200
        assert "WebSocket" in await resp.text()


async def test_a_message_gets_a_confirmation_card_in_the_history(
    http: aiohttp.ClientSession,
) -> None:
    message_id = await say(http, "lobby", "alice", DELETE_3)
    card = await wait_for_kind(http, "lobby", "confirmation")
    history = (await poll(http, "lobby"))["messages"]
    assert history[0]["kind"] == "text"
    assert history[0]["user"] == "alice"
    assert history[0]["message_id"] == message_id
    assert card["user"] is None
    c = card["confirmation"]
    assert c["status"] == "pending"
    assert c["session_key"] == "webchat:lobby"
    assert c["requester"] == "alice"
    assert c["details"]["rows_affected"] == 1
    assert c["id"] in card["text"]
    assert [m["seq"] for m in history] == sorted(m["seq"] for m in history)


async def test_the_202_says_where_the_message_landed_so_a_poll_after_it_gets_the_answer(
    http: aiohttp.ClientSession,
) -> None:
    await say(http, "seqroom", "bob", "/help")  # something before it in the room
    await eventually(lambda: _answered(http, "seqroom", 2))
    async with http.post(
        "/api/chat/seqroom/messages", json={"user": "bob", "text": "/help"}
    ) as resp:
        assert resp.status == 202
        body = await resp.json()
    history = (await poll(http, "seqroom"))["messages"]
    mine = next(m for m in history if m["message_id"] == body["message_id"])
    assert mine["seq"] == body["seq"]
    # One long poll after it: the answer, not the message itself.
    after = (await poll(http, "seqroom", after=body["seq"], wait=10))["messages"]
    assert after and all(m["user"] is None for m in after)


async def _answered(http: aiohttp.ClientSession, room: str, count: int) -> bool | None:
    return len((await poll(http, room))["messages"]) >= count or None


async def test_can_decide_is_computed_for_the_asking_user(http: aiohttp.ClientSession) -> None:
    await say(http, "lobby", "alice", DELETE_3)
    await wait_for_kind(http, "lobby", "confirmation")
    for_alice = [
        m for m in (await poll(http, "lobby", user="alice"))["messages"] if m["kind"] != "text"
    ]
    for_bob = [
        m for m in (await poll(http, "lobby", user="bob"))["messages"] if m["kind"] != "text"
    ]
    assert for_alice[0]["can_decide"]["approve"] == {"allowed": True, "why": ""}
    assert for_bob[0]["can_decide"]["approve"]["allowed"] is False
    assert "only the requester" in for_bob[0]["can_decide"]["approve"]["why"]
    anonymous = [m for m in (await poll(http, "lobby"))["messages"] if m["confirmation"]]
    assert "can_decide" not in anonymous[0]


async def test_a_typed_reply_decides_and_the_update_reaches_the_history(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    await say(http, "lobby", "alice", DELETE_3)
    await wait_for_kind(http, "lobby", "confirmation")
    await say(http, "lobby", "alice", "确认")
    update = await wait_for_kind(http, "lobby", "confirmation_update", "approved")
    assert update["confirmation"]["decided_by"] == "alice"
    assert update["confirmation"]["decided_via"] == "text"
    await eventually(
        lambda: asyncio.sleep(0, result=not order_exists(gateway.settings.data_dir, 3))
    )


async def test_long_poll_returns_when_something_new_arrives(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    last = (await poll(http, "quiet"))["last_seq"]
    waiting = asyncio.create_task(poll(http, "quiet", after=last, wait="20"))
    channel = gateway.channels.channels["webchat"]
    room = channel.rooms.get("quiet")  # type: ignore[attr-defined]
    # The poll is parked in the room: nothing has answered it yet.
    await eventually(lambda: asyncio.sleep(0, result=room.waiters == 1))
    assert not waiting.done()
    await say(http, "quiet", "carol", "/help")
    got = await asyncio.wait_for(waiting, 15)
    assert got["messages"][0]["text"] == "/help"
    assert all(m["seq"] > last for m in got["messages"])


async def test_long_poll_with_nothing_new_returns_empty(http: aiohttp.ClientSession) -> None:
    got = await poll(http, "empty-room", after=0, wait="0.05")
    assert got == {"messages": [], "last_seq": 0}


async def test_rooms_are_separate(http: aiohttp.ClientSession) -> None:
    await say(http, "room-a", "alice", "/help")
    await wait_for_kind(http, "room-a", "text")
    assert (await poll(http, "room-b"))["messages"] == []


@pytest.mark.parametrize(
    ("path", "body", "status", "needle"),
    [
        ("/api/chat/lobby/messages", b"not json", 400, "not valid JSON"),
        ("/api/chat/lobby/messages", b"", 400, "empty"),
        ("/api/chat/lobby/messages", b"[1, 2]", 400, "JSON object"),
        ("/api/chat/lobby/messages", b'{"text": "hi"}', 400, "user"),
        ("/api/chat/lobby/messages", b'{"user": "al ice", "text": "hi"}', 400, "user is invalid"),
        ("/api/chat/lobby/messages", b'{"user": 5, "text": "hi"}', 400, "user must be a string"),
        ("/api/chat/lobby/messages", b'{"user": "alice"}', 400, "text is required"),
        ("/api/chat/lobby/messages", b'{"user": "alice", "text": 5}', 400, "text must be"),
        ("/api/chat/lobby/messages", b'{"user": "alice", "text": "   "}', 400, "text is empty"),
        (
            "/api/chat/lobby/messages",
            b'{"user": "alice", "text": "%s"}' % (b"x" * 201),
            413,
            "long",
        ),
        ("/api/chat/" + "r" * 65 + "/messages", b'{"user": "a", "text": "hi"}', 400, "session"),
        ("/api/chat/a%3Ab/messages", b'{"user": "a", "text": "hi"}', 400, "session"),
    ],
)
async def test_bad_posts_get_a_json_error_naming_the_problem(
    http: aiohttp.ClientSession, path: str, body: bytes, status: int, needle: str
) -> None:
    async with http.post(path, data=body, headers=JSON) as resp:
        assert resp.status == status
        error = (await resp.json())["error"]
    assert needle in error


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("after=-1", "after"),
        ("after=abc", "after"),
        ("wait=nan", "wait"),
        ("wait=-2", "wait"),
        ("wait=soon", "wait"),
        ("user=a%20b", "user"),
    ],
)
async def test_bad_poll_parameters_are_400(
    http: aiohttp.ClientSession, query: str, needle: str
) -> None:
    async with http.get(f"/api/chat/lobby/messages?{query}") as resp:
        assert resp.status == 400
        assert needle in (await resp.json())["error"]


async def test_unknown_api_routes_are_json_404(http: aiohttp.ClientSession) -> None:
    async with http.get("/api/chat/lobby") as resp:
        assert resp.status == 404
        assert "no such endpoint" in (await resp.json())["error"]
    async with http.delete("/api/chat/lobby/messages") as resp:
        assert resp.status == 405
        assert "not allowed" in (await resp.json())["error"]


async def test_only_json_bodies_are_read(http: aiohttp.ClientSession) -> None:
    body = b'{"user": "alice", "text": "hi"}'
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        async with http.post(
            "/api/chat/lobby/messages", data=body, headers={"Content-Type": ctype}
        ) as resp:
            assert resp.status == 415
            assert "application/json" in (await resp.json())["error"]


async def test_other_sites_cannot_post_or_open_sockets(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    evil = {"Origin": "http://evil.example"}
    async with http.post(
        "/api/chat/lobby/messages", json={"user": "alice", "text": "确认"}, headers=evil
    ) as resp:
        assert resp.status == 403
        assert "cross-origin" in (await resp.json())["error"]
    async with http.get("/ws?session=lobby&user=alice", headers=evil) as resp:
        assert resp.status == 403
    # Reading is harmless, and the page's own origin is fine.
    async with http.get("/api/chat/lobby/messages", headers=evil) as resp:
        assert resp.status == 200
    own = {"Origin": base_url(gateway)}
    async with http.post(
        "/api/chat/lobby/messages", json={"user": "alice", "text": "/help"}, headers=own
    ) as resp:
        assert resp.status == 202
    assert (await poll(http, "lobby"))["messages"][0]["text"] == "/help"


async def test_a_sequence_number_from_an_earlier_life_gets_the_whole_history(
    http: aiohttp.ClientSession,
) -> None:
    # History lives in memory: after a restart numbering starts again, and a client still
    # holding a higher number must not miss everything until it catches up.
    await say(http, "reborn", "alice", "/help")
    await wait_for_kind(http, "reborn", "text")
    got = await poll(http, "reborn", after=10_000)
    assert got["messages"][0]["text"] == "/help"


async def test_json_answers_are_utf8_as_they_read(http: aiohttp.ClientSession) -> None:
    """aiohttp escaped every non-ASCII character ("\\u786e..."), unreadable in curl
    (issue 26): the bytes on the wire are the UTF-8 of the text."""
    await say(http, "utf8", "alice", "你好 /help")
    await eventually(lambda: _history_has(http, "utf8", "你好 /help"))
    async with http.get("/api/chat/utf8/messages", params={"after": "0"}) as resp:
        assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
        raw = await resp.read()
    assert "你好 /help".encode() in raw
    assert b"\\u" not in raw


async def _history_has(http: aiohttp.ClientSession, room: str, text: str) -> bool | None:
    return any(m.get("text") == text for m in (await poll(http, room))["messages"]) or None
