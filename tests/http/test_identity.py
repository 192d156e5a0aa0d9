"""Who is this, on the web? ``server.trusted_user_header`` from ``server.trusted_proxies``,
through the real server: the web chat sender, the admin actor, and typed names from
elsewhere whose decisions do not count."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pydantic
import pytest
import structlog
from multidict import CIMultiDict

from config.settings import ConfigError
from gateway import texts
from gateway.app import Gateway, build
from gateway.confirm.model import Status
from tests.webchat.support import (
    base_url,
    eventually,
    is_kind,
    make_settings,
    next_frame,
    running_gateway,
)

TOKEN = "identity-test-admin-token-0123456789"
HEADER = "X-Forwarded-User"
DELETE_3 = "/sql DELETE FROM orders WHERE id = 3"
# What a reverse proxy on this machine adds: the request came from further away.
FORWARDED = {"X-Forwarded-For": "203.0.113.7"}


def settings(tmp_path: Path, proxies: list[str]) -> Any:
    return make_settings(
        tmp_path,
        admin={"token": TOKEN},
        server={"trusted_user_header": HEADER, "trusted_proxies": proxies},
    )


@pytest.fixture
async def behind_proxy(tmp_path: Path) -> AsyncIterator[Gateway]:
    """The login proxy is on this machine (127.0.0.1): its header is believed."""
    async with running_gateway(settings(tmp_path, ["127.0.0.1", "::1"])) as gw:
        yield gw


@pytest.fixture
async def proxy_elsewhere(tmp_path: Path) -> AsyncIterator[Gateway]:
    """The proxy is another machine: a header on a request from here is anyone's."""
    async with running_gateway(settings(tmp_path, ["10.9.9.9"])) as gw:
        yield gw


async def pending(gw: Gateway, room: str) -> Any:
    async def probe() -> Any:
        found = await gw.confirmations.list_pending(f"webchat:{room}")
        return found[0] if found else None

    return await eventually(probe)


async def test_the_proxy_names_the_web_chat_sender(behind_proxy: Gateway) -> None:
    headers = {HEADER: "carol", **FORWARDED}
    async with aiohttp.ClientSession(base_url=base_url(behind_proxy), headers=headers) as http:
        body = {"user": "mallory", "text": DELETE_3}
        async with http.post("/api/chat/idroom/messages", json=body) as resp:
            assert resp.status == 202
        c = await pending(behind_proxy, "idroom")
        assert c.requester == "carol"
        # The socket's typed name is replaced too, and carol's decision counts.
        async with http.ws_connect("/ws?session=idroom&user=mallory") as ws:
            hello = await next_frame(ws, lambda f: f["type"] == "hello")
            assert hello["user"] == "carol"
            assert hello["identity"] == "verified"
            card = await next_frame(ws, is_kind("confirmation"))
            assert card["can_decide"]["approve"]["allowed"] is True
            await ws.send_json({"type": "decide", "id": c.id, "decision": "approve"})
            answer = await next_frame(ws, lambda f: f["type"] == "decision")
            assert answer["outcome"] == "decided"
    final = await behind_proxy.confirmations.get(c.id)
    assert final is not None and final.decided_by == "carol"


async def test_the_proxy_names_the_admin_actor(behind_proxy: Gateway) -> None:
    url = base_url(behind_proxy)
    async with aiohttp.ClientSession(base_url=url) as chat:
        body = {"user": "alice", "text": DELETE_3}
        async with chat.post("/api/chat/adminid/messages", json=body) as resp:
            assert resp.status == 202
    c = await pending(behind_proxy, "adminid")
    headers = {"Authorization": f"Bearer {TOKEN}", HEADER: "dana"}
    async with aiohttp.ClientSession(base_url=url, headers=headers) as admin:
        async with admin.get("/admin") as resp:
            assert "<b>dana</b>" in await resp.text()
        decision = {"decision": "reject", "actor": "someone-else", "reason": "later"}
        async with admin.post(f"/api/confirmations/{c.id}/decision", json=decision) as resp:
            assert resp.status == 200
            assert (await resp.json())["confirmation"]["decided_by"] == "dana"


async def test_a_header_from_elsewhere_is_ignored_and_typed_decisions_do_not_count(
    proxy_elsewhere: Gateway,
) -> None:
    headers = {HEADER: "carol", **FORWARDED}
    async with aiohttp.ClientSession(base_url=base_url(proxy_elsewhere), headers=headers) as http:
        body = {"user": "mallory", "text": DELETE_3}
        async with http.post("/api/chat/far/messages", json=body) as resp:
            assert resp.status == 202
        c = await pending(proxy_elsewhere, "far")
        assert c.requester == "mallory"  # the header was not believed
        async with http.ws_connect("/ws?session=far&user=mallory") as ws:
            hello = await next_frame(ws, lambda f: f["type"] == "hello")
            assert hello["identity"] == "self-declared"
            card = await next_frame(ws, is_kind("confirmation"))
            assert card["can_decide"]["approve"]["allowed"] is False
            await ws.send_json({"type": "decide", "id": c.id, "decision": "approve"})
            answer = await next_frame(ws, lambda f: f["type"] == "decision")
            assert answer["outcome"] == "forbidden"
            assert answer["message"] == texts.WEBCHAT_UNVERIFIED_DECISION
            # A typed 确认 is answered, not taken as a decision.
            await ws.send_json({"type": "message", "text": f"确认 {c.id}"})
            said = await next_frame(
                ws, lambda f: f.get("text") == texts.WEBCHAT_UNVERIFIED_DECISION
            )
            assert said["kind"] == "text"
        still = await proxy_elsewhere.confirmations.get(c.id)
        assert still is not None and still.status is Status.PENDING


