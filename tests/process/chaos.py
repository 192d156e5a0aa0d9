"""A seeded chaos run (issue 23): the hold under faults, checked on what users can see.

Real ``gateway serve`` replicas (tests/process/replica_support.py) share a ``redis-server``
of the run's own (``CLIENT PAUSE`` and ``CLIENT KILL`` hit every client of a server, so the
shared one is left to the other tests) and a PostgreSQL table of the run's own. Chats ask
for calls, each the ``INSERT`` of a marker row of its own, half through a model turn (the
loopback OpenAI fake) and half with ``/sql``, and each is decided at random through every
entrance: a typed ``确认`` / ``取消`` in the web chat, a card click (the web chat
WebSocket's ``decide`` frame), the admin API, a cancel (another message, with
``on_other_message = "cancel"``), or no answer until ``[confirmation] timeout_seconds``.
Some inserts are slow (a trigger sleeps), so that faults land while calls run. Meanwhile a
nemesis kill -9s and SIGTERMs replicas (often the one running or holding a call) and starts
them again, pauses Redis (``CLIENT PAUSE``) and kills its client connections.

Afterwards, with every replica up and nothing left to settle, the properties below are
checked on what users see: the admin API (records and audit trails), the web chat rooms as
open pages showed them (a WebSocket per room on every replica, opened again after each
restart) and the database. tests/process/test_chaos.py runs a short form, bench/chaos.py
the long one. The seed fixes every random choice (what is asked, how it is decided, which
fault comes next, whom it hits); on a shared machine the timing still varies, so a seed
replays the same plan, not the same interleaving.

One module past 600 lines on purpose: both forms share it, and it is one run (the chats,
the pages, the nemesis) with the judgement of what that run left (``judge``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import create_async_engine

from tests.fakes.openai_server import Answer, FakeOpenAI, text, tool_calls
from tests.process.replica_support import ReplicaSet
from tests.services import private_redis
from tests.webchat.support import eventually

NO_CALL_RAN_TWICE = "no call ran twice"
NO_EFFECT_WITHOUT_RECORD = "no effect without a record"
EVERY_RECORD_ENDED = "every record reached an end"
DEADLINE_KEPT = "no call stayed pending past its deadline"
EXECUTION_AGREES = "the execution state agrees with the database"
APPROVED_200_RAN = "every approval answered 200 ran or was reported"
INTERRUPTED_TOLD = "every interrupted call's chat was told"
CONVERSATION_WENT_ON = "the conversation went on where its turn's replica lived"
RESUMED_WENT_ON = "the conversation went on where a turn was resumed elsewhere"
ASKED_ONCE = "every message made at most one call"
PROPERTIES = (
    NO_CALL_RAN_TWICE,
    NO_EFFECT_WITHOUT_RECORD,
    EVERY_RECORD_ENDED,
    DEADLINE_KEPT,
    EXECUTION_AGREES,
    APPROVED_200_RAN,
    INTERRUPTED_TOLD,
    CONVERSATION_WENT_ON,
    RESUMED_WENT_ON,
    ASKED_ONCE,
)

# Properties that a product bug breaks today, with the bug: the test marks them xfail, the
# bench reports them as KNOWN. Remove the entry with the fix.
# Properties a known product bug breaks, with the bug: reported KNOWN by bench/chaos.py and
# xfail in tests/process/test_chaos.py. Empty: the two the first runs found are fixed (a
# refused call's turn stopped when its asking replica died: the wait is data now; a
# deadline met by a Redis outage was dropped: expiries retry until the store answers).
KNOWN_BUGS: dict[str, str] = {}

# How a call is decided, and how often (weights): approvals lead, so that calls run.
DECISIONS: tuple[tuple[str, int], ...] = (
    ("reply approve", 3),
    ("click approve", 3),
    ("admin approve", 3),
    ("reply reject", 1),
    ("click reject", 1),
    ("admin reject", 1),
    ("cancel", 1),
    ("timeout", 1),
)
# kill -9, SIGTERM, CLIENT PAUSE, CLIENT KILL: a kill leaves the most to adopt.
FAULT_WEIGHTS = (3, 2, 2, 1)
FINAL_EXECUTIONS = ("succeeded", "failed", "interrupted")
_ASK = re.compile(r"chaos (\w+)")
_MARKER = re.compile(r"VALUES \('(\w+)'\)")

Record = dict[str, Any]  # a confirmation as GET /api/confirmations/{id} shows it


@dataclass(frozen=True, kw_only=True)
class ChaosConfig:
    """One run: its seed, how long calls are asked and faults made, and the replicas."""

    seed: int
    duration: float
    replicas: int = 2
    chats: int = 4  # rooms asking at once, one call at a time each
    timeout_seconds: float = 10.0  # [confirmation] timeout_seconds: the "timeout" entrance
    lease: float = 3.0
    slow_share: float = 0.3  # calls whose INSERT sleeps, so that faults land mid-run
    slow_seconds: float = 1.5
    fault_gap: tuple[float, float] = (1.0, 4.0)  # seconds between two faults

    @property
    def settle_seconds(self) -> float:
        """How long a call may take to show up or end, faults included."""
        return self.timeout_seconds + 4 * self.lease + 20


@dataclass
class Ask:
    """One call a chat asked for, as the person behind it knows it."""

    marker: str
    room: str
    user: str
    by_model: bool
    decision: str
    cid: str | None = None
    approved_200: bool = False  # an approval answered 200 (admin API) or "decided" (click)


@dataclass
class Seen:
    """What the run saw afterwards: records, their trails, the table, the pages, the model."""

    records: list[Record]
    trails: dict[str, dict[str, float]]  # id -> first time of each kind of audit event
    rows: Counter[str]  # marker -> rows in the table
    lines: dict[str, set[str]]  # room -> every line an open page showed
    sent: set[str]  # tool_call_ids whose outcome the model was sent
    gone: set[str]  # instances killed or stopped
    read_at: float  # when the records were read (the wall clock, as expires_at)

    def adopted(self, c: Record) -> bool:
        return "adopted" in self.trails.get(c["id"], {})

    def elsewhere(self, c: Record) -> bool:
        """Whether the call's turn had to go on elsewhere: it was adopted by another
        replica, or the replica holding it was killed or stopped (that it died before the
        turn went on is for the failure to show)."""
        return self.adopted(c) or c["owner"] in self.gone


@dataclass
class ChaosResult:
    """The figures of a run, and each violated property with the ids that break it."""

    config: ChaosConfig
    figures: dict[str, Counter[str]]  # group -> name -> count
    decide_to_run_ms: list[float]
    violations: dict[str, list[str]]
    logs: Path

    @property
    def passed(self) -> bool:
        """No property is violated but those of a known product bug."""
        return not any(ids for p, ids in self.violations.items() if p not in KNOWN_BUGS)

    def violated(self, prop: str) -> str | None:
        """A failure message naming the seed and the ids, or None when ``prop`` held."""
        ids = self.violations.get(prop) or []
        if not ids:
            return None
        return (
            f"chaos seed {self.config.seed}: {prop}: violated by {len(ids)}: "
            f"{'; '.join(ids[:40])} (replica logs in {self.logs})"
        )

    def report(self) -> str:
        c, f, ms = self.config, self.figures, self.decide_to_run_ms
        lines = [
            f"chaos seed {c.seed}: {c.duration:g} s, {c.replicas} replicas, {c.chats} chats, "
            f"timeout {c.timeout_seconds:g} s, lease {c.lease:g} s",
        ]
        lines += [
            f"  {group}: " + ", ".join(f"{k} {v}" for k, v in counts.items())
            for group, counts in f.items()
        ]
        if len(ms) > 1:
            q = statistics.quantiles(ms, n=100, method="inclusive")
            lines.append(
                f"  decide -> run (audit trail: decided -> started, n={len(ms)}): "
                f"p50 {q[49]:.0f} ms, p99 {q[98]:.0f} ms, max {max(ms):.0f} ms"
            )
        for prop in PROPERTIES:
            ids = self.violations.get(prop) or []
            mark = ("KNOWN" if prop in KNOWN_BUGS else "FAIL") if ids else "ok   "
            lines.append(
                f"  {mark} {prop}"
                + (f" ({KNOWN_BUGS[prop]})" if ids and prop in KNOWN_BUGS else "")
            )
            lines += [f"          {i}" for i in ids[:20]]
        known = sum(bool(self.violations.get(p)) for p in KNOWN_BUGS)
        lines.append(
            f"{'PASS' if self.passed else 'FAIL'}"
            + (f" but for {known} known product bug(s)" if known else "")
            + f" (seed {c.seed}, logs in {self.logs})"
        )
        return "\n".join(lines)


def went_on(marker: str) -> str:
    """What the model says once the turn that asked for ``marker`` has the call's outcome."""
    return f"turn went on after {marker}"


