"""The admin API against a real gateway on a loopback port (token configured)."""

from __future__ import annotations

import asyncio
import html
import json
import tomllib
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from openapi_spec_validator import validate

from config.settings import ConfigError
from gateway.app import Gateway, build
from tests.admin.conftest import TOKEN
from tests.webchat.support import (
    base_url,
    eventually,
    is_kind,
    make_settings,
    next_frame,
    order_exists,
)

DELETE_3 = "/sql DELETE FROM orders WHERE id = 3"
JSON = {"Content-Type": "application/json"}


async def ask(http: aiohttp.ClientSession, room: str, user: str, text: str) -> str:
    """Say something in a web chat room and return the id of the pending confirmation."""
    async with http.post(f"/api/chat/{room}/messages", json={"user": user, "text": text}) as r:
        assert r.status == 202

    async def probe() -> str | None:
        async with http.get(
            "/api/confirmations", params={"status": "pending", "session": f"webchat:{room}"}
        ) as resp:
            found = (await resp.json())["confirmations"]
        return str(found[0]["id"]) if found else None

    return await eventually(probe)


async def read_event(resp: aiohttp.ClientResponse, timeout: float = 10.0) -> dict[str, Any]:
    """The next SSE event (comments skipped) as {"event", "id", "data"}."""
    event: dict[str, Any] = {}
    while True:
        line = (await asyncio.wait_for(resp.content.readline(), timeout)).decode()
        if not line:
            raise AssertionError("event stream ended")
        line = line.rstrip("\n")
        if line == "":
            if event:
                return event
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(": ")
        event[name] = json.loads(value) if name == "data" else value


# ---------------------------------------------------------------------- auth and health


async def test_health_is_open_and_everything_else_needs_the_token(
    anonymous: aiohttp.ClientSession,
) -> None:
    async with anonymous.get("/healthz") as resp:
        assert resp.status == 200
    async with anonymous.get("/readyz") as resp:
        assert resp.status == 200
        body = await resp.json()
        assert body["ready"] is True
        assert body["channels"]
    for method, path in [
        ("GET", "/api/confirmations"),
        ("GET", "/api/confirmations/K7Q2"),
        ("POST", "/api/confirmations/K7Q2/decision"),
        ("GET", "/api/events"),
        ("GET", "/api/keywords"),
        ("PUT", "/api/keywords"),
        ("GET", "/metrics"),
    ]:
        async with anonymous.request(method, path) as resp:
            assert resp.status == 401, path
            assert resp.headers["WWW-Authenticate"].startswith("Bearer")
            assert "bearer token" in (await resp.json())["error"]
        async with anonymous.request(
            method, path, headers={"Authorization": "Bearer wrong"}
        ) as resp:
            assert resp.status == 401, path


async def test_binding_beyond_loopback_without_a_token_is_refused(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, server={"host": "0.0.0.0", "port": 0})
    with pytest.raises(ConfigError, match=r"admin\.token is not set"):
        await build(settings)


# ---------------------------------------------------------------------- confirmations


async def test_list_get_and_filter(admin: aiohttp.ClientSession) -> None:
    cid = await ask(admin, "ops", "alice", DELETE_3)
    async with admin.get("/api/confirmations") as resp:
        listed = (await resp.json())["confirmations"]
    assert [c["id"] for c in listed] == [cid]
    async with admin.get("/api/confirmations", params={"status": "approved"}) as resp:
        assert (await resp.json())["confirmations"] == []
    async with admin.get("/api/confirmations", params={"session": "webchat:other"}) as resp:
        assert (await resp.json())["confirmations"] == []
    async with admin.get(f"/api/confirmations/{cid.lower()}") as resp:
        assert resp.status == 200
        c = (await resp.json())["confirmation"]
    assert c["id"] == cid
    assert c["details"]["statement"] == "DELETE FROM orders WHERE id = 3"


