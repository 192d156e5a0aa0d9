"""Admin page sessions in Redis, shared by every replica behind one load balancer.

``{prefix}:admin_session:{key}`` holds the session as JSON and expires with it;
``{prefix}:admin_sessions`` indexes them by expiry, so the limit ends the oldest first.
"""

from __future__ import annotations

import json
import math

from redis.asyncio import Redis

from gateway.http.sessions import AdminSession, SessionStore
from gateway.storage.redis.feed import fail_closed

# Add one session: forget the index entries of expired ones, then end the sessions that
# expire first while over the limit. One script: replicas adding at once stay bounded.
_ADD = """
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[4], KEYS[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
if over > 0 then
  local ended = redis.call('ZPOPMIN', KEYS[2], over)
  for i = 1, #ended, 2 do redis.call('DEL', ended[i]) end
end
return 1
"""


@fail_closed
class RedisSessionStore(SessionStore):
    """Sessions in the confirmations' Redis (its client: one pool per replica)."""

    def __init__(self, redis: Redis, *, prefix: str, limit: int) -> None:
        self._redis = redis
        self._prefix = prefix
        self.limit = limit
        self._add = redis.register_script(_ADD)

    def _name(self, key: str) -> str:
        return f"{self._prefix}:admin_session:{key}"

    async def add(self, key: str, session: AdminSession, *, now: float) -> None:
        value = json.dumps({"name": session.name, "expires_at": session.expires_at})
        await self._add(
            keys=[self._name(key), f"{self._prefix}:admin_sessions"],
            args=[
                now,
                value,
                max(1, math.ceil((session.expires_at - now) * 1000)),
                session.expires_at,
                self.limit,
            ],
        )

    async def get(self, key: str, *, now: float) -> AdminSession | None:
        raw = await self._redis.get(self._name(key))
        if raw is None:
            return None
        data = json.loads(raw)
        session = AdminSession(name=str(data["name"]), expires_at=float(data["expires_at"]))
        return session if session.expires_at > now else None

    async def remove(self, key: str) -> None:
        await self._redis.delete(self._name(key))
