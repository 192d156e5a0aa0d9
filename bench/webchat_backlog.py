"""A round trip through the web chat REST API in a fresh chat: 0 vs 100,000 pending (SQLite).

Two real gateways run in this process, each on its own data dir with the SQLite store and
the web chat: one with no pending confirmation, one whose ``confirmations.db`` was
preloaded with ``--pending`` pending records spread over ``--chats`` other chats (one
record made by the store, copied in SQL: seconds, where 100,000 creates take minutes).
Rounds alternate which gateway goes first. A round trip, each in a new room:

    POST /sql DELETE ... (0 rows)  ->  long-poll GET until the confirmation prompt
    POST 确认                       ->  long-poll GET until the tool's result line

Also timed: a ``/metrics`` scrape on both (it counts pending with one indexed query).

Run by hand (figures and method: docs/performance.md, "Web chat round trip at 100k
pending")::

    .venv/bin/python bench/webchat_backlog.py --pending 100000 --trips 100 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout: make `gateway` importable
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from config.settings import DEFAULT_KEYWORDS_FILE, Settings  # noqa: E402
from gateway import texts  # noqa: E402
from gateway.app import Gateway, build  # noqa: E402
from gateway.confirm.model import Confirmation, Instance, Status, ToolCall  # noqa: E402
from gateway.logs import configure_logging  # noqa: E402
from gateway.storage.sqlite.confirmations import SqliteConfirmationStore  # noqa: E402

STATEMENT = "DELETE FROM orders WHERE id = 999999"  # held for a decision, deletes nothing
DONE = f"DELETE: {texts.rows(0)}"  # in the result line the tool posts
DAY = 24 * 3600.0


def seed_record(now: float, owner: str | None = None) -> Confirmation:
    return Confirmation(
        id="SEED",
        session_key="webchat:backlog0",
        channel="webchat",
        chat_id="backlog0",
        requester="alice",
        is_group=False,
        tool_call=ToolCall("sql_modify", {"statement": STATEMENT}, "call_seed"),
        summary="DELETE on orders: 0 rows would be deleted",
        details={"statement": STATEMENT, "kind": "DELETE", "tables": ["orders"]},
        created_at=now - DAY,
        expires_at=now + DAY,  # nothing expires during the run
        owner=owner,
    )


async def preload(data_dir: Path, pending: int, chats: int, *, dead_owner: bool = False) -> None:
    """``pending`` pending records over ``chats`` chats, written before the gateway opens
    the file: the store makes one, SQL copies it (whatever the schema's columns).

    Their owner: none (records stored before instances existed); with ``dead_owner``, an
    instance whose last heartbeat is a day old (what ``kill -9`` of a gateway leaves).
    """
    path = data_dir / "confirmations.db"
    store = await SqliteConfirmationStore.open(path)
    now = time.time()
    owner = None
    try:
        if dead_owner:
            owner = Instance(
                id="dead-1-bench0", pid=1, host="dead", started_at=now - DAY, seen_at=now - DAY
            )
            await store.heartbeat(owner, lease=15.0)
        await store.create(seed_record(now, owner.id if owner else None))
    finally:
        await store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(confirmations)")]
        columns = [c for c in columns if c != "seq"]
        computed = {
            "id": "'B' || n",
            "session_key": f"'webchat:backlog' || (n % {chats})",
            "chat_id": f"'backlog' || (n % {chats})",
            "created_at": f"{now - DAY} + n * 0.001",
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


def settings(directory: Path) -> Settings:
    keywords = directory / "keywords.toml"
    shutil.copyfile(DEFAULT_KEYWORDS_FILE, keywords)
    return Settings(
        data_dir=directory / "data",
        server={"host": "127.0.0.1", "port": 0},
        # 100,000 pending by design: the round trip beside them, not the cap on them.
        confirmation={"store": "sqlite", "max_pending": 10**9},
        keywords={"file": keywords, "watch": False},
        channels={
            "webchat": {
                "enabled": True,
                "messages_per_minute": 0,
                "messages_per_minute_per_address": 0,
            }
        },
    )


@contextlib.asynccontextmanager
async def running(directory: Path) -> AsyncIterator[tuple[Gateway, aiohttp.ClientSession]]:
    gateway = await build(settings(directory))
    async with gateway:
        assert gateway.http is not None
        async with aiohttp.ClientSession(base_url=gateway.http.url) as http:
            yield gateway, http


async def wait_for(
    http: aiohttp.ClientSession, room: str, after: int, match: Any
) -> tuple[dict[str, Any], int]:
    """Long-poll the room's history until a message matches; it and the last seq seen."""
    while True:
        async with http.get(
            f"/api/chat/{room}/messages", params={"after": str(after), "wait": "10"}
        ) as resp:
            assert resp.status == 200, await resp.text()
            body = await resp.json()
        for message in body["messages"]:
            if match(message):
                return message, body["last_seq"]
        after = body["last_seq"]


async def say(http: aiohttp.ClientSession, room: str, text: str) -> None:
    async with http.post(
        f"/api/chat/{room}/messages", json={"user": "alice", "text": text}
    ) as resp:
        assert resp.status == 202, await resp.text()


async def round_trip(http: aiohttp.ClientSession, room: str) -> float:
    start = time.perf_counter()
    await say(http, room, f"/sql {STATEMENT}")
    _, seq = await wait_for(http, room, 0, lambda m: m["kind"] == "confirmation")
    await say(http, room, "确认")
    await wait_for(http, room, seq, lambda m: m["kind"] == "text" and DONE in m["text"])
    return time.perf_counter() - start


async def scrape(http: aiohttp.ClientSession) -> float:
    start = time.perf_counter()
    async with http.get("/metrics") as resp:
        assert resp.status == 200
        await resp.read()
    return time.perf_counter() - start


async def run(args: argparse.Namespace, directory: Path) -> None:
    empty_dir, backlog_dir = directory / "empty", directory / "backlog"
    for d in (empty_dir, backlog_dir):
        (d / "data").mkdir(parents=True)
    t = time.perf_counter()
    await preload(backlog_dir / "data", args.pending, args.chats)
    seconds = time.perf_counter() - t
    print(f"preloaded {args.pending} pending over {args.chats} chats in {seconds:.1f} s")
    async with contextlib.AsyncExitStack() as stack:
        t = time.perf_counter()
        empty = await stack.enter_async_context(running(empty_dir))
        t_empty = time.perf_counter() - t
        t = time.perf_counter()
        backlog = await stack.enter_async_context(running(backlog_dir))
        t_backlog = time.perf_counter() - t
        print(f"started: empty {t_empty:.2f} s, backlog {t_backlog:.2f} s")
        http = {"empty": empty[1], "backlog": backlog[1]}
        count = await backlog[0].store.count(Status.PENDING)
        print(f"backlog gateway: {count} pending")

        per_trip: dict[str, list[float]] = {"empty": [], "backlog": []}
        scrapes: dict[str, list[float]] = {"empty": [], "backlog": []}
        for name in http:  # warm-up: first connections, first statement plans
            await round_trip(http[name], f"warm-{name}")
        cpu_trip: dict[str, list[float]] = {"empty": [], "backlog": []}
        for r in range(args.rounds):
            order = ("empty", "backlog") if r % 2 == 0 else ("backlog", "empty")
            for name in order:
                cpu = time.process_time()
                times = [
                    await round_trip(http[name], f"fresh-{name}-{r}-{i}") for i in range(args.trips)
                ]
                cpu_trip[name].append((time.process_time() - cpu) / args.trips * 1e3)
                per_trip[name].append(statistics.median(times) * 1e3)
                scrapes[name] += [await scrape(http[name]) * 1e3 for _ in range(args.scrapes)]
                print(
                    f"  round {r + 1} {name:8s} median {per_trip[name][-1]:7.2f} ms,"
                    f" CPU {cpu_trip[name][-1]:6.2f} ms per round trip"
                )

        print(f"\nround trip (0 | {args.pending} pending)")
        for label, runs in (("wall, median of round medians", per_trip), ("CPU", cpu_trip)):
            # CPU time of this process (both gateways, their store threads and the client):
            # what other work on a shared machine disturbs least.
            a, b = statistics.median(runs["empty"]), statistics.median(runs["backlog"])
            ratios = [y / x for x, y in zip(runs["empty"], runs["backlog"], strict=True)]
            print(f"  {label}: {a:.2f} ms | {b:.2f} ms   x{b / a:.2f}")
            print(f"    ratio per round: {', '.join(f'{x:.2f}' for x in ratios)}")
        sa, sb = statistics.median(scrapes["empty"]), statistics.median(scrapes["backlog"])
        print(
            f"/metrics scrape, median of {len(scrapes['empty'])}: {sa:.2f} ms | {sb:.2f} ms"
            f" (max at backlog {max(scrapes['backlog']):.2f} ms)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pending", type=int, default=100_000)
    parser.add_argument("--chats", type=int, default=10_000)
    parser.add_argument("--trips", type=int, default=100, help="round trips per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scrapes", type=int, default=5, help="/metrics scrapes per round")
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cpus")
    # Log lines as in production (JSON, info), to nowhere: their cost is part of a trip.
    with open(os.devnull, "w") as sink:
        configure_logging("info", "json", sink)
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(run(args, Path(tmp)))


if __name__ == "__main__":
    main()
