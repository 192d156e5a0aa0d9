"""Confirmation round trips: the real bus + service against a bare baseline, in one run.

A round trip: a requesting coroutine calls ``service.request(...)``; a responder task
(standing in for a channel and the person behind it) takes the CONFIRMATION prompt off
``bus.outbound`` and publishes ``确认`` from the requester with
``bus.publish_inbound``; the request returns ``approved``.

The baseline is the naive seed design (QueryClaw's ``bus/queue.py``, see
/work/shared/reference/nanobot-and-queryclaw.md): asyncio queues, a dict of futures keyed by
session, ``asyncio.wait_for(future, timeout)``, and ``text == "确认"``. No dedupe, no
authorisation, no logging, no store, no prompt update.

Run by hand (figures and method: docs/performance.md)::

    .venv/bin/python bench/confirm_roundtrip.py --sessions 1000 --trips 20 --rounds 5

Log lines are produced as in production (gateway.logs.configure_logging, JSON renderer,
level info) and written to os.devnull.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import inspect
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from a checkout: make `gateway` importable
    sys.path.insert(0, str(ROOT))

from config.keywords import KeywordStore  # noqa: E402
from config.settings import ConfirmationSettings  # noqa: E402
from gateway.bus import InboundMessage, MessageBus, OutboundKind, OutboundMessage  # noqa: E402
from gateway.confirm.model import Confirmation, Risk, Status, ToolCall  # noqa: E402
from gateway.confirm.service import ConfirmationService  # noqa: E402
from gateway.storage.confirmations import ConfirmationStore  # noqa: E402
from gateway.storage.memory.confirmations import MemoryConfirmationStore  # noqa: E402
from gateway.storage.sqlite.confirmations import SqliteConfirmationStore  # noqa: E402

KEYWORDS_FILE = ROOT / "config" / "keywords.toml"
# Long enough that nothing expires during a run; the timer is still armed per request.
TIMEOUT_SECONDS = 300.0
STATEMENT = "DELETE FROM orders WHERE status = 1"
SUMMARY = "DELETE on orders: 3 rows would be deleted"
# Enough frames to see which of our functions an asyncio or logging allocation is for.
TRACE_FRAMES = 12


@dataclass(slots=True)
class RunResult:
    """One timed run of N sessions x T round trips."""

    design: str  # "baseline" | "real"
    sessions: int
    trips: int  # round trips done (sessions x trips per session)
    approved: int  # round trips that ended approved
    seconds: float  # wall clock
    cpu_seconds: float = 0.0  # this process's CPU time: steadier when others load the machine
    latencies: list[float] = field(default_factory=list)  # reply published -> requester resumed

    @property
    def rate(self) -> float:
        return self.trips / self.seconds

    @property
    def cpu_rate(self) -> float:
        return self.trips / self.cpu_seconds

    def latency_ms(self, q: float) -> float:
        return _quantile(self.latencies, q) * 1000.0


@dataclass(slots=True)
class MemoryResult:
    """Traced bytes held while N confirmations are pending and nobody answers."""

    design: str
    pending: int
    total_bytes: int
    by_area: dict[str, int]

    @property
    def per_pending(self) -> float:
        return self.total_bytes / self.pending


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


# ---------------------------------------------------------------------------- real path


class Ended:
    """Each ended record, as the service hands it on (the agent loop's place)."""

    def __init__(self) -> None:
        self._ended: dict[str, asyncio.Future[Confirmation]] = {}

    def _future(self, confirmation_id: str) -> asyncio.Future[Confirmation]:
        loop = asyncio.get_running_loop()
        return self._ended.setdefault(confirmation_id, loop.create_future())

    def __call__(self, final: Confirmation) -> None:
        fut = self._future(final.id)
        if not fut.done():
            fut.set_result(final)

    async def wait(self, confirmation_id: str) -> Confirmation:
        try:
            return await self._future(confirmation_id)
        finally:
            del self._ended[confirmation_id]


def build_real(
    keywords_file: Path = KEYWORDS_FILE, store: ConfirmationStore | None = None
) -> tuple[MessageBus, ConfirmationService, Ended]:
    """The production pieces, wired as gateway.app wires them (memory store by default)."""
    bus = MessageBus()
    service = ConfirmationService(
        store=store or MemoryConfirmationStore(),
        bus=bus,
        # --pending holds 10,000 at once: what they cost is measured, not the cap on them.
        settings=ConfirmationSettings(
            store="memory", timeout_seconds=TIMEOUT_SECONDS, max_pending=10**9
        ),
        keywords=KeywordStore(keywords_file),
    )
    ended = Ended()
    service.on_settled(ended)
    return bus, service, ended


def _real_request(
    service: ConfirmationService, session: int, trip: int
) -> Coroutine[Any, Any, Confirmation]:
    return service.request(
        session_key=f"bench:chat{session}",
        channel="bench",
        chat_id=f"chat{session}",
        requester=f"user{session}",
        is_group=False,
        tool_call=ToolCall("sql_modify", {"statement": STATEMENT}, f"call_{session}_{trip}"),
        summary=SUMMARY,
        details={"statement": STATEMENT, "kind": "DELETE", "tables": ["orders"], "rows": 3},
        risk=Risk.MEDIUM,
    )


async def open_store(kind: str, directory: Path) -> ConfirmationStore:
    """A fresh store of ``kind`` ("memory" or "sqlite", a new file in ``directory``)."""
    if kind == "sqlite":
        path = directory / f"bench-{os.getpid()}-{time.monotonic_ns()}.db"
        return await SqliteConfirmationStore.open(path)
    return MemoryConfirmationStore()


async def run_real(
    sessions: int,
    trips_per_session: int,
    *,
    keywords_file: Path = KEYWORDS_FILE,
    store: str = "memory",
    directory: Path | None = None,
) -> RunResult:
    with tempfile.TemporaryDirectory() as tmp:
        return await _run_real(
            sessions,
            trips_per_session,
            keywords_file=keywords_file,
            store=await open_store(store, directory or Path(tmp)),
        )


async def _run_real(
    sessions: int, trips_per_session: int, *, keywords_file: Path, store: ConfirmationStore
) -> RunResult:
    bus, service, ended = build_real(keywords_file, store)
    sent: dict[str, float] = {}  # confirmation id -> when the reply was published
    result = RunResult("real", sessions, sessions * trips_per_session, 0, 0.0)

    async def responder() -> None:
        seq = 0
        while True:
            out = await bus.consume_outbound()
            if out.kind is not OutboundKind.CONFIRMATION or out.confirmation is None:
                continue  # the CONFIRMATION_UPDATE after each decision: a channel would send it
            conf = out.confirmation
            seq += 1
            reply = InboundMessage(
                channel=out.channel,
                chat_id=out.chat_id,
                sender_id=conf.requester,
                text="确认",
                message_id=f"m{seq}",
            )
            sent[conf.id] = time.perf_counter()
            await bus.publish_inbound(reply)

    async def session(i: int) -> None:
        for k in range(trips_per_session):
            asked = await _real_request(service, i, k)
            conf = await ended.wait(asked.id)
            resumed = time.perf_counter()
            result.latencies.append(resumed - sent.pop(conf.id))
            if conf.status is Status.APPROVED:
                result.approved += 1

    result.seconds, result.cpu_seconds = await _timed(responder, session, sessions)
    await service.shutdown()
    await store.close()
    return result


# ---------------------------------------------------------------------------- baseline


class BaselineBus:
    """The seed design: queues, a dict of futures by session, ``text == "确认"``."""

    def __init__(self) -> None:
        self.inbound: asyncio.Queue[InboundMessage] = asyncio.Queue()
        self.outbound: asyncio.Queue[OutboundMessage] = asyncio.Queue()
        self.pending: dict[str, asyncio.Future[bool]] = {}

    async def publish_inbound(self, msg: InboundMessage) -> None:
        fut = self.pending.pop(msg.session_key, None)
        if fut is not None and not fut.done():
            fut.set_result(msg.text == "确认")
            return
        await self.inbound.put(msg)

    async def request(self, *, session_key: str, channel: str, chat_id: str, summary: str) -> bool:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self.pending[session_key] = fut
        await self.outbound.put(
            OutboundMessage(
                channel=channel,
                chat_id=chat_id,
                session_key=session_key,
                kind=OutboundKind.CONFIRMATION,
                text=f"{summary}\n\n回复 **确认** 执行，**取消** 取消。",
            )
        )
        try:
            return await asyncio.wait_for(fut, TIMEOUT_SECONDS)
        except TimeoutError:
            self.pending.pop(session_key, None)
            return False


def _baseline_request(bus: BaselineBus, session: int) -> Coroutine[Any, Any, bool]:
    key, chat = f"bench:chat{session}", f"chat{session}"  # the caller's arguments
    # One line, so the memory report can tell the request() coroutine made here apart.
    return bus.request(session_key=key, channel="bench", chat_id=chat, summary=SUMMARY)


def _baseline_coroutine_line() -> int:
    lines, first = inspect.getsourcelines(_baseline_request)
    return first + next(i for i, text in enumerate(lines) if "return bus.request(" in text)


def _real_coroutine_line() -> int:
    lines, first = inspect.getsourcelines(_real_request)
    return first + next(i for i, text in enumerate(lines) if "return service.request(" in text)


async def run_baseline(sessions: int, trips_per_session: int) -> RunResult:
    bus = BaselineBus()
    sent: dict[str, float] = {}  # session key -> when the reply was published
    result = RunResult("baseline", sessions, sessions * trips_per_session, 0, 0.0)

    async def responder() -> None:
        seq = 0
        while True:
            out = await bus.outbound.get()
            seq += 1
            reply = InboundMessage(
                channel=out.channel,
                chat_id=out.chat_id,
                sender_id="someone",  # the seed never looks at the sender
                text="确认",
                message_id=f"m{seq}",
            )
            sent[reply.session_key] = time.perf_counter()
            await bus.publish_inbound(reply)

    async def session(i: int) -> None:
        key = f"bench:chat{i}"
        for _ in range(trips_per_session):
            ok = await _baseline_request(bus, i)
            resumed = time.perf_counter()
            result.latencies.append(resumed - sent.pop(key))
            if ok:
                result.approved += 1

    result.seconds, result.cpu_seconds = await _timed(responder, session, sessions)
    return result


# ---------------------------------------------------------------------------- shared


async def _timed(
    responder: Callable[[], Coroutine[Any, Any, None]],
    session: Callable[[int], Coroutine[Any, Any, None]],
    sessions: int,
) -> tuple[float, float]:
    """Start the responder, run every session at once; wall and CPU seconds of the sessions."""
    responder_task = asyncio.create_task(responder(), name="bench-responder")
    start = time.perf_counter()
    cpu_start = time.process_time()
    everyone = asyncio.gather(*(session(i) for i in range(sessions)))
    either: set[asyncio.Future[Any]] = {everyone, responder_task}
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    if responder_task.done():
        # The responder never ends on its own: without it the sessions would wait forever.
        everyone.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await everyone
        raise RuntimeError("bench responder stopped") from responder_task.exception()
    responder_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await responder_task
    await everyone  # re-raises a session's error
    return elapsed, cpu


def _baseline_lines() -> range:
    lines, first = inspect.getsourcelines(BaselineBus)
    return range(first, first + len(lines))


def _area(frames: list[tuple[str, int]], baseline_lines: range) -> str:
    """Who an allocation is for, from its traceback (most recent frame first)."""
    top = frames[0][0]
    for name, line in frames:
        if "/structlog/" in name or "/logging/" in name or name.endswith("/gateway/logs.py"):
            # Not logging's own state (the total is the same with logging off): blocks
            # first allocated inside a log call and reused for something that stays.
            return "other: blocks first allocated during a log call"
        if name.endswith(
            ("/gateway/storage/confirmations.py", "/gateway/storage/memory/confirmations.py")
        ):
            return "service: store entries"
        if "/gateway/" in name:
            if "/asyncio/" in top:
                return "service: asyncio future and its awaiting"
            return "service: waiting coroutine, record, id, details, deadline"
        if name.endswith("/bench/confirm_roundtrip.py"):
            if line in baseline_lines:
                return "baseline: future, wait_for, timer"
            if line == _baseline_coroutine_line() and "/asyncio/" not in top:
                return "baseline: request() coroutine"
            if line == _real_coroutine_line() and "/asyncio/" not in top:
                return "service: request() coroutine (its arguments and locals)"
            if "/asyncio/" in top or "/_weakrefset.py" in top:
                return "waiting turn (caller): Task"
            return "waiting turn (caller): the arguments it built"
    return "other"


async def _measure_pending(
    design: str,
    n: int,
    start: Callable[[int], Coroutine[Any, Any, Any]],
    outbound: asyncio.Queue[OutboundMessage],
) -> tuple[MemoryResult, list[asyncio.Task[Any]]]:
    """Traced bytes for ``n`` waiting requests: tasks, futures, timers, store entries.

    Prompts are taken off the outbound queue and dropped as they come (a channel would
    have sent them), so what stays is what a pending confirmation costs while it waits.
    """
    gc.collect()
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start(TRACE_FRAMES)
    try:
        before = tracemalloc.take_snapshot()
        tasks = [asyncio.create_task(start(i), name=f"pending-{i}") for i in range(n)]
        for _ in range(n):  # every request has posted its prompt, so every one is waiting
            await outbound.get()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        if not was_tracing:
            tracemalloc.stop()
    by_area: dict[str, int] = {}
    total = 0
    baseline_lines = _baseline_lines()
    for stat in after.compare_to(before, "traceback"):
        frames = [(f.filename.replace("\\", "/"), f.lineno) for f in reversed(stat.traceback)]
        area = _area(frames, baseline_lines)
        by_area[area] = by_area.get(area, 0) + stat.size_diff
        total += stat.size_diff
    return MemoryResult(design, n, total, by_area), tasks


async def pending_memory_real(n: int, *, keywords_file: Path = KEYWORDS_FILE) -> MemoryResult:
    bus, service, _ = build_real(keywords_file)
    mem, tasks = await _measure_pending(
        "real", n, lambda i: _real_request(service, i, 0), bus.outbound
    )
    # Every pending one ends cancelled (never approved).
    asked = await asyncio.gather(*tasks)
    await service.shutdown()
    finals = [await service.store.get(c.id) for c in asked]
    if not all(c is not None and c.status is Status.CANCELLED for c in finals):
        raise RuntimeError("a pending confirmation did not end cancelled on shutdown")
    return mem


async def pending_memory_baseline(n: int) -> MemoryResult:
    bus = BaselineBus()
    mem, tasks = await _measure_pending(
        "baseline", n, lambda i: _baseline_request(bus, i), bus.outbound
    )
    for fut in bus.pending.values():
        fut.set_result(False)
    await asyncio.gather(*tasks)
    return mem


# ---------------------------------------------------------------------------- CLI


def configure_null_logging() -> TextIO:
    """Production logging (JSON lines, level info, loggers cached as ``gateway serve`` has
    them) into os.devnull: rendered, then dropped."""
    from gateway.logs import configure_logging

    sink = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives for the whole run
    configure_logging("info", "json", sink, cache=True)
    return sink


def configure_no_logging() -> None:
    """structlog drops every call below CRITICAL at the wrapper: no record, no rendering."""
    import logging

    import structlog

    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
        logger_factory=structlog.ReturnLoggerFactory(),
    )


