"""Instance / replica health through the real server: ``GET /api/instances`` and the admin
page's health panel (``/admin/part/health``), on one gateway, on two replicas sharing a
real Redis, with a dead instance's stale heartbeat, and with the store down."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web

from gateway.app import Gateway
from gateway.confirm.model import Instance
from gateway.http.openapi_models import Instances
from gateway.http.page import setup_templates
from tests.admin.conftest import TOKEN
from tests.fakes.tcp_proxy import TcpProxy
from tests.services import REDIS_URL, redis_prefix
from tests.webchat.support import base_url, eventually, make_settings, running_gateway

AUTH = {"Authorization": f"Bearer {TOKEN}"}
# Long enough that no adoption scan (every lease/3) forgets the dead instance a test
# writes before the test has read it back.
LONG_LEASE = 600.0


async def instances(http: aiohttp.ClientSession) -> dict[str, Any]:
    async with http.get("/api/instances") as resp:
        assert resp.status == 200, await resp.text()
        body: dict[str, Any] = await resp.json()
    Instances.model_validate(body)  # the documented answer is the real one
    return body


async def health_part(http: aiohttp.ClientSession) -> str:
    async with http.get("/admin/part/health") as resp:
        assert resp.status == 200
        return await resp.text()


def by_id(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i["id"]: i for i in body["instances"]}


async def test_one_gateway_lists_itself_alive_behind_the_token(
    gateway: Gateway, admin: aiohttp.ClientSession, anonymous: aiohttp.ClientSession
) -> None:
    async with anonymous.get("/api/instances") as resp:
        assert resp.status == 401
    body = await instances(admin)
    me = gateway.confirmations.instance
    assert body["instance"] == me.id
    assert body["lease_seconds"] == gateway.settings.confirmation.lease_seconds
    assert body["store"] == {"ready": True, "reason": None}
    [listed] = body["instances"]
    assert (listed["id"], listed["host"], listed["pid"]) == (me.id, me.host, me.pid)
    assert listed["alive"] is True and listed["this"] is True

    panel = await health_part(admin)
    assert f'data-id="{me.id}" data-alive="true"' in panel
    assert "this one" in panel and "last seen" in panel
    assert 'class="store ok"' in panel
    async with admin.get("/admin") as resp:
        page = await resp.text()
    assert 'id="health-body"' in page and me.id in page


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[tuple[Gateway, Gateway]]:
    async with redis_prefix() as prefix:
        options: dict[str, Any] = {
            "admin": {"token": TOKEN},
            "confirmation": {
                "store": "redis",
                "redis_url": REDIS_URL,
                "redis_prefix": prefix,
                "lease_seconds": LONG_LEASE,
            },
        }
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        async with (
            running_gateway(make_settings(tmp_path / "a", **options)) as a,
            running_gateway(make_settings(tmp_path / "b", **options)) as b,
        ):
            yield a, b


@pytest.mark.services
async def test_two_replicas_each_list_both_alive_and_a_stale_heartbeat_dead(
    replicas: tuple[Gateway, Gateway],
) -> None:
    a, b = replicas
    ids = {a.confirmations.instance.id, b.confirmations.instance.id}
    async with (
        aiohttp.ClientSession(base_url=base_url(a), headers=AUTH) as on_a,
        aiohttp.ClientSession(base_url=base_url(b), headers=AUTH) as on_b,
    ):
        for http, me in ((on_a, a), (on_b, b)):
            body = await instances(http)
            listed = by_id(body)
            assert set(listed) == ids
            assert all(i["alive"] for i in listed.values())
            assert [i["id"] for i in listed.values() if i["this"]] == [me.confirmations.instance.id]

        # A process that died: its last heartbeat, two leases old, is still in the store.
        now = time.time()
        ghost = Instance(
            id="ghost-4242-dead00",
            pid=4242,
            host="ghost",
            started_at=now - 4 * LONG_LEASE,
            seen_at=now - 2 * LONG_LEASE,
        )
        await a.store.heartbeat(ghost, lease=LONG_LEASE)
        for http in (on_a, on_b):
            listed = by_id(await instances(http))
            assert listed[ghost.id]["alive"] is False
            assert listed[ghost.id]["this"] is False
            assert all(listed[i]["alive"] for i in ids)
            panel = await health_part(http)
            assert f'data-id="{ghost.id}" data-alive="false"' in panel
            assert f"last seen {round(2 * LONG_LEASE)}" in panel


@pytest.mark.services
async def test_the_store_down_is_said_and_clears_by_itself(tmp_path: Path) -> None:
    parts = urlsplit(REDIS_URL)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    await proxy.start()
    through = parts._replace(netloc=proxy.url_host).geturl()
    try:
        async with redis_prefix() as prefix:
            settings = make_settings(
                tmp_path,
                admin={"token": TOKEN},
                confirmation={"store": "redis", "redis_url": through, "redis_prefix": prefix},
            )
            async with (
                running_gateway(settings) as gw,
                aiohttp.ClientSession(base_url=base_url(gw), headers=AUTH) as http,
            ):
                assert (await instances(http))["store"]["ready"] is True
                await proxy.stop()  # Redis is gone for this gateway
                body = await instances(http)
                assert body["store"]["ready"] is False
                assert body["store"]["reason"]
                assert body["instances"] == []
                assert 'class="store bad"' in await health_part(http)
                await proxy.start()

                async def back() -> bool:
                    found = await instances(http)
                    return bool(found["store"]["ready"] and found["instances"])

                await eventually(back)
    finally:
        await proxy.stop()


def test_the_panel_draws_channels_store_and_dead_instances() -> None:
    report = {
        "instance": "a-1-000001",
        "lease_seconds": 15.0,
        "now": 1000.0,
        "store": {"ready": False, "reason": "Redis at 127.0.0.1:6379 is unreachable"},
        "instances": [
            {"id": "a-1-000001", "host": "a", "pid": 1, "started_at": 900.0,
             "seen_at": 998.0, "alive": True, "this": True},
            {"id": "b-<2>-000002", "host": "b&c", "pid": 2, "started_at": 900.0,
             "seen_at": 940.0, "alive": False, "this": False},
        ],
    }  # fmt: skip
    channels = [{"name": "webchat", "ready": True}, {"name": "feishu", "ready": False}]
    health = setup_templates(web.Application()).get_template("health.html")
    html = health.render(channels=channels, report=report)
    assert 'class="row instance ok this" data-id="a-1-000001" data-alive="true"' in html
    assert 'data-id="b-&lt;2&gt;-000002" data-alive="false"' in html  # escaped
    assert "b&amp;c" in html
    assert "last seen 60 s ago" in html and "last seen 2 s ago" in html
    assert "Redis at 127.0.0.1:6379 is unreachable" in html
    assert '<li class="bad"><b>feishu</b> not ready</li>' in html
