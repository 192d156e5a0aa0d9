"""Inbound messages per CPU-second through the web chat REST API, with and without the inbox,
on the SQLite and on the Redis store.

One real gateway (``build``: web chat, command agent) per round, in this process; an
aiohttp client posts ``--messages`` messages (``/help``, each its own room,
``--concurrency`` at a time) and waits until every one is answered. CPU is the whole
process's (``time.process_time``: the client, the gateway and the SQLite threads alike),
so the figure is what one inbound message costs end to end; with Redis the server's own
CPU (``INFO cpu``, user + sys) is reported beside it, per message. The Redis on this
machine is shared: other clients' work lands in that column too.

- ``sqlite none`` / ``redis none``: the gateway on that confirmation store with
  ``bus.inbox = None`` (the bus before issue 12 item 7).
- ``sqlite inbox``: ``inbox.db`` in the data dir (WAL, synchronous=NORMAL).
- ``redis inbox``: the stream of gateway/storage/redis/inbox.py (put: one script, SET NX + XADD +
  XREADGROUP; taken: one script, XACK + XDEL + PEXPIREAT), under a prefix of its own.

Both inboxes put before the 202 and mark taken before the answer is said. Rounds
alternate the variants, on fresh data dirs and prefixes; medians are reported.

``--calls N`` measures the Redis inbox's two calls alone instead: N sequential puts, then
N takens, then N plain ``SET``s for comparison, on one client; µs of this process's CPU
per call.

Run: .venv/bin/python bench/inbox_cost.py [--messages 2000] [--rounds 5] [--concurrency 20]
     [--stores sqlite,redis] [--redis-url redis://127.0.0.1:6379/0] [--calls 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import structlog  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from config.settings import DEFAULT_KEYWORDS_FILE, load_settings  # noqa: E402
from gateway.app import build  # noqa: E402
from gateway.bus import InboundMessage  # noqa: E402
from gateway.storage.redis.inbox import RedisInbox  # noqa: E402

Round = tuple[float, float, float | None]  # CPU s, wall s, Redis server CPU s


async def redis_cpu(redis: Redis) -> float:
    info: dict[str, Any] = await redis.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def one_round(
    *, store: str, inbox: bool, messages: int, concurrency: int, redis_url: str
) -> Round:
    """(CPU seconds, wall seconds, Redis CPU seconds) for ``messages`` posted and answered."""
    prefix = f"bench-inbox:{uuid.uuid4().hex[:12]}"
    confirmation: dict[str, Any] = {"store": store}
    if store == "redis":
        confirmation.update(redis_url=redis_url, redis_prefix=prefix)
    admin = Redis.from_url(redis_url) if store == "redis" else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = load_settings(
                None,
                data_dir=Path(tmp) / "data",
                server={"host": "127.0.0.1", "port": 0},
                confirmation=confirmation,
                keywords={"file": DEFAULT_KEYWORDS_FILE, "watch": False},
                channels={
                    "webchat": {
                        "messages_per_minute": 10**9,
                        "messages_per_minute_per_address": 10**9,
                    }
                },
            )
            gw = await build(settings)
            if not inbox:
                gw.bus.inbox = None
            return await _drive(gw, admin, messages=messages, concurrency=concurrency)
    finally:
        if admin is not None:
            keys = [k async for k in admin.scan_iter(match=f"{prefix}:*")]
            if keys:
                await admin.delete(*keys)
            await admin.aclose()


async def _drive(gw: Any, admin: Redis | None, *, messages: int, concurrency: int) -> Round:
    answered = asyncio.Event()
    count = 0

    def on_out() -> None:
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
            await send(msg)
            on_out()

        webchat.send = counted
        gate = asyncio.Semaphore(concurrency)

        async def post(i: int) -> None:
            async with (
                gate,
                http.post(
                    f"{url}/api/chat/r{i}/messages", json={"user": f"u{i}", "text": "/help"}
                ) as resp,
            ):
                assert resp.status == 202, resp.status

        server0 = await redis_cpu(admin) if admin is not None else None
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(post(i) for i in range(messages)))
        await asyncio.wait_for(answered.wait(), 300)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        server = None
        if admin is not None and server0 is not None:
            server = await redis_cpu(admin) - server0
    return cpu, wall, server


async def calls(redis_url: str, n: int) -> None:
    """µs of CPU per put, taken and plain SET, each called ``n`` times in a row."""
    prefix = f"bench-inbox:{uuid.uuid4().hex[:12]}"
    redis = Redis.from_url(redis_url)
    try:
        inbox = await RedisInbox.open(redis, prefix=prefix, owner="bench", claim_idle_seconds=15)
        msgs = [
            InboundMessage(
                channel="webchat", chat_id=f"r{i}", sender_id="u", text="/help", message_id=f"m{i}"
            )
            for i in range(n)
        ]
        await redis.ping()  # the connection is made before the clock starts
        steps: dict[str, Callable[[int], Awaitable[object]]] = {
            "put": lambda i: inbox.put(msgs[i]),
            "taken": lambda i: inbox.taken("webchat", f"m{i}"),
            "SET": lambda i: redis.set(f"{prefix}:plain:{i}", "1"),
        }
        for name, call in steps.items():
            cpu0 = time.process_time()
            for i in range(n):
                await call(i)
            print(f"{name:>5}: {(time.process_time() - cpu0) / n * 1e6:6.0f} µs CPU per call")
    finally:
        keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
        for start in range(0, len(keys), 1000):
            await redis.delete(*keys[start : start + 1000])
        await redis.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--stores", default="sqlite,redis")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--calls", type=int, default=0)
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    if args.calls:
        await calls(args.redis_url, args.calls)
        return
    variants = [(s, i) for s in args.stores.split(",") for i in (False, True)]
    results: dict[tuple[str, bool], list[Round]] = {v: [] for v in variants}
    for _ in range(args.rounds):
        for store, inbox in variants:
            results[(store, inbox)].append(
                await one_round(
                    store=store,
                    inbox=inbox,
                    messages=args.messages,
                    concurrency=args.concurrency,
                    redis_url=args.redis_url,
                )
            )
    n = args.messages
    print(f"{n} messages x {args.rounds} rounds, concurrency {args.concurrency}")
    per_msg: dict[tuple[str, bool], float] = {}
    for (store, inbox), runs in results.items():
        cpu = statistics.median(c for c, _, _ in runs)
        wall = statistics.median(w for _, w, _ in runs)
        servers = [s for _, _, s in runs if s is not None]
        per_msg[(store, inbox)] = cpu / n * 1e6
        line = (
            f"{store:>6} {'inbox' if inbox else 'none':>5}: {n / cpu:7.0f} msg/CPU-s"
            f"  {cpu / n * 1e6:6.0f} µs CPU/msg  {n / wall:6.0f} msg/s wall"
        )
        if servers:
            line += f"  redis-server {statistics.median(servers) / n * 1e6:5.0f} µs/msg"
        print(line)
    for store in args.stores.split(","):
        extra = per_msg[(store, True)] - per_msg[(store, False)]
        ratio = per_msg[(store, True)] / per_msg[(store, False)]
        print(f"{store} inbox: +{extra:.0f} µs CPU per message ({ratio:.2f}x)")


if __name__ == "__main__":
    asyncio.run(main())
