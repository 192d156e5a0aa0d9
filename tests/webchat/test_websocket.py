"""The web chat WebSocket: fan-out to every tab of a room, button decisions, bad clients."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import WSCloseCode

from gateway.app import Gateway, build
from gateway.confirm.model import Status
from tests.support import ShiftedClock, pass_deadline
from tests.webchat.support import eventually, is_kind, next_frame, order_exists

DELETE_3 = "/sql DELETE FROM orders WHERE id = 3"


@asynccontextmanager
async def tab(
    http: aiohttp.ClientSession, room: str, user: str, after: int = 0
) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    async with http.ws_connect(f"/ws?session={room}&user={user}&after={after}") as ws:
        hello = await next_frame(ws, lambda f: f["type"] == "hello")
        assert hello["user"] == user
        yield ws


async def test_card_reaches_every_tab_and_a_click_approves_it(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    async with tab(http, "ops", "alice") as alice, tab(http, "ops", "bob") as bob:
        await alice.send_json({"type": "message", "text": DELETE_3})
        # Every tab sees the person's message, then the card.
        echoed = await next_frame(bob, is_kind("text"))
        assert echoed["user"] == "alice"
        card_alice = await next_frame(alice, is_kind("confirmation"))
        card_bob = await next_frame(bob, is_kind("confirmation"))
        cid = card_alice["confirmation"]["id"]
        assert card_bob["confirmation"]["id"] == cid
        assert card_alice["confirmation"]["details"]["rows_affected"] == 1
        assert card_alice["can_decide"]["approve"]["allowed"] is True
        assert card_bob["can_decide"]["approve"]["allowed"] is False

        # Bob clicks anyway (a hand-made frame): the server refuses.
        await bob.send_json({"type": "decide", "id": cid, "decision": "approve"})
        refused = await next_frame(bob, lambda f: f["type"] == "decision")
        assert refused["outcome"] == "forbidden"
        assert gateway.confirmations is not None
        still = await gateway.confirmations.get(cid)
        assert still is not None and still.status is Status.PENDING

        await alice.send_json({"type": "decide", "id": cid, "decision": "approve"})
        done = await next_frame(alice, lambda f: f["type"] == "decision")
        assert done["outcome"] == "decided"
        for ws in (alice, bob):
            update = await next_frame(ws, is_kind("confirmation_update", "approved"))
            assert update["confirmation"]["decided_by"] == "alice"
            assert update["confirmation"]["decided_via"] == "web"
        result = await next_frame(bob, lambda f: f.get("kind") == "text" and f["user"] is None)
        assert "1 行 / 1 row" in result["text"]
    assert not order_exists(gateway.settings.data_dir, 3)


async def test_reject_with_reason_from_the_card(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    async with tab(http, "ops", "alice") as alice:
        await alice.send_json({"type": "message", "text": DELETE_3})
        cid = (await next_frame(alice, is_kind("confirmation")))["confirmation"]["id"]
        await alice.send_json(
            {"type": "decide", "id": cid, "decision": "reject", "reason": "wrong order"}
        )
        update = await next_frame(alice, is_kind("confirmation_update", "rejected"))
        assert update["confirmation"]["reason"] == "wrong order"
    assert order_exists(gateway.settings.data_dir, 3)


async def test_a_new_tab_gets_the_history_and_only_what_it_missed(
    http: aiohttp.ClientSession,
) -> None:
    async with tab(http, "hist", "alice") as alice:
        await alice.send_json({"type": "message", "text": "/help"})
        reply = await next_frame(alice, lambda f: f.get("kind") == "text" and f["user"] is None)
    async with tab(http, "hist", "dave") as dave:
        first = await next_frame(dave, is_kind("text"))
        assert first["seq"] == 1 and first["text"] == "/help"
    async with http.ws_connect(f"/ws?session=hist&user=dave&after={reply['seq']}") as ws:
        hello = await next_frame(ws, lambda f: f["type"] == "hello")
        assert hello["last_seq"] == reply["seq"]
        await ws.send_json({"type": "ping"})
        # Nothing replayed: the next frame is the pong.
        assert (await next_frame(ws, lambda f: True))["type"] == "pong"


async def test_a_web_user_cannot_decide_another_rooms_confirmation(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    async with tab(http, "room-a", "alice") as alice, tab(http, "room-b", "alice") as other:
        await alice.send_json({"type": "message", "text": DELETE_3})
        cid = (await next_frame(alice, is_kind("confirmation")))["confirmation"]["id"]
        await other.send_json({"type": "decide", "id": cid, "decision": "approve"})
        answer = await next_frame(other, lambda f: f["type"] == "decision")
        assert answer["outcome"] == "not_found"
    assert gateway.confirmations is not None
    c = await gateway.confirmations.get(cid)
    assert c is not None and c.status is Status.PENDING


async def test_admin_decision_updates_the_open_tabs(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    async with tab(http, "ops", "alice") as alice:
        await alice.send_json({"type": "message", "text": DELETE_3})
        cid = (await next_frame(alice, is_kind("confirmation")))["confirmation"]["id"]
        async with http.post(
            f"/api/confirmations/{cid}/decision",
            json={"decision": "reject", "actor": "oncall", "reason": "not today"},
        ) as resp:
            assert resp.status == 200
        update = await next_frame(alice, is_kind("confirmation_update", "rejected"))
        assert update["confirmation"]["decided_by"] == "oncall"
        assert update["confirmation"]["decided_via"] == "admin"


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        ("this is not json", "frame is not JSON"),
        ("[1, 2, 3]", "frame must be a JSON object"),
        ('{"type": "shout"}', "unknown frame type"),
        ('{"type": "message", "text": 42}', "message.text must be a string"),
        ('{"type": "decide", "id": 7, "decision": "approve"}', "decide.id"),
        ('{"type": "decide", "id": "K7Q2", "decision": "maybe"}', "decide.decision"),
    ],
)
async def test_garbage_frames_close_the_socket_with_a_reason_and_nothing_else(
    http: aiohttp.ClientSession, frame: str, reason: str
) -> None:
    async with tab(http, "mixed", "carol") as good, tab(http, "mixed", "mallory") as bad:
        await bad.send_str(frame)
        closed = await bad.receive(timeout=10)
        assert closed.type is aiohttp.WSMsgType.CLOSE
        assert closed.data == WSCloseCode.UNSUPPORTED_DATA
        assert reason in closed.extra
        # The other tab in the room is unaffected.
        await good.send_json({"type": "message", "text": "/help"})
        reply = await next_frame(good, lambda f: f.get("kind") == "text" and f["user"] is None)
        assert "/sql" in reply["text"]


async def test_binary_frames_close_the_socket(http: aiohttp.ClientSession) -> None:
    async with tab(http, "bin", "mallory") as ws:
        await ws.send_bytes(b"\x00\x01")
        closed = await ws.receive(timeout=10)
        assert closed.type is aiohttp.WSMsgType.CLOSE
        assert "binary" in closed.extra


async def test_too_long_text_is_an_error_frame_not_a_hangup(http: aiohttp.ClientSession) -> None:
    async with tab(http, "long", "carol") as ws:
        await ws.send_json({"type": "message", "text": "x" * 201})
        error = await next_frame(ws, lambda f: f["type"] == "error")
        assert "too long" in error["error"]
        await ws.send_json({"type": "ping"})
        assert (await next_frame(ws, lambda f: f["type"] == "pong"))["type"] == "pong"


@pytest.mark.parametrize(
    "query",
    ["session=lobby", "user=alice", "session=a b&user=alice", "session=lobby&user=" + "u" * 65],
)
async def test_bad_names_are_refused_before_the_upgrade(
    http: aiohttp.ClientSession, query: str
) -> None:
    async with http.get(f"/ws?{query}", headers={"Upgrade": "websocket"}) as resp:
        assert resp.status == 400
        assert (
            "is invalid" in (await resp.json())["error"]
            or "must be" in (await resp.json())["error"]
        )


async def test_stop_closes_open_tabs_with_going_away(tmp_path: object) -> None:
    from pathlib import Path

    from tests.webchat.support import base_url, make_settings

    settings = make_settings(Path(str(tmp_path)))
    gw = await build(settings)
    await gw.start()
    try:
        async with (
            aiohttp.ClientSession(base_url=base_url(gw)) as http,
            tab(http, "bye", "alice") as ws,
        ):
            stopping = asyncio.create_task(gw.stop())
            closed = await ws.receive(timeout=10)
            assert closed.type is aiohttp.WSMsgType.CLOSE
            assert closed.data == WSCloseCode.GOING_AWAY
            await asyncio.wait_for(stopping, 15)
    finally:
        await gw.stop()


async def test_many_rooms_are_bounded(tmp_path: object) -> None:
    from pathlib import Path

    from tests.webchat.support import base_url, make_settings, running_gateway

    settings = make_settings(Path(str(tmp_path)), channels={"webchat": {"max_sessions": 3}})
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        for i in range(6):
            async with http.get(f"/api/chat/r{i}/messages") as resp:
                assert resp.status == 200
        channel = gw.channels.channels["webchat"]

        async def bounded() -> bool:
            return channel.status()["rooms"] <= 3

        await eventually(bounded)
        assert json.loads(json.dumps(channel.status()))["rooms"] == 3


async def test_a_timeout_turns_the_card_expired_in_every_tab(tmp_path: object) -> None:
    from pathlib import Path

    from tests.webchat.support import base_url, make_settings, running_gateway

    settings = make_settings(Path(str(tmp_path)))
    clock = ShiftedClock()  # the deadline passes once both tabs show the card
    async with (
        running_gateway(settings, clock=clock) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
        tab(http, "slow", "alice") as alice,
        tab(http, "slow", "bob") as bob,
    ):
        await alice.send_json({"type": "message", "text": DELETE_3})
        for ws in (alice, bob):
            card = await next_frame(ws, is_kind("confirmation"))
        assert gw.confirmations is not None
        await pass_deadline(gw.confirmations, clock, card["confirmation"]["id"])
        for ws in (alice, bob):
            update = await next_frame(ws, is_kind("confirmation_update", "expired"))
            assert update["confirmation"]["decided_via"] == "timeout"
    assert order_exists(settings.data_dir, 3)


async def test_a_configured_approver_may_decide_and_two_clicks_make_one_decision(
    tmp_path: object,
) -> None:
    from pathlib import Path

    from tests.webchat.support import base_url, make_settings, running_gateway

    settings = make_settings(Path(str(tmp_path)), channels={"webchat": {"approvers": ["lead"]}})
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
        tab(http, "team", "alice") as alice,
        tab(http, "team", "lead") as lead,
    ):
        await alice.send_json({"type": "message", "text": DELETE_3})
        card = await next_frame(lead, is_kind("confirmation"))
        assert card["can_decide"]["approve"]["allowed"] is True
        cid = card["confirmation"]["id"]
        # Both click at once: exactly one decision, the other is told it was already made.
        await asyncio.gather(
            alice.send_json({"type": "decide", "id": cid, "decision": "reject"}),
            lead.send_json({"type": "decide", "id": cid, "decision": "approve"}),
        )
        answers = [await next_frame(ws, lambda f: f["type"] == "decision") for ws in (alice, lead)]
        assert sorted(a["outcome"] for a in answers) == ["already_decided", "decided"]
        update = await next_frame(alice, is_kind("confirmation_update"))
        assert update["confirmation"]["status"] in ("approved", "rejected")
        # Only one update: the next thing in the room is not a second one.
        await alice.send_json({"type": "ping"})
        nxt = await next_frame(
            alice, lambda f: f["type"] == "pong" or f.get("kind") == "confirmation_update"
        )
        assert nxt["type"] == "pong"
