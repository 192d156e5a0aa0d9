"""Instructions per confirmation round trip, counted by valgrind: steady on a noisy machine.

Timed figures on a shared machine swing by a third between rounds. Instruction counts do
not: the same run gives about the same count whatever else the machine does. They leave out
what happens in the kernel (a write or getrandom system call counts as a few
instructions), so they complement the timed figures of confirm_roundtrip.py rather than
replace them.

Method: run the round trips of one design in a child process under
``valgrind --tool=callgrind``; run the same child once with no round trips; the
difference divided by the number of round trips is the cost of one. Both children import
and warm up the same code, so start-up cancels out, and freeze what start-up left for the
garbage collector. Requires valgrind::

    .venv/bin/python bench/count_instructions.py --sessions 300 --trips 5

Figures and method: docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_COLLECTED = re.compile(r"Collected : (\d+)")


def _child(design: str, sessions: int, trips: int, logging: str) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import confirm_roundtrip as bench

    if logging == "json":
        bench.configure_null_logging()
    else:
        bench.configure_no_logging()
    # The same warm-up in every child: imports, caches, first-use paths.
    asyncio.run(bench.run_baseline(10, 2))
    asyncio.run(bench.run_real(10, 2))
    gc.collect()
    # What start-up left behind is not scanned again by the collections during the run:
    # otherwise when a full collection falls moves the count by several percent.
    gc.freeze()
    if design == "baseline":
        asyncio.run(bench.run_baseline(sessions, trips))
    elif design == "real":
        asyncio.run(bench.run_real(sessions, trips))


def _count(design: str, sessions: int, trips: int, logging: str) -> int:
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        __file__,
        "--child",
        design,
        "--sessions",
        str(sessions),
        "--trips",
        str(trips),
        "--logging",
        logging,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    match = _COLLECTED.search(done.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")
    return int(match.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--trips", type=int, default=5, help="round trips per session")
    parser.add_argument("--logging", choices=("json", "off", "both"), default="both")
    parser.add_argument("--child", choices=("none", "baseline", "real"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.sessions, args.trips, args.logging)
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    n = args.sessions * args.trips
    modes = ("json", "off") if args.logging == "both" else (args.logging,)
    print(f"instructions per round trip, {args.sessions} sessions x {args.trips} (callgrind)")
    for logging in modes:
        none = _count("none", args.sessions, args.trips, logging)
        base = (_count("baseline", args.sessions, args.trips, logging) - none) / n
        real = (_count("real", args.sessions, args.trips, logging) - none) / n
        print(
            f"  logging {logging:4s}  baseline {base:9,.0f}  real {real:9,.0f}  "
            f"real/baseline {real / base:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