async def test_decision_200_then_409_with_the_record_and_404(
    gateway: Gateway, admin: aiohttp.ClientSession
) -> None:
    cid = await ask(admin, "ops", "alice", DELETE_3)
    body = {"decision": "approve", "actor": "oncall", "reason": "ticket 42"}
    async with admin.post(f"/api/confirmations/{cid}/decision", json=body) as resp:
        assert resp.status == 200
        first = await resp.json()
    assert first["outcome"] == "decided"
    assert first["confirmation"]["status"] == "approved"
    assert first["confirmation"]["decided_by"] == "oncall"
    assert first["confirmation"]["decided_via"] == "admin"
    await eventually(
        lambda: asyncio.sleep(0, result=not order_exists(gateway.settings.data_dir, 3))
    )

    again = {"decision": "reject", "actor": "someone-else"}
    async with admin.post(f"/api/confirmations/{cid}/decision", json=again) as resp:
        assert resp.status == 409
        second = await resp.json()
    assert second["outcome"] == "already_decided"
    assert second["confirmation"]["status"] == "approved"
    assert second["confirmation"]["decided_by"] == "oncall"
    assert "already approved" in second["error"]

    async with admin.post("/api/confirmations/ZZ99/decision", json=body) as resp:
        assert resp.status == 404
        assert (await resp.json())["outcome"] == "not_found"
    async with admin.get("/api/confirmations/ZZ99") as resp:
        assert resp.status == 404
        assert "ZZ99" in (await resp.json())["error"]


async def test_admin_may_decide_what_a_stranger_in_chat_may_not(
    admin: aiohttp.ClientSession,
) -> None:
    # The token authenticates the operator: no requester/approver check for via=admin.
    cid = await ask(admin, "ops", "alice", DELETE_3)
    async with admin.post(
        f"/api/confirmations/{cid}/decision", json={"decision": "reject", "actor": "oncall"}
    ) as resp:
        assert resp.status == 200
        c = (await resp.json())["confirmation"]
    assert c["status"] == "rejected"
    assert c["decided_by"] == "oncall"


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{", 400, "not valid JSON"),
        (b"", 400, "empty"),
        (b'"approve"', 400, "JSON object"),
        (b"{}", 400, "decision is required"),
        (b'{"decision": "yes"}', 400, "decision must be approve or reject"),
        (b'{"decision": ["approve"]}', 400, "decision must be approve or reject"),
        (b'{"decision": "approve", "actor": 5}', 400, "actor must be a string"),
        (b'{"decision": "approve", "reason": {}}', 400, "reason must be a string"),
        (b'{"decision": "approve", "actor": "' + b"a" * 129 + b'"}', 400, "actor is too long"),
    ],
)
async def test_bad_decision_bodies(
    admin: aiohttp.ClientSession, body: bytes, status: int, needle: str
) -> None:
    async with admin.post("/api/confirmations/K7Q2/decision", data=body, headers=JSON) as resp:
        assert resp.status == status
        assert needle in (await resp.json())["error"]


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("status=done", "status must be pending, approved"),
        ("limit=0", "limit"),
        ("limit=x", "limit"),
    ],
)
async def test_bad_list_queries(admin: aiohttp.ClientSession, query: str, needle: str) -> None:
    async with admin.get(f"/api/confirmations?{query}") as resp:
        assert resp.status == 400
        assert needle in (await resp.json())["error"]


# ---------------------------------------------------------------------- events


async def test_sse_sees_requested_resolved_and_executed_for_a_web_click(
    admin: aiohttp.ClientSession,
) -> None:
    async with admin.get("/api/events") as events:
        assert events.status == 200
        assert events.headers["Content-Type"].startswith("text/event-stream")
        async with admin.ws_connect("/ws?session=ops&user=alice") as ws:
            await ws.send_json({"type": "message", "text": DELETE_3})
            cid = (await next_frame(ws, is_kind("confirmation")))["confirmation"]["id"]
            requested = await read_event(events)
            await ws.send_json({"type": "decide", "id": cid, "decision": "approve"})
            resolved = await read_event(events)
            executed = await read_event(events)
    assert requested["event"] == "confirmation.requested"
    assert requested["data"]["id"] == cid
    assert requested["data"]["status"] == "pending"
    assert (requested["data"]["stage"], requested["data"]["outcome"]) == ("pending", None)
    assert resolved["event"] == "confirmation.resolved"
    assert resolved["data"]["id"] == cid
    assert resolved["data"]["status"] == "approved"
    assert resolved["data"]["actor"] == "alice"
    assert resolved["data"]["via"] == "web"
    assert int(resolved["id"]) > int(requested["id"])
    # What its cards say at each step, for a page that shows it (issue 26).
    assert resolved["data"]["stage"] == "approved"
    assert resolved["data"]["outcome"].startswith(f"✅ [{cid}] alice 已批准")
    assert executed["event"] == "confirmation.executed"
    assert executed["data"]["stage"] == "done"
    done = (
        f"✔️ [{cid}] alice 已批准，sql_modify 已执行 / "
        "approved by alice; sql_modify done: DELETE: 1 行 / 1 row"
    )
    # ...then how to undo it (docs/undo.md).
    assert executed["data"]["outcome"].startswith(done)
    assert executed["data"]["outcome"].endswith(f"reply undo {cid} to undo it")
    # The record's own page says the same: its stage's word, and the sentence.
    async with admin.get(f"/admin/confirmations/{cid}") as resp:
        page = await resp.text()
    assert 'data-stage="done"' in page
    assert '<span class="status status-done">已执行 <span class="en">done</span></span>' in page
    outcome = html.escape(executed["data"]["outcome"])
    assert f'<dd class="outcome">{outcome}</dd>' in page