def model(table: str) -> Callable[[dict[str, Any]], Answer]:
    """The model: "chaos M" asks for the INSERT of M; a tool result ends the turn saying so."""

    def respond(body: dict[str, Any]) -> Answer:
        messages = body["messages"]
        last = messages[-1]
        if last["role"] == "tool":
            call = next(m for m in reversed(messages) if m.get("tool_calls"))
            found = _MARKER.search(call["tool_calls"][0]["function"]["arguments"])
            marker = found.group(1) if found else "?"
            return text(f"{went_on(marker)}: {str(last.get('content'))[:120]}")
        asked = _ASK.search(str(last.get("content") or ""))
        if asked is None:
            return text("好的 / ok")
        return tool_calls(("sql_modify", {"sql": insert(table, asked.group(1))}))

    return respond


def insert(table: str, marker: str) -> str:
    return f"INSERT INTO {table} (marker) VALUES ('{marker}')"


def marker_of(c: Record) -> str:
    found = _MARKER.search(str(c["tool_call"]["args"].get("sql")))
    return found.group(1) if found else "?"


class MarkerTable:
    """The run's PostgreSQL table: a row per INSERT that ran; a marker ending in "s" is slow."""

    def __init__(self, url: str) -> None:
        self.engine = create_async_engine(url)
        self.name = f"chaos_{uuid.uuid4().hex[:12]}"

    async def create(self, slow_seconds: float) -> None:
        # No unique key: a call run twice shows as two rows, not as a failed second run.
        statements = [
            f"CREATE TABLE {self.name} (id SERIAL PRIMARY KEY, marker TEXT NOT NULL)",
            f"CREATE FUNCTION {self.name}_slow() RETURNS trigger AS $$ BEGIN "
            f"IF NEW.marker LIKE '%s' THEN PERFORM pg_sleep({slow_seconds}); END IF; "
            "RETURN NEW; END $$ LANGUAGE plpgsql",
            f"CREATE TRIGGER {self.name}_slow BEFORE INSERT ON {self.name} "
            f"FOR EACH ROW EXECUTE FUNCTION {self.name}_slow()",
        ]
        async with self.engine.begin() as conn:
            for statement in statements:
                await conn.exec_driver_sql(statement)

    async def rows(self) -> Counter[str]:
        async with self.engine.connect() as conn:
            result = await conn.exec_driver_sql(f"SELECT marker FROM {self.name}")
            return Counter(str(r[0]) for r in result.fetchall())

    async def drop(self) -> None:
        async with self.engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {self.name}")
            await conn.exec_driver_sql(f"DROP FUNCTION IF EXISTS {self.name}_slow()")
        await self.engine.dispose()


