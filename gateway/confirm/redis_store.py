"""Redis backend: for several gateway replicas behind one bot.

Each confirmation is a hash (``{prefix}:c:{id}``): the record as JSON at creation, plus
the fields that change (``status``, ``decision`` JSON, ``ref:<key>`` prompt refs). Pending
ids sit in sorted sets (per session and overall) scored by ``created_at``. Create, finish
and set_prompt_ref are Lua scripts, so each is atomic on the server whichever replica
calls it. Finished records get an explicit TTL (30 days by default).

For Redis Cluster, put the prefix in braces (``{gateway}``) so every key of the store
hashes to one slot, as multi-key scripts require.
"""

from __future__ import annotations

import builtins
import json
import math
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import structlog
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from gateway.confirm.model import AuditEvent, Confirmation, ExecState, Instance, Status
from gateway.confirm.store import ConfirmationExistsError, ConfirmationStore

log = structlog.get_logger(__name__)

DEFAULT_PREFIX = "gateway:confirm"
DEFAULT_FINISHED_TTL_SECONDS = 30 * 24 * 3600.0

# KEYS: record, session pending, all pending, index, session index
# ARGV: id, created_at, record JSON, status, expires_at, session_key, ttl seconds
_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'record', ARGV[3], 'status', ARGV[4],
           'expires_at', ARGV[5], 'session_key', ARGV[6])
if ARGV[4] == 'pending' then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
  redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
end
redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[7])
return 1
"""

# KEYS: record, session pending, all pending
# ARGV: id, new status, needs deadline ('1'/'0'), now, decision JSON, finished ttl seconds,
#       pub/sub channel announcing finished ids
# Returns {code, HGETALL}: 0 missing, 1 changed, 2 already terminal, 3 past the deadline.
_FINISH = """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {0, {}} end
if status ~= 'pending' then return {2, redis.call('HGETALL', KEYS[1])} end
if ARGV[3] == '1' then
  local expires_at = tonumber(redis.call('HGET', KEYS[1], 'expires_at'))
  if not (expires_at > tonumber(ARGV[4])) then
    return {3, redis.call('HGETALL', KEYS[1])}
  end
end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'decision', ARGV[5])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[6])
redis.call('PUBLISH', ARGV[7], ARGV[1])
return {1, redis.call('HGETALL', KEYS[1])}
"""

# KEYS: record; ARGV: ref key, ref value
_SET_REF = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'ref:' .. ARGV[1], ARGV[2])
return 1
"""


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _json(value: Any) -> str:
    # default=str: tool details may hold a Decimal or a date; keep the record rather than fail.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _pairs(flat: Sequence[Any] | Mapping[Any, Any]) -> dict[str, str]:
    """HGETALL as a dict of str, from a script's flat list or the client's mapping."""
    if isinstance(flat, Mapping):
        return {_text(k): _text(v) for k, v in flat.items()}
    return {_text(flat[i]): _text(flat[i + 1]) for i in range(0, len(flat), 2)}


