"""Every JSON body goes through parse_json: too deep or not valid Unicode is a 400, never a 500."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.app import Gateway, build
from gateway.http.jsonapi import JsonInputError, parse_json
from tests.http.conftest import TOKEN
from tests.webchat.support import base_url, eventually, make_settings

AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
DEEP = b"[" * 100_000
ENDPOINTS = [
    ("POST", "/api/confirmations/K7Q2/decision"),
    ("PUT", "/api/keywords"),
    ("POST", "/api/chat/lobby/messages"),
]


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with await build(make_settings(tmp_path, admin={"token": TOKEN})) as gw:
        yield gw


# ---------------------------------------------------------------------- parse_json


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_depth_up_to_the_limit_parses() -> None:
    assert parse_json(nested(64), max_depth=64) is not None
    assert parse_json('{"a": {"b": [1, {"c": "x"}]}}', max_depth=4) == {"a": {"b": [1, {"c": "x"}]}}
    with pytest.raises(JsonInputError, match="nested deeper than 64 levels"):
        parse_json(nested(65), max_depth=64)


@pytest.mark.parametrize("raw", [DEEP, DEEP.decode(), b'{"a":' * 100_000, b"[{" * 50_000])
def test_a_hundred_thousand_brackets_are_refused_without_recursion(raw: bytes | str) -> None:
    with pytest.raises(JsonInputError, match="nested deeper"):
        parse_json(raw, max_depth=64)


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"text": "[" * 1000 + '\\"{' * 100})
    assert parse_json(text, max_depth=1) == json.loads(text)


@pytest.mark.parametrize(
    "raw",
    [b'"\\ud800"', b'{"text": "a\\udfff b"}', b'{"\\udc00": 1}', b'[["ok", "\\ud83d"]]'],
)
def test_lone_surrogates_are_refused(raw: bytes) -> None:
    with pytest.raises(JsonInputError, match="lone surrogate"):
        parse_json(raw, max_depth=64)


def test_a_surrogate_pair_is_one_character() -> None:
    assert parse_json(b'"\\ud83d\\ude00"', max_depth=1) == "\U0001f600"


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b'"\xed\xa0\x80"', "UTF-8"),  # a surrogate encoded as bytes
        (b'{"a": "\xff"}', "UTF-8"),
        (b"[NaN]", "not valid JSON"),
        (b'{"a": Infinity}', "not valid JSON"),
        (b"{", "not valid JSON"),
        (b"1" * 5000, "not valid JSON"),  # past Python's int digit limit
    ],
)
def test_other_bad_input_is_a_json_input_error(raw: bytes, needle: str) -> None:
    with pytest.raises(JsonInputError, match=needle):
        parse_json(raw, max_depth=64)


# ---------------------------------------------------------------------- through the server


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (DEEP, "nested deeper than 64 levels"),
        (b'{"user": "alice", "text": "\\ud800", "decision": "\\ud800"}', "lone surrogate"),
        (b'{"confirm": ["\\udfff"], "cancel": ["x"]}', "lone surrogate"),
    ],
)
async def test_every_json_body_is_400_with_the_reason(
    gateway: Gateway, method: str, path: str, body: bytes, needle: str
) -> None:
    async with (
        aiohttp.ClientSession(base_url=base_url(gateway)) as http,
        http.request(method, path, data=body, headers=AUTH) as resp,
    ):
        assert resp.status == 400
        assert needle in (await resp.json())["error"]


async def test_the_depth_limit_is_configurable(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, server={"max_json_depth": 2})
    async with (
        await build(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        body = {"user": "alice", "text": "/help", "extra": [[1]]}
        async with http.post("/api/chat/lobby/messages", json=body) as resp:
            assert resp.status == 400
            assert "nested deeper than 2 levels" in (await resp.json())["error"]
        body["extra"] = [1]
        async with http.post("/api/chat/lobby/messages", json=body) as resp:
            assert resp.status == 202


async def test_a_room_keeps_working_after_a_lone_surrogate_was_sent(gateway: Gateway) -> None:
    """It used to be stored (202); every socket joining the room then died replaying it."""
    bad = b'{"user": "mallory", "text": "hi \\ud800"}'
    async with aiohttp.ClientSession(base_url=base_url(gateway)) as http:
        async with http.post("/api/chat/lobby/messages", data=bad, headers=AUTH) as resp:
            assert resp.status == 400
        async with http.post(
            "/api/chat/lobby/messages", json={"user": "alice", "text": "/help"}
        ) as resp:
            assert resp.status == 202
        async with http.ws_connect("/ws?session=lobby&user=bob") as ws:
            seen: list[str] = []

            async def help_replayed() -> bool:
                frame = await ws.receive_json(timeout=10)
                seen.append(json.dumps(frame, ensure_ascii=False))
                return any("/help" in s for s in seen)

            await eventually(help_replayed, timeout=15)
        assert not any("mallory" in s for s in seen)
