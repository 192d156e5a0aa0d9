"""The long chaos run by hand (issue 23): the hold under kill -9, SIGTERM and Redis faults.

Real ``gateway serve`` replicas on a private ``redis-server`` and a PostgreSQL table of the
run's own; chats ask for calls and decide them at random through every entrance while a
nemesis kills, stops, pauses and disconnects (tests/process/chaos.py, which the suite runs
for about a minute in tests/process/test_chaos.py). Prints what was asked, decided, run
and broken, decide -> run p50/p99, each property checked afterwards and a PASS / FAIL
line (exit status 1 on FAIL). The replicas' logs stay in the printed directory.

    .venv/bin/python bench/chaos.py --duration 600 --seed 7 --replicas 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.process.chaos import ChaosConfig, run_chaos  # noqa: E402
from tests.services import POSTGRES_URL  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of faults")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--chats", type=int, default=6, help="rooms asking at once")
    parser.add_argument("--timeout", type=float, default=15.0, help="[confirmation] timeout")
    parser.add_argument("--lease", type=float, default=3.0)
    parser.add_argument("--postgres", default=POSTGRES_URL, help="SQLAlchemy async URL")
    args = parser.parse_args()
    config = ChaosConfig(
        seed=args.seed,
        duration=args.duration,
        replicas=args.replicas,
        chats=args.chats,
        timeout_seconds=args.timeout,
        lease=args.lease,
    )
    root = Path(tempfile.mkdtemp(prefix=f"chaos-{args.seed}-"))
    result = run_chaos(config, root=root, postgres_url=args.postgres)
    print(result.report())
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
