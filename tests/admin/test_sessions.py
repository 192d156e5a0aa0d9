"""The /admin sign-in (issue 22, item 11) over real HTTP: a Secure cookie over TLS (the
server's own, or a listed proxy's X-Forwarded-Proto), server-side sessions that logout
ends at once, sessions shared by replicas on Redis, and wrong logins limited per client."""

from __future__ import annotations

import ssl
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
import structlog
from aiohttp import web

from config.settings import Settings
from gateway.app import Gateway, build
from gateway.http.server import ADMIN_COOKIE
from tests.admin.conftest import TOKEN
from tests.services import REDIS_URL, redis_prefix
from tests.webchat.support import base_url, make_settings, running_gateway

if TYPE_CHECKING:
    from gateway.http.sessions import SessionStore

LOGIN = {"name": "oncall", "token": TOKEN}


class Clock:
    """The gateway's clock, moved by the test: no sleeping through a minute."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def gateway_at(settings: Settings, clock: Clock) -> AsyncIterator[Gateway]:
    gateway = await build(settings, clock=clock)
    async with gateway:
        yield gateway


def browser(url: str) -> aiohttp.ClientSession:
    """Keeps cookies for an IP address host, as a browser does for its page."""
    return aiohttp.ClientSession(base_url=url, cookie_jar=aiohttp.CookieJar(unsafe=True))


async def login_cookie(http: aiohttp.ClientSession, **headers: str) -> Any:
    async with http.post("/admin/login", data=LOGIN, headers=headers, allow_redirects=False) as r:
        assert r.status == 303, await r.text()
        return r.cookies[ADMIN_COOKIE]


# ---------------------------------------------------------------------- Secure over TLS


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, made by the openssl command line."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "ec"),
            *("-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_the_cookie_is_secure_when_the_browser_came_over_tls(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))
    async with running_gateway(make_settings(tmp_path, admin={"token": TOKEN})) as gw:
        assert gw.http is not None
        runner = gw.http._runner  # a second, TLS, site on the gateway's own server
        assert runner is not None
        tls = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=served)
        await tls.start()
        port = next(a[1] for a in runner.addresses if a[1] != gw.http.port)
        connector = aiohttp.TCPConnector(ssl=trusting)
        async with aiohttp.ClientSession(f"https://127.0.0.1:{port}", connector=connector) as http:
            cookie = await login_cookie(http)
            assert cookie["secure"] is True
            assert cookie["httponly"] is True
        async with browser(base_url(gw)) as plain:  # the same server over plain HTTP
            assert not (await login_cookie(plain))["secure"]


async def test_only_a_listed_proxys_https_header_makes_it_secure(tmp_path: Path) -> None:
    over_tls = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.7"}
    (tmp_path / "here").mkdir()
    (tmp_path / "far").mkdir()
    here = make_settings(
        tmp_path / "here", admin={"token": TOKEN}, server={"trusted_proxies": ["127.0.0.1"]}
    )
    far = make_settings(
        tmp_path / "far", admin={"token": TOKEN}, server={"trusted_proxies": ["10.9.9.9"]}
    )
    async with running_gateway(here) as proxied, running_gateway(far) as elsewhere:
        async with browser(base_url(proxied)) as http:
            assert (await login_cookie(http, **over_tls))["secure"] is True
            assert not (await login_cookie(http))["secure"]  # the proxy said nothing
        async with browser(base_url(elsewhere)) as http:
            # Anyone can send the header; from a peer that is not a listed proxy it is noise.
            assert not (await login_cookie(http, **over_tls))["secure"]


# ---------------------------------------------------------------------- logout ends it


async def test_a_cookie_copied_before_logout_stops_working(tmp_path: Path) -> None:
    async with running_gateway(make_settings(tmp_path, admin={"token": TOKEN})) as gw:
        url = base_url(gw)
        async with browser(url) as http:
            copied = (await login_cookie(http)).value
            async with http.get("/api/confirmations") as resp:
                assert resp.status == 200
            async with http.post("/admin/logout", allow_redirects=False) as resp:
                assert resp.status == 303
        stolen = {"Cookie": f"{ADMIN_COOKIE}={copied}"}
        async with aiohttp.ClientSession(base_url=url) as thief:
            async with thief.get("/api/confirmations", headers=stolen) as resp:
                assert resp.status == 401
            async with thief.get("/admin", headers=stolen, allow_redirects=False) as resp:
                assert resp.status == 303
                assert resp.headers["Location"] == "/admin/login"


async def test_a_session_ends_after_its_hours_on_the_gateways_clock(tmp_path: Path) -> None:
    clock = Clock()
    settings = make_settings(tmp_path, admin={"token": TOKEN, "session_hours": 1})
    async with gateway_at(settings, clock) as gw, browser(base_url(gw)) as http:
        await login_cookie(http)
        clock.now += 3599
        async with http.get("/api/confirmations") as resp:
            assert resp.status == 200
        clock.now += 2
        async with http.get("/api/confirmations") as resp:
            assert resp.status == 401


async def test_the_login_needs_a_name_and_the_page_acts_as_it(tmp_path: Path) -> None:
    async with (
        running_gateway(make_settings(tmp_path, admin={"token": TOKEN})) as gw,
        browser(base_url(gw)) as http,
    ):
        async with http.get("/admin/login") as resp:
            form = await resp.text()
        assert 'name="name"' in form and 'name="token"' in form
        async with http.post("/admin/login", data={"token": TOKEN}) as resp:
            assert resp.status == 422
            assert len(http.cookie_jar) == 0
        await login_cookie(http)
        async with http.get("/admin") as resp:
            assert "<b>oncall</b>" in await resp.text()


# ---------------------------------------------------------------------- replicas


@pytest.mark.services
async def test_a_login_on_one_replica_works_on_the_other_and_logout_ends_it_on_both(
    tmp_path: Path,
) -> None:
    async with redis_prefix() as prefix:
        options: dict[str, Any] = {
            "admin": {"token": TOKEN},
            "confirmation": {"store": "redis", "redis_url": REDIS_URL, "redis_prefix": prefix},
        }
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        async with (
            running_gateway(make_settings(tmp_path / "a", **options)) as a,
            running_gateway(make_settings(tmp_path / "b", **options)) as b,
            browser(base_url(a)) as on_a,
        ):
            cookie = {"Cookie": f"{ADMIN_COOKIE}={(await login_cookie(on_a)).value}"}
            async with aiohttp.ClientSession(base_url=base_url(b), headers=cookie) as on_b:
                async with on_b.get("/api/confirmations") as resp:
                    assert resp.status == 200
                async with on_a.post("/admin/logout", allow_redirects=False) as resp:
                    assert resp.status == 303
                async with on_b.get("/api/confirmations") as resp:
                    assert resp.status == 401


@pytest.fixture(params=["memory", "redis"])
async def session_store(request: pytest.FixtureRequest) -> AsyncIterator[SessionStore]:
    from gateway.http.sessions import MemorySessionStore

    if request.param == "memory":
        yield MemorySessionStore(limit=2)
        return
    from redis.asyncio import Redis

    from gateway.storage.redis.sessions import RedisSessionStore

    async with redis_prefix() as prefix:
        client = Redis.from_url(REDIS_URL)
        try:
            yield RedisSessionStore(client, prefix=prefix, limit=2)
        finally:
            await client.aclose()


@pytest.mark.services
async def test_sessions_are_bounded_the_oldest_ending_first(session_store: SessionStore) -> None:
    from gateway.http.sessions import AdminSession

    now = time.time()
    for n, key in enumerate(("k1", "k2", "k3")):
        await session_store.add(key, AdminSession(f"p{n}", now + 100 + n), now=now)
    assert await session_store.get("k1", now=now) is None
    assert await session_store.get("k2", now=now) == AdminSession("p1", now + 101)
    assert await session_store.get("k3", now=now) == AdminSession("p2", now + 102)
    assert await session_store.get("k3", now=now + 103) is None  # past its end
    await session_store.remove("k2")
    assert await session_store.get("k2", now=now) is None


# ---------------------------------------------------------------------- rate limit


async def test_the_sixth_wrong_login_in_a_minute_gets_429_per_client(tmp_path: Path) -> None:
    clock = Clock()
    settings = make_settings(
        tmp_path, admin={"token": TOKEN}, server={"trusted_proxies": ["127.0.0.1"]}
    )
    wrong = {"name": "oncall", "token": "guess-0123456789-0123456789"}
    mallory = {"X-Forwarded-For": "203.0.113.9"}
    async with gateway_at(settings, clock) as gw, browser(base_url(gw)) as http:
        with structlog.testing.capture_logs() as logs:
            for _ in range(5):
                clock.now += 1
                async with http.post("/admin/login", data=wrong, headers=mallory) as resp:
                    assert resp.status == 401
            for guess in (wrong, LOGIN, wrong):  # blocked: even the right token is not read
                async with http.post("/admin/login", data=guess, headers=mallory) as resp:
                    assert resp.status == 429
                    assert resp.headers["Retry-After"] == "56"
                    assert "too many wrong logins" in await resp.text()
        limited = [e for e in logs if e["event"] == "admin.login_limited"]
        assert len(limited) == 1 and limited[0]["client"] == "203.0.113.9"
        # Another client behind the same proxy is not held up by mallory's guesses.
        await login_cookie(http, **{"X-Forwarded-For": "203.0.113.10"})
        # A minute after the first guess, one more try; the right token works again.
        clock.now += 56
        await login_cookie(http, **mallory)
