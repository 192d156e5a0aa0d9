"""Calls held at once are capped per session and over all (issue 22, item 10): one client
rotating typed names held 1,500 calls in 46 s, each with a record, a timer and a turn.

Through a real gateway on each store: past a cap the call is not held, the chat is told
(Chinese first, English beside it) and the store gets no record for it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway import texts
from gateway.app import Gateway
from gateway.confirm.model import Status
from tests.services import REDIS_URL, redis_prefix
from tests.webchat.support import base_url, eventually, make_settings, running_gateway
from tests.webchat.test_rest import poll, say, wait_for_kind


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.services)])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, Any]]:
    """The [confirmation] settings of each store (Redis: a key prefix of the test's own)."""
    if request.param != "redis":
        yield {"store": request.param}
        return
    async with redis_prefix() as prefix:
        yield {"store": "redis", "redis_url": REDIS_URL, "redis_prefix": prefix}


async def _told(http: aiohttp.ClientSession, room: str, words: str) -> None:
    async def probe() -> bool:
        said = [m["text"] for m in (await poll(http, room))["messages"] if m["user"] is None]
        return words in said

    await eventually(probe)


async def _records(gw: Gateway) -> list[str]:
    return sorted(c.id for c in await gw.store.list(limit=1000))


async def test_rotating_names_in_one_room_meet_the_per_session_cap(
    tmp_path: Path, store: dict[str, Any]
) -> None:
    settings = make_settings(tmp_path, confirmation={**store, "max_pending_per_session": 3})
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        # A new typed name each time, from one address: each may ask for one call.
        for i in range(3):
            await say(http, "lobby", f"name{i}", f"/sql DELETE FROM orders WHERE id = {i + 1}")
        await eventually(lambda: _pending(gw, "webchat:lobby", 3))
        held = await _records(gw)
        await say(http, "lobby", "name3", "/sql DELETE FROM orders WHERE id = 4")
        await _told(http, "lobby", texts.PENDING_LIMIT_SESSION.format(limit=3, tool="sql_modify"))
        assert await _records(gw) == held, "the refused call left no record"
        assert await gw.store.count(Status.PENDING) == 3
        # Another room is not this one's cap.
        await say(http, "other", "name4", "/sql DELETE FROM orders WHERE id = 5")
        await wait_for_kind(http, "other", "confirmation", "pending")


async def test_the_overall_cap_counts_every_session(tmp_path: Path, store: dict[str, Any]) -> None:
    settings = make_settings(
        tmp_path, confirmation={**store, "max_pending_per_session": 10, "max_pending": 4}
    )
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        for i in range(4):
            await say(http, f"room{i}", "alice", f"/sql DELETE FROM orders WHERE id = {i + 1}")
        await eventually(lambda: _count(gw, 4))
        held = await _records(gw)
        await say(http, "room9", "bob", "/sql DELETE FROM orders WHERE id = 6")
        await _told(http, "room9", texts.PENDING_LIMIT_TOTAL.format(limit=4, tool="sql_modify"))
        assert await _records(gw) == held
        # One decided: there is room again.
        card = await wait_for_kind(http, "room0", "confirmation", "pending")
        await say(http, "room0", "alice", f"取消 {card['confirmation']['id']}")
        await eventually(lambda: _count(gw, 3))
        await say(http, "room9", "carol", "/sql DELETE FROM orders WHERE id = 7")
        await wait_for_kind(http, "room9", "confirmation", "pending")


async def _pending(gw: Gateway, session: str, n: int) -> bool:
    return len(await gw.store.list_pending(session)) == n


async def _count(gw: Gateway, n: int) -> bool:
    return await gw.store.count(Status.PENDING) == n
