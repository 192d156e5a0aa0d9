"""The web chat card's grant button ("30 分钟内同类操作免确认 / skip asking for 30 min")
through the real server: a ``decide`` frame with a session grant approves the call and
gives the grant (the one entrance for decisions, ``ConfirmationService.answer``); the next
identical call runs without a card and the chat says whose grant let it. Offered only to
whoever may approve, never on four-eyes (or critical) calls."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import WSCloseCode

from gateway import texts
from gateway.app import Gateway
from tests.webchat.support import (
    base_url,
    is_kind,
    make_settings,
    next_frame,
    order_exists,
    running_gateway,
)
from tests.webchat.test_websocket import DELETE_3, tab

GRANT = {"scope": "session", "minutes": texts.GRANT_MINUTES_BUTTON}


def said(start: str) -> Callable[[dict[str, Any]], bool]:
    def match(frame: dict[str, Any]) -> bool:
        return frame.get("kind") == "text" and str(frame.get("text", "")).startswith(start)

    return match


async def live_grants(http: aiohttp.ClientSession) -> list[dict[str, Any]]:
    async with http.get("/api/grants") as resp:  # loopback without a token: open
        assert resp.status == 200
        grants: list[dict[str, Any]] = (await resp.json())["grants"]
    return grants


async def test_the_grant_button_approves_grants_and_the_next_same_call_runs_unasked(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    async with tab(http, "gb", "alice") as alice, tab(http, "gb", "bob") as bob:
        await alice.send_json({"type": "message", "text": DELETE_3})
        card = await next_frame(alice, is_kind("confirmation", "pending"))
        bob_card = await next_frame(bob, is_kind("confirmation", "pending"))
        cid = card["confirmation"]["id"]
        assert card["can_decide"]["grant"] == {"allowed": True, **GRANT}
        assert bob_card["can_decide"]["grant"]["allowed"] is False  # bob may not approve

        await alice.send_json({"type": "decide", "id": cid, "decision": "approve", "grant": GRANT})
        answer = await next_frame(alice, lambda f: f["type"] == "decision")
        assert answer["outcome"] == "decided"
        update = await next_frame(bob, is_kind("confirmation_update", "approved"))
        assert update["confirmation"]["decided_by"] == "alice"
        given = await next_frame(bob, said("🔓 alice"))
        assert (
            "alice's sql_modify (DELETE orders) calls here run without asking until"
            in given["text"]
        )

        [grant] = await live_grants(http)
        assert (grant["scope"], grant["tool"], grant["requester"]) == (
            "session",
            "sql_modify",
            "alice",
        )
        assert (grant["granted_by"], grant["granted_via"], grant["confirmation_id"]) == (
            "alice",
            "web",
            cid,
        )
        assert grant["expires_at"] - grant["created_at"] == pytest.approx(30 * 60)

        # The same call again: it runs at once, no card, and the room reads whose grant.
        await alice.send_json({"type": "message", "text": DELETE_3})
        used = await next_frame(bob, said("✅ 已按 alice 的授权"))
        assert "without asking: alice's grant until" in used["text"]
    assert await gateway.confirmations.list_pending("webchat:gb") == []
    async with http.get("/api/chat/gb/messages") as resp:
        history = (await resp.json())["messages"]
    assert [m["confirmation"]["id"] for m in history if m["kind"] == "confirmation"] == [cid]
    assert not order_exists(gateway.settings.data_dir, 3)


async def test_no_grant_on_four_eyes_calls_even_from_a_hand_made_frame(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        policy={"rules": [{"name": "deletes", "tool": "sql_modify", "four_eyes": True}]},
        channels={"webchat": {"approvers": ["carol"]}},
    )
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
        tab(http, "fe", "alice") as alice,
        tab(http, "fe", "carol") as carol,
    ):
        await alice.send_json({"type": "message", "text": DELETE_3})
        card = await next_frame(carol, is_kind("confirmation", "pending"))
        assert card["confirmation"]["four_eyes"] is True
        assert card["can_decide"]["approve"]["allowed"] is True  # carol is the approver
        assert card["can_decide"]["grant"]["allowed"] is False  # but no grant button
        cid = card["confirmation"]["id"]
        await carol.send_json({"type": "decide", "id": cid, "decision": "approve", "grant": GRANT})
        await next_frame(carol, is_kind("confirmation_update", "approved"))
        refused = await next_frame(carol, said("已批准这一次，但未授予免确认"))
        assert texts.GRANT_NOT_FOUR_EYES in refused["text"]
        assert await live_grants(http) == []


@pytest.mark.parametrize(
    ("grant", "decision", "reason"),
    [
        (GRANT, "reject", "decide.grant goes only with approve"),
        ({"scope": "call", "minutes": 30}, "approve", "decide.grant must be"),
        ("30 min", "approve", "decide.grant must be"),
        ({"scope": "session", "minutes": "30"}, "approve", "minutes must be a whole number"),
        ({"scope": "session", "minutes": True}, "approve", "minutes must be a whole number"),
    ],
)
async def test_a_bad_grant_closes_the_socket_and_decides_nothing(
    gateway: Gateway, http: aiohttp.ClientSession, grant: object, decision: str, reason: str
) -> None:
    async with tab(http, "bad-grant", "alice") as alice:
        await alice.send_json({"type": "message", "text": DELETE_3})
        cid = (await next_frame(alice, is_kind("confirmation")))["confirmation"]["id"]
        await alice.send_json({"type": "decide", "id": cid, "decision": decision, "grant": grant})
        closed = await alice.receive(timeout=10)
        assert closed.type is aiohttp.WSMsgType.CLOSE
        assert closed.data == WSCloseCode.UNSUPPORTED_DATA
        assert reason in closed.extra
    assert [c.id for c in await gateway.confirmations.list_pending("webchat:bad-grant")] == [cid]
    assert await live_grants(http) == []


async def test_no_grant_button_on_a_critical_call(http: aiohttp.ClientSession) -> None:
    async with tab(http, "crit", "alice") as alice:
        await alice.send_json({"type": "message", "text": "/sql DELETE FROM orders"})
        card = await next_frame(alice, is_kind("confirmation", "pending"))
        assert card["confirmation"]["risk"] == "critical"
        assert card["can_decide"]["grant"]["allowed"] is False
