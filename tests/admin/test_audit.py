"""Audit you can read: a record's execution and events over the admin API and the CLI,
and listings that page with a cursor."""

from __future__ import annotations

import json
import time
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.confirm.model import AuditEvent, Confirmation, ToolCall
from gateway.http import openapi_models as openapi
from tests.admin.conftest import TOKEN
from tests.admin.test_api import DELETE_3, ask
from tests.admin.test_cli import run_cli
from tests.webchat.support import base_url

T0 = 1_800_000_000.0


async def add_trail(gateway: Gateway, cid: str) -> None:
    # Written with store.add_event: the events the service writes land with the runtime
    # work of issue 12 (helper `executor`); the endpoint reads whatever the store holds.
    now = time.time() + 60  # after anything the service wrote for this record
    for at, kind, actor, detail in (
        (now + 1, "prompt_sent", None, {}),
        (now + 2, "reply_read", "alice", {"intent": "unclear", "how": "unclear"}),
        (now + 3, "decided", "alice", {"via": "reply", "status": "approved"}),
        (now + 4, "finished", "inst-1", {"state": "succeeded", "result": "1 rows"}),
    ):
        await gateway.store.add_event(
            AuditEvent(confirmation_id=cid, at=at, kind=kind, actor=actor, detail=detail)
        )


async def test_a_record_shows_its_execution_and_its_events(
    gateway: Gateway, admin: aiohttp.ClientSession
) -> None:
    cid = await ask(admin, "audit", "alice", DELETE_3)
    await add_trail(gateway, cid)

    async with admin.get(f"/api/confirmations/{cid}") as resp:
        one = openapi.OneConfirmation.model_validate(await resp.json())
    assert one.confirmation.execution.state == "waiting"
    assert one.confirmation.execution.claimed_by is None

    async with admin.get(f"/api/confirmations/{cid.lower()}/events") as resp:
        assert resp.status == 200
        trail = openapi.ConfirmationEvents.model_validate(await resp.json())
    assert trail.confirmation_id == cid
    kinds = [e.kind for e in trail.events]
    assert kinds[-4:] == ["prompt_sent", "reply_read", "decided", "finished"]
    assert [e.at for e in trail.events] == sorted(e.at for e in trail.events)
    reply = trail.events[-3]
    assert (reply.actor, reply.detail) == ("alice", {"intent": "unclear", "how": "unclear"})

    async with admin.get("/api/confirmations/ZZ99/events") as resp:
        assert resp.status == 404
        assert openapi.Error.model_validate(await resp.json()).field == "id"


def record(n: int, tool: str = "sql_modify") -> Confirmation:
    return Confirmation(
        id=f"PG{n:02d}",
        session_key="webchat:pages",
        channel="webchat",
        chat_id="pages",
        requester="bob" if n % 3 == 0 else "alice",
        is_group=False,
        tool_call=ToolCall(tool, {"statement": "DELETE FROM t"}, f"call_{n}"),
        summary=f"call {n}",
        created_at=T0 + n,
        expires_at=4_000_000_000.0,
    )


async def walk(admin: aiohttp.ClientSession, **params: Any) -> tuple[list[str], int]:
    """Every id the listing gives, following next_cursor; and how many pages it took."""
    ids: list[str] = []
    pages = 0
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        async with admin.get("/api/confirmations", params=query) as resp:
            assert resp.status == 200
            body = openapi.ConfirmationList.model_validate(await resp.json())
        pages += 1
        assert len(body.confirmations) <= int(params["limit"])
        ids += [c.id for c in body.confirmations]
        if body.next_cursor is None:
            return ids, pages
        cursor = body.next_cursor


async def test_listings_page_with_a_cursor(gateway: Gateway, admin: aiohttp.ClientSession) -> None:
    for n in range(12):
        await gateway.store.create(record(n))
    newest_first = [f"PG{n:02d}" for n in reversed(range(12))]

    ids, pages = await walk(admin, session="webchat:pages", limit="5")
    assert ids == newest_first
    assert pages == 3

    # A page read, then a record created: the next page is unchanged (cursor is stable).
    async with admin.get(
        "/api/confirmations", params={"session": "webchat:pages", "limit": "5"}
    ) as r:
        cursor = (await r.json())["next_cursor"]
    await gateway.store.create(record(20))
    async with admin.get(
        "/api/confirmations", params={"session": "webchat:pages", "limit": "5", "cursor": cursor}
    ) as r:
        assert [c["id"] for c in (await r.json())["confirmations"]] == newest_first[5:10]

    # Filtered here (person), still every match once and in order.
    ids, _ = await walk(admin, session="webchat:pages", person="bob", limit="2")
    assert ids == ["PG09", "PG06", "PG03", "PG00"]

    async with admin.get("/api/confirmations", params={"cursor": "not-a-cursor"}) as resp:
        assert resp.status == 400
        assert (await resp.json())["field"] == "cursor"


async def test_cli_show_prints_execution_and_events_and_list_pages(
    gateway: Gateway,
    admin: aiohttp.ClientSession,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GATEWAY_ADMIN__TOKEN", TOKEN)
    url = base_url(gateway)
    cid = await ask(admin, "clishow", "alice", DELETE_3)
    await add_trail(gateway, cid)
    capsys.readouterr()

    assert await run_cli("confirmations", "show", cid, "--url", url) == 0
    out = capsys.readouterr().out
    assert "statement:   DELETE FROM orders WHERE id = 3" in out
    assert "execution:   waiting" in out
    assert "events:" in out
    assert "reply_read" in out and "intent=unclear" in out and "how=unclear" in out
    assert "finished" in out and "state=succeeded" in out

    assert await run_cli("confirmations", "show", cid, "--url", url, "--json") == 0
    out = capsys.readouterr().out
    start = out.index('{\n  "confirmation"')
    shown = json.JSONDecoder().raw_decode(out, start)[0]
    assert shown["confirmation"]["id"] == cid
    assert [e["kind"] for e in shown["events"]][-1] == "finished"

    for n in range(3):
        await gateway.store.create(record(n))
    args = ("confirmations", "list", "--session", "webchat:pages", "--url", url)
    assert await run_cli(*args, "--limit", "2") == 0
    out = capsys.readouterr().out
    assert "PG02" in out and "PG01" in out and "PG00" not in out
    cursor = out.split("next page: --cursor ", 1)[1].split()[0]
    assert await run_cli(*args, "--limit", "2", "--cursor", cursor) == 0
    out = capsys.readouterr().out
    assert "PG00" in out and "PG01" not in out
    assert "next page" not in out
