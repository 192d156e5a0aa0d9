"""Approving with edited arguments through the real server: the edited call runs once and
the audit trail shows both; arguments that do not fit are a 4xx and the call still waits;
an edit that needs more than the decider may give is refused; an edit racing a cancel has
one winner on every store backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.http import openapi_models as openapi
from tests.admin.conftest import TOKEN
from tests.admin.test_api import DELETE_3, ask
from tests.services import REDIS_URL, redis_prefix
from tests.webchat.support import base_url, eventually, make_settings, order_exists, running_gateway

HEADERS = {"Authorization": f"Bearer {TOKEN}"}
DELETE_4 = "DELETE FROM orders WHERE id = 4"


async def decide(
    admin: aiohttp.ClientSession, cid: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    async with admin.post(f"/api/confirmations/{cid}/decision", json=body) as resp:
        return resp.status, await resp.json()


async def record(admin: aiohttp.ClientSession, cid: str) -> dict[str, Any]:
    async with admin.get(f"/api/confirmations/{cid}") as resp:
        found: dict[str, Any] = (await resp.json())["confirmation"]
        return found


async def trail(admin: aiohttp.ClientSession, cid: str) -> list[dict[str, Any]]:
    async with admin.get(f"/api/confirmations/{cid}/events") as resp:
        events: list[dict[str, Any]] = (await resp.json())["events"]
        return events


async def chat_texts(admin: aiohttp.ClientSession, room: str) -> list[str]:
    async with admin.get(f"/api/chat/{room}/messages") as resp:
        return [m["text"] for m in (await resp.json())["messages"]]


async def settled(admin: aiohttp.ClientSession, cid: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        c = await record(admin, cid)
        return c if c["execution"]["state"] in ("succeeded", "failed", "skipped") else None

    return await eventually(probe)


async def test_an_edited_approval_runs_the_edited_call_once_and_the_audit_shows_both(
    gateway: Gateway, admin: aiohttp.ClientSession
) -> None:
    data_dir = gateway.settings.data_dir
    cid = await ask(admin, "ed", "alice", DELETE_3)
    body = {"decision": "approve", "actor": "oncall", "arguments": {"sql": DELETE_4}}
    status, answer = await decide(admin, cid, body)
    assert status == 200, answer
    openapi.DecisionResult.model_validate(answer)
    c = answer["confirmation"]
    assert (c["status"], c["decided_by"]) == ("approved", "oncall")
    assert c["tool_call"]["args"] == {"sql": DELETE_4}
    assert c["details"]["statement"] == DELETE_4
    assert c["details"]["edited"]["args_before"] == {"sql": "DELETE FROM orders WHERE id = 3"}
    assert "✏️" in answer["message"]

    done = await settled(admin, cid)
    assert done["execution"]["state"] == "succeeded"
    assert not order_exists(data_dir, 4)
    assert order_exists(data_dir, 3)  # the asked call never ran

    events = await trail(admin, cid)
    kinds = [e["kind"] for e in events]
    assert kinds.index("edited") < kinds.index("decided") < kinds.index("started")
    assert kinds.count("started") == 1 and kinds.count("finished") == 1
    edited = events[kinds.index("edited")]
    assert edited["actor"] == "oncall"
    assert edited["detail"]["before"] == {"sql": "DELETE FROM orders WHERE id = 3"}
    assert edited["detail"]["after"] == {"sql": DELETE_4}

    # The chat is told who changed what, and the result is of the edited call.
    texts = await eventually(
        lambda: _with(chat_texts(admin, "ed"), lambda ts: any("已执行" in t for t in ts))
    )
    told = next(t for t in texts if t.startswith("✏️"))
    assert "oncall" in told and "with edited arguments" in told
    assert "id = 3" in told and "id = 4" in told
    # Deciding again is the usual 409, with or without arguments.
    status, again = await decide(
        admin, cid, {"decision": "approve", "actor": "oncall", "arguments": {"sql": "x"}}
    )
    assert status == 409 and again["outcome"] == "already_decided"


async def _with(texts: Any, ok: Any) -> list[str] | None:
    found: list[str] = await texts
    return found if ok(found) else None


@pytest.mark.parametrize(
    ("arguments", "status", "field", "needle"),
    [
        ({"sql": 5}, 422, "arguments.sql", "valid string"),
        ({}, 422, "arguments.sql", "Field required"),
        ({"sql": DELETE_4, "limit": 1}, 422, "arguments.limit", "Extra inputs"),
        ({"sql": "DELETE FROM"}, 422, "arguments", "refuses these arguments"),
        ({"sql": "SELECT * FROM orders"}, 422, "arguments", "sql_query"),
        ("DELETE", 400, "arguments", "arguments"),
    ],
)
async def test_arguments_that_do_not_fit_are_refused_and_the_call_still_waits(
    gateway: Gateway,
    admin: aiohttp.ClientSession,
    arguments: Any,
    status: int,
    field: str,
    needle: str,
) -> None:
    cid = await ask(admin, "bad", "alice", DELETE_3)
    got, answer = await decide(
        admin, cid, {"decision": "approve", "actor": "oncall", "arguments": arguments}
    )
    assert got == status, answer
    openapi.Error.model_validate(answer)
    assert answer["field"] == field
    assert needle in answer["error"]
    c = await record(admin, cid)
    assert c["status"] == "pending"
    assert c["tool_call"]["args"] == {"sql": "DELETE FROM orders WHERE id = 3"}
    assert "edited" not in [e["kind"] for e in await trail(admin, cid)]


async def test_arguments_only_with_approve(admin: aiohttp.ClientSession) -> None:
    cid = await ask(admin, "rej", "alice", DELETE_3)
    body = {"decision": "reject", "actor": "oncall", "arguments": {"sql": DELETE_4}}
    status, answer = await decide(admin, cid, body)
    assert (status, answer["field"]) == (400, "arguments")
    assert (await record(admin, cid))["status"] == "pending"


@pytest.fixture
async def strict_gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    """No DROP at all; four-eyes for critical calls; boss approves."""
    settings = make_settings(
        tmp_path,
        admin={"token": TOKEN},
        confirmation={"approvers": ["boss"]},
        policy={
            "four_eyes_for_critical": True,
            "rules": [
                {"name": "no-drop", "tool": "sql_modify", "sql": {"kind": "DROP"}, "level": "deny"},
                {
                    "name": "customers-by-hand",
                    "tool": "sql_modify",
                    "sql": {"tables": "customers"},
                    "level": "manual",
                },
            ],
        },
    )
    async with running_gateway(settings) as gw:
        yield gw


async def test_an_edit_that_raises_the_level_needs_what_that_level_needs(
    strict_gateway: Gateway,
) -> None:
    async with aiohttp.ClientSession(base_url=base_url(strict_gateway), headers=HEADERS) as admin:
        cid = await ask(admin, "strict", "alice", DELETE_3)
        refusals = [
            ({"sql": "DROP TABLE orders"}, "alice", "no-drop"),
            ({"sql": "DELETE FROM customers WHERE id = 1"}, "boss", "manual"),
            # No WHERE: critical, so four-eyes; alice asked for the call and may not approve.
            ({"sql": "DELETE FROM orders"}, "alice", "another approver"),
        ]
        for arguments, actor, needle in refusals:
            body = {"decision": "approve", "actor": actor, "arguments": arguments}
            status, answer = await decide(admin, cid, body)
            assert status == 403, answer
            openapi.DecisionResult.model_validate(answer)
            assert answer["outcome"] == "forbidden"
            assert needle in answer["message"]
            c = answer["confirmation"]
            assert c["status"] == "pending"
            assert c["tool_call"]["args"] == {"sql": "DELETE FROM orders WHERE id = 3"}
        assert "edited" not in [e["kind"] for e in await trail(admin, cid)]
        assert order_exists(strict_gateway.settings.data_dir, 3)

        # Somebody else may approve the critical edit: it is recorded as four-eyes, critical.
        body = {"decision": "approve", "actor": "boss", "arguments": {"sql": "DELETE FROM orders"}}
        status, answer = await decide(admin, cid, body)
        assert status == 200, answer
        c = answer["confirmation"]
        assert (c["risk"], c["four_eyes"], c["decided_by"]) == ("critical", True, "boss")
        assert c["details"]["edited"]["risk_before"] == "medium"
        await settled(admin, cid)
        assert not order_exists(strict_gateway.settings.data_dir, 3)


# ---------------------------------------------------------------------- the race


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.services)])
async def any_store_gateway(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Gateway]:
    kind: str = request.param
    if kind == "redis":
        async with redis_prefix() as prefix:
            store = {"store": "redis", "redis_url": REDIS_URL, "redis_prefix": prefix}
            settings = make_settings(tmp_path, admin={"token": TOKEN}, confirmation=store)
            async with running_gateway(settings) as gw:
                yield gw
        return
    settings = make_settings(tmp_path, admin={"token": TOKEN}, confirmation={"store": kind})
    async with running_gateway(settings) as gw:
        yield gw


async def test_an_edit_racing_a_cancel_has_one_winner(any_store_gateway: Gateway) -> None:
    """The operator's edit against a reject on the API (even rounds) or the requester's
    取消 in the chat (odd rounds): one of them wins, and only an edit that won runs."""
    gw = any_store_gateway
    data_dir = gw.settings.data_dir
    async with aiohttp.ClientSession(base_url=base_url(gw), headers=HEADERS) as admin:
        for n, (asked, edited) in enumerate([(1, 2), (3, 4), (5, 6), (7, 8)]):
            room = f"race{n}"
            cid = await ask(admin, room, "alice", f"/sql DELETE FROM orders WHERE id = {asked}")
            sql = f"DELETE FROM orders WHERE id = {edited}"
            edit = decide(
                admin, cid, {"decision": "approve", "actor": "oncall", "arguments": {"sql": sql}}
            )
            if n % 2 == 0:
                cancel = {"decision": "reject", "actor": "alice", "reason": "changed my mind"}
                answers = await asyncio.gather(edit, decide(admin, cid, cancel))
                assert sorted(status for status, _ in answers) == [200, 409], answers
                edit_status = answers[0][0]
            else:
                said = admin.post(
                    f"/api/chat/{room}/messages", json={"user": "alice", "text": "取消"}
                )
                (edit_status, _), resp = await asyncio.gather(edit, said)
                assert resp.status == 202
            c = await settled(admin, cid)
            events = [e["kind"] for e in await trail(admin, cid)]
            assert events.count("decided") == 1
            if c["status"] == "approved":
                assert edit_status == 200
                assert c["tool_call"]["args"] == {"sql": sql}
                assert "edited" in events and events.count("started") == 1
                assert not order_exists(data_dir, edited)
            else:
                assert (edit_status, c["status"]) == (409, "rejected")
                assert c["tool_call"]["args"]["sql"].endswith(f"id = {asked}")
                assert "edited" not in events and "started" not in events
                assert order_exists(data_dir, edited)
            assert order_exists(data_dir, asked)  # the asked call never runs either way
