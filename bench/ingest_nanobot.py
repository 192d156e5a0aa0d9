"""Feishu ingest: events per CPU-second until they reach the bus, nanobot vs this gateway.

One loopback fake Feishu (tests/fakes/feishu, in this process) pushes the same
``im.message.receive_v1`` events (direct chats, text) over the long connection, in the
frames lark-oapi reads. Each side is its own process, started fresh per round, rounds
alternating the order:

- ``gateway``: this checkout's Feishu channel through ``build(settings)`` (ws mode, the
  configured confirmation store with its inbox: SQLite by default, as ``gateway serve``;
  JSON logs at info), started as ``serve`` starts it but without the agent loop: the
  process counts what comes off ``bus.inbound``. A message reaches our bus once it passed
  the receive rules, was stored in the inbox and offered to the reply intercept; the
  channel acknowledges Feishu only then.
- ``nanobot``: nanobot-ai's own ``FeishuChannel`` and ``MessageBus``, run under nanobot's
  interpreter (its own venv); lark-oapi's base domain is pointed at the fake, loguru
  logs at INFO as nanobot's CLI sets it. The process counts what comes off
  ``bus.inbound``. As shipped (0.3.5) nanobot adds a 👍 reaction to every message it
  receives (one Feishu API call, in its thread pool); ``nanobot, no reaction`` replaces
  that call with nothing, which leaves its bare receive path: that row is the one to beat.

CPU is each side's process (utime + stime from /proc/PID/stat, all threads) from after
``--warmup`` events to the last; the fake and this driver are not counted. At most
``--window`` events are unacknowledged at a time (nanobot acknowledges before its bus,
this gateway after storing).

nanobot is never a dependency of this project. Install it into a venv of its own:

    python3 -m venv /tmp/nanobot-venv
    /tmp/nanobot-venv/bin/pip install nanobot-ai==0.3.5 lark-oapi==1.7.5

Run: .venv/bin/python bench/ingest_nanobot.py [--events 2000] [--rounds 3] [--store sqlite]
     [--nanobot-python /tmp/nanobot-venv/bin/python]
     [--repo PATH]   (measure another checkout's gateway, e.g. a worktree of an older commit)
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")
NANOBOT_PYTHON = "/tmp/nanobot-venv/bin/python"
INSTALL = (
    "nanobot is not installed for this bench; install it into a venv of its own (never into"
    " this project's):\n  python3 -m venv /tmp/nanobot-venv\n"
    "  /tmp/nanobot-venv/bin/pip install nanobot-ai==0.3.5 lark-oapi==1.7.5\n"
    "or pass --nanobot-python PATH"
)
SIDES = ("gateway", "nanobot", "nanobot, no reaction")


# ---------------------------------------------------------------- the measured processes


def _serve_count(bus_get: Any, warmup: int, events: int) -> Any:
    async def count() -> None:
        # Both sides alike: what start-up left is collected now, so the full collection
        # it would soon cause does not fall into one side's measurement and not the other's.
        gc.collect()
        print("ready", flush=True)
        for n in range(1, warmup + events + 1):
            await bus_get()
            if n == warmup:
                print("warm", flush=True)
        print("done", flush=True)
        # Until the driver closes stdin: the CPU is read while this process idles.
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)

    return count()


async def _wait(cond: Any, what: str, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def side_gateway(fake_url: str, app_id: str, secret: str, args: argparse.Namespace) -> None:
    sys.path.insert(0, args.repo)
    from config.settings import Settings
    from gateway.app import build
    from gateway.logs import configure_logging

    configure_logging("info", "json", sys.stderr)
    with tempfile.TemporaryDirectory(prefix="gw-feishu-ingest-") as tmp:
        settings = Settings(
            data_dir=Path(tmp),
            confirmation={"store": args.store},
            channels={
                "webchat": {"enabled": False},
                "feishu": {
                    "enabled": True,
                    "app_id": app_id,
                    "app_secret": secret,
                    "domain": fake_url,
                    "allow_from": ["*"],
                },
            },
        )
        gw = await build(settings, serve_http=False)
        try:
            # Gateway.start() without the agent loop (the nanobot side runs no agent either).
            await gw.keywords.start_watching()
            await gw.confirmations.recover()
            await gw.bus.start()
            await gw.channels.start()
            await _wait(lambda: gw.channels.ready, "the Feishu long connection")
            await _serve_count(gw.bus.consume_inbound, args.warmup, args.events)
        finally:
            await gw.stop()


async def side_nanobot(fake_url: str, app_id: str, secret: str, args: argparse.Namespace) -> None:
    import lark_oapi.core.const as lark_const
    from loguru import logger
    from nanobot.bus.queue import MessageBus
    from nanobot.channels.feishu.runtime import FeishuChannel

    # The fake stands in for open.feishu.cn (nanobot's domain setting is feishu | lark).
    lark_const.FEISHU_DOMAIN = fake_url
    logger.remove()  # as nanobot's CLI (nanobot/cli/commands.py) sets it up
    logger.add(
        sys.stderr,
        format="{time:YYYY-MM-DD HH:mm:ss} | {level: <5} | {extra[channel]} | {message}",
        level="INFO",
        filter=lambda record: record["extra"].setdefault("channel", "-") or True,
    )
    bus = MessageBus()
    channel = FeishuChannel(
        {"enabled": True, "appId": app_id, "appSecret": secret, "allowFrom": ["*"]}, bus
    )
    if args.no_reaction:

        async def no_reaction(message_id: str, emoji_type: str = "") -> None:
            return None

        channel._add_reaction = no_reaction  # type: ignore[method-assign]
    running = asyncio.create_task(channel.start())
    try:
        await _wait(
            lambda: getattr(channel._ws_client, "_conn", None) is not None,
            "the Feishu long connection",
        )
        await _serve_count(bus.consume_inbound, args.warmup, args.events)
    finally:
        await channel.stop()
        running.cancel()


# ---------------------------------------------------------------- the driver


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Side:
    """One measured process; its stdout says ready / warm / done."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            env=env,
            cwd=str(ROOT),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: dict[str, threading.Event] = {
            k: threading.Event() for k in ("ready", "warm", "done")
        }
        self.log: deque[str] = deque(maxlen=30)
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = self.lines.get(line.strip())
            if event is not None:
                event.set()
        for event in self.lines.values():
            event.set()  # ended: whoever waits sees it (and checks the process)

    def _read_stderr(self) -> None:  # keeps the pipe empty so logging never blocks
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip())

    def wait(self, line: str, within: float) -> None:
        if not self.lines[line].wait(within) or self.proc.poll() is not None:
            self.stop()
            tail = "\n".join(self.log)
            raise RuntimeError(f"{self.proc.args} never said {line!r}; its log ends:\n{tail}")

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _event(n: int) -> dict[str, Any]:
    from tests.fakes.feishu import message_event

    # Ten direct chats, as bench/ingest.py's ten rooms.
    return message_event(chat_id=f"oc_bench{n % 10}", sender=f"ou_user{n % 10}", text="hello")


