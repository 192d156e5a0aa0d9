"""Cold start of ``gateway serve``: seconds until /readyz answers 200, and RSS then.

Two configurations, each started ``--runs`` times as a real process (``python -m gateway
serve``, SQLite store in a fresh data dir, port 0), alternating:

- ``web chat only``: the defaults.
- ``feishu (ws)``: Feishu enabled in long-connection mode against the loopback fake Feishu
  (tests/fakes/feishu, in this process's thread); ready means the long connection is open.

With ``--pending N`` the two are instead ``0 pending`` and ``N pending``, web chat only:
the second data dir holds N pending confirmations over ``--chats`` chats, owned by a gateway
that died (``kill -9``: its heartbeat a day old; ``--owner none``: records with no owner at
all), seeded once by bench/webchat_backlog.py's ``preload`` and copied for each start.

Time runs from ``Popen`` to the first 200 from /readyz (polled every 10 ms); RSS is the
process's VmRSS read at that moment, peak its VmHWM at the end. Then a ``/help`` is posted
to a new web chat room: "answered" is the time from ``Popen`` to its reply. "adopted" is
when the gateway logged the end of its first adoption scan (``confirm.startup_scan_done``),
if it does (a build that adopts before it is ready logs none: the wait ends after 5 s
without a log line). A process with a backlog is ended with SIGKILL (a clean stop would
cancel every adopted call). ``--repo`` runs another checkout's code with this interpreter
(e.g. ``git worktree add /tmp/before <commit>``) for a same-run comparison.

Run: .venv/bin/python bench/startup.py [--runs 5] [--repo PATH] [--pending 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.webchat_backlog import preload  # noqa: E402
from tests.fakes.feishu import FakeFeishu  # noqa: E402

# A build that adopts a backlog before it serves took minutes at 100,000 pending.
TIMEOUT = 3600.0


class Start:
    """One start: seconds from ``Popen`` to each milestone, and RSS when ready."""

    def __init__(
        self, ready: float, answered: float, adopted: float | None, rss: float, peak: float
    ) -> None:
        self.ready, self.answered, self.adopted = ready, answered, adopted
        self.rss, self.peak = rss, peak  # MB when ready; VmHWM (peak) when adopted


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def ask_help(url: str, started: float) -> float:
    """Post ``/help`` to a new web chat room; seconds from ``started`` to its reply."""
    room = f"{url}/api/chat/startup-probe/messages"
    body = json.dumps({"user": "alice", "text": "/help"}).encode()
    post = urllib.request.Request(room, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(post, timeout=30) as resp:
        assert resp.status == 202
    after = 0
    while True:
        with urllib.request.urlopen(f"{room}?after={after}&wait=10", timeout=30) as resp:
            page = json.load(resp)
        if any(m["user"] is None for m in page["messages"]):
            return time.perf_counter() - started
        if time.perf_counter() - started > TIMEOUT:
            raise RuntimeError(f"no answer within {TIMEOUT} s")
        after = page["last_seq"]


def start_once(repo: Path, env_extra: dict[str, str], seed: Path | None = None) -> Start:
    with tempfile.TemporaryDirectory(prefix="gw-start-") as tmp:
        keywords = Path(tmp) / "keywords.toml"
        shutil.copyfile(ROOT / "config" / "keywords.toml", keywords)
        if seed is not None:
            (Path(tmp) / "data").mkdir()
            shutil.copyfile(seed, Path(tmp) / "data" / "confirmations.db")
        env = {
            **os.environ,
            "PYTHONPATH": str(repo),
            "GATEWAY_DATA_DIR": str(Path(tmp) / "data"),
            "GATEWAY_SERVER__HOST": "127.0.0.1",
            "GATEWAY_SERVER__PORT": "0",
            "GATEWAY_KEYWORDS__FILE": str(keywords),
            "GATEWAY_CONFIRMATION__STORE": "sqlite",
            "GATEWAY_LOG__FORMAT": "json",
            "NO_PROXY": "127.0.0.1,localhost",
            **env_extra,
        }
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve"],
            cwd=tmp,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        url: list[str] = []
        adopted: list[float] = []
        last_line = [started]
        seen = threading.Event()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                last_line[0] = time.perf_counter()
                if line.startswith("gateway is running: open "):
                    url.append(line.split("open ", 1)[1].split()[0].rstrip("/"))
                    seen.set()
                elif '"confirm.startup_scan_done"' in line:
                    adopted.append(time.perf_counter() - started)
            seen.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            if not seen.wait(TIMEOUT) or not url:
                raise RuntimeError("gateway serve did not start")
            while True:
                try:
                    with urllib.request.urlopen(url[0] + "/readyz", timeout=5) as resp:
                        if resp.status == 200:
                            break
                except urllib.error.HTTPError:
                    pass
                if time.perf_counter() - started > TIMEOUT:
                    raise RuntimeError(f"not ready within {TIMEOUT} s")
                time.sleep(0.01)
            ready, rss = time.perf_counter() - started, rss_mb(proc.pid)
            answered = ask_help(url[0], started)
            # A build that adopts before it is ready logs no end of scan: stop waiting for
            # one when the process has been quiet for 5 s.
            while seed is not None and not adopted and time.perf_counter() - last_line[0] < 5:
                time.sleep(0.05)
            peak = rss_mb(proc.pid, "VmHWM")
            return Start(ready, answered, adopted[0] if adopted else None, rss, peak)
        finally:
            proc.send_signal(signal.SIGTERM if seed is None else signal.SIGKILL)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            reader.join(5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--repo", default=str(ROOT), help="checkout whose code is started")
    ap.add_argument("--pending", type=int, default=0, help="0 vs N pending instead of feishu")
    ap.add_argument("--chats", type=int, default=10_000, help="chats the backlog is spread over")
    ap.add_argument("--owner", choices=("dead", "none"), default="dead")
    args = ap.parse_args()
    repo = Path(args.repo).resolve()
    with contextlib.ExitStack() as stack:
        configs: dict[str, tuple[dict[str, str], Path | None]]
        if args.pending:
            seed_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gw-seed-")))
            t = time.perf_counter()
            asyncio.run(
                preload(seed_dir, args.pending, args.chats, dead_owner=args.owner == "dead")
            )
            print(f"seeded {args.pending} pending in {time.perf_counter() - t:.1f} s")
            configs = {
                "0 pending": ({}, None),
                f"{args.pending} pending": ({}, seed_dir / "confirmations.db"),
            }
        else:
            fake = stack.enter_context(FakeFeishu(app_id="cli_startup", bot_open_id="ou_startup"))
            feishu = {
                "GATEWAY_CHANNELS__FEISHU__ENABLED": "true",
                "GATEWAY_CHANNELS__FEISHU__APP_ID": fake.app_id,
                "GATEWAY_CHANNELS__FEISHU__APP_SECRET": fake.app_secret,
                "GATEWAY_CHANNELS__FEISHU__DOMAIN": fake.url,
            }
            configs = {"web chat only": ({}, None), "feishu (ws)": (feishu, None)}
        results: dict[str, list[Start]] = {name: [] for name in configs}
        for _ in range(args.runs):
            for name, (env, seed) in configs.items():
                results[name].append(start_once(repo, env, seed))
    print(f"gateway serve from {repo}, {args.runs} runs (median; min-max), seconds from Popen")
    for name, runs in results.items():
        line = f"  {name:15}"
        for label in ("ready", "answered", "adopted"):
            secs = [x for x in (getattr(r, label) for r in runs) if x is not None]
            if secs:
                line += f" {label} {statistics.median(secs):6.2f} ({min(secs):.2f}-{max(secs):.2f})"
        rss, peak = statistics.median(r.rss for r in runs), statistics.median(r.peak for r in runs)
        print(f"{line}   RSS {rss:6.1f} MB (peak {peak:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
