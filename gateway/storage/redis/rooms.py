"""Web chat rooms in Redis, shared by every replica that uses the same prefix.

Keys under ``{prefix}:webchat:``: ``seq`` numbers the entries of all rooms; ``room:{name}`` is
a room's list of entries, each ``"{seq} {size} {RoomEntry.dump()}"``; ``rooms`` orders the rooms by
their newest entry (the least recently written goes past ``max_rooms``), ``firsts`` by their
oldest (the oldest entry of any room goes past ``total_bytes``), ``bytes`` holds each room's
bytes and ``total`` all of them; ``feed`` is a stream of every entry appended.

An append is one script: it numbers the entry, keeps it, applies the bounds and adds it to
the feed. Each replica follows the feed and applies the same bounds to the same entries in
the same order, so what it keeps in memory is what Redis holds; its pages and long polls are
told of every entry from there, its own included, in order. A number that skips one (a
stream trimmed past a reader that fell behind), a reconnect (Redis may have restarted empty)
or a new replica reads the whole state again, in one script, with the feed's position.
Runs on the confirmation store's client (its bounded pool); one of its connections waits on
the feed.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.runtime import BackgroundTasks, after_failure_retrying
from gateway.storage.redis.codec import text
from gateway.storage.redis.feed import drop_idle_connections, fail_closed, is_disconnect
from gateway.storage.rooms import RoomBounds, RoomEntry, RoomStore

log = structlog.get_logger(__name__)

# Entries the feed keeps (approximately): a replica further behind than that reads the state
# again. A web chat message writes two; an entry of the longest text is ~25 KB.
FEED_MAXLEN = 1_000
# A blocking read waits this long before the next; short enough that a close is prompt.
_BLOCK_MS = 1000
# An append returns once this replica's copy has its entry (a script's next poll reads it),
# or after this long if the feed is behind: the entry is stored either way.
_CATCH_UP_SECONDS = 5.0
_RETRY_INITIAL = 0.05
_RETRY_MAX = 2.0

# KEYS: seq, rooms, firsts, bytes, total, feed. ARGV: room, size, entry, history_size,
# room_bytes, total_bytes, max_rooms, room key prefix, feed maxlen. Returns the entry's seq.
# The bounds in the order of KeptRooms.add: the room's count and bytes, the total (oldest
# entry of any room first), the rooms (least recently written first).
_APPEND = """
local p = ARGV[8]
local function pop(name)
  local key = p .. name
  local head = redis.call('LPOP', key)
  local size = tonumber(string.match(head, '^%d+ (%d+) '))
  redis.call('HINCRBY', KEYS[4], name, -size)
  redis.call('DECRBY', KEYS[5], size)
  local next = redis.call('LINDEX', key, 0)
  if next then
    redis.call('ZADD', KEYS[3], tonumber(string.match(next, '^(%d+) ')), name)
  else
    redis.call('ZREM', KEYS[2], name)
    redis.call('ZREM', KEYS[3], name)
    redis.call('HDEL', KEYS[4], name)
  end
  return size
end
local seq = redis.call('INCR', KEYS[1])
local room, size = ARGV[1], tonumber(ARGV[2])
local item = seq .. ' ' .. size .. ' ' .. ARGV[3]
local n = redis.call('RPUSH', p .. room, item)
if n == 1 then redis.call('ZADD', KEYS[3], seq, room) end
redis.call('ZADD', KEYS[2], seq, room)
local bytes = redis.call('HINCRBY', KEYS[4], room, size)
redis.call('INCRBY', KEYS[5], size)
while n > 1 and (n > tonumber(ARGV[4]) or bytes > tonumber(ARGV[5])) do
  bytes = bytes - pop(room)
  n = n - 1
end
while tonumber(redis.call('GET', KEYS[5])) > tonumber(ARGV[6]) do
  local oldest = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if not oldest then break end
  pop(oldest)
end
while redis.call('ZCARD', KEYS[2]) > tonumber(ARGV[7]) do
  local name = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  redis.call('DECRBY', KEYS[5], tonumber(redis.call('HGET', KEYS[4], name) or '0'))
  redis.call('DEL', p .. name)
  redis.call('ZREM', KEYS[2], name)
  redis.call('ZREM', KEYS[3], name)
  redis.call('HDEL', KEYS[4], name)
end
redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[9], '*', 'room', room, 'item', item)
return seq
"""

# KEYS: seq, rooms, feed. ARGV: room key prefix. Returns the last seq, the feed's newest id,
# then each room's name and entries: the state and where the feed goes on from, together.
_SNAPSHOT = """
local out = {redis.call('GET', KEYS[1]) or '0'}
local newest = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
out[2] = newest[1] and newest[1][1] or '0-0'
for _, name in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  table.insert(out, name)
  table.insert(out, redis.call('LRANGE', ARGV[1] .. name, 0, -1))
