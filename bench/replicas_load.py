"""Many concurrent chats across real ``gateway serve`` replicas on one Redis (issue 13).

Each chat ``i`` posts "write c<i>" to the web chat of replica ``i % n``; the model (the
loopback OpenAI fake) asks for ``gated_write("c<i>")``, which needs a confirmation; the
person approves with a chat reply "确认 <id>" on the *next* replica (a cross-replica
decision when n > 1); the asking replica's turn wakes, runs the call and the model answers.
All chats run at once.

Reported: errors (non-2xx answers, chats whose call did not end ``succeeded``, error log
lines), lost cards (a chat whose prompt card is not in its room), calls not run exactly
once, round trips/s, decide -> claim p50/p99 (from the audit trail: the reply's ``decided``
event on one replica to the ``claimed`` event of the woken turn on the other), and Redis
commands per round trip (INFO commandstats of a private ``redis-server``, everything the
replicas sent meanwhile, heartbeats and blocking stream reads included).

    .venv/bin/python bench/replicas_load.py --chats 500 --replicas 2
    .venv/bin/python bench/replicas_load.py --chats 500 --replicas 1
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from gateway import texts  # noqa: E402
from tests.admin.test_api import read_event  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI  # noqa: E402
from tests.process.replica_support import ReplicaSet, chat_lines, script_model  # noqa: E402
from tests.services import private_redis  # noqa: E402

# What the replicas need for this many chats: one SSE reader per replica sees every event.
# Every chat posts from this one address: no per-address message limit.
LOAD_SETTINGS = {
    "GATEWAY_ADMIN__SSE_QUEUE_SIZE": "100000",
    "GATEWAY_CHANNELS__WEBCHAT__MESSAGES_PER_MINUTE_PER_ADDRESS": "0",
}


@dataclass
class LoadResult:
    chats: int
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)
    lost_cards: list[str] = field(default_factory=list)
    # Errors where the chat was told the store was unavailable (overload failing closed).
    refused: list[str] = field(default_factory=list)
    decide_to_claim: list[float] = field(default_factory=list)

    @property
    def round_trips_per_second(self) -> float:
        return self.chats / self.seconds if self.seconds else 0.0


class _Events:
    """One replica's SSE feed: prompt ids by session, executed records by id."""

    def __init__(self) -> None:
        self.requested: dict[str, asyncio.Future[str]] = {}
        self.executed: dict[str, asyncio.Future[dict[str, Any]]] = {}

    def _future(self, table: dict[str, Any], key: str) -> asyncio.Future[Any]:
        if key not in table:
            table[key] = asyncio.get_running_loop().create_future()
        future: asyncio.Future[Any] = table[key]
        return future

    def prompt(self, session_key: str) -> asyncio.Future[str]:
        return self._future(self.requested, session_key)

    def ran(self, cid: str) -> asyncio.Future[dict[str, Any]]:
        return self._future(self.executed, cid)

    async def follow(self, http: aiohttp.ClientSession, ready: asyncio.Event) -> None:
        async with http.get("/api/events", timeout=aiohttp.ClientTimeout(total=None)) as sse:
            ready.set()
            while True:
                event = await read_event(sse, timeout=3600)
                data = event["data"]
                if event["event"] == "confirmation.requested":
                    _settle(self.prompt(data["session_key"]), data["id"])
                elif event["event"] == "confirmation.executed":
                    _settle(self.ran(data["id"]), data["confirmation"])


def _settle(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)


async def drive(urls: list[str], chats: int, *, timeout: float = 120.0) -> LoadResult:
    """Run ``chats`` concurrent chats over the replicas at ``urls``; what became of them."""
    result = LoadResult(chats)
    sessions = [aiohttp.ClientSession(base_url=url) for url in urls]
    feeds = [_Events() for _ in urls]
    readers: list[asyncio.Task[None]] = []
    try:
        for http, feed in zip(sessions, feeds, strict=True):
            ready = asyncio.Event()
            readers.append(asyncio.create_task(feed.follow(http, ready)))
            await asyncio.wait_for(ready.wait(), 30)
        started = time.perf_counter()
        outcomes = await asyncio.gather(
            *(_chat(i, sessions, feeds, timeout) for i in range(chats)), return_exceptions=True
        )
        result.seconds = time.perf_counter() - started
        ids: dict[int, str] = {}
        for i, outcome in enumerate(outcomes):
            if isinstance(outcome, BaseException):
                result.errors.append(f"chat {i}: {type(outcome).__name__}: {outcome}")
                if await _told_unavailable(sessions[i % len(urls)], f"load{i}"):
                    result.refused.append(f"load{i}")
            else:
                ids[i] = outcome
        for i, cid in ids.items():
            http = sessions[i % len(urls)]
            if not await _card_shown(http, f"load{i}", cid):
                result.lost_cards.append(f"load{i}")
            kinds = {e["kind"]: e["at"] for e in await _trail(http, cid)}
            if "decided" in kinds and "claimed" in kinds:
                result.decide_to_claim.append(kinds["claimed"] - kinds["decided"])
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        for http in sessions:
            await http.close()
    return result


