"""Undo snapshots in Redis, shared by every replica.

``{prefix}:undo:{id}`` is a hash (the snapshot's JSON, its expiry, the undo that took it)
that Redis also expires a day after the snapshot's own expiry, as a backstop;
``{prefix}:undo_expiry`` indexes snapshots by expiry for the retention sweep.
"""

from __future__ import annotations

import math
from typing import Any

from redis.asyncio import Redis

from gateway.storage.redis import answering
from gateway.storage.undo import UndoSnapshot, UndoStore

_BACKSTOP_SECONDS = 24 * 3600

# Claim as one compare-and-set: a kept, unexpired snapshot nobody took; first caller wins.
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
if redis.call('HEXISTS', KEYS[1], 'undone_by') == 1 then return false end
if tonumber(redis.call('HGET', KEYS[1], 'expires_at')) <= tonumber(ARGV[1]) then
  return false
end
redis.call('HSET', KEYS[1], 'undone_by', ARGV[2])
return redis.call('HGET', KEYS[1], 'body')
"""
# Give back only what this undo took.
_RELEASE = """
if redis.call('HGET', KEYS[1], 'undone_by') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'undone_by')
end
return 1
"""


class RedisUndoStore(UndoStore):
    def __init__(self, redis: Redis, *, prefix: str, close_client: bool = False) -> None:
        self._redis = redis
        self._prefix = prefix
        self._close_client = close_client
        self._claim = redis.register_script(_CLAIM)
        self._release = redis.register_script(_RELEASE)

    @classmethod
    async def from_url(cls, url: str, *, prefix: str, **client_kwargs: Any) -> RedisUndoStore:
        client = await answering(Redis.from_url(url, **client_kwargs))
        return cls(client, prefix=prefix, close_client=True)

    async def close(self) -> None:
        if self._close_client:
            await self._redis.aclose()

    def _key(self, confirmation_id: str) -> str:
        return f"{self._prefix}:undo:{confirmation_id}"

    @property
    def _index(self) -> str:
        return f"{self._prefix}:undo_expiry"

    async def put(self, snapshot: UndoSnapshot) -> None:
        key = self._key(snapshot.confirmation_id)
        ttl = max(1, math.ceil(snapshot.expires_at - snapshot.taken_at)) + _BACKSTOP_SECONDS
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.hset(key, items=["body", snapshot.body(), "expires_at", repr(snapshot.expires_at)])
            pipe.expire(key, ttl)
            pipe.zadd(self._index, {snapshot.confirmation_id: snapshot.expires_at})
            await pipe.execute()

    async def get(self, confirmation_id: str, *, now: float) -> UndoSnapshot | None:
        fields = await self._redis.hgetall(self._key(confirmation_id))
        if not fields or float(fields[b"expires_at"]) <= now:
            return None
        by = fields.get(b"undone_by")
        return UndoSnapshot.from_body(fields[b"body"], undone_by=_text(by) if by else None)

    async def claim(self, confirmation_id: str, *, by: str, now: float) -> UndoSnapshot | None:
        body = await self._claim(keys=[self._key(confirmation_id)], args=[repr(now), by])
        return UndoSnapshot.from_body(body, undone_by=by) if body else None

    async def release(self, confirmation_id: str, *, by: str) -> None:
        await self._release(keys=[self._key(confirmation_id)], args=[by])

    async def purge(self, *, before: float) -> int:
        ids = await self._redis.zrangebyscore(self._index, "-inf", before)
        if not ids:
            return 0
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(*(self._key(_text(i)) for i in ids if isinstance(i, bytes | str)))
            pipe.zrem(self._index, *ids)
            await pipe.execute()
        return len(ids)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
