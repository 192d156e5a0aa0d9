"""Cross-replica decide -> go on, on Redis, and the Redis commands a round trip costs.

Two confirmation services (replicas A and B) share one Redis store under a fresh prefix.
A asks (``service.request``, as a turn does: it returns once the prompt is out); B decides
(``service.decide``, as a reply that reached B would); the figure is the time from B's
decide call to the ended record being handed to the path that goes on with it (claim →
run → continue), on B, where the decision was taken (issue 23: before it, A's waiting turn
was woken through the lifecycle stream). Run sequentially ``--n`` times, after
``--warmup`` trips.

Commands are counted on the client side (every command and pipeline entry the two
clients send, one EVALSHA counting as one, plus the blocking XREADs of the followers),
so other users of a shared Redis do not disturb the figure. Each trip ends when both
replicas have also shown it in their live views (the other replica's events reached their
listeners), so no trip's reads are counted in the next one.

    .venv/bin/python bench/replica_roundtrip.py --n 200
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from redis.asyncio.client import Pipeline, Redis  # noqa: E402

from config.keywords import load_keywords  # noqa: E402
from config.settings import DEFAULT_KEYWORDS_FILE, ConfirmationSettings  # noqa: E402
from gateway.bus import MessageBus, OutboundKind  # noqa: E402
from gateway.confirm.model import Answer, Confirmation, Decision, ToolCall  # noqa: E402
from gateway.confirm.service import ConfirmationEvent, ConfirmationService  # noqa: E402
from gateway.storage.redis.confirmations import RedisConfirmationStore  # noqa: E402

COMMANDS: Counter[str] = Counter()


def _count_commands() -> None:
    plain = Redis.execute_command
    piped = Pipeline.execute

    async def execute_command(self: Redis, *args: Any, **options: Any) -> Any:
        if not isinstance(self, Pipeline):
            COMMANDS[str(args[0]).upper()] += 1
        return await plain(self, *args, **options)

    async def execute(self: Pipeline, raise_on_error: bool = True) -> Any:
        for command, _ in self.command_stack:
            COMMANDS[str(command[0]).upper()] += 1
        return await piped(self, raise_on_error)

    Redis.execute_command = execute_command  # type: ignore[method-assign]
    Pipeline.execute = execute  # type: ignore[method-assign]


class Remote:
    """The remote events a replica's listeners heard: (kind, confirmation id)."""

    def __init__(self, service: ConfirmationService) -> None:
        self.heard: set[tuple[str, str]] = set()
        self._changed = asyncio.Event()
        service.subscribe(self._on_event)

    def _on_event(self, event: ConfirmationEvent) -> None:
        if event.remote:
            self.heard.add((event.kind, event.confirmation.id))
            self._changed.set()

    async def wait(self, *wanted: tuple[str, str]) -> None:
        async with asyncio.timeout(10):
            while not self.heard.issuperset(wanted):
                self._changed.clear()
                await self._changed.wait()


GOING_ON: dict[str, asyncio.Future[None]] = {}  # confirmation id -> handed on to go on


def _went_on(final: Confirmation) -> None:
    fut = GOING_ON.get(final.id)
    if fut is not None and not fut.done():
        fut.set_result(None)


def _service(store: RedisConfirmationStore) -> ConfirmationService:
    service = ConfirmationService(
        store=store,
        bus=MessageBus(),
        settings=ConfirmationSettings(timeout_seconds=300),
        keywords=load_keywords(DEFAULT_KEYWORDS_FILE),
    )
    service.on_settled(_went_on)
    return service


async def _trip(a: ConfirmationService, b: ConfirmationService, n: int) -> float:
    """One round trip; the time from B's decision to its going on."""
    seconds, cid = await _timed_trip(a, b, n)
    # Settled: each replica's live views showed what the other did.
    if a is b:
        await VIEWS[1].wait(("requested", cid), ("resolved", cid))
    else:
        await VIEWS[1].wait(("requested", cid))
        await VIEWS[0].wait(("resolved", cid))
    return seconds


async def _timed_trip(a: ConfirmationService, b: ConfirmationService, n: int) -> tuple[float, str]:
    call = ToolCall(name="sql_modify", args={"sql": "DELETE FROM t WHERE id = 1"}, call_id=f"c{n}")
    asked = await a.request(
        session_key=f"bench:chat{n}",
        channel="bench",
        chat_id=f"chat{n}",
        requester="alice",
        is_group=False,
        tool_call=call,
        summary="DELETE t",
    )
    prompt = await a.bus.consume_outbound()
    while prompt.kind is not OutboundKind.CONFIRMATION:
        prompt = await a.bus.consume_outbound()
    going_on = GOING_ON[asked.id] = asyncio.get_running_loop().create_future()
    start = time.perf_counter()
    await b.answer(
        Answer(confirmation_id=asked.id, decision=Decision.APPROVE, actor="alice", via="text")
    )
    await asyncio.wait_for(going_on, timeout=10)
    del GOING_ON[asked.id]
    return time.perf_counter() - start, asked.id


VIEWS: list[Remote] = []  # replica A's, then B's


async def main(url: str, n: int, warmup: int) -> None:
    _count_commands()
    prefix = f"bench:{uuid.uuid4().hex}"
    store_a = await RedisConfirmationStore.from_url(url, prefix=prefix)
    store_b = await RedisConfirmationStore.from_url(url, prefix=prefix)
    a, b = _service(store_a), _service(store_b)
    VIEWS[:] = [Remote(a), Remote(b)]
    await a.recover()
    await b.recover()
    try:
        for i in range(warmup):
            await _trip(a, b, -1 - i)
            await _trip(a, a, -1000 - i)
        # Interleaved, so that machine noise hits both alike. The baseline: the same
        # replica asks and decides.
        times: list[float] = []
        local: list[float] = []
        counted: Counter[str] = Counter()
        for i in range(n):
            COMMANDS.clear()
            times.append(await _trip(a, b, i))
            counted.update(COMMANDS)
            local.append(await _trip(a, a, 10_000 + i))
    finally:
        await a.shutdown()
        await b.shutdown()
        keys = [k async for k in store_a._redis.scan_iter(match=f"{prefix}:*")]
        if keys:
            await store_a._redis.delete(*keys)
        await store_a.close()
        await store_b.close()
    for label, series in (("cross-replica", times), ("same replica (baseline)", local)):
        ms = sorted(t * 1000 for t in series)
        p99 = ms[min(len(ms) - 1, round(0.99 * len(ms)) - 1)]
        print(
            f"{label} decide -> go on, n={n}: p50 {statistics.median(ms):.2f} ms, "
            f"p99 {p99:.2f} ms, max {ms[-1]:.2f} ms"
        )
    total = sum(counted.values())
    print(f"Redis commands per round trip (both replicas): {total / n:.1f}")
    for name, count in sorted(counted.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<10} {count / n:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.n, args.warmup))
