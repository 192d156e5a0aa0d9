"""Plumbing every long-lived part shares: background tasks, one-at-a-time per key, backoff.

Each mechanism is written here once; channels, the confirmation service and the agent loop
use these instead of their own copies.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import structlog
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    stop_never,
    wait_exponential,
    wait_random,
)
from tenacity.wait import wait_base

log = structlog.get_logger(__name__)

T = TypeVar("T")

# How long a cancelled task may take to end before it is cancelled again: longer than the
# cleanup a task runs on its way out (the Feishu socket's close is given 2 s), which a
# second cancel would cut short.
CANCEL_AGAIN_SECONDS = 5.0


class ServiceUnavailable(Exception):
    """A service the gateway relies on (Redis) is down for now: expected, and whoever
    handed the work in tries again (a platform redelivers what was not acknowledged).
    A task that ends with it is logged as one line, not a traceback per message."""


class BackgroundTasks:
    """Tasks that run on their own: kept until done, crashes logged, drained on stop.

    A task nobody awaits loses its exception silently (and may be garbage-collected while
    it runs); here each one is held in a set and its failure is logged with its name.
    """

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, ServiceUnavailable):
            log.warning("task.failed", owner=self._owner, task=task.get_name(), error=str(exc))
        elif exc is not None:
            log.error("task.crashed", owner=self._owner, task=task.get_name(), exc_info=exc)

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait for the running tasks (and those they spawn); True when all ended in time."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while self._tasks:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            if left == 0:
                return False
            await asyncio.wait(set(self._tasks), timeout=left)
        return True

    async def cancel(self, *, again_after: float = CANCEL_AGAIN_SECONDS) -> None:
        """Cancel every task and wait until each has ended.

        A task still running ``again_after`` seconds after its cancel is cancelled again:
        Python 3.11's ``asyncio.wait_for`` drops a cancel that lands as its inner call
        completes, and redis-py sends every command through it, so a loop of Redis calls
        can go on after one cancel and hold a stop until the supervisor kills it.
        """
        running = set(self._tasks)
        while running:
            for task in running:
                task.cancel()
            _, running = await asyncio.wait(running, timeout=again_after)

    async def stop(self, timeout: float) -> None:
        """Let tasks finish for up to ``timeout`` seconds, then cancel the rest."""
        if not await self.drain(timeout):
            await self.cancel()


class KeyedSerial:
    """One holder at a time per key (a chat, a session); other keys run freely.

    Locks exist only while someone holds or waits for them, so a daemon that has seen a
    million chats does not keep a million locks.
    """

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    def __len__(self) -> int:
        return len(self._locks)

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users > 1:
                self._locks[key] = (lock, users - 1)
            else:
                del self._locks[key]


def backoff(*, initial: float, maximum: float) -> wait_base:
    """Exponential backoff from ``initial`` up to ``maximum`` seconds, plus up to ``initial``
    of random jitter (so many clients that failed together do not retry together)."""
    return wait_exponential(multiplier=initial, max=maximum) + wait_random(0, initial)


def retrying(
    *,
    attempts: int | None,
    initial: float,
    maximum: float,
    retry_on: Callable[[BaseException], bool],
    before_sleep: Callable[[Any], Any] | None = None,
) -> AsyncRetrying:
    """The one retry policy: ``attempts`` tries (None: until it works), backoff between them.

    Raises the last error when the attempts run out (``reraise``), so callers see what
    failed rather than tenacity's wrapper.
    """
    return AsyncRetrying(
        stop=stop_after_attempt(attempts) if attempts else stop_never,
        wait=backoff(initial=initial, maximum=maximum),
        retry=retry_if_exception(retry_on),
        reraise=True,
        before_sleep=before_sleep,
    )


async def after_failure_retrying(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int | None,
    initial: float,
    maximum: float,
    retry_on: Callable[[BaseException], bool],
    before_sleep: Callable[[Any], Any] | None = None,
) -> T:
    """``await call()``; only when that fails with an error ``retry_on`` accepts, go on
    under ``retrying`` (the first failure counts as its attempt 1, so attempts, waits and
    ``before_sleep`` are as if the policy had run from the start).
    """
    # Entering tenacity only after a failure: bench/send_retry.py µs per send (26.8 µs
    # more per send through the retry machinery on the first try).
    try:
        return await call()
    except Exception as exc:
        if attempts == 1 or not retry_on(exc):
            raise
        first: Exception | None = exc
    async for attempt in retrying(
        attempts=attempts,
        initial=initial,
        maximum=maximum,
        retry_on=retry_on,
        before_sleep=before_sleep,
    ):
        with attempt:
            if first is not None:
                failed, first = first, None
                raise failed
            return await call()
    raise AssertionError("unreachable: the retry policy re-raises the last error")
