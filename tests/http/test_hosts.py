"""server.allowed_hosts: a Host this server does not know is 421 on every route (DNS rebinding)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
import pytest

from gateway.app import Gateway, build
from gateway.http.server import host_name
from tests.http.conftest import TOKEN, webhook_settings

if TYPE_CHECKING:
    from tests.fakes.dingtalk import FakeDingTalk
    from tests.fakes.feishu import FakeFeishu
from tests.webchat.support import base_url

EVERY_KIND_OF_ROUTE = [
    ("GET", "/"),
    ("GET", "/healthz"),
    ("GET", "/api/openapi.json"),
    ("GET", "/api/chat/lobby/messages"),
    ("POST", "/api/chat/lobby/messages"),
    ("GET", "/api/confirmations"),
    ("POST", "/api/confirmations/K7Q2/decision"),
    ("PUT", "/api/keywords"),
    ("GET", "/metrics"),
    ("POST", "/webhook/feishu/event"),
    ("POST", "/webhook/feishu/card"),
    ("POST", "/webhook/dingtalk"),
    ("GET", "/no/such/page"),
]
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.mark.parametrize(("method", "path"), EVERY_KIND_OF_ROUTE)
async def test_a_foreign_host_is_421_on_every_route(
    gateway: Gateway, method: str, path: str
) -> None:
    headers = {**AUTH, "Host": "rebind.attacker.example"}
    async with (
        aiohttp.ClientSession(base_url=base_url(gateway)) as http,
        http.request(method, path, headers=headers, json={"user": "a"}) as resp,
    ):
        assert resp.status == 421
        assert "server.allowed_hosts" in (await resp.json())["error"]


async def test_a_foreign_host_cannot_open_the_web_chat_socket(gateway: Gateway) -> None:
    async with aiohttp.ClientSession(base_url=base_url(gateway)) as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(
                "/ws?session=lobby&user=alice", headers={"Host": "rebind.attacker.example:80"}
            )
        assert refused.value.status == 421
        async with http.ws_connect("/ws?session=lobby&user=alice") as ws:
            hello = await ws.receive_json(timeout=10)
            assert hello["type"]


@pytest.mark.parametrize(
    "host", ["localhost", "LOCALHOST:8080", "127.0.0.1:1", "[::1]:8080", "localhost."]
)
async def test_loopback_names_are_answered_whatever_the_port(gateway: Gateway, host: str) -> None:
    async with (
        aiohttp.ClientSession(base_url=base_url(gateway)) as http,
        http.get("/api/confirmations", headers={**AUTH, "Host": host}) as resp,
    ):
        assert resp.status == 200


async def test_a_proxys_public_name_is_answered_once_listed(
    tmp_path: Path, fakes: tuple[FakeFeishu, FakeDingTalk]
) -> None:
    settings = webhook_settings(
        tmp_path, fakes, server={"allowed_hosts": ["chat.example.com", "localhost"]}
    )
    async with await build(settings) as gw, aiohttp.ClientSession(base_url=base_url(gw)) as http:
        async with http.get("/healthz", headers={"Host": "Chat.Example.com:443"}) as resp:
            assert resp.status == 200
        # The bound host is always answered, listed or not.
        async with http.get("/healthz", headers={"Host": "127.0.0.1"}) as resp:
            assert resp.status == 200
        async with http.get("/healthz", headers={"Host": "other.example.com"}) as resp:
            assert resp.status == 421


async def test_a_star_answers_any_host(
    tmp_path: Path, fakes: tuple[FakeFeishu, FakeDingTalk]
) -> None:
    settings = webhook_settings(tmp_path, fakes, server={"allowed_hosts": ["*"]})
    async with (
        await build(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
        http.get("/healthz", headers={"Host": "anything.example"}) as resp,
    ):
        assert resp.status == 200


def test_host_names_are_compared_without_port_case_or_brackets() -> None:
    assert host_name("LocalHost:8080") == "localhost"
    assert host_name("[::1]:8080") == "::1"
    assert host_name("::1") == "::1"
    assert host_name("example.com.") == "example.com"
