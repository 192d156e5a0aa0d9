"""Conversations in Redis, shared by every replica that uses the same prefix.

``{prefix}:conversation:{key}`` holds a session's kept messages as one JSON array;
``{prefix}:conversations`` is a sorted set of the session keys by their last write, so the
least recently written are dropped past ``max_sessions``. An append is one optimistic
transaction (WATCH the session's value, write it back trimmed): two replicas ending a turn
of one session at once both land, each exchange whole. Runs on the confirmation store's
client (its bounded pool).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from gateway.storage.conversations import ConversationStore, Message, trim_history

# KEYS: the index. ARGV: max sessions, the session value's key prefix.
# Drops the least recently written sessions past the cap, value and index entry.
_EVICT = """
local old = redis.call('ZRANGE', KEYS[1], 0, -(tonumber(ARGV[1]) + 1))
for _, k in ipairs(old) do redis.call('DEL', ARGV[2] .. k) end
if #old > 0 then redis.call('ZREM', KEYS[1], unpack(old)) end
return #old
"""


class RedisConversationStore(ConversationStore):
    def __init__(self, redis: Redis, *, prefix: str, max_messages: int, max_sessions: int) -> None:
        super().__init__(max_messages=max_messages, max_sessions=max_sessions)
        self._redis = redis
        self._value_prefix = f"{prefix}:conversation:"
        self._index = f"{prefix}:conversations"
        self._evict = redis.register_script(_EVICT)

    def _key(self, key: str) -> str:
        return self._value_prefix + key

    async def load(self, key: str) -> list[Message]:
        raw = await self._redis.get(self._key(key))
        return list(json.loads(raw)) if raw else []

    async def append(self, key: str, added: Sequence[Message]) -> None:
        value_key = self._key(key)

        async def write(pipe: Pipeline) -> bool:
            raw: Any = await pipe.get(value_key)
            kept = json.loads(raw) if raw else []
            messages = trim_history([*kept, *added], self.max_messages)
            pipe.multi()  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
            pipe.set(value_key, json.dumps(messages, ensure_ascii=False))
            pipe.zadd(self._index, {key: time.time()})
            return raw is None

        new: bool = await self._redis.transaction(write, value_key, value_from_callable=True)
        if new:
            await self._evict(keys=[self._index], args=[self.max_sessions, self._value_prefix])

    async def forget(self, key: str) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(self._key(key))
            pipe.zrem(self._index, key)
            await pipe.execute()