class ChaosRun:
    """Chats, open pages and the nemesis over replicas r0..rN-1, then what is left to see."""

    def __init__(
        self,
        config: ChaosConfig,
        *,
        group: ReplicaSet,
        http: aiohttp.ClientSession,
        redis: Redis,
        table: MarkerTable,
        fake: FakeOpenAI,
    ) -> None:
        self.config = config
        self.group = group
        self.names = [f"r{n}" for n in range(config.replicas)]
        self.instance: dict[str, str] = {}  # replica name -> the instance id of its process
        self.gone: set[str] = set()  # instance ids of the processes killed or stopped
        self.unclean_stops = 0
        self.http = http
        self.redis = redis
        self.table = table
        self.fake = fake
        self.rooms = [f"chaos{k}" for k in range(config.chats)]
        self.asks: list[Ask] = []
        self.lines: dict[str, set[str]] = {room: set() for room in self.rooms}
        self.faults = Counter(
            dict.fromkeys(("kill -9", "SIGTERM", "Redis pause", "Redis disconnect"), 0)
        )
        self.server_errors: list[str] = []
        self.route = random.Random(f"{config.seed}-route")

    async def run(self) -> ChaosResult:
        for name in self.names:
            await self._start(name)
        pages = [
            asyncio.create_task(self._page(room, name))
            for room in self.rooms
            for name in self.names
        ]
        end = asyncio.get_running_loop().time() + self.config.duration
        nemesis = asyncio.create_task(self._nemesis(end))
        try:
            await asyncio.gather(*(self._chat(k, end) for k in range(self.config.chats)))
            await nemesis
            seen = await self._afterwards()
        finally:
            for task in [*pages, nemesis]:
                task.cancel()
            await asyncio.gather(*pages, nemesis, return_exceptions=True)
        return ChaosResult(
            config=self.config,
            figures=self._figures(seen),
            decide_to_run_ms=[
                (t["started"] - t["decided"]) * 1000
                for t in seen.trails.values()
                if "decided" in t and "started" in t
            ],
            violations=judge(self.asks, seen),
            logs=self.group.root,
        )

    async def _start(self, name: str) -> None:
        """Start replica ``name`` (again), and learn the instance id it works as."""
        replica = await asyncio.to_thread(self.group.start, name)
        async with self.http.get(f"{replica.url}/api/instances") as resp:
            self.instance[name] = (await resp.json())["instance"]

    # -------------------------------------------------------------- HTTP to any replica

    async def _any_url(self) -> str:
        while not self.group.up:
            await asyncio.sleep(0.1)
        return self.route.choice(sorted(self.group.up.items()))[1].url

    async def _call(
        self,
        method: str,
        path: str,
        *,
        json: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
        within: float = 30.0,
    ) -> tuple[int, Any] | None:
        """Status and JSON body from a live replica, or None when the outcome is unknown.

        A replica that is down or answers 503 (Redis paused) is tried again, elsewhere; a
        POST whose connection broke after it was sent is not sent again (it may have been
        taken), a GET is.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            url = await self._any_url()
            try:
                async with self.http.request(method, url + path, json=json, params=params) as r:
                    body = await r.json(content_type=None)
                    if r.status not in (429, 503) or loop.time() > deadline:
                        if r.status >= 500 and r.status != 503:
                            self.server_errors.append(f"{method} {path}: {r.status} {body}")
                        return r.status, body
            except aiohttp.ClientConnectorError:
                pass  # it never reached the replica
            except (aiohttp.ClientError, TimeoutError, ValueError):
                if method != "GET":
                    return None
            if loop.time() > deadline:
                return None
            await asyncio.sleep(0.3)

    async def _say(self, room: str, user: str, said: str) -> None:
        await self._call("POST", f"/api/chat/{room}/messages", json={"user": user, "text": said})

    async def _record(self, cid: str) -> Record | None:
        answer = await self._call("GET", f"/api/confirmations/{cid}")
        return answer[1]["confirmation"] if answer and answer[0] == 200 else None

    async def _list(self) -> list[Record]:
        """Every record, newest first, across pages."""
        found: list[Record] = []
        cursor = ""
        while True:
            query = {"limit": "500", **({"cursor": cursor} if cursor else {})}
            answer = await self._call("GET", "/api/confirmations", params=query, within=60)
            if answer is None or answer[0] != 200:
                raise AssertionError(f"cannot list confirmations: {answer}")
            found += answer[1]["confirmations"]
            cursor = answer[1]["next_cursor"]
            if not cursor:
                return found

    async def _until(self, probe: Callable[[], Awaitable[Any]], seconds: float) -> Any:
        """``probe``'s first truthy answer within ``seconds``, else None."""
        with contextlib.suppress(AssertionError):  # eventually's "not met in time"
            return await eventually(probe, timeout=seconds, every=0.4)
        return None

    # -------------------------------------------------------------- chats

    async def _chat(self, k: int, end: float) -> None:
        """One room asking one call at a time until ``end``, each decided at random."""
        rng = random.Random(f"{self.config.seed}-chat-{k}")
        room, user = self.rooms[k], f"u{k}"
        decisions, weights = zip(*DECISIONS, strict=True)
        n = 0
        while asyncio.get_running_loop().time() < end:
            n += 1
            slow = rng.random() < self.config.slow_share
            ask = Ask(
                marker=f"m{k}n{n}{'s' if slow else ''}",
                room=room,
                user=user,
                by_model=rng.random() < 0.5,
                decision=rng.choices(decisions, weights)[0],
            )
            think = rng.uniform(0.0, 2.0)
            word = rng.choice(["bare", "with id"])
            self.asks.append(ask)
            statement = insert(self.table.name, ask.marker)
            await self._say(
                room, user, f"chaos {ask.marker}" if ask.by_model else f"/sql {statement}"
            )
            ask.cid = await self._until(partial(self._find, ask), self.config.settle_seconds)
            if ask.cid is None:
                continue
            await asyncio.sleep(think)
            await self._decide(ask, word)
            await self._until(partial(self._ended, ask), self.config.settle_seconds)

    async def _find(self, ask: Ask) -> str | None:
        """The id of the call asked for ``ask.marker``, once its record is there."""
        params = {"session": f"webchat:{ask.room}", "limit": "5"}
        answer = await self._call("GET", "/api/confirmations", params=params)
        for c in answer[1]["confirmations"] if answer and answer[0] == 200 else []:
            if marker_of(c) == ask.marker:
                return str(c["id"])
        return None

    async def _ended(self, ask: Ask) -> bool:
        assert ask.cid is not None
        c = await self._record(ask.cid)
        return c is not None and self._over(c)

    def _over(self, c: Record) -> bool:
        """Ended, or pending so long past its deadline that no fault explains it (the
        longest Redis pause, then adoption): nothing will end it; the checks say so."""
        late = c["status"] == "pending" and c["expires_at"] + 2 * self.config.lease + 12
        return ended(c) or bool(late and late < time.time())

    async def _decide(self, ask: Ask, word: str) -> None:
        entrance, _, decision = ask.decision.partition(" ")
        if entrance == "cancel":  # the person writes something else instead
            await self._say(ask.room, ask.user, f"never mind {ask.marker}")
        elif entrance == "reply":
            said = "确认" if decision == "approve" else "取消"
            await self._say(ask.room, ask.user, said if word == "bare" else f"{said} {ask.cid}")
        elif entrance == "click":
            await self._click(ask, decision)
        elif entrance == "admin":
            answer = await self._call(
                "POST",
                f"/api/confirmations/{ask.cid}/decision",
                json={"decision": decision, "actor": ask.user},
            )
            ask.approved_200 = bool(
                answer
                and answer[0] == 200
                and answer[1]["confirmation"]["status"] == "approved"
                and decision == "approve"
            )

    async def _click(self, ask: Ask, decision: str) -> None:
        """The card's button: a ``decide`` frame on the room's WebSocket at a live replica;
        clicked again elsewhere when the socket closes before the answer."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        frame = {"type": "decide", "id": ask.cid, "decision": decision}
        while loop.time() < deadline:
            url = await self._any_url()
            params = {"session": ask.room, "user": ask.user, "after": str(1 << 40)}
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                async with self.http.ws_connect(f"{url}/ws", params=params) as ws:
                    await ws.send_json(frame)
                    async for msg in ws:
                        data = msg.json() if msg.type is aiohttp.WSMsgType.TEXT else {}
                        if data.get("type") == "decision" and data.get("id") == ask.cid:
                            ask.approved_200 = decision == "approve" and (
                                data["outcome"] == "decided"
                            )
                            return
            await asyncio.sleep(0.3)

    async def _page(self, room: str, name: str) -> None:
        """A page open on ``room`` at replica ``name``, keeping every line it is shown; after a
        restart it loads the room's history from that replica again."""
        while True:
            replica = self.group.up.get(name)
            if replica is not None:
                params = {"session": room, "user": f"page-{name}"}
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                    async with self.http.ws_connect(f"{replica.url}/ws", params=params) as ws:
                        async for msg in ws:
                            data = msg.json() if msg.type is aiohttp.WSMsgType.TEXT else {}
                            if data.get("type") == "message":
                                self.lines[room].add(str(data.get("text")))
            await asyncio.sleep(0.1)

    # -------------------------------------------------------------- the nemesis

    async def _nemesis(self, end: float) -> None:
        rng = random.Random(f"{self.config.seed}-nemesis")
        faults = [self._kill_9, self._sigterm, self._pause, self._disconnect]
        while True:
            await asyncio.sleep(rng.uniform(*self.config.fault_gap))
            if asyncio.get_running_loop().time() >= end:
                return  # every fault restores what it broke before it returns
            await rng.choices(faults, FAULT_WEIGHTS)[0](rng)

    async def _victim(self, rng: random.Random) -> str:
        """Often the replica running a call or holding a pending one, when there is one."""
        roll = rng.random()
        if roll < 0.7:
            status, state = ("approved", "running") if roll < 0.4 else ("pending", "waiting")
            listed = await self._call(
                "GET", "/api/confirmations", params={"status": status, "limit": "50"}
            )
            for c in listed[1]["confirmations"] if listed and listed[0] == 200 else []:
                ex = c["execution"]
                holder = ex["claimed_by"] or c["owner"]
                name = next((n for n in self.group.up if self.instance.get(n) == holder), None)
                if ex["state"] == state and name is not None:
                    return name
        return rng.choice(sorted(self.group.up))

    async def _kill_9(self, rng: random.Random) -> None:
        name = await self._victim(rng)
        self.gone.add(self.instance[name])
        await asyncio.to_thread(self.group.kill_9, name)
        self.faults["kill -9"] += 1
        await asyncio.sleep(rng.uniform(0.5, 3.0))
        await self._start(name)

    async def _sigterm(self, rng: random.Random) -> None:
        name = await self._victim(rng)
        self.gone.add(self.instance[name])
        if await asyncio.to_thread(self.group.sigterm, name) != 0:
            self.unclean_stops += 1
        self.faults["SIGTERM"] += 1
        await asyncio.sleep(rng.uniform(0.5, 3.0))
        await self._start(name)

    async def _pause(self, rng: random.Random) -> None:
        # Up to a little past redis-py's 5 s socket timeout: some commands wait, some fail.
        seconds = rng.uniform(1.0, 6.0)
        await self.redis.execute_command("CLIENT", "PAUSE", int(seconds * 1000), "ALL")
        self.faults["Redis pause"] += 1
        await asyncio.sleep(seconds)

    async def _disconnect(self, _: random.Random) -> None:
        for kind in ("normal", "pubsub"):
            await self.redis.execute_command("CLIENT", "KILL", "TYPE", kind, "SKIPME", "yes")
        self.faults["Redis disconnect"] += 1

    # -------------------------------------------------------------- afterwards

    async def _afterwards(self) -> Seen:
        """Once every record ended (or the settle time is up): what there is to see."""

        async def settled() -> list[Record] | None:
            records = await self._list()
            return records if all(self._over(c) for c in records) else None

        records = await self._until(settled, self.config.settle_seconds) or await self._list()
        trails = {c["id"]: await self._trail(c["id"]) for c in records}
        seen = Seen(
            records, trails, await self.table.rows(), self.lines, set(), self.gone, time.time()
        )

        # A notice another replica posted reaches the open pages through the live feed.
        async def told() -> bool:
            return all(told_interrupted(c, seen) for c in interrupted(records))

        await self._until(told, 10.0)

        # A turn goes on after its record ended; one whose replica died first, where its
        # message is taken up again: that replica's next start, or the one adopting it.
        async def turns_went_on() -> bool:
            seen.sent = {i for r in self.fake.requests for i in r.tool_results()}
            v = judge(self.asks, seen)
            return not (v[CONVERSATION_WENT_ON] or v[RESUMED_WENT_ON])

        await self._until(turns_went_on, 4 * self.config.lease + 10)
        seen.sent = {i for r in self.fake.requests for i in r.tool_results()}
        return seen

    async def _trail(self, cid: str) -> dict[str, float]:
        answer = await self._call("GET", f"/api/confirmations/{cid}/events")
        first: dict[str, float] = {}
        for e in answer[1]["events"] if answer and answer[0] == 200 else []:
            first.setdefault(e["kind"], float(e["at"]))
        return first

    def _figures(self, seen: Seen) -> dict[str, Counter[str]]:
        statuses = Counter(c["status"] for c in seen.records)
        states = Counter(c["execution"]["state"] for c in seen.records)
        calls = Counter(
            {
                "asked": len(self.asks),
                "without a record": sum(a.cid is None for a in self.asks),
                "approved": statuses["approved"],
                "ran": sum(seen.rows.values()),
                "rejected": statuses["rejected"],
                "expired": statuses["expired"],
                "cancelled": statuses["cancelled"],
            }
        )
        executions = Counter(
            {k: states[k] for k in FINAL_EXECUTIONS}
            | {"adopted": sum(seen.adopted(c) for c in seen.records)}
        )
        health = Counter(
            {
                "unclean stops": self.unclean_stops,
                "HTTP 5xx other than 503": len(self.server_errors),
                "error log lines": sum(len(r.errors()) for r in self.group.replicas),
            }
        )
        return {
            "calls": calls,
            "executions": executions,
            "decided by": Counter(
                {d: sum(a.decision == d for a in self.asks if a.cid) for d, _ in DECISIONS}
            ),
            "faults": self.faults,
            "health": health,
        }


