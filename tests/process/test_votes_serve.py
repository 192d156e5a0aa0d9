"""Issue 25 on a real ``gateway serve`` process (SQLite store): a call that needs two
approvers, decided in the web chat, and several calls decided by one reply.

First tests: tests/core/test_votes.py and tests/core/test_several.py (the service), and
tests/confirm/test_vote_contract.py (the store's compare-and-set on every backend).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from tests.process.test_hold_rules import history, prompts, say, text_with
from tests.webchat.support import eventually, order_exists, serve

TOKEN = "votes-admin-token-0123456789abcdef"
TWO_APPROVERS = json.dumps([{"name": "two-dbas", "tool": "sql_modify", "approvals": 2}])


async def _updates(http: aiohttp.ClientSession, room: str, cid: str) -> list[dict[str, Any]]:
    return [
        m
        for m in await history(http, room)
        if m["kind"] == "confirmation_update" and m["confirmation"]["id"] == cid
    ]


async def test_two_approvers_one_vote_shown_then_the_second_approves(tmp_path: Any) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with serve(
        tmp_path,
        GATEWAY_ADMIN__TOKEN=TOKEN,
        GATEWAY_POLICY__RULES=TWO_APPROVERS,
        GATEWAY_CHANNELS__WEBCHAT__APPROVERS='["carol", "dave"]',
    ) as daemon:
        async with aiohttp.ClientSession(base_url=daemon.url, headers=auth) as http:
            await say(http, "ops", "alice", "/sql DELETE FROM orders WHERE id = 3")
            [prompt] = await prompts(http, "ops", 1)
            cid = prompt["id"]
            assert (prompt["approvals"], prompt["four_eyes"]) == (2, True)
            # The requester's own 确认 never counts.
            await say(http, "ops", "alice", f"确认 {cid}")
            await text_with(http, "ops", "需要另一位审批人批准")
            # Carol's vote: shown in the room, on the card, and nothing runs yet.
            await say(http, "ops", "carol", f"确认 {cid} 谢谢")

            async def counted() -> dict[str, Any] | None:
                found = await _updates(http, "ops", cid)
                return found[0] if found else None

            first = await counted_or_fail(counted)
            assert first["confirmation"]["status"] == "pending"
            assert [v["actor"] for v in first["confirmation"]["votes"]] == ["carol"]
            assert "1/2 已批准：carol / approved 1 of 2: carol" in first["text"]
            assert order_exists(daemon.data_dir, 3)
            # The admin page's card shows the tally too.
            async with http.get("/admin/part/pending") as resp:
                assert "1/2 已批准：carol" in await resp.text()
            # Carol again: told, not counted twice.
            await say(http, "ops", "carol", f"确认 {cid}")
            await text_with(http, "ops", "您已批准过")
            # Dave's is the second: approved, and the delete runs once.
            await say(http, "ops", "dave", f"好的 {cid}")
            await eventually(lambda: _gone(daemon.data_dir, 3), timeout=20)
            async with http.get(f"/api/confirmations/{cid}") as resp:
                record = (await resp.json())["confirmation"]
            assert record["status"] == "approved"
            assert [v["actor"] for v in record["votes"]] == ["carol", "dave"]
            async with http.get(f"/api/confirmations/{cid}/events") as resp:
                trail = [(e["kind"], e["actor"]) for e in (await resp.json())["events"]]
            assert [t for t in trail if t[0] in ("voted", "decided")] == [
                ("voted", "carol"),
                ("voted", "dave"),
                ("decided", "dave"),
            ]
    assert daemon.error_lines() == []


async def test_several_calls_decided_by_one_reply(tmp_path: Any) -> None:
    with serve(tmp_path, GATEWAY_CHANNELS__WEBCHAT__APPROVERS='["carol"]') as daemon:
        async with aiohttp.ClientSession(base_url=daemon.url) as http:
            await say(http, "ops", "alice", "/sql DELETE FROM orders WHERE id = 3")
            await prompts(http, "ops", 1)
            await say(http, "ops", "bob", "/sql DELETE FROM orders WHERE id = 4")
            await prompts(http, "ops", 2)
            await say(http, "ops", "erin", "/sql DELETE FROM orders WHERE id = 5")
            first, second, third = await prompts(http, "ops", 3)
            # /pending lists each with its id and how to name several.
            await say(http, "ops", "carol", "/pending")
            await text_with(http, "ops", "待确认 Pending (3)", f"确认 {first['id']}")
            # Carol names two of the three (and an id that is not there).
            await say(http, "ops", "carol", f"确认 {first['id']} {second['id']} ZZ99，谢谢")
            answer = await text_with(http, "ops", "已处理 3 项 / 3 named")
            assert f"✅ {first['id']} 已批准 / approved" in answer
            assert f"✅ {second['id']} 已批准 / approved" in answer
            assert "❓ ZZ99" in answer
            await eventually(lambda: _gone(daemon.data_dir, 3), timeout=20)
            await eventually(lambda: _gone(daemon.data_dir, 4), timeout=20)
            # The call it did not name still waits; bob may not cancel erin's.
            assert order_exists(daemon.data_dir, 5)
            await say(http, "ops", "bob", f"取消 {third['id']} {second['id']} 不要删")
            refused = await text_with(http, "ops", "已处理 2 项 / 2 named")
            assert f"⛔ {third['id']} 无权操作 / not yours" in refused
            assert order_exists(daemon.data_dir, 5)
    assert daemon.error_lines() == []


async def counted_or_fail(probe: Any) -> dict[str, Any]:
    found: dict[str, Any] = await eventually(probe, timeout=20)
    return found


async def _gone(data_dir: Any, order_id: int) -> bool:
    return not order_exists(data_dir, order_id)
