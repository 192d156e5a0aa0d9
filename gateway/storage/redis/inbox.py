"""The inbox on Redis: a Stream with a consumer group, shared by every replica.

Layout (``P`` = the confirmation store's prefix, one per deployment):

- ``P:inbox`` stream, group ``gateway``: one entry per stored message (field ``m``: the
  message as JSON; ``t``: a token of the put that wrote it, read when that put's reply was
  lost, ``_unsure_put``). Each replica is a consumer named by its instance id. ``put`` adds
  the entry and reads it into the putter's pending list in one script, so the replica that
  acknowledged a message processes it (no hop to another replica, and a reply is intercepted
  where the person's platform call waits). ``taken`` acknowledges (XACK) and deletes (XDEL)
  it: the stream holds only what is still to be processed.
- ``P:inbox-seen:{channel}:{message_id}``: the dedupe key, set NX in the same script as the
  XADD (its value is the entry id). It lives ``KEEP_TAKEN_SECONDS`` from put, then as
  long again from taken: a late platform redelivery is still a duplicate, and nothing
  needs purging.

Adoption claims a dead consumer's pending entries (XPENDING for that consumer, then XCLAIM
with min-idle = the instance lease, in one script, so two adopters never split one entry
twice). Not XAUTOCLAIM: it claims whatever is idle, whoever holds it, so a live replica
whose model thinks longer than the lease would have its message processed twice.
"""

from __future__ import annotations

import asyncio
import builtins
import math
import time
import uuid
from collections.abc import Collection
from typing import Any, ClassVar

import structlog
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from gateway.bus import InboundMessage
from gateway.storage.inbox import KEEP_TAKEN_SECONDS, Inbox, dump_message, load_message, message_key
from gateway.storage.redis.codec import text
from gateway.storage.redis.feed import fail_closed, is_disconnect

log = structlog.get_logger(__name__)

GROUP = "gateway"
# How long a put whose reply was lost asks Redis what became of it before it gives up and
# says "not stored" (a Redis restart or a pause longer than this leaves it unknown).
_UNSURE_PUT_SECONDS = 2.0
# Entries read or claimed per round trip.
_BATCH = 500

# KEYS: stream, seen key. ARGV: group, consumer, seen ttl (s), body, this put's token.
# Returns the entry id, or false when the message is already stored.
_PUT = """
if not redis.call('SET', KEYS[2], '-', 'NX', 'EX', ARGV[3]) then return false end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
end
local id = redis.call('XADD', KEYS[1], '*', 'm', ARGV[4], 't', ARGV[5])
redis.call('SET', KEYS[2], id, 'KEEPTTL')
redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1, 'STREAMS', KEYS[1], '>')
return id
"""

# KEYS: stream, seen key. ARGV: group, when the seen key expires (epoch ms).
# 1 when it was taken now; 0 for an unknown or already taken message.
_TAKEN = """
local id = redis.call('GET', KEYS[2])
if not id or id == '-' then return 0 end
if redis.call('XACK', KEYS[1], ARGV[1], id) == 0 then return 0 end
redis.call('XDEL', KEYS[1], id)
redis.call('PEXPIREAT', KEYS[2], ARGV[2])
return 1
"""

# KEYS: stream. ARGV: group, dead consumer, adopter, min idle (ms), count.
# Returns the claimed entries; forgets the dead consumer once it holds nothing.
_ADOPT = """
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', ARGV[4], '-', '+',
                           ARGV[5], ARGV[2])
local ids = {}
for _, p in ipairs(pending) do ids[#ids + 1] = p[1] end
local claimed = {}
if #ids > 0 then
  claimed = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], ARGV[4], unpack(ids))
end
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) == 0 then
  redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
end
return claimed
"""