def _decode(fields: Mapping[str, str]) -> Confirmation | None:
    if "record" not in fields:
        return None
    data = json.loads(fields["record"])
    data["status"] = fields.get("status", data.get("status"))
    if "decision" in fields:
        data.update(json.loads(fields["decision"]))
    refs = dict(data.get("prompt_refs") or {})
    refs.update({k[4:]: v for k, v in fields.items() if k.startswith("ref:")})
    data["prompt_refs"] = refs
    return Confirmation.from_dict(data)


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
        self._prefix = prefix
        self._finished_ttl = max(1, math.ceil(finished_ttl_seconds))
        self._close_client = close_client
        self._create = redis.register_script(_CREATE)
        self._finish = redis.register_script(_FINISH)
        self._set_ref = redis.register_script(_SET_REF)

    @classmethod
    async def from_url(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        finished_ttl_seconds: float = DEFAULT_FINISHED_TTL_SECONDS,
        **client_kwargs: Any,
    ) -> RedisConfirmationStore:
        """Connect and check the server answers, so a wrong URL fails at start-up."""
        client: Redis = Redis.from_url(url, **client_kwargs)
        try:
            await client.ping()
        except BaseException:
            await client.aclose()
            raise
        return cls(
            client, prefix=prefix, finished_ttl_seconds=finished_ttl_seconds, close_client=True
        )

    async def close(self) -> None:
        if self._close_client:
            await self._redis.aclose()

    # -- keys ------------------------------------------------------------------------------

    def _record_key(self, confirmation_id: str) -> str:
        return f"{self._prefix}:c:{confirmation_id}"

    def _session_pending_key(self, session_key: str) -> str:
        return f"{self._prefix}:pending:{session_key}"

    def _all_pending_key(self) -> str:
        return f"{self._prefix}:pending-all"

    def _index_key(self) -> str:
        return f"{self._prefix}:index"

    def _session_index_key(self, session_key: str) -> str:
        return f"{self._prefix}:session:{session_key}"

    # -- the contract ----------------------------------------------------------------------

    async def create(self, confirmation: Confirmation) -> None:
        c = confirmation
        record = c.to_dict()
        if c.status is Status.PENDING:
            # A pending record outlives its deadline by the finished TTL, so one that no
            # replica ever finishes (all crashed) does not stay forever.
            ttl = math.ceil(max(0.0, c.expires_at - c.created_at)) + self._finished_ttl
        else:
            ttl = self._finished_ttl
        created = await self._create(
            keys=[
                self._record_key(c.id),
                self._session_pending_key(c.session_key),
                self._all_pending_key(),
                self._index_key(),
                self._session_index_key(c.session_key),
            ],
            args=[
                c.id,
                repr(c.created_at),
                _json(record),
                c.status.value,
                repr(c.expires_at),
                c.session_key,
                ttl,
            ],
        )
        if not int(created):
            raise ConfirmationExistsError(c.id)

    async def get(self, confirmation_id: str) -> Confirmation | None:
        fields = await self._redis.hgetall(self._record_key(confirmation_id))
        return _decode(_pairs(fields))

    async def list_pending(self, session_key: str) -> builtins.list[Confirmation]:
        key = self._session_pending_key(session_key)
        ids = await self._redis.zrange(key, 0, -1)
        found = await self._load(key, ids)
        return [c for c in found if c.status is Status.PENDING]

    async def list_all_pending(self) -> builtins.list[Confirmation]:
        key = self._all_pending_key()
        ids = await self._redis.zrange(key, 0, -1)
        found = await self._load(key, ids)
        return [c for c in found if c.status is Status.PENDING]

    async def _list_first(
        self,
        *,
        status: Status | None = None,
        session_key: str | None = None,
        limit: int = 200,
    ) -> builtins.list[Confirmation]:
        if status is Status.PENDING:
            key = (
                self._session_pending_key(session_key)
                if session_key is not None
                else self._all_pending_key()
            )
        elif session_key is not None:
            key = self._session_index_key(session_key)
        else:
            key = self._index_key()
        out: builtins.list[Confirmation] = []
        page = max(limit, 100)
        start = 0
        while len(out) < limit:
            ids = await self._redis.zrevrange(key, start, start + page - 1)
            if not ids:
                break
            start += len(ids)
            for c in await self._load(key, ids):
                if status is not None and c.status is not status:
                    continue
                if session_key is not None and c.session_key != session_key:
                    continue
                out.append(c)
                if len(out) >= limit:
                    break
        return out

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
    ) -> tuple[Confirmation | None, bool]:
        if not status.is_terminal:
            raise ValueError("finish() moves a confirmation to a terminal status")
        record_key = self._record_key(confirmation_id)
        # The session key never changes, so reading it before the script is safe; the
        # script needs it up front because every key it touches must be declared.
        session_key = await self._redis.hget(record_key, "session_key")
        if session_key is None:
            return None, False
        decision = {
            "decided_by": by,
            "decided_at": now,
            "decided_via": via,
            "reason": reason,
            "feedback": feedback,
        }
        code, flat = await self._finish(
            keys=[
                record_key,
                self._session_pending_key(_text(session_key)),
                self._all_pending_key(),
            ],
            args=[
                confirmation_id,
                status.value,
                "1" if status in (Status.APPROVED, Status.REJECTED) else "0",
                repr(now),
                _json(decision),
                self._finished_ttl,
                self.finished_channel,
            ],
        )
        return _decode(_pairs(flat)), int(code) == 1

    async def set_prompt_ref(self, confirmation_id: str, key: str, value: str) -> None:
        await self._set_ref(keys=[self._record_key(confirmation_id)], args=[key, value])

    # -- cross-replica notification ----------------------------------------------------------

    @property
    def finished_channel(self) -> str:
        """The pub/sub channel on which every successful ``finish`` publishes the id."""
        return f"{self._prefix}:finished"

    @asynccontextmanager
    async def finished_feed(self) -> AsyncIterator[AsyncIterator[str]]:
        """Ids of confirmations finished by any replica, as they happen.

        A turn waits on a future in the process that asked; the decision may land on
        another replica (the reply reached that one). This feed lets the asking replica
        wake its turn. Subscribed before it is yielded: nothing finished after entry is
        missed (pub/sub does not replay what came before).
        """
        pubsub = self._redis.pubsub()
        try:
            await pubsub.subscribe(self.finished_channel)
            while True:
                message = await pubsub.get_message(timeout=5.0)
                if message is None:
                    raise TimeoutError("Redis did not confirm the subscription")
                if message["type"] == "subscribe":
                    break
            yield self._finished_ids(pubsub)
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py 8

    @staticmethod
    async def _finished_ids(pubsub: PubSub) -> AsyncIterator[str]:
        # get_message with a timeout instead of listen(): a cancelled follower ends at the
        # next poll even if redis-py swallows the cancellation inside a blocking read.
        while True:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
            if message is not None and message["type"] == "message":
                yield _text(message["data"])

    # -- internals -------------------------------------------------------------------------

    async def _load(self, index_key: str, ids: Iterable[Any]) -> builtins.list[Confirmation]:
        """Fetch records in index order; drop ids whose record has expired from the index."""
        id_list = [_text(i) for i in ids]
        if not id_list:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for confirmation_id in id_list:
                pipe.hgetall(self._record_key(confirmation_id))
            results = await pipe.execute()
        found: builtins.list[Confirmation] = []
        gone: builtins.list[str] = []
        for confirmation_id, fields in zip(id_list, results, strict=True):
            c = _decode(_pairs(fields))
            if c is None:
                gone.append(confirmation_id)
            else:
                found.append(c)
        if gone:
            # The record's TTL ran out; sorted sets have no per-member TTL, so tidy here.
            await self._redis.zrem(index_key, *gone)
            log.debug("confirm.redis_pruned", index=index_key, count=len(gone))
        return found

    # ------------------------------------------------------------ the execution ledger
    # Not yet on this backend: the ledger lands here next (issue 12). The service does not
    # call these yet; the ledger contract suite lists only the backends that have them.

    async def claim(
        self, confirmation_id: str, *, instance: str, now: float, lease: float
    ) -> Confirmation | None:
        raise NotImplementedError

    async def start_execution(
        self, confirmation_id: str, *, instance: str, now: float
    ) -> Confirmation | None:
        raise NotImplementedError

    async def finish_execution(
        self,
        confirmation_id: str,
        *,
        instance: str,
        state: ExecState,
        result: str | None,
        now: float,
    ) -> Confirmation | None:
        raise NotImplementedError

    async def adopt(
        self, confirmation_id: str, *, from_owner: str | None, to_owner: str
    ) -> Confirmation | None:
        raise NotImplementedError

    async def list_unsettled(self, *, instance: str) -> builtins.list[Confirmation]:
        raise NotImplementedError

    async def list_approved_waiting(self) -> builtins.list[Confirmation]:
        raise NotImplementedError

    async def heartbeat(self, instance: Instance, *, lease: float) -> None:
        raise NotImplementedError

    async def list_instances(self) -> builtins.list[Instance]:
        raise NotImplementedError

    async def forget_instance(self, instance_id: str) -> None:
        raise NotImplementedError

    async def add_event(self, event: AuditEvent) -> None:
        raise NotImplementedError

    async def events(self, confirmation_id: str) -> builtins.list[AuditEvent]:
        raise NotImplementedError

    async def purge(self, *, before: float) -> int:
        raise NotImplementedError

    async def page(
        self,
        *,
        status: Status | None = None,
        session_key: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[builtins.list[Confirmation], str | None]:
        items = await self._list_first(status=status, session_key=session_key, limit=limit)
        return items, None

    async def count(self, status: Status) -> int:
        raise NotImplementedError
