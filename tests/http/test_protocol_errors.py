"""Garbage from scanners is one info line without a traceback; a real bug is still an error."""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.http.jsonapi import read_json_object
from gateway.http.server import HttpServer
from gateway.logs import configure_logging


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    yield stream
    configure_logging("info", "json")  # back to stderr


@pytest.fixture
async def server() -> AsyncIterator[HttpServer]:
    http = HttpServer(host="127.0.0.1", port=0, admin_token=None)

    async def broken(_: web.Request) -> web.Response:
        raise RuntimeError("a bug in a handler")

    async def fine(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def echo(request: web.Request) -> web.Response:
        return web.json_response(await read_json_object(request))

    http.app.router.add_post("/echo", echo)
    http.app.router.add_get("/broken", broken)
    http.app.router.add_get("/fine", fine)
    await http.start()
    yield http
    await http.stop()


async def send_raw(server: HttpServer, data: bytes, *, hang_up: bool = False) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(data)
        await writer.drain()
        if hang_up:
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        await writer.wait_closed()


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


GARBAGE = [
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(40)) + b"\r\n\r\n",  # TLS hello
    b"GET / HTTP/1.1\r\nHost: localhost\r\nBad Header Name: x\r\n\r\n",
    b"GET /fine HTTP/9.9\r\nHost: localhost\r\n\r\n",
    b"GET /fine HTTP/1.1\r\nHost: localhost\r\nContent-Length: nope\r\n\r\n",
    b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n",
    b"POST /fine HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
]


@pytest.mark.parametrize("garbage", GARBAGE)
async def test_garbage_is_one_line_without_a_traceback(
    server: HttpServer, json_logs: io.StringIO, garbage: bytes
) -> None:
    answer = await send_raw(server, garbage)
    assert not answer or re.match(rb"HTTP/1\.[01] 4\d\d ", answer), answer[:100]
    for line in lines(json_logs):
        assert line["level"] in ("debug", "info"), line
        assert "exception" not in line, line
        assert "Traceback" not in json.dumps(line)
    # The server keeps answering.
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/fine") as resp:
        assert resp.status == 200


@pytest.mark.parametrize(
    "cut",
    [
        b'Content-Length: 100\r\n\r\n{"user"',
        b'Transfer-Encoding: chunked\r\n\r\n5\r\n{"use\r\n',
    ],
)
async def test_a_client_hanging_up_mid_body_is_one_info_line(
    server: HttpServer, json_logs: io.StringIO, cut: bytes
) -> None:
    head = b"POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
    await send_raw(server, head + cut, hang_up=True)

    async def reported() -> None:
        while not any(line["event"] == "http.client_gone" for line in lines(json_logs)):
            await asyncio.sleep(0.01)

    await asyncio.wait_for(reported(), 10)
    assert [line for line in lines(json_logs) if line["level"] not in ("debug", "info")] == []


async def test_a_bad_request_line_is_reported_as_one_info_line(
    server: HttpServer, json_logs: io.StringIO
) -> None:
    await send_raw(server, b"GET /fine HTTP/1.1\r\nHost: localhost\r\nBad Header: x\r\n\r\n")
    reported = [line for line in lines(json_logs) if line["event"] == "http.bad_request"]
    assert len(reported) == 1
    assert reported[0]["level"] == "info"
    assert reported[0]["status"] == 400
    assert "\\n" not in json.dumps(reported[0]["error"])


async def test_a_bug_in_a_handler_is_still_an_error_with_its_traceback(
    server: HttpServer, json_logs: io.StringIO
) -> None:
    async with aiohttp.ClientSession() as http, http.get(f"{server.url}/broken") as resp:
        assert resp.status == 500
    errors = [line for line in lines(json_logs) if line["level"] == "error"]
    assert len(errors) == 1
    assert "a bug in a handler" in errors[0]["exception"]