end
return out
"""


def _field(fields: dict[Any, Any], name: str) -> str:
    return text(fields.get(name.encode(), fields.get(name, b"")))


def _entry(room: str, item: str) -> RoomEntry:
    seq, _size, dumped = item.split(" ", 2)
    return RoomEntry.load(room, int(seq), dumped)


@fail_closed
class RedisRoomStore(RoomStore):
    def __init__(self, redis: Redis, bounds: RoomBounds, *, prefix: str) -> None:
        super().__init__(bounds)
        self._redis = redis
        keys = f"{prefix}:webchat"
        self._seq, self._feed, self._rooms = f"{keys}:seq", f"{keys}:feed", f"{keys}:rooms"
        self._append_keys = [
            self._seq,
            self._rooms,
            f"{keys}:firsts",
            f"{keys}:bytes",
            f"{keys}:total",
            self._feed,
        ]
        self._room_prefix = f"{keys}:room:"
        self._append = redis.register_script(_APPEND)
        self._snapshot = redis.register_script(_SNAPSHOT)
        self._advanced = asyncio.Event()
        self._tasks = BackgroundTasks("webchat.rooms")
        self._follower: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    async def open(cls, redis: Redis, bounds: RoomBounds, *, prefix: str) -> RedisRoomStore:
        """Read the rooms, then follow the feed from there until ``close``."""
        store = cls(redis, bounds, prefix=prefix)
        position = await store._reload()
        store._follower = store._tasks.spawn(store._follow(position), name="webchat-rooms-feed")
        return store

    async def close(self) -> None:
        self._closed = True
        if self._follower is not None:
            # redis-py (8.1) can swallow the cancel of a blocking read on a connection that
            # ran a script: then the loop ends when that read returns, within _BLOCK_MS.
            self._follower.cancel()
            await asyncio.wait([self._follower], timeout=_BLOCK_MS / 1000 + 1)

    async def append(self, entry: RoomEntry) -> RoomEntry:
        b = self.kept.bounds
        seq = int(
            await self._append(
                keys=self._append_keys,
                args=[
                    entry.room,
                    entry.size,
                    entry.dump(),
                    b.history_size,
                    b.room_bytes,
                    b.total_bytes,
                    b.max_rooms,
                    self._room_prefix,
                    FEED_MAXLEN,
                ],
            )
        )
        # Told to this replica's pages through the feed, in order among the other replicas'
        # entries. Returned once the copy here has it: a script that posted and then polls
        # after the number it got must not find the copy behind that number.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_CATCH_UP_SECONDS):
                while self.kept.last_seq < seq:
                    await self._advanced.wait()
        return entry.numbered(seq)

    def _advance(self) -> None:
        self._advanced.set()
        self._advanced = asyncio.Event()

    async def _reload(self) -> str:
        """Read the whole state again; tell what this copy did not have. The feed's id to
        read on from."""
        reply: list[Any] = await self._snapshot(
            keys=[self._seq, self._rooms, self._feed], args=[self._room_prefix]
        )
        last, position = int(reply[0]), text(reply[1])
        entries = [
            _entry(text(name), text(item))
            for name, items in zip(reply[2::2], reply[3::2], strict=True)
            for item in items
        ]
        before = self.kept.last_seq
        self.kept.restore(entries, last)
        # Numbers that start again (Redis lost its data): what it holds now is all new.
        news = [e for e in self.kept.entries() if e.seq > before or last < before]
        for entry in news:
            self._tell(entry)
        self._advance()
        return position

    async def _follow(self, position: str) -> None:
        while not self._closed:
            try:
                position = await self._read(position)
            except (RedisError, OSError) as exc:
                if not is_disconnect(exc):
                    raise
                log.warning("webchat.rooms_feed_reconnecting", error=f"{type(exc).__name__}: {exc}")
                await drop_idle_connections(self._redis)
                position = await after_failure_retrying(
                    self._reload,
                    attempts=None,
                    initial=_RETRY_INITIAL,
                    maximum=_RETRY_MAX,
                    retry_on=is_disconnect,
                )
                log.info("webchat.rooms_feed_resumed", seq=self.kept.last_seq)

    async def _read(self, position: str) -> str:
        rows: Any = await self._redis.xread({self._feed: position}, block=_BLOCK_MS, count=500)
        for _, found in rows or []:
            for entry_id, fields in found:
                position = text(entry_id)
                entry = _entry(_field(fields, "room"), _field(fields, "item"))
                if entry.seq <= self.kept.last_seq:
                    continue  # in the state read at open or at a reload
                if entry.seq != self.kept.last_seq + 1:
                    log.info("webchat.rooms_feed_gap", after=self.kept.last_seq, got=entry.seq)
                    return await self._reload()
                self._keep(entry)
                self._advance()
        return position
