"""SQLite store cost of one round trip in a fresh chat: with no pending backlog vs a big one.

A round trip is the store's part of a confirmation in a chat that has nothing pending:
``create`` -> ``list_pending`` (the intercept's lookup) -> ``finish`` (approved) ->
``claim`` -> ``start_execution`` -> ``finish_execution`` (``--part decision`` stops after
``finish``, for a store without the ledger). The same trips run, in the same process and
interleaved by round, against a file with no pending record and one with ``--pending``
pending records spread over many other chats. Also reported: thread hops per round trip
(every hop comes back through ``loop.call_soon_threadsafe``, which is counted) and
``count(pending)`` on the backlog file.

Run by hand (figures and method: docs/performance.md, "Store cost at 100k pending")::

    .venv/bin/python bench/store_backlog.py --pending 100000 --trips 1000 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout: make `gateway` importable
    sys.path.insert(0, str(ROOT))

import structlog  # noqa: E402

from gateway.confirm.model import Confirmation, ExecState, Status, ToolCall  # noqa: E402
from gateway.storage.sqlite.confirmations import SqliteConfirmationStore  # noqa: E402

T0 = 1_763_000_000.0
STEPS_DECISION = ("create", "list_pending", "finish")
STEPS_FULL = (*STEPS_DECISION, "claim", "start", "finish_execution")


def record(cid: str, session: str, created_at: float) -> Confirmation:
    statement = "DELETE FROM orders WHERE status = 1"
    return Confirmation(
        id=cid,
        session_key=session,
        channel="webchat",
        chat_id=session.split(":", 1)[1],
        requester="alice",
        is_group=False,
        tool_call=ToolCall("sql_modify", {"statement": statement}, f"call_{cid}"),
        summary="DELETE on orders: 3 rows would be deleted",
        details={"statement": statement, "kind": "DELETE", "tables": ["orders"], "rows": 3},
        created_at=created_at,
        expires_at=created_at + 300.0,
    )


async def seed(store: SqliteConfirmationStore, path: Path, pending: int, chats: int) -> None:
    """``pending`` pending records over ``chats`` chats: one made by the store, copied in SQL.

    Copying the store's own row (whatever its columns) keeps the seed honest for any
    schema, and takes seconds where 100,000 fsynced creates would take minutes.
    """
    await store.create(record("SEED", "webchat:backlog0", T0))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(confirmations)")]
        columns = [c for c in columns if c != "seq"]
        computed = {
            "id": "'B' || n",
            "session_key": f"'webchat:backlog' || (n % {chats})",
            "chat_id": f"'backlog' || (n % {chats})",
            "created_at": f"{T0} + n * 0.001",
            "expires_at": f"{T0 + 300.0} + n * 0.001",
        }
        select = ", ".join(computed.get(c, c) for c in columns)
        conn.execute("BEGIN")
        conn.execute(
            f"WITH RECURSIVE k(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM k WHERE n < {pending})"
            f" INSERT INTO confirmations ({', '.join(columns)})"
            f" SELECT {select} FROM k, confirmations WHERE id = 'SEED'"
        )
        conn.execute("DELETE FROM confirmations WHERE id = 'SEED'")
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


@contextmanager
def counting_hops(counter: list[int]) -> Iterator[None]:
    """Count thread -> loop handoffs: each store call to its thread returns through here."""
    loop = asyncio.get_running_loop()
    original = loop.call_soon_threadsafe

    def counted(*args: Any, **kwargs: Any) -> Any:
        counter[0] += 1
        return original(*args, **kwargs)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    try:
        yield
    finally:
        del loop.call_soon_threadsafe


async def trips(
    store: SqliteConfirmationStore, *, tag: str, n: int, steps: tuple[str, ...]
) -> tuple[dict[str, float], int]:
    """``n`` round trips, each in a new chat; seconds spent per step, and hops in all."""
    spent = dict.fromkeys(steps, 0.0)
    hops = [0]
    mark = 0.0

    def lap(step: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        spent[step] += now - mark
        mark = now

    with counting_hops(hops):
        for i in range(n):
            cid, session, at = f"{tag}{i}", f"webchat:fresh-{tag}-{i}", T0 + 1000 + i
            mark = time.perf_counter()
            await store.create(record(cid, session, at))
            lap("create")
            found = await store.list_pending(session)
            lap("list_pending")
            _, changed = await store.finish(
                cid, Status.APPROVED, by="alice", via="reply", reason=None, now=at + 1
            )
            lap("finish")
            assert [c.id for c in found] == [cid]
            assert changed
            if "claim" not in steps:
                continue
            mark = time.perf_counter()
            claimed = await store.claim(cid, instance="bench", now=at + 2, lease=15.0)
            lap("claim")
            started = await store.start_execution(cid, instance="bench", now=at + 3)
            lap("start")
            done = await store.finish_execution(
                cid, instance="bench", state=ExecState.SUCCEEDED, result="3 rows", now=at + 4
            )
            lap("finish_execution")
            assert claimed is not None
            assert started is not None
            assert done is not None
    return spent, hops[0]


async def run(args: argparse.Namespace, directory: Path) -> int:
    steps = STEPS_FULL if args.part == "full" else STEPS_DECISION
    empty_path, backlog_path = directory / "empty.db", directory / "backlog.db"
    empty = await SqliteConfirmationStore.open(empty_path)
    backlog = await SqliteConfirmationStore.open(backlog_path)
    try:
        t = time.perf_counter()
        await seed(backlog, backlog_path, args.pending, args.chats)
        seconds = time.perf_counter() - t
        print(f"seeded {args.pending} pending over {args.chats} chats in {seconds:.1f} s")
        per_trip: dict[str, list[dict[str, float]]] = {"empty": [], "backlog": []}
        hops: dict[str, int] = {}
        for r in range(args.rounds):
            order = ("empty", "backlog") if r % 2 == 0 else ("backlog", "empty")
            for name in order:
                store = empty if name == "empty" else backlog
                spent, hops[name] = await trips(
                    store, tag=f"{name[0]}{r}x", n=args.trips, steps=steps
                )
                per_trip[name].append({k: v / args.trips * 1e6 for k, v in spent.items()})
                total = sum(per_trip[name][-1].values())
                print(f"  round {r + 1} {name:8s} {total:8.1f} us per round trip")

        print(
            f"\nmedians over {args.rounds} rounds, us per call (0 pending | {args.pending} pending)"
        )
        medians = {
            name: {s: statistics.median(x[s] for x in runs) for s in steps}
            for name, runs in per_trip.items()
        }
        for s in steps:
            a, b = medians["empty"][s], medians["backlog"][s]
            print(f"  {s:17s} {a:8.1f} | {b:8.1f}   x{b / a:.2f}")
        totals = {n: [sum(x.values()) for x in runs] for n, runs in per_trip.items()}
        ratios = [b / a for a, b in zip(totals["empty"], totals["backlog"], strict=True)]
        a, b = statistics.median(totals["empty"]), statistics.median(totals["backlog"])
        print(f"  {'round trip':17s} {a:8.1f} | {b:8.1f}   x{b / a:.2f}")
        print(f"    ratio per round: {', '.join(f'{x:.2f}' for x in ratios)}")
        for name, n in hops.items():
            print(f"  thread hops per round trip ({name}): {n / args.trips:.1f}")

        if args.part == "full":
            times = []
            for _ in range(20):
                t = time.perf_counter()
                counted = await backlog.count(Status.PENDING)
                times.append(time.perf_counter() - t)
            print(
                f"\ncount(pending) = {counted} on the backlog file: "
                f"median {statistics.median(times) * 1e3:.2f} ms, max {max(times) * 1e3:.2f} ms"
            )
    finally:
        await empty.close()
        await backlog.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=100_000, help="pending in the backlog")
    parser.add_argument("--chats", type=int, default=10_000, help="chats the backlog spans")
    parser.add_argument("--trips", type=int, default=1000, help="round trips per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument(
        "--part",
        choices=("full", "decision"),
        default="full",
        help="decision: create, list_pending, finish only (a store without the ledger)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (a temp dir)")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    print(
        f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, "
        f"{os.cpu_count()} cpus; pending={args.pending} chats={args.chats} "
        f"trips={args.trips} rounds={args.rounds} part={args.part}"
    )
    if args.dir is not None:
        return asyncio.run(run(args, args.dir))
    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    raise SystemExit(main())