@fail_closed
class RedisInbox(Inbox):
    """Inbound messages in a Redis Stream; takes the confirmation store's client (and so
    its bounded pool and its prefix). ``close()`` leaves the client to the store."""

    shared: ClassVar[bool] = True

    def __init__(self, redis: Redis, *, prefix: str, owner: str, claim_idle_seconds: float) -> None:
        super().__init__(owner=owner)
        self._redis = redis
        self._prefix = prefix
        self._stream = f"{prefix}:inbox"
        self._claim_idle_ms = max(0, math.ceil(claim_idle_seconds * 1000))
        self._put = redis.register_script(_PUT)
        self._taken = redis.register_script(_TAKEN)
        self._adopt = redis.register_script(_ADOPT)

    @classmethod
    async def open(
        cls, redis: Redis, *, prefix: str, owner: str, claim_idle_seconds: float
    ) -> RedisInbox:
        """The inbox, with its stream and group made if they are not there yet."""
        inbox = cls(redis, prefix=prefix, owner=owner, claim_idle_seconds=claim_idle_seconds)
        await inbox.ensure_group()
        return inbox

    async def ensure_group(self) -> None:
        try:
            await self._redis.xgroup_create(self._stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def _seen(self, channel: str, message_id: str) -> str:
        return f"{self._prefix}:inbox-seen:{channel}:{message_id}"

    async def put(self, msg: InboundMessage) -> bool:
        channel, message_id = message_key(msg)
        seen, token = self._seen(channel, message_id), uuid.uuid4().hex
        try:
            entry = await self._put(
                keys=[self._stream, seen],
                args=[GROUP, self.owner, KEEP_TAKEN_SECONDS, dump_message(msg), token],
            )
        except Exception as exc:
            if not is_disconnect(exc):
                raise
            return await self._unsure_put(seen, token, exc)
        return entry is not None

    async def _unsure_put(self, seen: str, token: str, lost: Exception) -> bool:
        """The connection broke under a put: the reply was lost, maybe not the write. Told
        "not stored", a web client sends the text again and a platform redelivers, while the
        stored entry waits in this live replica's pending list until it dies: one message,
        two turns (the long chaos run, docs/performance.md). So ask Redis, for a few
        seconds, what became of it: the seen key names the entry, and the entry carries the
        token of the put that wrote it. Ours: stored, to be processed here (True). Another
        put's: a redelivery (False). Nothing there, or no answer in time: ``lost`` is raised
        again (not stored, as far as anyone can tell)."""
        deadline = time.monotonic() + _UNSURE_PUT_SECONDS
        delay = 0.05
        while True:
            try:
                entry = await self._redis.get(seen)
                if entry is None or text(entry) == "-":
                    raise lost
                found = await self._redis.xrange(self._stream, text(entry), text(entry))
            except Exception as exc:
                if exc is lost or not is_disconnect(exc) or time.monotonic() > deadline:
                    raise lost from (None if exc is lost else exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            fields = (found[0][1] or {}) if found else {}
            mine = text(fields.get(b"t", fields.get("t", b""))) == token
            log.warning("inbox.unsure_put_settled", stored_here=mine)
            return mine

    async def taken(self, channel: str, message_id: str, *, at: float | None = None) -> None:
        when = time.time() if at is None else at
        await self._taken(
            keys=[self._stream, self._seen(channel, message_id)],
            args=[GROUP, math.ceil((when + KEEP_TAKEN_SECONDS) * 1000)],
        )

    async def adopt(self, alive: Collection[str]) -> builtins.list[InboundMessage]:
        keep = {self.owner, *alive}
        try:
            consumers = await self._redis.xinfo_consumers(self._stream, GROUP)
        except ResponseError as exc:  # the stream or group is gone (FLUSHDB): remake it
            if "no such key" not in str(exc).lower() and "NOGROUP" not in str(exc):
                raise
            await self.ensure_group()
            return []
        claimed: builtins.list[tuple[str, InboundMessage]] = []
        for consumer in consumers:
            name = text(consumer["name"])
            if name in keep:
                continue
            while True:
                entries = await self._adopt(
                    keys=[self._stream],
                    args=[GROUP, name, self.owner, self._claim_idle_ms, _BATCH],
                )
                claimed.extend(_decoded(entries))
                if len(entries) < _BATCH:
                    break
        # Stream ids grow with time: oldest first across every dead consumer.
        claimed.sort(key=lambda item: _id_order(item[0]))
        return [msg for _, msg in claimed]

    async def untaken(self) -> builtins.list[InboundMessage]:
        found: builtins.list[InboundMessage] = []
        start = "-"
        while True:
            entries = await self._redis.xrange(self._stream, min=start, count=_BATCH) or []
            decoded = _decoded(entries)
            found.extend(msg for _, msg in decoded)
            if len(entries) < _BATCH:
                return found
            start = "(" + decoded[-1][0]

    async def purge(self, before: float) -> int:
        return 0  # the seen keys expire by themselves; taken entries are already deleted


def _decoded(entries: Any) -> builtins.list[tuple[str, InboundMessage]]:
    out = []
    for entry in entries or ():
        if not entry:  # an entry deleted while pending: nothing left to process
            continue
        entry_id, fields = entry[0], entry[1]
        if isinstance(fields, dict):
            body = fields.get(b"m", fields.get("m"))
        else:  # a script's reply: a flat field/value list
            pairs = dict(zip(fields[::2], fields[1::2], strict=True))
            body = pairs.get(b"m", pairs.get("m"))
        if body is not None:
            out.append((text(entry_id), load_message(body)))
    return out


def _id_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)
