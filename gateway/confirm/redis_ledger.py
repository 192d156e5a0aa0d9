"""The execution ledger on Redis: claims, instances, adoption and the audit trail.

Every change is one Lua script (redis_scripts.py), so a claim is a single atomic
compare-and-set whichever replica sends it. Listings read per-instance sorted sets, so their
cost follows what one instance answers for, not the whole backlog.
"""

from __future__ import annotations

import builtins
import json
import math
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from gateway.confirm import redis_scripts as lua
from gateway.confirm.model import AuditEvent, Confirmation, ExecState, Instance, Status
from gateway.confirm.redis_codec import (
    RedisKeys,
    decode,
    dumps,
    event_lines,
    load,
    number,
    pairs,
    text,
)
from gateway.confirm.redis_feed import STREAM_MAXLEN

# How many settled records one purge script drops before yielding the server to others.
_PURGE_BATCH = 500


class RedisLedger:
    """The ledger half of ``RedisConfirmationStore`` (a mixin: it needs the client and keys)."""

    _redis: Redis
    _keys: RedisKeys
    _writer: str  # this handle's name in the lifecycle feed

    def _register_ledger_scripts(self, redis: Redis) -> None:
        self._claim = redis.register_script(lua.CLAIM)
        self._start = redis.register_script(lua.START)
        self._finish_execution = redis.register_script(lua.FINISH_EXECUTION)
        self._adopt = redis.register_script(lua.ADOPT)
        self._heartbeat = redis.register_script(lua.HEARTBEAT)
        self._add_event = redis.register_script(lua.ADD_EVENT)
        self._purge = redis.register_script(lua.PURGE)

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

    # ------------------------------------------------------------ instances

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

    # ------------------------------------------------------------ audit trail

    async def add_event(self, event: AuditEvent) -> None:
        await self._add_event(
            keys=[self._keys.record(event.confirmation_id)],
            args=[self._keys.prefix, event.confirmation_id, dumps(event.to_dict())],
        )

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


def _unsettled(c: Confirmation) -> bool:
    if c.status is Status.PENDING:
        return True
    return c.status is Status.APPROVED and not c.execution.state.is_final