async def _chat(
    i: int, sessions: list[aiohttp.ClientSession], feeds: list[_Events], timeout: float
) -> str:
    n = len(sessions)
    asking, deciding = sessions[i % n], sessions[(i + 1) % n]
    feed = feeds[i % n]
    room, user = f"load{i}", f"u{i}"
    prompted = feed.prompt(f"webchat:{room}")
    await _post(asking, room, user, f"write c{i}")
    try:
        cid = await asyncio.wait_for(asyncio.shield(prompted), timeout)
    except TimeoutError:
        raise AssertionError(f"{room}: no prompt within {timeout:g} s") from None
    ran = feed.ran(cid)
    await _post(deciding, room, user, f"确认 {cid}")
    try:
        record = await asyncio.wait_for(asyncio.shield(ran), timeout)
    except TimeoutError:
        raise AssertionError(f"{room}: {cid} approved, not run within {timeout:g} s") from None
    state = record["execution"]["state"]
    if state != "succeeded":
        raise AssertionError(f"{cid} ended {state}")
    return cid


async def _post(http: aiohttp.ClientSession, room: str, user: str, text: str) -> None:
    async with http.post(f"/api/chat/{room}/messages", json={"user": user, "text": text}) as r:
        if r.status != 202:
            raise AssertionError(f"POST {room}: {r.status} {await r.text()}")


async def _card_shown(http: aiohttp.ClientSession, room: str, cid: str) -> bool:
    return any(
        m["kind"] == "confirmation" and (m.get("confirmation") or {}).get("id") == cid
        for m in await chat_lines(http, room)
    )


async def _told_unavailable(http: aiohttp.ClientSession, room: str) -> bool:
    return any(
        m["text"]
        in (texts.STORE_UNAVAILABLE_MESSAGE, texts.STORE_UNAVAILABLE.format(tool="gated_write"))
        for m in await chat_lines(http, room)
    )


async def _trail(http: aiohttp.ClientSession, cid: str) -> list[dict[str, Any]]:
    async with http.get(f"/api/confirmations/{cid}/events") as resp:
        return list((await resp.json())["events"])


def runs_not_once(runs: list[str], chats: int) -> dict[str, int]:
    """Calls that did not run exactly once: name -> how many times they ran."""
    counted = Counter({f"c{i}": 0 for i in range(chats)})
    counted.update(runs)
    return {name: count for name, count in counted.items() if count != 1}


# ---------------------------------------------------------------------- the bench


async def _commands(url: str) -> Counter[str]:
    """Calls per command so far (``cmdstat_evalsha`` -> ``evalsha``)."""
    from redis.asyncio import Redis

    admin = Redis.from_url(url)
    try:
        stats = await admin.info("commandstats")
        return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})
    finally:
        await admin.aclose()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def bench(chats: int, replicas: int, lease: float) -> None:
    with (
        private_redis() as url,
        FakeOpenAI() as fake,
        tempfile.TemporaryDirectory(prefix="replicas-load-") as tmp,
    ):
        script_model(fake, 2 * chats + 10)
        group = ReplicaSet(
            Path(tmp), redis_url=url, prefix="bench", fake=fake, lease=lease, **LOAD_SETTINGS
        )
        try:
            started = [group.start(f"r{n}") for n in range(replicas)]
            for i in range(chats):
                group.open_gate(f"c{i}")
            before = asyncio.run(_commands(url))
            result = asyncio.run(drive([r.url for r in started], chats))
            after = asyncio.run(_commands(url))
            runs = group.runs_of()
        finally:
            group.stop()
        logged = [line for r in started for line in r.errors()]
        for r in started:  # for a closer look: the replicas' JSON logs
            (Path(tempfile.gettempdir()) / f"replicas-load-{r.name}.log").write_text(
                "".join(r.process.lines), encoding="utf-8"
            )
    after.subtract(before)
    report(result, replicas, runs_not_once(runs, chats), after, logged)


def report(
    result: LoadResult,
    replicas: int,
    not_once: dict[str, int],
    commands: Counter[str],
    logged: list[str],
) -> None:
    ms = [t * 1000 for t in result.decide_to_claim]
    print(f"{result.chats} concurrent chats on {replicas} replica(s)")
    print(
        f"  errors: {len(result.errors)} ({len(result.refused)} told the store is unavailable), "
        f"error log lines: {len(logged)}"
    )
    print(f"  lost cards: {len(result.lost_cards)}, calls not run exactly once: {len(not_once)}")
    print(f"  round trips/s: {result.round_trips_per_second:.1f} ({result.seconds:.2f} s)")
    if ms:
        print(
            f"  decide -> claim (n={len(ms)}): p50 {statistics.median(ms):.1f} ms, "
            f"p99 {_percentile(ms, 0.99):.1f} ms, max {max(ms):.1f} ms"
        )
    n = result.chats
    print(f"  Redis commands per round trip: {commands.total() / n:.1f}")
    print("    " + ", ".join(f"{k} {v / n:.1f}" for k, v in commands.most_common(8)))
    for line in (result.errors + logged)[:10]:
        print(f"    {line.strip()[:200]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=500)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--lease", type=float, default=15.0)
    args = parser.parse_args()
    bench(args.chats, args.replicas, args.lease)
