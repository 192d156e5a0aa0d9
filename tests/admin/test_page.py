"""The /admin page over real HTTP: login cookie, the one admin check, CSRF, the testers,
history search (sessions, TLS and the login limit: test_sessions.py). The browser test
(tests/browser/test_admin_browser.py) clicks through it."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from gateway.app import Gateway
from gateway.http.server import ADMIN_COOKIE
from tests.admin.conftest import TOKEN
from tests.admin.test_api import DELETE_3, ask
from tests.webchat.support import base_url, make_settings, order_exists, running_gateway

CSRF = {"X-Requested-With": "gateway-admin"}


async def login(gateway: Gateway, token: str = TOKEN) -> aiohttp.ClientSession:
    """A browser-like session: logs in through the form and keeps the cookie."""
    jar = aiohttp.CookieJar(unsafe=True)  # cookies for an IP address host
    session = aiohttp.ClientSession(base_url=base_url(gateway), cookie_jar=jar)
    async with session.post("/admin/login", data={"name": "oncall", "token": token}) as resp:
        assert resp.status in (200, 401)
    return session


async def test_the_page_sends_a_person_without_the_cookie_to_the_login_form(
    anonymous: aiohttp.ClientSession,
) -> None:
    async with anonymous.get("/admin", allow_redirects=False) as resp:
        assert resp.status == 303
        assert resp.headers["Location"] == "/admin/login"
    async with anonymous.get("/admin/login") as resp:
        assert resp.status == 200
        page = await resp.text()
    assert 'name="token"' in page
    assert "Content-Security-Policy" in resp.headers
    # The JSON API still answers 401, not a redirect.
    async with anonymous.get("/api/confirmations", allow_redirects=False) as resp:
        assert resp.status == 401


async def test_a_wrong_token_sets_no_cookie(gateway: Gateway) -> None:
    async with await login(gateway, "wrong-token") as http:
        assert len(http.cookie_jar) == 0
        async with http.get("/admin", allow_redirects=False) as resp:
            assert resp.status == 303


async def test_the_login_cookie_is_httponly_strict_and_opens_page_and_api(
    gateway: Gateway, anonymous: aiohttp.ClientSession
) -> None:
    form = {"name": "oncall", "token": TOKEN}
    async with anonymous.post("/admin/login", data=form, allow_redirects=False) as resp:
        assert resp.status == 303
        cookie = resp.cookies[ADMIN_COOKIE]
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Strict"
    assert cookie["path"] == "/"
    assert TOKEN not in cookie.value  # a random session id, never the token itself

    async with await login(gateway) as http:
        async with http.get("/admin") as resp:
            assert resp.status == 200
            page = await resp.text()
        assert 'id="pending"' in page and 'id="history"' in page and 'id="policy"' in page
        async with http.get("/api/confirmations") as resp:
            assert resp.status == 200
        # The event stream the page listens to takes the cookie too.
        async with http.get("/api/events") as resp:
            assert resp.status == 200
            assert await resp.content.readline() == b": connected\n"


async def test_cookie_changes_need_the_csrf_header_bearer_ones_do_not(
    gateway: Gateway, admin: aiohttp.ClientSession
) -> None:
    cid = await ask(admin, "csrf", "alice", DELETE_3)
    body = {"decision": "approve"}
    async with await login(gateway) as http:
        async with http.post(f"/api/confirmations/{cid}/decision", json=body) as resp:
            assert resp.status == 403
            assert "X-Requested-With" in (await resp.json())["error"]
        async with http.put("/api/keywords", json={"confirm": ["ok"], "cancel": ["no"]}) as resp:
            assert resp.status == 403
        assert order_exists(gateway.settings.data_dir, 3)
        async with http.post(f"/api/confirmations/{cid}/decision", json=body, headers=CSRF) as resp:
            assert resp.status == 200
            assert (await resp.json())["confirmation"]["status"] == "approved"


async def test_a_forged_cookie_opens_nothing(anonymous: aiohttp.ClientSession) -> None:
    for junk in ("x", "9" * 40, TOKEN, "a" * 5000, "%ED%A0%80"):
        headers = {"Cookie": f"{ADMIN_COOKIE}={junk}"}
        async with anonymous.get("/api/confirmations", headers=headers) as resp:
            assert resp.status == 401


async def test_logout_clears_the_cookie(gateway: Gateway) -> None:
    async with await login(gateway) as http:
        async with http.post("/admin/logout", allow_redirects=False) as resp:
            assert resp.status == 303
        async with http.get("/admin", allow_redirects=False) as resp:
            assert resp.status == 303


async def test_without_a_token_on_loopback_the_page_is_open_as_the_api_is(
    tmp_path: Path,
) -> None:
    async with (
        running_gateway(make_settings(tmp_path)) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        async with http.get("/admin/login") as resp:  # a name only: there is no token
            form = await resp.text()
            assert 'name="name"' in form and 'name="token"' not in form
        async with http.get("/admin") as resp:
            assert resp.status == 200
            page = await resp.text()
            assert "Log out" not in page and "log in to decide" in page
        # A cross-site page still cannot decide: the Origin check applies as before.
        async with http.post(
            "/api/replies/test", json={"text": "确认"}, headers={"Origin": "http://evil.example"}
        ) as resp:
            assert resp.status == 403


async def test_pending_and_history_render_and_search(
    gateway: Gateway, admin: aiohttp.ClientSession
) -> None:
    cid = await ask(admin, "pagesearch", "alice", "/sql DELETE FROM orders WHERE id = 5")
    async with admin.get("/admin/part/pending") as resp:
        pending = await resp.text()
    assert f'data-id="{cid}"' in pending
    assert "DELETE FROM orders WHERE id = 5" in pending
    async with admin.post(
        f"/api/confirmations/{cid}/decision",
        json={"decision": "reject", "actor": "oncall", "reason": "<b>no</b>"},
    ) as resp:
        assert resp.status == 200
    for query, hit in [
        ({"person": "alice"}, True),
        ({"person": "oncall"}, True),  # the decider counts as a person too
        ({"person": "bob"}, False),
        ({"tool": "sql_modify", "status": "rejected"}, True),
        ({"tool": "sql_query"}, False),
        ({"session": "webchat:pagesearch"}, True),
        ({"session": "webchat:elsewhere"}, False),
    ]:
        async with admin.get("/admin/part/history", params=query) as resp:
            assert (f'data-id="{cid}"' in await resp.text()) is hit, query
        async with admin.get("/api/confirmations", params=query) as resp:
            ids = [c["id"] for c in (await resp.json())["confirmations"]]
            assert (cid in ids) is hit, query
    async with admin.get(f"/admin/confirmations/{cid}") as resp:
        detail = await resp.text()
    assert "&lt;b&gt;no&lt;/b&gt;" in detail and "<b>no</b>" not in detail
    async with admin.get("/admin/confirmations/NOPE9") as resp:
        assert resp.status == 404


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        ("确认", "confirm"),
        ("确认吗？", "unclear"),
        ("不确认", "unclear"),
        ("取消，太危险", "cancel"),
    ],
)
async def test_reply_tester_uses_the_real_parser(
    admin: aiohttp.ClientSession, text: str, intent: str
) -> None:
    async with admin.post("/api/replies/test", json={"text": text}) as resp:
        assert resp.status == 200
        assert (await resp.json())["intent"] == intent


async def test_policy_tester_says_what_the_cli_says(admin: aiohttp.ClientSession) -> None:
    args = {"sql": "DELETE FROM orders WHERE id = 3"}
    async with admin.post("/api/policy/test", json={"tool": "sql_modify", "args": args}) as resp:
        assert resp.status == 200
        answer = await resp.json()
    assert answer["level"] == "confirm"
    assert answer["tool"] == "sql_modify"
    async with admin.post("/api/policy/test", json={"tool": "nope", "args": {}}) as resp:
        assert resp.status == 404
        assert "sql_modify" in (await resp.json())["error"]
    async with admin.post("/api/policy/test", json={"tool": "sql_modify", "args": {}}) as resp:
        assert resp.status == 422
