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
