"""Web chat ingest: messages answered per server CPU-second, ``gateway serve`` vs a bare server.

Both servers run as their own processes and are driven by the same client over the same
REST shape (bench/bare_chat.py documents it): ``--rooms`` clients at once, each posting
``--messages`` messages one after another to its own room and long-polling that room,
after the ``seq`` the 202 gives, until the answer is in it. A message counts once its
answer is in the room.

- ``bare aiohttp``: bench/bare_chat.py: answers into the room inside the POST handler.
- ``gateway serve``: the real daemon, web chat REST API, the command agent (``/help``),
  SQLite confirmation store (``--store``), JSON logs to a pipe the bench drains; rate limit off.

Server CPU is the process's utime + stime (/proc/PID/stat, all threads) over the run;
the client's own CPU is not counted. Rounds alternate the order.

Run: .venv/bin/python bench/ingest.py [--rooms 20] [--messages 50] [--rounds 3]
     [--repo PATH]   (run another checkout's gateway, e.g. a worktree of an older commit)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Server:
    """A server process; ``url`` is read from the first line that names it."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, marker: str) -> None:
        self.proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.url = ""
        found = threading.Event()

        def drain() -> None:  # keeps the pipe empty so logging never blocks the server
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if not self.url and line.startswith(marker):
                    self.url = line[len(marker) :].split()[0].rstrip("/")
                    found.set()
            found.set()

        self._reader = threading.Thread(target=drain, daemon=True)
        self._reader.start()
        if not found.wait(60) or not self.url:
            self.stop()
            raise RuntimeError(f"{argv} did not start")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)


async def one_room(session: aiohttp.ClientSession, url: str, room: str, messages: int) -> int:
    user = f"u{room}"
    answered = 0
    after = 0
    for _i in range(messages):
        async with session.post(
            f"{url}/api/chat/{room}/messages", json={"user": user, "text": "/help"}
        ) as resp:
            assert resp.status == 202, (resp.status, await resp.text())
            posted = await resp.json()
        # Poll after the message itself: the 202 says where it landed. A server that does
        # not say (a checkout from before) gives the message back first; the loop reads on.
        after = max(after, int(posted.get("seq", 0)))
        while True:
            async with session.get(
                f"{url}/api/chat/{room}/messages", params={"after": after, "wait": 10}
            ) as resp:
                body = await resp.json()
            got = body["messages"]
            if got:
                after = got[-1]["seq"]
            if any(m.get("user") != user for m in got):
                answered += 1
                break
    return answered


async def drive(url: str, rooms: int, messages: int) -> int:
    connector = aiohttp.TCPConnector(limit=rooms * 2)
    async with aiohttp.ClientSession(connector=connector) as session:
        counts = await asyncio.gather(
            *(one_room(session, url, f"r{r}", messages) for r in range(rooms))
        )
    return sum(counts)


def measure(server: Server, rooms: int, messages: int) -> tuple[float, float]:
    asyncio.run(drive(server.url, rooms, 2))  # warm up: imports, first-use paths
    cpu, wall = cpu_seconds(server.proc.pid), time.perf_counter()
    answered = asyncio.run(drive(server.url, rooms, messages))
    cpu, wall = cpu_seconds(server.proc.pid) - cpu, time.perf_counter() - wall
    assert answered == rooms * messages, answered
    return answered / cpu, answered / wall


def start_bare() -> Server:
    env = {**os.environ, "NO_PROXY": "127.0.0.1"}
    argv = [sys.executable, str(ROOT / "bench" / "bare_chat.py")]
    return Server(argv, env, str(ROOT), "listening on ")


def start_gateway(repo: Path, tmp: str, store: str) -> Server:
    keywords = Path(tmp) / "keywords.toml"
    shutil.copyfile(ROOT / "config" / "keywords.toml", keywords)
    env = {
        **os.environ,
        "PYTHONPATH": str(repo),
        "GATEWAY_DATA_DIR": str(Path(tmp) / "data"),
        "GATEWAY_SERVER__HOST": "127.0.0.1",
        "GATEWAY_SERVER__PORT": "0",
        "GATEWAY_KEYWORDS__FILE": str(keywords),
        "GATEWAY_CONFIRMATION__STORE": store,
        "GATEWAY_LOG__FORMAT": "json",
        "GATEWAY_CHANNELS__WEBCHAT__MESSAGES_PER_MINUTE": "0",
        "GATEWAY_CHANNELS__WEBCHAT__MESSAGES_PER_MINUTE_PER_ADDRESS": "0",
        "NO_PROXY": "127.0.0.1",
    }
    argv = [sys.executable, "-m", "gateway", "serve"]
    return Server(argv, env, tmp, "gateway is running: open ")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rooms", type=int, default=20)
    ap.add_argument("--messages", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repo", default=str(ROOT))
    ap.add_argument("--store", default="sqlite", choices=["sqlite", "memory"])
    args = ap.parse_args()
    repo = Path(args.repo).resolve()
    per_cpu: dict[str, list[float]] = {"bare aiohttp": [], "gateway serve": []}
    per_wall: dict[str, list[float]] = {"bare aiohttp": [], "gateway serve": []}
    for r in range(args.rounds):
        order = list(per_cpu)
        if r % 2:
            order.reverse()
        for name in order:
            with tempfile.TemporaryDirectory(prefix="gw-ingest-") as tmp:
                server = (
                    start_bare() if name == "bare aiohttp" else start_gateway(repo, tmp, args.store)
                )
                try:
                    cpu_rate, wall_rate = measure(server, args.rooms, args.messages)
                finally:
                    server.stop()
            per_cpu[name].append(cpu_rate)
            per_wall[name].append(wall_rate)
    n = args.rooms * args.messages
    print(f"{n} messages ({args.rooms} rooms x {args.messages}) x {args.rounds} rounds, medians")
    print(f"gateway from {repo}, confirmation store {args.store}")
    for name in per_cpu:
        rate = statistics.median(per_cpu[name])
        print(
            f"  {name:14} {rate:7.0f} answered per server CPU-s ({1e6 / rate:6.0f} µs each)"
            f"  {statistics.median(per_wall[name]):6.0f} per s wall"
        )
    ratios = [g / b for g, b in zip(per_cpu["gateway serve"], per_cpu["bare aiohttp"], strict=True)]
    print(
        f"  ratio gateway/bare per CPU-s: {statistics.median(ratios):.2f}  per round: "
        + ", ".join(f"{x:.2f}" for x in ratios)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
