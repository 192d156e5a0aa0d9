"""A gateway restarted after a crash serves before it has adopted its dead predecessor's
backlog (docs/performance.md, "Start-up with a backlog"), and the backlog is still finished
right: a call decided before its adoption runs once, by the adoption.

What kill -9 leaves is written with the real SQLite store: a heartbeat an hour old and the
records it owned. The gateway is real (build + start, HTTP, web chat, tools, executor); its
store is the real SQLite store whose first batch adoption waits for the test (``go``), so
the test knows the scan is under way, not finished, while it checks /readyz and a new
message, and decides one of the records the scan has read but not yet adopted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from gateway.app import build
from gateway.bus import OUTBOUND_ROOM
from gateway.confirm.model import Confirmation, ExecState, Instance, Status, ToolCall
from gateway.storage.sqlite.confirmations import SqliteConfirmationStore
from gateway.storage.sqlite.thread import SqliteThread
from tests.confirm.records import make
from tests.webchat.support import make_settings, order_exists

LEASE = 15.0


class HeldStore(SqliteConfirmationStore):
    """The SQLite store; the first ``adopt_many`` waits until ``go`` is set."""

    def __init__(self, db: SqliteThread, pending_sessions: Any = ()) -> None:
        super().__init__(db, pending_sessions)
        self.reached = asyncio.Event()
        self.go = asyncio.Event()

    async def adopt_many(
        self, records: Sequence[Confirmation], *, to_owner: str
    ) -> list[Confirmation]:
        self.reached.set()
        await self.go.wait()
        return await super().adopt_many(records, to_owner=to_owner)


def _left(dead: Instance, cid: str, order: int) -> Confirmation:
    """A pending call of the dead gateway, in web chat room ``cid.lower()``."""
    statement = f"DELETE FROM orders WHERE id = {order}"
    return make(
        cid,
        session=f"webchat:{cid.lower()}",
        created_at=dead.seen_at - 10,
        timeout=7200,
        owner=dead.id,
        channel="webchat",
        is_group=True,
        tool_call=ToolCall("sql_modify", {"sql": statement}, f"call_{cid}"),
    )


async def _messages(http: aiohttp.ClientSession, room: str, after: int) -> dict[str, Any]:
    """The room's entries after ``after``, waiting (server side) until there is one."""
    params = {"after": str(after), "wait": "10"}
    async with http.get(f"/api/chat/{room}/messages", params=params) as resp:
        assert resp.status == 200, await resp.text()
        body: dict[str, Any] = await resp.json()
        return body


async def _said_by_gateway(
    http: aiohttp.ClientSession, room: str, needle: str, *, lines_only: bool = False
) -> list[str]:
    """Wait until the gateway said something containing ``needle`` in ``room``; all it said.

    ``lines_only``: its lines of text, not the updates of a card (which say the result too).
    """
    after, said = 0, []
    while True:
        body = await _messages(http, room, after)
        said += [
            m["text"]
            for m in body["messages"]
            if m["user"] is None and (m["kind"] == "text" or not lines_only)
        ]
        if any(needle in text for text in said):
            return said
        assert body["messages"], f"nothing with {needle!r} in {room}: {said}"
        after = body["last_seq"]


