"""Cold start of ``gateway serve``: seconds until /readyz answers 200, and RSS then.

Two configurations, each started ``--runs`` times as a real process (``python -m gateway
serve``, SQLite store in a fresh data dir, port 0), alternating:

- ``web chat only``: the defaults.
- ``feishu (ws)``: Feishu enabled in long-connection mode against the loopback fake Feishu
  (tests/fakes/feishu, in this process's thread); ready means the long connection is open.

Time runs from ``Popen`` to the first 200 from /readyz (polled every 10 ms); RSS is the
process's VmRSS read at that moment. ``--repo`` runs another checkout's code with this
interpreter (e.g. ``git worktree add /tmp/before <commit>``) for a same-run comparison.

Run: .venv/bin/python bench/startup.py [--runs 5] [--repo PATH]
"""

from __future__ import annotations

import argparse
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

from tests.fakes.feishu import FakeFeishu  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def start_once(repo: Path, env_extra: dict[str, str]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="gw-start-") as tmp:
        keywords = Path(tmp) / "keywords.toml"
        shutil.copyfile(ROOT / "config" / "keywords.toml", keywords)
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
        seen = threading.Event()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("gateway is running: open "):
                    url.append(line.split("open ", 1)[1].split()[0].rstrip("/"))
                    seen.set()
            seen.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            if not seen.wait(60) or not url:
                raise RuntimeError("gateway serve did not start")
            while True:
                try:
                    with urllib.request.urlopen(url[0] + "/readyz", timeout=5) as resp:
                        if resp.status == 200:
                            break
                except urllib.error.HTTPError:
                    pass
                if time.perf_counter() - started > 60:
                    raise RuntimeError("not ready within 60 s")
                time.sleep(0.01)
            elapsed = time.perf_counter() - started
            return elapsed, rss_mb(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
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
    args = ap.parse_args()
    repo = Path(args.repo).resolve()
    with FakeFeishu(app_id="cli_startup", bot_open_id="ou_startup") as fake:
        configs = {
            "web chat only": {},
            "feishu (ws)": {
                "GATEWAY_CHANNELS__FEISHU__ENABLED": "true",
                "GATEWAY_CHANNELS__FEISHU__APP_ID": fake.app_id,
                "GATEWAY_CHANNELS__FEISHU__APP_SECRET": fake.app_secret,
                "GATEWAY_CHANNELS__FEISHU__DOMAIN": fake.url,
            },
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
        for _ in range(args.runs):
            for name, env in configs.items():
                results[name].append(start_once(repo, env))
    print(f"gateway serve from {repo}, {args.runs} runs (median; min-max)")
    for name, runs in results.items():
        secs = [r[0] for r in runs]
        mem = [r[1] for r in runs]
        print(
            f"  {name:14} ready in {statistics.median(secs):5.2f} s"
            f" ({min(secs):.2f}-{max(secs):.2f})   RSS {statistics.median(mem):6.1f} MB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
