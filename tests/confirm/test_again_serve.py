"""Ask again across a restart of ``gateway serve`` (a subprocess, SQLite store, the web chat
REST API): a call cancelled by the shutdown offers 重新发起 / Ask again; after the restart
its requester's ``retry K7Q2`` asks the same call again, and approving it runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.webchat.support import eventually, order_exists, serve

DELETE_3 = "/sql DELETE FROM orders WHERE id = 3"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


async def _history(http: aiohttp.ClientSession, room: str) -> list[dict[str, Any]]:
    async with http.get(f"/api/chat/{room}/messages", params={"after": "0"}) as resp:
        assert resp.status == 200, await resp.text()
        messages: list[dict[str, Any]] = (await resp.json())["messages"]
        return messages


async def _say(http: aiohttp.ClientSession, room: str, user: str, text: str) -> None:
    async with http.post(f"/api/chat/{room}/messages", json={"user": user, "text": text}) as resp:
        assert resp.status == 202, await resp.text()


async def _card(http: aiohttp.ClientSession, room: str, status: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        for m in reversed(await _history(http, room)):
            c = m.get("confirmation")
            if c is not None and c["status"] == status:
                return dict(c)
        return None

    return await eventually(probe, timeout=15)


async def test_a_call_cancelled_by_a_shutdown_is_asked_again_after_the_restart(
    tmp_path: Path,
) -> None:
    with serve(tmp_path) as first:
        async with aiohttp.ClientSession(base_url=first.url) as http:
            await _say(http, "ops", "alice", DELETE_3)
            asked = await _card(http, "ops", "pending")
    # The stop (SIGTERM) cancelled it, told the room, and kept it on SQLite.
    with serve(tmp_path) as second:
        async with aiohttp.ClientSession(base_url=second.url) as http:
            cancelled = await _card(http, "ops", "cancelled")
            assert cancelled["id"] == asked["id"]
            assert "网关关闭 / gateway shutting down" in (cancelled["reason"] or "")
            await _say(http, "ops", "bob", f"retry {asked['id']}")
            # Not bob's to ask: said in the room, nothing asked.
            await eventually(
                lambda: _said(http, "only alice, who asked, can ask again"), timeout=15
            )
            await _say(http, "ops", "alice", f"retry {asked['id']}")
            new = await _card(http, "ops", "pending")
            assert new["id"] != asked["id"]
            assert new["details"]["asked_again_from"] == asked["id"]
            assert new["tool_call"]["args"] == asked["tool_call"]["args"]
            assert order_exists(second.data_dir, 3)
            await _say(http, "ops", "alice", "确认")
            await eventually(lambda: _said(http, "DELETE: 1 行 / 1 row"), timeout=15)
            assert not order_exists(second.data_dir, 3)
        assert second.error_lines() == []


async def _said(http: aiohttp.ClientSession, fragment: str) -> str | None:
    for m in await _history(http, "ops"):
        if m["kind"] == "text" and fragment in m["text"]:
            return str(m["text"])
    return None