async def test_typed_names_on_this_machine_decide_as_before(proxy_elsewhere: Gateway) -> None:
    async with (
        aiohttp.ClientSession(base_url=base_url(proxy_elsewhere)) as http,
        http.ws_connect("/ws?session=here&user=alice") as ws,
    ):
        hello = await next_frame(ws, lambda f: f["type"] == "hello")
        assert hello["identity"] == "local"
        await ws.send_json({"type": "message", "text": DELETE_3})
        card = await next_frame(ws, is_kind("confirmation"))
        await ws.send_json({"type": "message", "text": "确认"})
        done = await next_frame(ws, is_kind("confirmation_update", "approved"))
        assert done["confirmation"]["id"] == card["confirmation"]["id"]


async def test_a_header_without_proxies_is_refused_at_start(tmp_path: Path) -> None:
    bad = make_settings(tmp_path, server={"trusted_user_header": HEADER})
    with pytest.raises(ConfigError, match="trusted_proxies"):
        await build(bad)
    with pytest.raises(pydantic.ValidationError, match="not an IP address"):
        make_settings(tmp_path, server={"trusted_proxies": ["proxy.example"]})


# ------------------------------------------- issue 22: who is deciding behind a proxy


async def decide_on_socket(http: aiohttp.ClientSession, room: str, typed: str) -> dict[str, Any]:
    """Ask as ``typed`` (DELETE_3), then try to approve on the socket; the answer frame."""
    async with http.ws_connect(f"/ws?session={room}&user={typed}") as ws:
        hello = await next_frame(ws, lambda f: f["type"] == "hello")
        await ws.send_json({"type": "message", "text": DELETE_3})
        card = await next_frame(ws, is_kind("confirmation"))
        cid = card["confirmation"]["id"]
        await ws.send_json({"type": "decide", "id": cid, "decision": "approve"})
        answer = await next_frame(ws, lambda f: f["type"] == "decision")
        return {"hello": hello, "card": card, "answer": answer}


@pytest.mark.parametrize(
    "headers",
    [
        # nginx's proxy_set_header Host $http_host: the public name, no forwarding header.
        {"Host": "chat.example.com"},
        {"Via": "1.1 proxy"},
        {"X-Forwarded-Proto": "https"},
        {"X-Forwarded-Host": "chat.example.com"},
        # The user header itself, from a loopback address that is not a listed proxy.
        {HEADER: "alice"},
    ],
    ids=["public-host", "via", "proto", "fwd-host", "user-header-unlisted"],
)
async def test_a_typed_name_decides_only_on_a_truly_local_connection(
    tmp_path: Path, headers: dict[str, str]
) -> None:
    """A proxy on this machine connects from loopback: what it passes on is not local."""
    options = settings(tmp_path, ["10.9.9.9"])
    options.server.allowed_hosts.append("chat.example.com")
    async with (
        running_gateway(options) as gw,
        aiohttp.ClientSession(base_url=base_url(gw), headers=headers) as http,
    ):
        seen = await decide_on_socket(http, "typed", "alice")
        assert seen["hello"]["identity"] == "self-declared"
        assert seen["card"]["can_decide"]["approve"]["allowed"] is False
        assert seen["answer"]["outcome"] == "forbidden"
        still = await gw.confirmations.get(seen["card"]["confirmation"]["id"])
        assert still is not None and still.status is Status.PENDING


@pytest.mark.parametrize("user_header", [None, ""], ids=["absent", "empty"])
async def test_a_proxied_request_without_the_header_is_not_identified(
    behind_proxy: Gateway, user_header: str | None
) -> None:
    """From the listed proxy but nobody signed in: can chat, cannot decide. Caddy's
    header_up sends the header empty then."""
    headers = {**FORWARDED, **({HEADER: user_header} if user_header is not None else {})}
    async with aiohttp.ClientSession(base_url=base_url(behind_proxy), headers=headers) as http:
        seen = await decide_on_socket(http, "nobody", "alice")
    assert seen["hello"] == {**seen["hello"], "user": "alice", "identity": "self-declared"}
    assert seen["answer"]["outcome"] == "forbidden"
    c = await behind_proxy.confirmations.get(seen["card"]["confirmation"]["id"])
    assert c is not None and c.status is Status.PENDING and c.requester == "alice"


@pytest.mark.parametrize(
    "copies",
    [
        [("X-Forwarded-User", "mallory"), ("X-Forwarded-User", "alice")],
        [(HEADER, "mallory, alice")],
    ],
    ids=["two-copies", "comma-joined"],
)
@pytest.mark.parametrize("path", ["/api/chat/dup/messages", "/ws?session=dup&user=x", "/healthz"])
async def test_a_duplicated_user_header_from_the_proxy_is_refused_and_logged_once(
    behind_proxy: Gateway, copies: list[tuple[str, str]], path: str
) -> None:
    headers = CIMultiDict(copies)
    async with aiohttp.ClientSession(base_url=base_url(behind_proxy)) as http:
        with structlog.testing.capture_logs() as logs:
            method = "POST" if path.startswith("/api/") else "GET"
            body = {"user": "x", "text": DELETE_3} if method == "POST" else None
            async with http.request(method, path, headers=headers, json=body) as resp:
                assert resp.status == 400
                assert "came more than once" in (await resp.json())["error"]
    duplicates = [e for e in logs if e["event"] == "identity.duplicate_header"]
    assert len(duplicates) == 1 and duplicates[0]["header"] == HEADER
    assert await behind_proxy.confirmations.list_pending("webchat:dup") == []
