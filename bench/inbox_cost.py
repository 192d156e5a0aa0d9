"""Inbound messages per CPU-second through the web chat REST API, with and without the inbox.

One real gateway (``build``: web chat, command agent, SQLite confirmation store) per
round, in this process; an aiohttp client posts ``--messages`` messages (``/help``, each
its own room, ``--concurrency`` at a time) and waits until every one is answered.
CPU is the whole process's (``time.process_time``: the client, the gateway and the
SQLite threads alike), so the figure is what one inbound message costs end to end.

- ``inbox``: ``inbox.db`` in the data dir (WAL, synchronous=NORMAL): put before the 202,
  taken at the turn's start.
- ``none``: the same gateway with ``bus.inbox = None`` (the bus before issue 12 item 7).

Rounds alternate the two, on fresh data dirs; medians are reported.

Run: .venv/bin/python bench/inbox_cost.py [--messages 2000] [--rounds 5] [--concurrency 20]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import structlog  # noqa: E402

from config.settings import DEFAULT_KEYWORDS_FILE, load_settings  # noqa: E402
from gateway.app import build  # noqa: E402


async def one_round(*, inbox: bool, messages: int, concurrency: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) for ``messages`` posted and answered."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(
            None,
            data_dir=Path(tmp) / "data",
            server={"host": "127.0.0.1", "port": 0},
            confirmation={"store": "sqlite"},
            keywords={"file": DEFAULT_KEYWORDS_FILE, "watch": False},
            channels={"webchat": {"messages_per_minute": 10**9}},
        )
        gw = await build(settings)
        if not inbox:
            gw.bus.inbox = None
        answered = asyncio.Event()
        count = 0

        def on_out(msg: object, *_: object) -> None:
            nonlocal count
            count += 1
            if count == messages:
                answered.set()

        async with gw, aiohttp.ClientSession() as http:
            assert gw.http is not None
            url = gw.http.url
            webchat = gw.channels.channels["webchat"]
            send = webchat.send

            async def counted(msg: object) -> None:
                await send(msg)  # type: ignore[arg-type]
                on_out(msg)

            webchat.send = counted  # type: ignore[method-assign]
            gate = asyncio.Semaphore(concurrency)

            async def post(i: int) -> None:
                async with (
                    gate,
                    http.post(
                        f"{url}/api/chat/r{i}/messages", json={"user": f"u{i}", "text": "/help"}
                    ) as resp,
                ):
                    assert resp.status == 202, resp.status

            cpu0, wall0 = time.process_time(), time.perf_counter()
            await asyncio.gather(*(post(i) for i in range(messages)))
            await asyncio.wait_for(answered.wait(), 300)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return cpu, wall


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=20)
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    results: dict[str, list[tuple[float, float]]] = {"none": [], "inbox": []}
    for _ in range(args.rounds):
        for name in ("none", "inbox"):
            results[name].append(
                await one_round(
                    inbox=name == "inbox", messages=args.messages, concurrency=args.concurrency
                )
            )
    print(f"{args.messages} messages x {args.rounds} rounds, concurrency {args.concurrency}")
    rate = {}
    for name, runs in results.items():
        cpu = statistics.median(c for c, _ in runs)
        wall = statistics.median(w for _, w in runs)
        rate[name] = args.messages / cpu
        print(
            f"{name:>6}: {rate[name]:8.0f} msg/CPU-s  {cpu / args.messages * 1e6:7.0f} µs CPU/msg"
            f"  {args.messages / wall:8.0f} msg/s wall"
        )
    print(f"inbox costs {rate['none'] / rate['inbox']:.2f}x the CPU per message")


if __name__ == "__main__":
    asyncio.run(main())