def ended(c: Record) -> bool:
    """Terminal, an approved call's execution final, and any other call never ran."""
    state = c["execution"]["state"]
    if c["status"] == "approved":
        return bool(state in FINAL_EXECUTIONS)
    return bool(c["status"] != "pending" and state in ("skipped", "waiting"))


def goes_on(c: Record) -> bool:
    """The turn that asked goes on with the call's outcome: it ran (or failed), a person
    said no, or nobody answered in time. A cancel (the person's next message superseded it,
    or its process stopped) and an interruption end the turn."""
    state = c["execution"]["state"]
    return bool(c["status"] in ("rejected", "expired") or state in ("succeeded", "failed"))


def interrupted(records: list[Record]) -> list[Record]:
    return [c for c in records if c["execution"]["state"] == "interrupted"]


def told_interrupted(c: Record, seen: Seen) -> bool:
    return any(f"[{c['id']}]" in s and "interrupted" in s for s in seen.lines[c["chat_id"]])


def judge(asks: list[Ask], seen: Seen) -> dict[str, list[str]]:
    """Each property, with what breaks it (ids, markers and states)."""
    v: dict[str, list[str]] = {p: [] for p in PROPERTIES}
    by_marker: dict[str, list[Record]] = {}
    for c in seen.records:
        by_marker.setdefault(marker_of(c), []).append(c)
    by_id = {c["id"]: c for c in seen.records}
    for marker, count in seen.rows.items():
        calls = by_marker.get(marker, [])
        ids = ", ".join(c["id"] for c in calls) or "no record"
        if count > 1:
            v[NO_CALL_RAN_TWICE].append(f"{marker} ran {count} times ({ids})")
        if not any(c["status"] == "approved" for c in calls):
            v[NO_EFFECT_WITHOUT_RECORD].append(f"{marker} ({ids})")
    for marker, calls in by_marker.items():
        if len(calls) > 1:
            v[ASKED_ONCE].append(f"{marker}: {', '.join(c['id'] for c in calls)}")
    for c in seen.records:
        state = f"{c['id']} {c['status']}/{c['execution']['state']}"
        present = seen.rows[marker_of(c)] > 0
        if c["status"] == "pending" and c["expires_at"] < seen.read_at:
            v[DEADLINE_KEPT].append(f"{state}, {seen.read_at - c['expires_at']:.0f} s past")
        elif not ended(c):
            v[EVERY_RECORD_ENDED].append(state)
        ran = c["execution"]["state"] in ("succeeded", "interrupted")
        if (c["execution"]["state"] == "succeeded" and not present) or (present and not ran):
            v[EXECUTION_AGREES].append(f"{state}, row {'present' if present else 'absent'}")
        if c["execution"]["state"] == "interrupted" and not told_interrupted(c, seen):
            v[INTERRUPTED_TOLD].append(f"{c['id']} in room {c['chat_id']}")
    for ask in asks:
        asked = by_id.get(ask.cid or "")
        if ask.approved_200 and not (
            asked
            and asked["status"] == "approved"
            and asked["execution"]["state"] in FINAL_EXECUTIONS
        ):
            v[APPROVED_200_RAN].append(f"{ask.cid} {asked and asked['execution']['state']}")
        if not (asked and ask.by_model and goes_on(asked)):
            continue
        shown = any(s.startswith(went_on(ask.marker)) for s in seen.lines[ask.room])
        sent = asked["tool_call"]["call_id"] in seen.sent
        if sent and shown:
            continue
        elsewhere = seen.elsewhere(asked)
        why = ("adopted" if seen.adopted(asked) else "its replica died") if elsewhere else ""
        missing = "the model was not sent its outcome" if not sent else "no page showed it"
        state = f"{asked['id']} {asked['status']}/{asked['execution']['state']} {why}".strip()
        v[RESUMED_WENT_ON if elsewhere else CONVERSATION_WENT_ON].append(f"{state}: {missing}")
    return v


