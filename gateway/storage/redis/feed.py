"""The cross-replica lifecycle feed: a Redis Stream read from a remembered last id.

Each entry says which record changed, how (``requested``, ``resolved``, ``executed``,
``voted``) and which store handle wrote it, so a reader can tell its own process's changes
from the other replicas'.

Pub/sub forgets what it sent while a subscriber was away, and redis-py's subscriber ends
for good on a dropped connection: one ``CLIENT KILL`` or Redis restart left every later
cross-replica decision to wake its turn only at the deadline (issue 13). A stream keeps the
entries; the reader remembers the id of the last one it gave out, reconnects on the one
backoff policy of gateway/runtime.py and reads on from there, so nothing finished while it
was away is missed (as long as the stream, trimmed near ``MAXLEN``, still holds it).

The Redis parts share here what a dropped connection means to them: ``is_disconnect``,
``drop_idle_connections`` and ``fail_closed`` (their operations raise StoreUnavailableError).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import structlog
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.runtime import after_failure_retrying
from gateway.storage.confirmations import FeedEntry, FeedKind, StoreUnavailableError
from gateway.storage.redis.codec import text

C = TypeVar("C", bound=type)

log = structlog.get_logger(__name__)

# Entries the stream keeps (approximately): far more than are written during any outage a
# reader rides out; an entry is ~100 bytes. A round trip writes three (requested, resolved,
# executed): 30,000 still cover the 10,000 round trips the feed covered with decisions only.
STREAM_MAXLEN = 30_000
# One blocking read waits this long before the next; short enough that a stop is prompt.
_BLOCK_MS = 1000
# Reconnect backoff: first retry after ~50 ms, then doubling up to 2 s.
_RETRY_INITIAL = 0.05
_RETRY_MAX = 2.0


def is_disconnect(exc: BaseException) -> bool:
    """Errors a reconnect can cure (the server went away, or is loading its data)."""
    return isinstance(exc, RedisConnectionError | RedisTimeoutError | OSError)


async def drop_idle_connections(redis: Redis) -> None:
    """After a disconnect the pool's idle connections are dead too (a Redis restart, a
    network cut): close them now, so the next callers connect afresh instead of each
    failing once on a stale socket (commands are not retried: see from_url)."""
    await redis.connection_pool.disconnect(inuse_connections=False)


def _pool_exhausted(exc: BaseException) -> bool:
    """BlockingConnectionPool's wait timed out: every connection is in use, none is dead."""
    return isinstance(exc, RedisConnectionError) and isinstance(exc.__cause__, TimeoutError)


def fail_closed(cls: C) -> C:
    """Every public coroutine method of ``cls`` raises StoreUnavailableError when Redis
    cannot be reached or the pool stays exhausted past its timeout, so callers above
    (service, runner, bus, HTTP) handle one error, with no Redis import. ``close`` and
    ``unavailable`` are left as they are; instances keep their client in ``self._redis``."""
    for name, method in list(vars(cls).items()):
        if name.startswith("_") or name in ("close", "unavailable"):
            continue
        if inspect.iscoroutinefunction(method):
            setattr(cls, name, _translated(method))
    return cls


def _translated(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(method)
    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await method(self, *args, **kwargs)
        except (RedisError, OSError) as exc:
            if not is_disconnect(exc):
                raise
            if not _pool_exhausted(exc):
                # Not when the pool is merely busy: its connections are fine, and dropping
                # them under load made every caller reconnect, a spiral of timeouts.
                with contextlib.suppress(RedisError, OSError):
                    await drop_idle_connections(self._redis)
            raise StoreUnavailableError(f"Redis: {type(exc).__name__}: {exc}") from exc

    return call


_KINDS: dict[str, FeedKind] = {"requested": "requested", "executed": "executed", "voted": "voted"}


def entry_of(fields: dict[Any, Any], writer: str) -> FeedEntry | None:
    """A stream entry as the feed gives it out; None for one without an id.

    An entry without a kind or a writer comes from a replica of an older version, which
    announced decisions only: a ``resolved`` from elsewhere.
    """
    value = fields.get(b"id", fields.get("id"))
    if value is None:
        return None
    kind = _KINDS.get(text(fields.get(b"kind", fields.get("kind", b""))), "resolved")
    source = fields.get(b"from", fields.get("from"))
    return FeedEntry(text(value), kind, local=source is not None and text(source) == writer)


class FinishedStream:
    """Reads ``key`` from where the feed started, forever, across disconnects; entries
    written by ``writer`` are marked local."""

    def __init__(self, redis: Redis, key: str, writer: str) -> None:
        self._redis = redis
        self._key = key
        self._writer = writer

    @asynccontextmanager
    async def feed(self) -> AsyncIterator[AsyncIterator[FeedEntry]]:
        # The position is taken before the context is entered: what finishes after that is
        # given out, even when the reader first reads later.
        newest = await self._redis.xrevrange(self._key, count=1)
        entry_id = newest[0][0] if newest else None
        last = text(entry_id) if entry_id is not None else "0-0"
        yield self._ids(last)

    async def _ids(self, last: str) -> AsyncIterator[FeedEntry]:
        while True:
            for _, entries in await self._read(last):
                for entry_id, fields in entries:
                    last = text(entry_id)
                    entry = entry_of(fields, self._writer)
                    if entry is not None:
                        yield entry

    async def _read(self, last: str) -> Any:
        away = False

        async def reconnecting(state: Any) -> None:
            nonlocal away
            if not away:
                await drop_idle_connections(self._redis)
            away = True
            log.warning(
                "confirm.feed_reconnecting",
                attempt=state.attempt_number,
                error=f"{type(state.outcome.exception()).__name__}: {state.outcome.exception()}",
            )

        rows = await after_failure_retrying(
            lambda: self._redis.xread({self._key: last}, block=_BLOCK_MS, count=500),
            attempts=None,
            initial=_RETRY_INITIAL,
            maximum=_RETRY_MAX,
            retry_on=is_disconnect,
            before_sleep=reconnecting,
        )
        if away:
            log.info("confirm.feed_resumed", after=last)
        return rows or []
