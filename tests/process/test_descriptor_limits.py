"""``gateway serve`` under a real open-file limit (issue 22, item 7).

About 1,000 idle WebSockets from one client used up the process's file descriptors:
/healthz, admin requests and webhooks timed out, and the log grew by ~19 MB of "Too many
open files" in 30 s. A real process with its limit lowered (``prlimit``), real sockets.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from tests.webchat.support import GATEWAY_BIN, ServeProcess, eventually, serve

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc, uses prlimit")


def _limit_open_files(process: ServeProcess, spare: int) -> None:
    """Let the process open only ``spare`` more descriptors than it has open now."""
    assert process.proc is not None
    pid = process.proc.pid
    in_use = len(os.listdir(f"/proc/{pid}/fd"))
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (in_use + spare, in_use + spare))


def _events(process: ServeProcess) -> list[dict[str, object]]:
    found = []
    for line in list(process.lines):
        try:
            found.append(json.loads(line))
        except ValueError:
            continue
    return found


def _asyncio_lines(process: ServeProcess) -> list[str]:
    """asyncio's own reports of the accept loop: one per failed attempt, with a traceback."""
    return [
        line
        for line in list(process.lines)
        if "out of system resource" in line or "_start_serving" in line
    ]


def _ours(process: ServeProcess) -> list[dict[str, object]]:
    return [e for e in _events(process) if e.get("event") == "http.accept_failed"]


async def test_failed_accepts_are_one_line_per_interval_with_a_count(tmp_path: Path) -> None:
    with serve(tmp_path, GATEWAY_SERVER__ACCEPT_ERROR_LOG_SECONDS="0.5") as gateway:
        _limit_open_files(gateway, spare=8)
        parts = urlsplit(gateway.url)
        # Connections the process cannot accept wait in the listen backlog: every try of
        # its accept loop fails with EMFILE while they are there.
        held = [
            socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80))
            for _ in range(40)
        ]
        try:

            async def two_lines_or_a_flood() -> bool:
                return len(_ours(gateway)) >= 2 or len(_asyncio_lines(gateway)) > 5

            await eventually(two_lines_or_a_flood, timeout=30)
        finally:
            for sock in held:
                sock.close()
        ours = _ours(gateway)
        assert len(ours) >= 2, "".join(_asyncio_lines(gateway)[:3])
        assert ours[0]["count"] == 1
        # The second line sums up the failures since the first (asyncio's accept loop tries
        # the rest of its backlog after each failure): many attempts, one line.
        assert isinstance(ours[1]["count"], int) and ours[1]["count"] > 1
        assert ours[0]["error"] == "Too many open files"
        assert "LimitNOFILE" in str(ours[0]["advice"])
    # After the stop too: the retries asyncio had scheduled are counted, not logged each.
    assert _asyncio_lines(gateway) == []
    assert len(_ours(gateway)) <= len(ours) + 2


async def test_a_websocket_flood_under_the_open_file_limit_leaves_healthz_answering(
    tmp_path: Path,
) -> None:
    # 20 sockets per address by default; the process may open 80 more descriptors. The
    # flood from one address is 120 sockets: without the cap it runs the process out.
    with serve(tmp_path) as gateway:
        _limit_open_files(gateway, spare=80)
        timeout = aiohttp.ClientTimeout(total=10)
        # force_close: a refused handshake's connection is closed, as a browser's is.
        connector = aiohttp.TCPConnector(force_close=True, limit=0)
        async with aiohttp.ClientSession(
            base_url=gateway.url, connector=connector, timeout=timeout
        ) as http:
            held: list[aiohttp.ClientWebSocketResponse] = []
            refused: list[int] = []
            try:
                for i in range(120):
                    try:
                        ws = await http.ws_connect(f"/ws?session=room{i}&user=u{i}")
                    except aiohttp.WSServerHandshakeError as exc:
                        refused.append(exc.status)
                    else:
                        held.append(ws)
                assert len(held) == 20
                assert refused == [429] * 100
                async with http.get("/healthz") as resp:
                    assert resp.status == 200
                for ws in held:  # the ones held still work
                    await ws.send_json({"type": "ping"})
                    frame = await eventually(lambda ws=ws: ws.receive_json(timeout=10))
                    while frame["type"] != "pong":
                        frame = await ws.receive_json(timeout=10)
            finally:
                for ws in held:
                    await ws.close()


def _check_config(tmp_path: Path, open_files: int) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # in the child, before exec: a real process under a real limit
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, hard))

    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    return subprocess.run(
        [str(GATEWAY_BIN), "check-config"],
        cwd=tmp_path,
        env=env | {"GATEWAY_DATA_DIR": str(tmp_path / "data")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=limit,
    )


def test_check_config_warns_of_an_open_file_limit_below_the_caps(tmp_path: Path) -> None:
    # systemd's default soft limit: below the 1000 WebSockets + 1000 long polls allowed.
    low = _check_config(tmp_path, 1024)
    assert low.returncode == 0, low.stderr
    assert "warning: the open-file limit is 1024, below the 2256 descriptors" in low.stderr
    assert "LimitNOFILE" in low.stderr
    high = _check_config(tmp_path, 8192)
    assert "open-file limit" not in high.stderr