async def _drive(
    config: ChaosConfig, root: Path, redis_url: str, postgres_url: str, fake: FakeOpenAI
) -> ChaosResult:
    table = MarkerTable(postgres_url)
    await table.create(config.slow_seconds)
    fake.script(*[model(table.name)] * int(40 * config.duration + 200))
    group = ReplicaSet(
        root,
        redis_url=redis_url,
        prefix="chaos",
        fake=fake,
        lease=config.lease,
        GATEWAY_TOOLS__SQL__URL=postgres_url,
        GATEWAY_CONFIRMATION__TIMEOUT_SECONDS=f"{config.timeout_seconds:g}",
        GATEWAY_CONFIRMATION__ON_OTHER_MESSAGE="cancel",
        # Every chat posts from this one address, some twice a second.
        GATEWAY_CHANNELS__WEBCHAT__MESSAGES_PER_MINUTE="0",
        GATEWAY_CHANNELS__WEBCHAT__MESSAGES_PER_MINUTE_PER_ADDRESS="0",
    )
    redis = Redis.from_url(redis_url)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            try:
                run = ChaosRun(config, group=group, http=http, redis=redis, table=table, fake=fake)
                return await run.run()
            finally:
                await asyncio.to_thread(group.stop)
                group.save_logs(root)
    finally:
        await redis.aclose()
        await table.drop()


def run_chaos(config: ChaosConfig, *, root: Path, postgres_url: str) -> ChaosResult:
    """One whole run on a private Redis; the replicas' homes and logs stay in ``root``."""
    with private_redis() as redis_url, FakeOpenAI() as fake:
        return asyncio.run(_drive(config, root, redis_url, postgres_url, fake))