async def test_sse_sends_keep_alive_comments(admin: aiohttp.ClientSession) -> None:
    async with admin.get("/api/events") as events:
        first = await asyncio.wait_for(events.content.readline(), 10)
        assert first.startswith(b":")
        # Heartbeat is 0.2 s in this fixture: another comment follows without any event.
        lines = [await asyncio.wait_for(events.content.readline(), 10) for _ in range(3)]
        assert b": keep-alive\n" in lines


async def test_sse_streams_end_when_the_gateway_stops(tmp_path: Path) -> None:
    gw = await build(make_settings(tmp_path))
    await gw.start()
    try:
        async with (
            aiohttp.ClientSession(base_url=base_url(gw)) as http,
            http.get("/api/events") as events,
        ):
            await asyncio.wait_for(events.content.readline(), 10)
            stopping = asyncio.create_task(gw.stop())
            rest = await asyncio.wait_for(events.content.read(), 15)
            assert b"confirmation." not in rest
            await asyncio.wait_for(stopping, 15)
    finally:
        await gw.stop()


# ---------------------------------------------------------------------- keywords


async def test_keywords_put_is_validated_written_and_applied_live(
    gateway: Gateway, admin: aiohttp.ClientSession
) -> None:
    async with admin.get("/api/keywords") as resp:
        before = await resp.json()
    assert "确认" in before["confirm"]
    new = {"confirm": [*before["confirm"], "好的呀"], "cancel": before["cancel"]}
    async with admin.put("/api/keywords", json=new) as resp:
        assert resp.status == 200
        assert "好的呀" in (await resp.json())["confirm"]
    on_disk = tomllib.loads(Path(before["file"]).read_text(encoding="utf-8"))
    assert "好的呀" in on_disk["confirm"]["words"]

    # Applied now: the new word decides a pending confirmation in chat.
    cid = await ask(admin, "kw", "alice", DELETE_3)
    async with admin.post(
        "/api/chat/kw/messages", json={"user": "alice", "text": "好的呀"}
    ) as resp:
        assert resp.status == 202

    async def approved() -> bool:
        async with admin.get(f"/api/confirmations/{cid}") as resp:
            return bool((await resp.json())["confirmation"]["status"] == "approved")

    await eventually(approved)


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"confirm": ["ok"], "cancel": ["ok"]}, 422, "both lists"),
        ({"confirm": [], "cancel": ["no"]}, 422, "confirm list is empty"),
        ({"confirm": ["ok", ""], "cancel": ["no"]}, 422, "empty"),
        ({"confirm": "ok", "cancel": ["no"]}, 400, "confirm must be a list"),
        ({"confirm": ["ok", 1], "cancel": ["no"]}, 400, "confirm[1] must be a string"),
        ({"confirm": ["ok"]}, 400, "cancel is required"),
        ({"confirm": ["x" * 65], "cancel": ["no"]}, 400, "too long"),
    ],
)
async def test_bad_keywords_are_refused_and_the_file_is_untouched(
    gateway: Gateway, admin: aiohttp.ClientSession, body: Any, status: int, needle: str
) -> None:
    path = gateway.settings.keywords.file
    before = path.read_bytes()
    async with admin.put("/api/keywords", json=body) as resp:
        assert resp.status == status
        assert needle in (await resp.json())["error"]
    assert path.read_bytes() == before
    assert "确认" in gateway.keywords.words.confirm


# ---------------------------------------------------------------------- metrics, OpenAPI


