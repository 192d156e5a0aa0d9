"""Grants in Redis, shared by every replica.

``{prefix}:grant:{id}`` is a hash (the grant as JSON, its expiry, who revoked it and
when) that expires with the grant; ``{prefix}:grants`` indexes live ones by expiry;
``{prefix}:grant_events:{id}`` is a grant's audit trail, kept past the longest grant.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from redis.asyncio import Redis

from gateway.confirm.model import Grant, GrantEvent
from gateway.storage.grants import GrantStore
from gateway.storage.redis import answering

# The longest grant (30 days) and a week after it.
EVENTS_KEPT_SECONDS = 37 * 24 * 3600

# Revoke as one compare-and-set: only a live, unrevoked grant; first caller wins.
_REVOKE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
if redis.call('HEXISTS', KEYS[1], 'revoked_at') == 1 then return false end
if tonumber(redis.call('HGET', KEYS[1], 'expires_at')) <= tonumber(ARGV[1]) then
  return false
end
redis.call('HSET', KEYS[1], 'revoked_at', ARGV[1], 'revoked_by', ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[3])
return 1
"""


class RedisGrantStore(GrantStore):
    def __init__(self, redis: Redis, *, prefix: str, close_client: bool = False) -> None:
        self._redis = redis
        self._prefix = prefix
        self._close_client = close_client
        self._revoke = redis.register_script(_REVOKE)

    @classmethod
    async def from_url(cls, url: str, *, prefix: str, **client_kwargs: Any) -> RedisGrantStore:
        client = await answering(Redis.from_url(url, **client_kwargs))
        return cls(client, prefix=prefix, close_client=True)

    async def close(self) -> None:
        if self._close_client:
            await self._redis.aclose()

    def _grant(self, grant_id: str) -> str:
        return f"{self._prefix}:grant:{grant_id}"

    @property
    def _index(self) -> str:
        return f"{self._prefix}:grants"

    def _events(self, grant_id: str) -> str:
        return f"{self._prefix}:grant_events:{grant_id}"

    async def add(self, grant: Grant) -> None:
        ttl = max(1, math.ceil(grant.expires_at - grant.created_at))
        key = self._grant(grant.id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, items=["body", _body(grant), "expires_at", repr(grant.expires_at)])
            pipe.expire(key, ttl)
            pipe.zadd(self._index, {grant.id: grant.expires_at})
            await pipe.execute()

    async def get(self, grant_id: str) -> Grant | None:
        return _from_hash(await self._redis.hgetall(self._grant(grant_id)))

    async def live(self, now: float) -> list[Grant]:
        await self._redis.zremrangebyscore(self._index, "-inf", now)
        ids = await self._redis.zrange(self._index, 0, -1)
        if not ids:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for raw_id in ids:
                pipe.hgetall(self._grant(_text(raw_id)))
            hashes = await pipe.execute()
        found = [g for g in map(_from_hash, hashes) if g is not None]
        return sorted((g for g in found if g.live(now)), key=lambda g: g.created_at)

    async def revoke(self, grant_id: str, *, by: str, now: float) -> Grant | None:
        keys = [self._grant(grant_id), self._index]
        if not await self._revoke(keys=keys, args=[repr(now), by, grant_id]):
            return None
        return await self.get(grant_id)

    async def record(self, event: GrantEvent) -> None:
        key = self._events(event.grant_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, json.dumps(event.to_dict(), ensure_ascii=False))
            pipe.expire(key, EVENTS_KEPT_SECONDS)
            await pipe.execute()

    async def events(self, grant_id: str) -> list[GrantEvent]:
        raws = await self._redis.lrange(self._events(grant_id), 0, -1)
        return [GrantEvent(**json.loads(r)) for r in raws]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _from_hash(fields: Any) -> Grant | None:
    """A grant from its hash: the JSON body, with who revoked it and when."""
    if not fields:
        return None
    data = {_text(k): _text(v) for k, v in fields.items()}
    grant = Grant.from_dict(json.loads(data["body"]))
    if "revoked_at" not in data:
        return grant
    return replace(grant, revoked_at=float(data["revoked_at"]), revoked_by=data["revoked_by"])


def _body(grant: Grant) -> str:
    return json.dumps(grant.to_dict(), ensure_ascii=False, separators=(",", ":"), default=str)
