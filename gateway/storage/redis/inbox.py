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
- ``P:inbox-given-up:{token}``: a put whose reply never came and that said "not stored"
  (``_unsure_put``); the put, should Redis still execute it, finds it and stores nothing.

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
# How long a put whose reply was lost tries to settle what became of it (``_GIVE_UP``)
# before it says "not stored" unsettled (Redis unreachable all that time).
_UNSURE_PUT_SECONDS = 2.0
# Entries read or claimed per round trip.
_BATCH = 500

# KEYS: stream, seen key, this put's given-up key. ARGV: group, consumer, seen ttl (s),
# body, this put's token. Returns the entry id, or false when the message is already
# stored (or this put was given up: it arrives after its caller said "not stored").
_PUT = """
if redis.call('EXISTS', KEYS[3]) == 1 then return false end
if not redis.call('SET', KEYS[2], '-', 'NX', 'EX', ARGV[3]) then return false end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], '0', 'MKSTREAM')
end
local id = redis.call('XADD', KEYS[1], '*', 'm', ARGV[4], 't', ARGV[5])
redis.call('SET', KEYS[2], id, 'KEEPTTL')
redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', 1, 'STREAMS', KEYS[1], '>')
return id
"""

# KEYS: seen key, stream, a put's given-up key. ARGV: that put's token, ttl (s).
# What became of the put: 'stored' (its entry is there), 'duplicate' (another put's
# entry, or one taken already), or 'refused': not stored, and now never will be, whenever
# Redis executes the put (it finds its given-up key). Either order of the two is settled.
_GIVE_UP = """
local id = redis.call('GET', KEYS[1])
if id then
  local found = redis.call('XRANGE', KEYS[2], id, id)
  if #found == 0 then return 'duplicate' end
  local fields = found[1][2]
  for i = 1, #fields, 2 do
    if fields[i] == 't' and fields[i + 1] == ARGV[1] then return 'stored' end
  end
  return 'duplicate'
end
redis.call('SET', KEYS[3], '1', 'EX', ARGV[2])
return 'refused'
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
        self._give_up = redis.register_script(_GIVE_UP)
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

    def _given_up(self, token: str) -> str:
        return f"{self._prefix}:inbox-given-up:{token}"

    async def put(self, msg: InboundMessage) -> bool:
        channel, message_id = message_key(msg)
        seen, token = self._seen(channel, message_id), uuid.uuid4().hex
        try:
            entry = await self._put(
                keys=[self._stream, seen, self._given_up(token)],
                args=[GROUP, self.owner, KEEP_TAKEN_SECONDS, dump_message(msg), token],
            )
        except Exception as exc:
            if not is_disconnect(exc):
                raise
            return await self._unsure_put(seen, token, exc)
        return entry is not None

    async def _unsure_put(self, seen: str, token: str, lost: Exception) -> bool:
        """The put got no reply (a broken connection, a read timeout while Redis paused):
        it may have been executed, or be executed yet. Told "not stored", a web client
        sends the text again and a platform redelivers, while a stored entry waits in this
        live replica's pending list until it dies: one message, two turns (the long chaos
        run, docs/performance.md). So settle it, in one script whichever runs first:
        stored by this put (True: processed here), by another (False: a duplicate), or
        refused for good (``lost`` raised again: "not stored" is then true). Redis silent
        for ``_UNSURE_PUT_SECONDS`` more leaves it unsettled: ``lost`` too."""
        deadline = time.monotonic() + _UNSURE_PUT_SECONDS
        delay = 0.05
        while True:
            try:
                outcome = await self._give_up(
                    keys=[seen, self._stream, self._given_up(token)],
                    args=[token, KEEP_TAKEN_SECONDS],
                )
            except Exception as exc:
                if not is_disconnect(exc) or time.monotonic() > deadline:
                    raise lost from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            settled = text(outcome)
            log.warning("inbox.unsure_put_settled", outcome=settled)
            if settled == "refused":
                raise lost
            return settled == "stored"

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