def _median(values: list[float]) -> float:
    return statistics.median(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=1000, help="sessions at once")
    parser.add_argument("--trips", type=int, default=20, help="round trips per session")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved runs of each design")
    parser.add_argument("--pending", type=int, default=10_000, help="pending for the memory run")
    parser.add_argument(
        "--store",
        choices=("memory", "sqlite"),
        default="memory",
        help="the real design's store (sqlite: a new file in a temporary directory)",
    )
    parser.add_argument(
        "--logging",
        choices=("json", "off"),
        default="json",
        help="json: production JSON lines into os.devnull (default); off: drop every line "
        "before it is built (shows what logging costs)",
    )
    args = parser.parse_args(argv)

    if args.logging == "json":
        configure_null_logging()
    else:
        configure_no_logging()

    print(
        f"python {platform.python_version()} on {platform.machine()}, "
        f"{os.cpu_count()} cpus; sessions={args.sessions} trips/session={args.trips} "
        f"rounds={args.rounds} store={args.store} "
        f"logging={'json -> os.devnull' if args.logging == 'json' else 'off'}"
    )
    runs: dict[str, list[RunResult]] = {"baseline": [], "real": []}
    for r in range(args.rounds):
        # Alternate which design goes first, so drift on a noisy machine hits both.
        order = ("baseline", "real") if r % 2 == 0 else ("real", "baseline")
        for design in order:
            gc.collect()
            if design == "baseline":
                res = asyncio.run(run_baseline(args.sessions, args.trips))
            else:
                res = asyncio.run(run_real(args.sessions, args.trips, store=args.store))
            if res.approved != res.trips:
                print(f"ERROR: {design}: {res.approved}/{res.trips} approved", file=sys.stderr)
                return 1
            runs[design].append(res)
            print(
                f"  round {r + 1} {design:8s} {res.rate:8.0f} trips/s wall "
                f"{res.cpu_rate:8.0f} trips/s cpu  "
                f"p50 {res.latency_ms(0.5):8.3f} ms  p99 {res.latency_ms(0.99):8.3f} ms"
            )

    print("\nmedians over rounds")
    rates = {d: _median([x.rate for x in rs]) for d, rs in runs.items()}
    cpu_rates = {d: _median([x.cpu_rate for x in rs]) for d, rs in runs.items()}
    for design, rs in runs.items():
        p50 = _median([x.latency_ms(0.5) for x in rs])
        p99 = _median([x.latency_ms(0.99) for x in rs])
        print(
            f"  {design:8s} {rates[design]:8.0f} round trips/s (wall)  "
            f"{cpu_rates[design]:8.0f} per CPU-second ({1e6 / cpu_rates[design]:6.1f} us each)  "
            f"reply->resume p50 {p50:.3f} ms  p99 {p99:.3f} ms"
        )
    pairs = list(zip(runs["real"], runs["baseline"], strict=True))
    wall = [a.rate / b.rate for a, b in pairs]
    cpu = [a.cpu_rate / b.cpu_rate for a, b in pairs]
    print(
        f"  ratio real/baseline {rates['real'] / rates['baseline']:.2f} wall, "
        f"{cpu_rates['real'] / cpu_rates['baseline']:.2f} CPU\n"
        f"    per round, wall: {', '.join(f'{x:.2f}' for x in wall)}; "
        f"CPU: {', '.join(f'{x:.2f}' for x in cpu)}"
    )

    if args.pending:
        print(f"\nmemory per pending confirmation, {args.pending} pending (tracemalloc)")
        for mem in (
            asyncio.run(pending_memory_baseline(args.pending)),
            asyncio.run(pending_memory_real(args.pending)),
        ):
            print(f"  {mem.design:8s} {mem.per_pending:8.0f} B per pending")
            for area, size in sorted(mem.by_area.items(), key=lambda kv: -kv[1]):
                print(f"      {size / mem.pending:8.0f} B  {area}")
            turn = sum(v for k, v in mem.by_area.items() if k.startswith("waiting turn"))
            print(
                f"      {(mem.total_bytes - turn) / mem.pending:8.0f} B  held for the confirmation "
                "itself (all but the waiting turn)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
