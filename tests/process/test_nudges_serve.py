"""Reminders and escalation on a real ``gateway serve`` subprocess (the web chat).

The daemon is configured through the environment as an operator would: a call asked in
the web chat is reminded of once, with its requester @-named, and escalated once (the
web chat has no direct chats: its room is told); the audit trail has one line of each and
the call is still decided as usual. The daemon's own timers run: the test waits for what
they post, with a timeout far longer than their seconds and far shorter than the call's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.webchat.support import ServeProcess, eventually, order_exists, serve

TOKEN = "nudge-serve-token-abcdef"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ServeProcess]:
    with serve(
        tmp_path,
        GATEWAY_ADMIN__TOKEN=TOKEN,
        GATEWAY_CONFIRMATION__TIMEOUT_SECONDS="120",
        GATEWAY_CONFIRMATION__REMIND_BEFORE_SECONDS="118",  # 2 s after it is asked
        GATEWAY_CONFIRMATION__ESCALATE_AFTER_SECONDS="3",
    ) as process:
        yield process


async def test_a_call_is_reminded_and_escalated_once_then_decided(daemon: ServeProcess) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(base_url=daemon.url, headers=headers) as http:
        async with http.post(
            "/api/chat/nudge/messages",
            json={"user": "alice", "text": "/sql DELETE FROM orders WHERE id = 3"},
        ) as resp:
            assert resp.status == 202

        async def room() -> list[dict[str, Any]]:
            async with http.get("/api/chat/nudge/messages?after=0") as resp:
                messages: list[dict[str, Any]] = (await resp.json())["messages"]
            return messages

        async def both_nudges() -> list[dict[str, Any]] | None:
            texts = [m["text"] for m in await room()]
            reminded = [t for t in texts if t.startswith("@alice\n⏰")]
            escalated = [t for t in texts if t.startswith("⏫")]
            return await room() if reminded and escalated else None

        messages = await eventually(both_nudges, timeout=60)
        [prompt] = [m for m in messages if m["kind"] == "confirmation"]
        cid = prompt["confirmation"]["id"]
        [reminder] = [m["text"] for m in messages if "⏰" in m["text"]]
        assert cid in reminder and "still waiting" in reminder and "仍在等待确认" in reminder

        async with http.post(
            f"/api/confirmations/{cid}/decision", json={"decision": "approve", "actor": "oncall"}
        ) as resp:
            assert resp.status == 200, await resp.text()
        await eventually(lambda: _gone(daemon.data_dir, 3), timeout=15)
        async with http.get(f"/api/confirmations/{cid}/events") as resp:
            kinds = [e["kind"] for e in (await resp.json())["events"]]
        assert kinds.count("reminded") == 1 and kinds.count("escalated") == 1
        async with http.get(f"/api/confirmations/{cid}") as resp:
            record = (await resp.json())["confirmation"]
        assert "escalated_at" in record["prompt_refs"]
    assert daemon.stop() == 0
    assert daemon.error_lines() == []


async def _gone(data_dir: Path, order_id: int) -> bool:
    return not order_exists(data_dir, order_id)
