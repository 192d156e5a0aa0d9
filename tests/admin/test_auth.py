"""The one bearer check (gateway.http.server.require_admin), through a real gateway.

Feishu (webhook mode) and DingTalk (HTTP mode) run against their loopback fakes, so their
dead-letter routes are registered by the channels themselves, as in production.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from gateway.app import Gateway, build
from gateway.http.server import UNAUTHORIZED, needs_admin
from tests.admin.conftest import TOKEN
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.feishu import FakeFeishu
from tests.webchat.support import base_url, make_settings

DEAD_LETTERS = ("/api/channels/feishu/failed", "/api/channels/dingtalk/failed")


@pytest.fixture
def fakes() -> Iterator[tuple[FakeFeishu, FakeDingTalk]]:
    app_id = "cli_" + uuid.uuid4().hex[:10]
    with FakeFeishu(app_id=app_id, bot_open_id="ou_bot") as feishu, FakeDingTalk() as dingtalk:
        yield feishu, dingtalk


@pytest.fixture
async def gateway(tmp_path: Path, fakes: tuple[FakeFeishu, FakeDingTalk]) -> AsyncIterator[Gateway]:
    feishu, dingtalk = fakes
    settings = make_settings(
        tmp_path,
        admin={"token": TOKEN},
        channels={
            "feishu": {
                "enabled": True,
                "mode": "webhook",
                "app_id": feishu.app_id,
                "app_secret": feishu.app_secret,
                "domain": feishu.url,
                "encrypt_key": "feishu-encrypt-key",
                "verification_token": "feishu-verification-token",
            },
            "dingtalk": {
                "enabled": True,
                "mode": "http",
                "client_id": dingtalk.client_id,
                "client_secret": dingtalk.client_secret,
                "openapi_endpoint": dingtalk.url,
            },
        },
    )
    async with await build(settings) as gw:
        yield gw


async def raw_get(url: str, path: str, authorization: bytes | None) -> tuple[int, bytes]:
    """One HTTP/1.1 GET with the header bytes exactly as given (clients refuse non-ASCII)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n".encode()
        if authorization is not None:
            request += b"Authorization: " + authorization + b"\r\n"
        writer.write(request + b"\r\n")
        answer = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer tökén-ünïcode".encode(),
        b"Bearer \xff\xfe\xfd",
        "Bearer 令牌".encode(),
        b"Basic " + TOKEN.encode(),
        b"Bearer",
        b"Bearer " + TOKEN.encode() + b"x",
    ],
)
async def test_a_wrong_or_non_ascii_token_is_401_never_500(
    gateway: Gateway, authorization: bytes
) -> None:
    status, body = await raw_get(base_url(gateway), "/api/confirmations", authorization)
    assert status == 401
    assert "Authorization: Bearer" in json.loads(body)["error"]


async def test_the_channels_dead_letters_need_the_token(gateway: Gateway) -> None:
    async with aiohttp.ClientSession(base_url=base_url(gateway)) as http:
        for path in DEAD_LETTERS:
            async with http.get(path) as resp:
                assert resp.status == 401, path
                # Answered by the server's middleware, not by a check of the channel's own.
                assert (await resp.json())["error"] == UNAUTHORIZED
            async with http.get(path, headers={"Authorization": "Bearer wrong"}) as resp:
                assert resp.status == 401, path
            async with http.get(path, headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
                assert resp.status == 200, path
                assert (await resp.json())["failed"] == []


async def test_web_chat_health_and_openapi_are_public(gateway: Gateway) -> None:
    async with aiohttp.ClientSession(base_url=base_url(gateway)) as http:
        async with http.post(
            "/api/chat/lobby/messages", json={"user": "alice", "text": "/help"}
        ) as resp:
            assert resp.status == 202
        async with http.get("/api/chat/lobby/messages") as resp:
            assert resp.status == 200
        for path in ("/", "/healthz", "/readyz", "/api/openapi.json"):
            async with http.get(path) as resp:
                assert resp.status == 200, path


async def test_unknown_api_paths_are_protected_too(gateway: Gateway) -> None:
    """Safe by default: a path under /api/ that nobody registered answers 401 to strangers."""
    async with aiohttp.ClientSession(base_url=base_url(gateway)) as http:
        async with http.get("/api/nothing-here") as resp:
            assert resp.status == 401
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with http.get("/api/nothing-here", headers=headers) as resp:
            assert resp.status == 404
            assert "no such endpoint" in (await resp.json())["error"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/chat/x/../../confirmations",
        "/api/chat/%2e%2e/%2e%2e/confirmations",
        "/api/chat%2F..%2Fconfirmations",
        "/api/chat/../confirmations",
    ],
)
async def test_no_spelling_of_a_path_reaches_admin_data_through_the_chat_prefix(
    gateway: Gateway, path: str
) -> None:
    status, body = await raw_get(base_url(gateway), path, None)
    assert status in (401, 404), (status, body[:200])
    assert b'"confirmations"' not in body


def test_which_routes_need_the_token() -> None:
    admin = [
        "/api/confirmations",
        "/api/confirmations/{id}/decision",
        "/api/events",
        "/api/keywords",
        "/api/channels/feishu/failed",
        "/api/anything-added-later",
        "/metrics",
        "/admin",
        "/admin/confirmations/{id}",
    ]
    public = [
        "/",
        "/ws",
        "/healthz",
        "/readyz",
        "/static/app.js",
        "/api/chat/{session}/messages",
        "/api/openapi.json",
        "/webhook/feishu/event",
        "/webhook/dingtalk",
        "/administrator",
        "/admin/login",
        "/admin/logout",
        "/admin/static/admin.js",
    ]
    assert [p for p in admin if not needs_admin(p)] == []
    assert [p for p in public if needs_admin(p)] == []
