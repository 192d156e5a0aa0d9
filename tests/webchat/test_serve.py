"""REST, SSE and the CLI against a real ``gateway serve`` subprocess on a free port."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.admin.test_api import read_event
from tests.webchat.support import GATEWAY_BIN, ServeProcess, eventually, order_exists, serve

TOKEN = "serve-test-token-abcdef"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ServeProcess]:
    with serve(tmp_path, GATEWAY_ADMIN__TOKEN=TOKEN) as process:
        yield process


async def test_chat_sse_and_admin_decision_on_a_real_daemon(daemon: ServeProcess) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(base_url=daemon.url, headers=headers) as http:
        async with http.get("/") as resp:
            assert resp.status == 200
            assert "网关聊天" in await resp.text()
        async with http.get("/api/events") as events:
            async with http.post(
                "/api/chat/lobby/messages",
                json={"user": "alice", "text": "/sql DELETE FROM orders WHERE id = 3"},
            ) as resp:
                assert resp.status == 202
            requested = await read_event(events)
            cid = requested["data"]["id"]
            assert requested["event"] == "confirmation.requested"
            assert requested["data"]["confirmation"]["details"]["rows_affected"] == 1

            async with http.post(
                f"/api/confirmations/{cid}/decision",
                json={"decision": "approve", "actor": "oncall"},
            ) as resp:
                assert resp.status == 200
            resolved = await read_event(events)
            assert resolved["event"] == "confirmation.resolved"
            assert resolved["data"]["via"] == "admin"
            assert resolved["data"]["actor"] == "oncall"

        async def history_done() -> list[dict[str, Any]] | None:
            async with http.get("/api/chat/lobby/messages?after=0&wait=1") as resp:
                messages: list[dict[str, Any]] = (await resp.json())["messages"]
            kinds = [m["kind"] for m in messages]
            done = "confirmation_update" in kinds and "1 行 / 1 row" in messages[-1]["text"]
            return messages if done else None

        await eventually(history_done, timeout=15)

        # A client speaking garbage is hung up on, with a reason, and logged as no error.
        async with http.ws_connect("/ws?session=lobby&user=mallory") as ws:
            await ws.send_str("{not json")
            closed = await ws.receive(timeout=10)
            while closed.type is aiohttp.WSMsgType.TEXT:  # hello and the room's history
                closed = await ws.receive(timeout=10)
            assert closed.type is aiohttp.WSMsgType.CLOSE
            assert closed.extra == "frame is not JSON"
    assert not order_exists(daemon.data_dir, 3)
    assert daemon.stop() == 0
    assert daemon.error_lines() == []


async def test_the_admin_page_url_is_printed_beside_the_chat_url(daemon: ServeProcess) -> None:
    """Only the web chat's URL was printed at start (issue 26)."""
    started = next(line for line in daemon.lines if line.startswith("gateway is running"))
    assert f"admin page: {daemon.url}/admin;" in started
    async with aiohttp.ClientSession() as http, http.get(f"{daemon.url}/admin") as resp:
        assert resp.status == 200  # the login form, after the redirect
        assert resp.url.path == "/admin/login"


async def test_cli_against_the_daemon(daemon: ServeProcess) -> None:
    env = {"GATEWAY_ADMIN__TOKEN": TOKEN, "PATH": str(GATEWAY_BIN.parent)}
    async with aiohttp.ClientSession(base_url=daemon.url) as http:
        async with http.post(
            "/api/chat/ops/messages",
            json={"user": "bob", "text": "/sql UPDATE orders SET status = 2 WHERE id = 1"},
        ) as resp:
            assert resp.status == 202

        def listed() -> list[dict[str, Any]]:
            out = subprocess.run(
                [str(GATEWAY_BIN), "confirmations", "list", "--url", daemon.url, "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout
            found: list[dict[str, Any]] = json.loads(out)["confirmations"]
            return found

        async def pending() -> str | None:
            found = await asyncio.to_thread(listed)
            return str(found[0]["id"]) if found else None

        cid = await eventually(pending, timeout=15)
    done = await asyncio.to_thread(
        subprocess.run,
        [
            *(str(GATEWAY_BIN), "confirmations", "reject", cid, "--reason", "no"),
            *("--actor", "oncall", "--url", daemon.url),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert "rejected by oncall" in done.stdout


def test_daemon_stops_cleanly_and_logs_no_errors(tmp_path: Path) -> None:
    process = ServeProcess(tmp_path=tmp_path)
    process.start()
    assert process.url.startswith("http://127.0.0.1:")
    assert any("Ctrl-C to stop" in line for line in process.lines)
    assert process.stop() == 0
    assert process.error_lines() == []


def test_refuses_to_listen_beyond_loopback_without_a_token(tmp_path: Path) -> None:
    process = ServeProcess(tmp_path=tmp_path, env={"GATEWAY_SERVER__HOST": "0.0.0.0"})
    with pytest.raises(AssertionError, match=r"admin\.token is not set"):
        process.start()
    assert process.stop() == 2
