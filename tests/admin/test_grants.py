"""Scoped grants through the real server: a reply 确认 30分钟 in the web chat, the admin
API's decision with a grant, listing, the audit trail, revoking (API and CLI), and what a
grant does not cover."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import aiohttp
import pytest

from gateway import texts
from gateway.app import Gateway
from gateway.cli.main import main
from tests.admin.conftest import TOKEN
from tests.admin.test_api import ask
from tests.webchat.support import (
    base_url,
    eventually,
    is_kind,
    make_settings,
    next_frame,
    order_exists,
    running_gateway,
)


def said(text: str) -> object:
    def match(frame: dict[str, object]) -> bool:
        return frame.get("kind") == "text" and str(frame.get("text", "")).startswith(text)

    return match


async def test_a_reply_with_minutes_lets_the_same_persons_next_call_run(
    gateway: Gateway, admin: aiohttp.ClientSession
) -> None:
    url = base_url(gateway)
    async with aiohttp.ClientSession(base_url=url) as http:
        alice = await http.ws_connect("/ws?session=grants&user=alice")
        bob = await http.ws_connect("/ws?session=grants&user=bob")
        await alice.send_json({"type": "message", "text": "/sql DELETE FROM orders WHERE id = 3"})
        await next_frame(alice, is_kind("confirmation", "pending"))
        await alice.send_json({"type": "message", "text": "确认 30分钟"})
        await next_frame(alice, is_kind("confirmation_update", "approved"))
        given = await next_frame(alice, said("🔓 alice"))
        assert "sql_modify" in given["text"]

        # Alice's next call of the same tool runs without a card, and the chat says whose
        # grant let it.
        await alice.send_json({"type": "message", "text": "/sql DELETE FROM orders WHERE id = 4"})
        used = await next_frame(alice, said("✅ 已按 alice 的授权"))
        assert "without asking: alice's grant until" in used["text"]

        async def gone() -> bool:
            return not order_exists(gateway.settings.data_dir, 4)

        await eventually(gone)
        assert await gateway.confirmations.list_pending("webchat:grants") == []

        # Bob's call is not alice's: he is asked.
        await bob.send_json({"type": "message", "text": "/sql DELETE FROM orders WHERE id = 5"})
        pending = is_kind("confirmation", "pending")
        card = await next_frame(
            bob, lambda f: pending(f) and f["confirmation"]["requester"] == "bob"
        )
        assert card["confirmation"]["details"]["statement"].endswith("id = 5")
        await alice.close()
        await bob.close()

    async with admin.get("/api/grants") as resp:
        grants = (await resp.json())["grants"]
    assert [(g["scope"], g["granted_by"], g["granted_via"]) for g in grants] == [
        ("session", "alice", "text")
    ]
    async with admin.get(f"/api/grants/{grants[0]['id']}") as resp:
        trail = (await resp.json())["events"]
    assert [e["kind"] for e in trail] == ["given", "used"]


async def test_an_admin_call_grant_covers_exactly_that_call_until_revoked(
    gateway: Gateway,
    admin: aiohttp.ClientSession,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    same = "/sql DELETE FROM orders WHERE id = 6"
    cid = await ask(admin, "exact", "alice", same)
    body = {"decision": "approve", "actor": "oncall", "grant": {"scope": "call", "minutes": 60}}
    async with admin.post(f"/api/confirmations/{cid}/decision", json=body) as resp:
        assert resp.status == 200
        grant = (await resp.json())["grant"]
    assert grant["scope"] == "call" and grant["granted_by"] == "oncall"

    # The exact same call, by someone else in another room: runs without asking.
    async with aiohttp.ClientSession(base_url=base_url(gateway)) as http:
        ws = await http.ws_connect("/ws?session=elsewhere&user=carol")
        await ws.send_json({"type": "message", "text": same})
        await next_frame(ws, said("✅ 已按 oncall 的授权"))
        # Other arguments are asked for.
        await ws.send_json({"type": "message", "text": "/sql DELETE FROM orders WHERE id = 7"})
        await next_frame(ws, is_kind("confirmation", "pending"))

        monkeypatch.setenv("GATEWAY_ADMIN__TOKEN", TOKEN)
        url = base_url(gateway)
        assert await asyncio.to_thread(main, ["grants", "list", "--url", url]) == 0
        assert grant["id"] in capsys.readouterr().out
        args = ["grants", "revoke", grant["id"], "--url", url, "--actor", "oncall"]
        assert await asyncio.to_thread(main, args) == 0
        assert await asyncio.to_thread(main, args) == 1  # already ended
        capsys.readouterr()

        await ws.send_json({"type": "message", "text": same})
        card = await next_frame(ws, is_kind("confirmation", "pending"))
        assert card["confirmation"]["tool_call"]["args"] == {"sql": same.removeprefix("/sql ")}
        await ws.close()

    async with admin.get(f"/api/grants/{grant['id']}") as resp:
        shown = await resp.json()
    assert shown["grant"]["revoked_by"] == "oncall"
    assert [e["kind"] for e in shown["events"]] == ["given", "used", "revoked"]
    async with admin.get("/api/grants") as resp:
        assert (await resp.json())["grants"] == []


async def test_a_grant_on_a_reject_or_a_bad_length_is_refused(
    gateway: Gateway, admin: aiohttp.ClientSession
) -> None:
    cid = await ask(admin, "nogrant", "alice", "/sql DELETE FROM orders WHERE id = 8")
    body = {
        "decision": "approve",
        "actor": "oncall",
        "grant": {"scope": "session", "minutes": 100000},
    }
    async with admin.post(f"/api/confirmations/{cid}/decision", json=body) as resp:
        assert resp.status == 400
        assert (await resp.json())["field"] == "grant"
    body = {"decision": "reject", "actor": "oncall", "grant": {"scope": "session", "minutes": 30}}
    async with admin.post(f"/api/confirmations/{cid}/decision", json=body) as resp:
        answer = await resp.json()
    assert answer["confirmation"]["status"] == "rejected"
    assert answer["grant"] is None
    async with admin.get("/api/grants") as resp:
        assert (await resp.json())["grants"] == []
    assert texts.GRANT_BUTTON


async def test_a_grant_covers_the_same_kind_on_the_same_table_never_every_row(
    tmp_path: Path,
) -> None:
    """Issue 22: a grant given on ``DELETE … WHERE id = 3`` ran ``DELETE FROM orders WHERE
    id = id`` without asking and emptied the table, and under four_eyes_for_critical the
    requester could approve such a statement alone. Now the grant covers DELETEs on
    ``orders`` only, and a WHERE true of every row is critical: asked again, four-eyes."""
    settings = make_settings(
        tmp_path,
        policy={"four_eyes_for_critical": True},
        channels={"webchat": {"approvers": ["carol"]}},
    )
    data = settings.data_dir
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        alice = await http.ws_connect("/ws?session=scope&user=alice")
        await alice.send_json({"type": "message", "text": "/sql DELETE FROM orders WHERE id = 3"})
        await next_frame(alice, is_kind("confirmation", "pending"))
        await alice.send_json({"type": "message", "text": "确认 30分钟"})
        given = await next_frame(alice, said("🔓 alice"))
        assert "sql_modify (DELETE orders)" in given["text"]

        # Another DELETE on orders: covered, runs without asking.
        await alice.send_json({"type": "message", "text": "/sql DELETE FROM orders WHERE id = 4"})
        await next_frame(alice, said("✅ 已按 alice 的授权"))
        await eventually(lambda: _gone(data, 4))

        # Another kind on the same table, or the same kind on another table: asked.
        with sqlite3.connect(data / "demo.db") as db:
            db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY)")
            db.execute("INSERT INTO notes (id) VALUES (1), (2)")
        for sql in ("UPDATE orders SET status = 9 WHERE id = 5", "DELETE FROM notes WHERE id = 1"):
            await alice.send_json({"type": "message", "text": f"/sql {sql}"})
            card = await next_frame(alice, is_kind("confirmation", "pending"))
            assert card["confirmation"]["tool_call"]["args"] == {"sql": sql}
            assert card["confirmation"]["risk"] == "medium"
            await alice.send_json({"type": "message", "text": "取消"})
            await next_frame(alice, is_kind("confirmation_update", "rejected"))

        # Every row, spelled so that no syntax check sees it: asked, critical, four-eyes.
        await alice.send_json({"type": "message", "text": "/sql DELETE FROM orders WHERE id = id"})
        card = await next_frame(alice, is_kind("confirmation", "pending"))
        asked = card["confirmation"]
        assert (asked["risk"], asked["four_eyes"]) == ("critical", True)
        assert asked["details"]["rows_affected"] == 6
        assert card["can_decide"]["approve"]["allowed"] is False
        await alice.send_json({"type": "decide", "id": asked["id"], "decision": "approve"})
        refused = await next_frame(alice, lambda f: f["type"] == "decision")
        assert refused["outcome"] == "forbidden"
        pending = await gw.confirmations.list_pending("webchat:scope")
        assert [p.id for p in pending] == [asked["id"]]
        assert all(order_exists(data, i) for i in (1, 2, 5, 6, 7, 8))
        await alice.close()


async def _gone(data: Path, order_id: int) -> bool:
    return not order_exists(data, order_id)
