"""Invariant 9 on the web chat REST API: 202 (with the message id) only once stored."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from gateway.app import build
from tests.support import FailingInbox
from tests.webchat.support import base_url, eventually, make_settings


async def test_a_message_not_stored_is_not_accepted(tmp_path: Path) -> None:
    inbox = FailingInbox(failures=1)
    async with (
        await build(make_settings(tmp_path), inbox=inbox) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        body = {"user": "alice", "text": "/ack-after-store"}
        async with http.post("/api/chat/room1/messages", json=body) as resp:
            assert resp.status >= 500
        assert inbox.stored == []
        async with http.post("/api/chat/room1/messages", json=body) as resp:
            assert resp.status == 202
            message_id = (await resp.json())["message_id"]
        assert inbox.stored == [("webchat", message_id)]

        async def answered() -> list[str] | None:
            async with http.get("/api/chat/room1/messages") as resp:
                texts = [m["text"] for m in (await resp.json())["messages"]]
            bot = [t for t in texts if "/ack-after-store" in t and t != body["text"]]
            return bot or None

        assert len(await eventually(answered)) == 1