def measure(side: str, args: argparse.Namespace) -> float:
    """Events per CPU-second of ``side``'s process."""
    from tests.fakes.feishu import FakeFeishu

    app_id = "cli_" + uuid.uuid4().hex[:10]
    with FakeFeishu(app_id=app_id, bot_open_id="ou_bot", ping_interval=120) as fake:
        python = sys.executable if side == "gateway" else args.nanobot_python
        argv = [python, __file__, "--side", side, "--fake", fake.url, "--app-id", app_id]
        argv += ["--warmup", str(args.warmup), "--events", str(args.events)]
        argv += ["--store", args.store, "--repo", args.repo]
        with tempfile.TemporaryDirectory(prefix="nanobot-home-") as home:
            # nanobot keeps its config in ~/.nanobot: a home of its own per run.
            env = {**os.environ, "HOME": home, "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
            proc = Side(argv, env)
            try:
                proc.wait("ready", 60)
                total = args.warmup + args.events
                sent = 0
                cpu0 = 0.0
                while sent < total:
                    if sent - len(fake.acks) >= args.window:
                        time.sleep(0.0005)
                        continue
                    fake.send_frame(_event(sent))
                    sent += 1
                    if sent == args.warmup:
                        proc.wait("warm", 60)
                        cpu0 = cpu_seconds(proc.proc.pid)
                proc.wait("done", 120)
                cpu = cpu_seconds(proc.proc.pid) - cpu0
            finally:
                proc.stop()
    return args.events / cpu


def nanobot_installed(python: str) -> bool:
    if not Path(python).exists():
        return False
    check = [python, "-c", "import nanobot.channels.feishu.runtime, lark_oapi"]
    return subprocess.run(check, capture_output=True, check=False, timeout=120).returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--store", default="sqlite", choices=["sqlite", "memory"])
    ap.add_argument("--nanobot-python", default=os.environ.get("NANOBOT_PYTHON", NANOBOT_PYTHON))
    ap.add_argument("--repo", default=str(ROOT), help="the gateway checkout to measure")
    ap.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    ap.add_argument("--fake", help=argparse.SUPPRESS)
    ap.add_argument("--app-id", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side is not None:  # a measured process
        args.no_reaction = args.side == "nanobot, no reaction"
        run = side_gateway if args.side == "gateway" else side_nanobot
        asyncio.run(run(args.fake, args.app_id, "fake-secret", args))
        return 0
    if not nanobot_installed(args.nanobot_python):
        print(INSTALL, file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    for r in range(args.rounds):
        order = list(SIDES) if r % 2 == 0 else list(reversed(SIDES))
        for side in order:
            rates[side].append(measure(side, args))
    ask = "import importlib.metadata as m; print(m.version('nanobot-ai'))"
    version = subprocess.run(
        [args.nanobot_python, "-c", ask],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print(
        f"{args.events} Feishu events (after {args.warmup} warm-up) x {args.rounds} rounds,"
        f" window {args.window}, medians; gateway from {args.repo}, store {args.store},"
        f" nanobot-ai {version}"
    )
    for side, runs in rates.items():
        rate = statistics.median(runs)
        print(
            f"  {side:21} {rate:7.0f} events per CPU-s ({1e6 / rate:5.0f} µs each)  per round: "
            + ", ".join(f"{x:.0f}" for x in runs)
        )
    for other in SIDES[1:]:
        ratios = [g / n for g, n in zip(rates["gateway"], rates[other], strict=True)]
        print(
            f"  gateway / {other}: {statistics.median(ratios):.2f}  per round: "
            + ", ".join(f"{x:.2f}" for x in ratios)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