async def test_metrics_count_messages_and_decisions(admin: aiohttp.ClientSession) -> None:
    cid = await ask(admin, "m", "alice", DELETE_3)
    async with admin.get("/metrics") as resp:
        text = await resp.text()
    assert "gateway_pending_confirmations 1.0" in text
    async with admin.post(
        f"/api/confirmations/{cid}/decision", json={"decision": "reject", "actor": "oncall"}
    ) as resp:
        assert resp.status == 200
    async with admin.get("/metrics") as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = await resp.text()
    assert 'gateway_inbound_messages_total{channel="webchat",result="queued"} 1.0' in text
    assert 'gateway_confirmations_resolved_total{outcome="rejected",via="admin"} 1.0' in text
    assert "gateway_pending_confirmations 0.0" in text
    assert "gateway_confirmation_decision_seconds_count 1.0" in text
    assert "gateway_outbound_send_failures_total" in text


async def test_openapi_describes_every_api_route(
    gateway: Gateway, anonymous: aiohttp.ClientSession
) -> None:
    async with anonymous.get("/api/openapi.json") as resp:
        assert resp.status == 200
        doc = await resp.json()
    assert doc["openapi"].startswith("3.")
    validate(doc)  # the OpenAPI 3.1 schema, not just its shape
    assert gateway.http is not None
    routes = {
        (r.method.lower(), r.resource.canonical)
        for r in gateway.http.app.router.routes()
        if r.resource is not None
        and (r.resource.canonical.startswith("/api/") or r.resource.canonical == "/metrics")
        and r.method != "HEAD"
    }
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    missing = {r for r in routes if r not in documented and r[1] != "/api/openapi.json"}
    assert not missing
    # One table feeds both (issue 23): nothing is documented that this server does not serve.
    served = {(r.method.lower(), r.resource.canonical) for r in gateway.http.app.router.routes()}
    assert documented <= served
    # Every $ref points at a schema that exists.
    refs = {ref.rsplit("/", 1)[1] for ref in _refs(doc)}
    assert refs <= set(doc["components"]["schemas"])


async def test_answers_match_their_openapi_models(
    admin: aiohttp.ClientSession, anonymous: aiohttp.ClientSession
) -> None:
    """The documented answers are the real ones (models forbid unknown fields): no drift."""
    from gateway.http import openapi_models as openapi

    async def check(model: type[Any], method: str, path: str, **kwargs: Any) -> None:
        async with admin.request(method, path, **kwargs) as resp:
            model.model_validate(await resp.json())

    cid = await ask(admin, "doc", "alice", DELETE_3)
    await check(openapi.ConfirmationList, "GET", "/api/confirmations")
    await check(openapi.OneConfirmation, "GET", f"/api/confirmations/{cid}")
    await check(openapi.ConfirmationEvents, "GET", f"/api/confirmations/{cid}/events")
    await check(openapi.ChatHistory, "GET", "/api/chat/doc/messages", params={"user": "alice"})
    decision = f"/api/confirmations/{cid}/decision"
    await check(
        openapi.DecisionResult, "POST", decision, json={"decision": "approve", "actor": "oncall"}
    )
    await check(
        openapi.DecisionResult, "POST", decision, json={"decision": "reject", "actor": "oncall"}
    )
    await check(openapi.Keywords, "GET", "/api/keywords")
    await check(openapi.Health, "GET", "/healthz")
    await check(openapi.Readiness, "GET", "/readyz")
    await check(openapi.Error, "GET", "/api/confirmations/ZZ99")
    await check(openapi.Error, "GET", "/api/confirmations", params={"limit": "0"})
    body = {"user": "alice", "text": "hi"}
    await check(openapi.Accepted, "POST", "/api/chat/doc/messages", json=body)
    async with anonymous.get("/api/events") as resp:
        openapi.Error.model_validate(await resp.json())


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if "$ref" in node else []
        for v in node.values():
            found.extend(_refs(v))
        return found
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


async def test_the_token_is_never_logged(
    gateway: Gateway, admin: aiohttp.ClientSession, capsys: pytest.CaptureFixture[str]
) -> None:
    async with admin.get("/api/confirmations") as resp:
        assert resp.status == 200
    async with admin.get("/api/confirmations", headers={"Authorization": "Bearer nope"}) as r:
        assert r.status == 401
    captured = capsys.readouterr()
    assert TOKEN not in captured.out + captured.err