async def test_a_backlog_is_adopted_while_the_gateway_already_serves(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        confirmation={"store": "sqlite", "lease_seconds": LEASE},
        channels={
            "webchat": {
                "enabled": True,
                "messages_per_minute": 0,
                "messages_per_minute_per_address": 0,
            }
        },
    )
    settings.data_dir.mkdir(parents=True)
    path = settings.data_dir / "confirmations.db"
    now = time.time()
    dead = Instance(
        id="dead-1-aaaaaa", pid=1, host="dead", started_at=now - 7200, seen_at=now - 3600
    )
    seed = await SqliteConfirmationStore.open(path)
    for cid, order in (("P1", 3), ("P2", 4), ("P3", 5)):
        await seed.create(_left(dead, cid, order))
    await seed.create(_left(dead, "A1", 6))
    await seed.finish("A1", Status.APPROVED, by="alice", via="text", reason=None, now=now - 3599)
    await seed.heartbeat(dead, lease=LEASE)
    await seed.close()

    store = await HeldStore.open(path)
    gateway = await build(settings, store=store)
    async with gateway, aiohttp.ClientSession(base_url=gateway.http.url) as http:  # type: ignore[union-attr]
        await store.reached.wait()  # the scan has read the backlog and waits to adopt it
        async with http.get("/readyz") as resp:
            assert resp.status == 200, await resp.text()
        async with http.post(
            "/api/chat/newcomer/messages", json={"user": "bob", "text": "/help"}
        ) as resp:
            assert resp.status == 202
        assert await _said_by_gateway(http, "newcomer", "/sql")
        # Not adopted yet: still the dead gateway's.
        p2 = await store.get("P2")
        assert (
            p2 is not None and p2.owner == dead.id and "P2" not in gateway.confirmations.deadlines
        )

        # Alice approves P1, which the scan has read as pending and not adopted yet: the
        # process that took her decision goes on with it at once, adopted or not.
        async with http.post(
            "/api/chat/p1/messages", json={"user": "alice", "text": "确认"}
        ) as resp:
            assert resp.status == 202
        await _said_by_gateway(http, "p1", "✅")
        await _said_by_gateway(http, "p1", "DELETE:", lines_only=True)

        store.go.set()
        await gateway.confirmations.recovered()
        me = gateway.confirmations.instance.id

        # P1 ran once, at its approval; A1 (approved before the crash) once, by the
        # adoption. Neither ran twice.
        for cid, order in (("P1", 3), ("A1", 6)):
            said = await _said_by_gateway(http, cid.lower(), "DELETE:", lines_only=True)
            assert sum("DELETE:" in text for text in said) == 1
            ran = await store.get(cid)
            assert ran is not None
            assert ran.execution.state is ExecState.SUCCEEDED and ran.execution.attempts == 1
            assert ran.execution.claimed_by == me
            assert not order_exists(settings.data_dir, order)
            kinds = [e.kind for e in await store.events(cid)]
            assert kinds.count("claimed") == 1
        assert (await store.get("A1")).owner == me  # type: ignore[union-attr]

        # P2 and P3 wait here now: deadline armed, prompt shown again in their rooms.
        for cid, order in (("P2", 4), ("P3", 5)):
            said = await _said_by_gateway(http, cid.lower(), "🔁")
            assert len(said) == 1
            record = await store.get(cid)
            assert record is not None and record.owner == me and record.status is Status.PENDING
            assert cid in gateway.confirmations.deadlines
            assert [e.kind for e in await store.events(cid)] == ["adopted", "prompt_reposted"]
            assert order_exists(settings.data_dir, order)
        assert dead.id not in {i.id for i in await store.list_instances()}


async def test_prompts_shown_again_wait_for_room_and_all_go_out(tmp_path: Path) -> None:
    # More than the outbound room: the scan starts before the channels, so the first
    # prompts fill the room and the rest must wait for sends, not for a start that waits.
    settings = make_settings(
        tmp_path,
        confirmation={"store": "sqlite", "lease_seconds": LEASE},
        channels={"webchat": {"enabled": True}},
    )
    settings.data_dir.mkdir(parents=True)
    now = time.time()
    dead = Instance(
        id="dead-1-bbbbbb", pid=1, host="dead", started_at=now - 7200, seen_at=now - 3600
    )
    seed = await SqliteConfirmationStore.open(settings.data_dir / "confirmations.db")
    ids = [f"Q{n:03d}" for n in range(3 * OUTBOUND_ROOM)]
    for n, cid in enumerate(ids):
        await seed.create(_left(dead, cid, 1000 + n))
    await seed.heartbeat(dead, lease=LEASE)
    await seed.close()

    gateway = await build(settings)
    busy: list[int] = []
    gateway.channels.on_sent(lambda *_: busy.append(gateway.bus.outbound_busy))
    async with gateway:
        await gateway.confirmations.recovered()
        assert all(cid in gateway.confirmations.deadlines for cid in ids)
        await gateway.channels.drain()
        rooms = gateway.channels.channels["webchat"].rooms  # type: ignore[attr-defined]
        for cid in ids:
            [entry] = rooms.get(cid.lower()).after(0)
            assert entry.kind == "confirmation" and entry.text.startswith("🔁")
        # One send each, never more than the room queued or sending at once.
        assert len(busy) == len(ids) and max(busy) == OUTBOUND_ROOM
