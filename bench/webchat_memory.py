"""Memory of `gateway serve` while one client pushes web chat messages (defaults).

Usage: .venv/bin/python bench/webchat_memory.py [seconds] [unique]
"unique": a new sender name on every request (gets round any per-sender limit).
One client, 16 requests in flight, REST POSTs of max-length (4000 chars) Chinese text
round-robin over 1000 rooms. Prints the server's RSS before and after, and the answers.
"""

import asyncio
import collections
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp


def rss_mb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


async def main(seconds):
    port = free_port()
    tmp = tempfile.mkdtemp()
    env = dict(
        os.environ,
        GATEWAY_DATA_DIR=tmp,
        GATEWAY_SERVER__PORT=str(port),
        GATEWAY_KEYWORDS__WATCH="false",
        GATEWAY_LOG__LEVEL="warning",
    )
    # The server outlives every await here; Popen only starts it.
    proc = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, "-m", "gateway.cli.main", "serve"],
        env=env,
        cwd=tmp,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(200):
                try:
                    async with http.get(base + "/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
            before = rss_mb(proc.pid)
            text = "测" * 4000
            statuses = collections.Counter()
            n = 0
            deadline = time.monotonic() + seconds

            async def worker(w):
                nonlocal n
                i = w
                while time.monotonic() < deadline:
                    room = f"room{i % 1000}"
                    async with http.post(
                        f"{base}/api/chat/{room}/messages",
                        json={"user": f"u{n}" if UNIQUE else f"u{w}", "text": text},
                    ) as r:
                        statuses[r.status] += 1
                        await r.read()
                    n += 1
                    i += 16

            await asyncio.gather(*(worker(w) for w in range(16)))
            await asyncio.sleep(2)  # let the agent answer what is queued
            after = rss_mb(proc.pid)
        print(f"requests={n} statuses={dict(statuses)}")
        print(
            f"rss_before_mb={before:.1f} rss_after_mb={after:.1f} "
            f"delta_mb={after - before:+.1f} over {seconds}s"
        )
    finally:
        proc.terminate()
        proc.wait(10)


UNIQUE = len(sys.argv) > 2 and sys.argv[2] == "unique"
asyncio.run(main(float(sys.argv[1]) if len(sys.argv) > 1 else 20))
