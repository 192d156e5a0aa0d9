"""Redis backend: for several gateway replicas behind one bot.

Each confirmation is a hash (``{prefix}:c:{id}``) with sorted-set indexes beside it; every
change is a Lua script, so each is atomic on the server whichever replica calls it: a
claim is a single compare-and-set (the layout is described in scripts.py).
Finished records get an explicit TTL (30 days by default), their audit trail with them.

For Redis Cluster, put the prefix in braces (``{gateway}``) so every key of the store
hashes to one slot, as multi-key scripts require.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import math
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar, cast

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from gateway.confirm.model import (
    AuditEvent,
    CallEdit,
    Confirmation,
    ExecState,
    Instance,
    Status,
    Vote,
    VoteOutcome,
)
from gateway.storage.confirmations import (
    ConfirmationExistsError,
    ConfirmationStore,
    FeedEntry,
    PendingLimitReached,
    PendingLimits,
    check_edit,
)
from gateway.storage.redis import answering
from gateway.storage.redis import scripts as lua
from gateway.storage.redis.codec import (
    DETAIL,
    RedisKeys,
    decode,
    dumps,
    event_lines,
    hash_fields,
    load,
    number,
    pairs,
    text,
)
from gateway.storage.redis.feed import STREAM_MAXLEN, FinishedStream, fail_closed

DEFAULT_PREFIX = "gateway:confirm"
DEFAULT_FINISHED_TTL_SECONDS = 30 * 24 * 3600.0
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_POOL_TIMEOUT_SECONDS = 5.0
# /readyz must answer even while Redis hangs (CLIENT PAUSE, a dead host).
_PING_TIMEOUT_SECONDS = 2.0
# How many settled records one purge script drops before yielding the server to others.
_PURGE_BATCH = 500
# What scripts.VOTE answers.
_VOTE_CODES = {
    0: VoteOutcome.NOT_FOUND,
    1: VoteOutcome.COUNTED,
    2: VoteOutcome.REFUSED,
    3: VoteOutcome.APPROVED,
    4: VoteOutcome.ALREADY_VOTED,
}


@fail_closed
class RedisConfirmationStore(ConfirmationStore):
    """Confirmations in Redis, shared by every replica that uses the same prefix.

    Takes an injected ``redis.asyncio.Redis`` client (closed by ``close()`` only when the
    store made it, as ``from_url()`` does).
    """

    shared: ClassVar[bool] = True

    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str = DEFAULT_PREFIX,
        finished_ttl_seconds: float = DEFAULT_FINISHED_TTL_SECONDS,
        close_client: bool = False,
    ) -> None:
        if finished_ttl_seconds <= 0:
            raise ValueError("finished_ttl_seconds must be positive")
        self._redis = redis
        self._keys = RedisKeys(prefix)
        self._finished_ttl = max(1, math.ceil(finished_ttl_seconds))
        self._close_client = close_client
        # Names this handle's entries in the lifecycle feed: the follower of this process
        # tells its listeners only of the others' (the service told them of its own).
        self._writer = secrets.token_hex(8)
        self._create = redis.register_script(lua.CREATE)
        self._finish = redis.register_script(lua.FINISH)
        self._vote = redis.register_script(lua.VOTE)
        self._set_ref = redis.register_script(lua.SET_REF)
        self._swap_detail = redis.register_script(lua.SWAP_DETAIL)
        self._claim = redis.register_script(lua.CLAIM)
        self._start = redis.register_script(lua.START)
        self._finish_execution = redis.register_script(lua.FINISH_EXECUTION)
        self._adopt = redis.register_script(lua.ADOPT)
        self._heartbeat = redis.register_script(lua.HEARTBEAT)
        self._add_event = redis.register_script(lua.ADD_EVENT)
        self._add_event_once = redis.register_script(lua.ADD_EVENT_ONCE)
        self._purge = redis.register_script(lua.PURGE)

    @classmethod
    async def from_url(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        finished_ttl_seconds: float = DEFAULT_FINISHED_TTL_SECONDS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        pool_timeout_seconds: float = DEFAULT_POOL_TIMEOUT_SECONDS,
        **client_kwargs: Any,
    ) -> RedisConfirmationStore:
        """Connect and check the server answers, so a wrong URL fails at start-up.

        Connections come from a bounded pool: past ``max_connections`` a caller waits for
        one up to ``pool_timeout_seconds`` (backpressure), then gets StoreUnavailableError.
        redis-py's default pool raised MaxConnectionsError at once: 500s, lost cards.
        """
        # No retries: redis-py would re-send a script whose reply was lost, and a claim or
        # finish run twice reports "lost" or "already decided" for what this call did.
        # A disconnect fails the call (closed, StoreUnavailableError); the pool then drops
        # its idle connections so the next call connects afresh.
        client_kwargs.setdefault("retry", Retry(NoBackoff(), 0))
        pool = BlockingConnectionPool.from_url(
            url, max_connections=max_connections, timeout=pool_timeout_seconds, **client_kwargs
        )
        client = await answering(Redis.from_pool(pool))
        return cls(
            client, prefix=prefix, finished_ttl_seconds=finished_ttl_seconds, close_client=True
        )

    @property
    def client(self) -> Redis:
        """The store's client and its bounded pool, shared with the Redis inbox and grants."""
        return self._redis

    async def unavailable(self) -> str | None:
        try:
            async with asyncio.timeout(_PING_TIMEOUT_SECONDS):
                await self._redis.ping()
        except TimeoutError:
            return f"Redis did not answer within {_PING_TIMEOUT_SECONDS:g} s"
        except (RedisError, OSError) as exc:
            return f"Redis: {type(exc).__name__}: {exc}"
        return None

    async def durability_warnings(self) -> tuple[str, ...]:
        """Persistence off or an eviction policy that may drop keys: a restart or memory
        pressure would lose pending and approved calls (the ledger lives only here)."""
        try:
            found: dict[str, str] = {}
            for name in ("appendonly", "save", "maxmemory-policy"):
                reply = await self._redis.config_get(name)
                found.update({text(k): text(v or "") for k, v in reply.items() if k is not None})
        except RedisError as exc:  # CONFIG is often disabled on managed Redis
            return (f"could not read the Redis configuration ({exc}): check persistence",)
        warnings: builtins.list[str] = []
        if found.get("appendonly") != "yes":
            snapshots = "snapshots only" if found.get("save") else "no persistence at all"
            warnings.append(
                f"Redis has appendonly=no ({snapshots}): a Redis restart loses the "
                "decisions and executions since the last snapshot; set appendonly yes"
            )
        policy = found.get("maxmemory-policy", "noeviction")
        if policy != "noeviction":
            warnings.append(
                f"Redis maxmemory-policy is {policy}: under memory pressure it may evict "
                "confirmation records; set maxmemory-policy noeviction"
            )
        return tuple(warnings)

    async def close(self) -> None:
        if self._close_client:
            await self._redis.aclose()

    # -- the contract ----------------------------------------------------------------------

    async def create(
        self,
        confirmation: Confirmation,
        *,
        events: Sequence[AuditEvent] = (),
        limits: PendingLimits | None = None,
    ) -> None:
        c, keys = confirmation, self._keys
        caps: list[str | int] = ["", ""]
        if limits is not None and c.status is Status.PENDING:
            caps = [limits.per_session, limits.total]
        if c.status is Status.PENDING:
            # A pending record outlives its deadline by the finished TTL, so one that no
            # replica ever finishes (all crashed) does not stay forever.
            ttl = math.ceil(max(0.0, c.expires_at - c.created_at)) + self._finished_ttl
        else:
            ttl = self._finished_ttl
        indexes = [keys.index, keys.session_index(c.session_key), keys.status_index(c.status)]
        if c.status is Status.PENDING:
            indexes.append(keys.session_pending(c.session_key))
        ex = c.execution
        unsettled = c.status is Status.PENDING or (
            c.status is Status.APPROVED and not ex.state.is_final
        )
        if c.owner is not None and unsettled:
            indexes.append(keys.owned(c.owner))
        if c.status is Status.APPROVED and ex.state is ExecState.WAITING:
            indexes.append(keys.approved_waiting)
        if ex.claimed_by is not None and ex.state.in_flight:
            indexes.append(keys.claims(ex.claimed_by))
        flat = [item for pair in hash_fields(c).items() for item in pair]
        feed = keys.finished_stream if c.status is Status.PENDING else ""
        created = await self._create(
            keys=[keys.record(c.id), *indexes],
            args=[
                c.id,
                number(c.created_at),
                ttl,
                feed,
                STREAM_MAXLEN,
                self._writer,
                keys.prefix,
                event_lines(events),
                *caps,
                *flat,
            ],
        )
        if int(created) < 0 and limits is not None:
            raise PendingLimitReached(
                per_session=int(created) == -1,
                limit=limits.per_session if int(created) == -1 else limits.total,
            )
        if not int(created):
            raise ConfirmationExistsError(c.id)

    async def get(self, confirmation_id: str) -> Confirmation | None:
        fields = await self._redis.hgetall(self._keys.record(confirmation_id))
        return decode(pairs(fields))

    async def list_pending(self, session_key: str) -> builtins.list[Confirmation]:
        return await self._pending(self._keys.session_pending(session_key))

    async def _pending(self, key: str) -> builtins.list[Confirmation]:
        found = await load(self._redis, self._keys, key, await self._redis.zrange(key, 0, -1))
        return [c for c in found if c.status is Status.PENDING]

    async def finish(
        self,
        confirmation_id: str,
        status: Status,
        *,
        by: str | None,
        via: str | None,
        reason: str | None,
        now: float,
        feedback: bool = False,
        edit: CallEdit | None = None,
        events: Sequence[AuditEvent] = (),
    ) -> tuple[Confirmation | None, bool]:
        if not status.is_terminal:
            raise ValueError("finish() moves a confirmation to a terminal status")
        check_edit(status, edit)
        decision = {
            "decided_by": by,
            "decided_at": now,
            "decided_via": via,
            "reason": reason,
            "feedback": feedback,
        }
        code, flat = await self._finish(
            keys=[self._keys.record(confirmation_id)],
            args=[
                self._keys.prefix,
                confirmation_id,
                status.value,
                "1" if status in (Status.APPROVED, Status.REJECTED) else "0",
                number(now),
                dumps(decision),
                self._finished_ttl,
                self._keys.finished_stream,
                STREAM_MAXLEN,
                "" if edit is None else dumps(edit.to_dict()),
                self._writer,
                event_lines(events),
            ],
        )
        return decode(pairs(flat)), int(code) == 1

    async def vote(
        self,
        confirmation_id: str,
        vote: Vote,
        *,
        events: Sequence[AuditEvent] = (),
        approved_events: Sequence[AuditEvent] = (),
    ) -> tuple[Confirmation | None, VoteOutcome]:
        decision = {
            "decided_by": vote.actor,
            "decided_at": vote.at,
            "decided_via": vote.via,
            "reason": None,
            "feedback": False,
        }
        code, flat = await self._vote(
            keys=[self._keys.record(confirmation_id)],
            args=[
                self._keys.prefix,
                confirmation_id,
                number(vote.at),
                vote.person,
                dumps(vote.to_dict()),
                dumps(decision),
                self._finished_ttl,
                self._keys.finished_stream,
                STREAM_MAXLEN,
                self._writer,
                event_lines(events),
                event_lines(approved_events),
            ],
        )
        return decode(pairs(flat)), _VOTE_CODES[int(code)]

    async def set_prompt_ref(self, confirmation_id: str, key: str, value: str) -> None:
        await self._set_ref(keys=[self._keys.record(confirmation_id)], args=[key, value])

    async def swap_detail(
        self,
        confirmation_id: str,
        key: str,
        *,
        expected: Mapping[str, Any] | None,
        value: Mapping[str, Any],
        events: Sequence[AuditEvent] = (),
    ) -> tuple[Confirmation | None, bool]:
        found = await self._swap_detail(
            keys=[self._keys.record(confirmation_id)],
            args=[
                DETAIL + key,
                "" if expected is None else dumps(dict(expected)),
                dumps(dict(value)),
                self._keys.prefix,
                confirmation_id,
                event_lines(events),
            ],
        )
        if not found:
            return None, False
        code, flat = found
        return decode(pairs(flat)), int(code) == 1

    # -- listing and counting ----------------------------------------------------------------

    async def page(
        self,
        *,
        status: Status | None = None,
        session_key: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[builtins.list[Confirmation], str | None]:
        """Walk the narrowest created-at index from the cursor down, newest first.

        The cursor is ``created_at:id`` of the last item given: records created later sit
        above it, so inserts do not shift later pages.
        """
        keys = self._keys
        if status is Status.PENDING and session_key is not None:
            key = keys.session_pending(session_key)
        elif status is not None and session_key is None:
            key = keys.status_index(status)
        elif session_key is not None:
            key = keys.session_index(session_key)
        else:
            key = keys.index
        top: float | str = "+inf"
        after_id: str | None = None
        if cursor:
            score, _, after_id = cursor.partition(":")
            top = float(score)
        batch = min(max(limit + 1, 50), 1000)
        out: builtins.list[tuple[Confirmation, float]] = []
        offset = 0
        while len(out) <= limit:
            rows = cast(
                "builtins.list[tuple[bytes, float]]",
                await self._redis.zrange(
                    key,
                    top,
                    "-inf",
                    desc=True,
                    byscore=True,
                    offset=offset,
                    num=batch,
                    withscores=True,
                ),
            )
            offset += len(rows)
            # Same created_at as the cursor: members come in descending id order; the
            # ones at or above the cursor's id were on earlier pages.
            scores = {
                text(m): float(s)
                for m, s in rows
                if not (after_id and s == top and text(m) >= after_id)
            }
            for c in await load(self._redis, keys, key, scores):
                if (status is None or c.status is status) and (
                    session_key is None or c.session_key == session_key
                ):
                    out.append((c, scores[c.id]))
            if len(rows) < batch:
                break
        items = [c for c, _ in out[:limit]]
        if len(out) <= limit or not items:
            return items, None
        last, last_score = out[limit - 1]
        return items, f"{number(last_score)}:{last.id}"

    async def count(self, status: Status) -> int:
        return int(await self._redis.zcard(self._keys.status_index(status)))

    # -- the execution ledger: claims, adoption (listings read per-instance sorted sets, so
    # their cost follows what one instance answers for, not the whole backlog) ------------

    async def claim(
        self, confirmation_id: str, *, instance: str, now: float, lease: float
    ) -> Confirmation | None:
        flat = await self._claim(
            keys=[self._keys.record(confirmation_id)],
            args=[self._keys.prefix, confirmation_id, instance, number(now), number(now + lease)],
        )
        return decode(pairs(flat))

    async def start_execution(
        self, confirmation_id: str, *, instance: str, now: float
    ) -> Confirmation | None:
        flat = await self._start(
            keys=[self._keys.record(confirmation_id)], args=[instance, number(now)]
        )
        return decode(pairs(flat))

    async def finish_execution(
        self,
        confirmation_id: str,
        *,
        instance: str,
        state: ExecState,
        result: str | None,
        now: float,
        events: Sequence[AuditEvent] = (),
    ) -> Confirmation | None:
        if not state.is_final or state is ExecState.SKIPPED:
            raise ValueError("finish_execution ends a call: succeeded, failed or interrupted")
        flat = await self._finish_execution(
            keys=[self._keys.record(confirmation_id)],
            args=[
                self._keys.prefix,
                confirmation_id,
                instance,
                state.value,
                number(now),
                "0" if result is None else "1",
                result or "",
                self._keys.finished_stream,
                STREAM_MAXLEN,
                self._writer,
                event_lines(events),
            ],
        )
        return decode(pairs(flat))

    async def adopt(
        self, confirmation_id: str, *, from_owner: str | None, to_owner: str
    ) -> Confirmation | None:
        flat = await self._adopt(
            keys=[self._keys.record(confirmation_id)],
            args=[self._keys.prefix, confirmation_id, from_owner or "", to_owner],
        )
        return decode(pairs(flat))

    async def list_unsettled(self, *, instance: str) -> builtins.list[Confirmation]:
        owned_key, claims_key = self._keys.owned(instance), self._keys.claims(instance)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.zrange(owned_key, 0, -1, withscores=True)
            pipe.zrange(claims_key, 0, -1, withscores=True)
            owned, claimed = await pipe.execute()
        order: dict[str, float] = {}
        for member, score in [*owned, *claimed]:
            order.setdefault(text(member), score)
        ids = sorted(order, key=lambda i: (order[i], i))
        found = await load(self._redis, self._keys, owned_key, ids)
        return [
            c
            for c in found
            if (c.owner == instance and _unsettled(c))
            or (c.execution.claimed_by == instance and c.execution.state.in_flight)
        ]

    async def list_approved_waiting(self) -> builtins.list[Confirmation]:
        key = self._keys.approved_waiting
        found = await load(self._redis, self._keys, key, await self._redis.zrange(key, 0, -1))
        return [
            c
            for c in found
            if c.status is Status.APPROVED and c.execution.state is ExecState.WAITING
        ]

    # -- instances -------------------------------------------------------------------------

    async def heartbeat(self, instance: Instance, *, lease: float) -> None:
        await self._heartbeat(
            args=[
                self._keys.prefix,
                instance.id,
                dumps(instance.to_dict()),
                max(1, math.ceil(lease * 1000)),
                number(instance.seen_at + lease),
            ]
        )

    async def list_instances(self) -> builtins.list[Instance]:
        rows = await self._redis.hgetall(self._keys.instances)
        found = [Instance.from_dict(json.loads(text(v))) for v in rows.values()]
        return sorted(found, key=lambda i: (i.started_at, i.id))

    async def forget_instance(self, instance_id: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hdel(self._keys.instances, instance_id)
            pipe.delete(self._keys.alive(instance_id))
            await pipe.execute()

    # -- audit trail -------------------------------------------------------------------------

    async def add_event(self, event: AuditEvent) -> None:
        await self._add_event(
            keys=[self._keys.record(event.confirmation_id)],
            args=[self._keys.prefix, event.confirmation_id, dumps(event.to_dict())],
        )

    async def add_event_once(self, event: AuditEvent) -> bool:
        done = await self._add_event_once(
            keys=[self._keys.record(event.confirmation_id)],
            args=[self._keys.prefix, event.confirmation_id, event.kind, dumps(event.to_dict())],
        )
        return bool(done)

    async def events(self, confirmation_id: str) -> builtins.list[AuditEvent]:
        rows: list[Any] = await self._redis.lrange(self._keys.events(confirmation_id), 0, -1)
        return [AuditEvent.from_dict(json.loads(text(r))) for r in rows]

    async def purge(self, *, before: float) -> int:
        dropped = 0
        while True:
            gone, handled = await self._purge(
                args=[self._keys.prefix, number(before), _PURGE_BATCH]
            )
            dropped += int(gone)
            if int(handled) < _PURGE_BATCH:
                return dropped

    # -- cross-replica notification ----------------------------------------------------------

    def lifecycle_feed(self) -> AbstractAsyncContextManager[AsyncIterator[FeedEntry]]:
        """Every replica's requests, decisions and execution ends, from entry on, across
        disconnects.

        A turn waits on a future in the process that asked; the decision may land on
        another replica (the reply reached that one). This feed lets the asking replica
        wake its turn, and every replica show the others' changes in its live views
        (feed.py: a stream read on from the last id after a reconnect).
        """
        return FinishedStream(self._redis, self._keys.finished_stream, self._writer).feed()


def _unsettled(c: Confirmation) -> bool:
    if c.status is Status.PENDING:
        return True
    return c.status is Status.APPROVED and not c.execution.state.is_final
