"""What each platform channel needs around its SDK, written once for Feishu and DingTalk.

* ``CachedToken``: the app's access token, fetched on first use and again before it expires.
* ``SdkThread``: the SDK's client on an event loop of its own, in a daemon thread.
* ``DeadLetters``: the sends that failed after every retry, served at
  ``/api/channels/<name>/failed`` (protected like every ``/api/`` path by the server).
* ``until_it_works``: connect (or restart) on the gateway's one backoff policy, logging
  each failure.
* ``same_secret`` / ``UsedOnce``: the constant-time comparison of a token or signature
  from a request, and the memory of signatures and nonces already used (replays).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog
from aiohttp import web
from cachetools import TTLCache
from tenacity import RetryCallState

from gateway.http.jsonapi import json_response
from gateway.http.openapi import Reply, Route, serve
from gateway.http.openapi_models import DeadLetters as DeadLettersAnswer
from gateway.runtime import retrying

DEAD_LETTERS = Reply("the dead letters, oldest first", DeadLettersAnswer)

log = structlog.get_logger(__name__)

T = TypeVar("T")


def same_secret(given: str, expected: str) -> bool:
    """Whether a token or signature from a request equals ours, in constant time.

    On bytes: ``hmac.compare_digest`` raises TypeError on a ``str`` with non-ASCII
    characters, so a token like "令牌" in a request body was a 500 instead of a 401.
    ``surrogatepass`` turns a lone surrogate (JSON ``"\\ud800"``, or an undecodable
    header byte) into bytes as well: they can never match, and never raise.
    """
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


class UsedOnce:
    """Keys (request signatures, nonces) each accepted once within ``seconds``.

    Bounded: past ``size`` keys the oldest are forgotten first. Size it above the number
    of requests a platform can sign within the window.
    """

    def __init__(
        self, *, seconds: float, size: int = 100_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._seen: TTLCache[str, bool] = TTLCache(maxsize=size, ttl=seconds, timer=clock)

    def first_use(self, key: str) -> bool:
        """True the first time ``key`` is seen within the window; it is then remembered."""
        if key in self._seen:
            return False
        self._seen[key] = True
        return True


class CachedToken:
    """An access token shared by one app's calls: fetched once, refreshed before expiry.

    ``fetch`` returns ``(token, seconds it is valid)``. One fetch at a time: callers that
    arrive while it runs wait for its token instead of fetching their own.
    """

    def __init__(
        self,
        *,
        fetch: Callable[[], Awaitable[tuple[str, float]]],
        refresh_early_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._early = refresh_early_seconds
        self._clock = clock
        self._token: str | None = None
        self._valid_until = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> str:
        async with self._lock:
            if self._token is not None and self._clock() < self._valid_until:
                return self._token
            token, ttl = await self._fetch()
            # Early, but not before half its life: a short-lived token is still used.
            self._valid_until = self._clock() + max(ttl - self._early, ttl / 2)
            self._token = token
            return token

    def invalidate(self, token: str) -> None:
        """Forget ``token`` (when it is still the current one) after the platform refused it."""
        if self._token == token:
            self._token = None
            self._valid_until = 0.0

    async def call(self, call: Callable[[str], Awaitable[T]], *, refused: Callable[[T], bool]) -> T:
        """``call(token)``; when the platform refused the token, once more with a fresh one.

        A revoked or early-expired token is not a failure to back off from: the platform
        asked for a new token, so the call is repeated at once.
        """
        token = await self.get()
        result = await call(token)
        if refused(result):
            self.invalidate(token)
            result = await call(await self.get())
        return result


async def until_it_works(
    work: Callable[[], Awaitable[Any]], *, event: str, initial: float, maximum: float
) -> None:
    """Run ``work()`` until it returns (or the caller is cancelled), retrying any error.

    Each failure is logged as ``event`` with the wait before the next try; the waits come
    from the gateway's one backoff policy, so many clients that failed together do not
    retry in step.
    """

    def failed(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            event,
            attempt=state.attempt_number,
            retry_in=round(state.upcoming_sleep, 2),
            error=f"{type(exc).__name__}: {exc}",
        )

    async for attempt in retrying(
        attempts=None,
        initial=initial,
        maximum=maximum,
        retry_on=lambda exc: isinstance(exc, Exception),
        before_sleep=failed,
    ):
        with attempt:
            await work()


class SdkThread:
    """A platform SDK's client on an event loop of its own, in a daemon thread.

    Both SDKs make blocking HTTP calls from their coroutines and own their loop's
    behaviour (lark-oapi captures a loop at import; dingtalk-stream fetches its connection
    ticket with ``requests``). On the gateway's loop such a stall would stall every chat.
    The thread's loop runs one coroutine; ``stop()`` cancels it and waits, bounded, for the
    thread to end (a daemon thread cannot hold up the exit when that bound runs out).

    The SDK side reaches the gateway's loop only through ``hand_over`` (fire and forget)
    and ``run_on_gateway`` (a coroutine whose result it waits for).
    """

    def __init__(self, *, name: str) -> None:
        self.name = name
        self._gateway: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._finished: asyncio.Future[None] | None = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def start(self, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start the thread and run ``main()`` on its loop; returns once that loop runs."""
        self._gateway = asyncio.get_running_loop()
        self._finished = self._gateway.create_future()
        running = self._gateway.create_future()
        self._thread = threading.Thread(
            target=self._run, args=(main, running), name=self.name, daemon=True
        )
        self._thread.start()
        await running

    async def stop(self, timeout: float) -> bool:
        """Cancel the SDK's coroutine; True when the thread ended within ``timeout``."""
        loop, task, finished = self._loop, self._task, self._finished
        if loop is None or task is None or finished is None:
            return True
        # RuntimeError: the thread's loop already closed (its coroutine ended by itself).
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(task.cancel)
        try:
            await asyncio.wait_for(asyncio.shield(finished), timeout)
        except TimeoutError:
            log.warning("sdk_thread.stop_timeout", thread=self.name, seconds=timeout)
            return False
        if self._thread is not None:
            # Its loop is closed; the thread is on its last lines. Joined off the loop.
            await asyncio.to_thread(self._thread.join, timeout)
        return True

    def hand_over(self, fn: Callable[..., None], *args: Any) -> bool:
        """From the SDK thread: call ``fn(*args)`` on the gateway's loop, without waiting.

        False when the gateway's loop is gone (shutting down).
        """
        loop = self._gateway
        if loop is None or loop.is_closed():
            return False
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # closed between the check and the call
            return False
        return True

    def run_on_gateway(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """From the SDK thread: run ``coro`` on the gateway's loop; its result as a future.

        Raises RuntimeError when the gateway's loop is gone.
        """
        loop = self._gateway
        if loop is None or loop.is_closed():
            coro.close()
            raise RuntimeError(f"{self.name}: the gateway's loop is not running")
        try:
            return asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:
            coro.close()
            raise

    # ---- on the thread --------------------------------------------------------------

    def _run(
        self, main: Callable[[], Coroutine[Any, Any, None]], running: asyncio.Future[None]
    ) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            self._loop = loop
            self._task = loop.create_task(main(), name=self.name)
            self._tell(running)
            loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            log.info("sdk_thread.stopped", thread=self.name)
        except Exception:  # the thread must end cleanly and say why, whatever happened
            log.exception("sdk_thread.crashed", thread=self.name)
        finally:
            leftover = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in leftover:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self._tell(running)
            if self._finished is not None:
                self._tell(self._finished)

    def _tell(self, future: asyncio.Future[None]) -> None:
        """Resolve a gateway-loop future from the thread (nothing to do once it is closed)."""

        def resolve() -> None:
            if not future.done():
                future.set_result(None)

        gateway = self._gateway
        if gateway is not None:
            with contextlib.suppress(RuntimeError):
                gateway.call_soon_threadsafe(resolve)


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedSend:
    """One message that could not be delivered after every retry."""

    at: float
    chat_id: str
    kind: str  # the outbound kind: text | confirmation | confirmation_update
    text: str
    error: str
    attempts: int
    confirmation_id: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)  # platform specifics

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at,
            "chat_id": self.chat_id,
            "kind": self.kind,
            "text": self.text,
            "error": self.error,
            "attempts": self.attempts,
            "confirmation_id": self.confirmation_id,
            **self.detail,
        }


class DeadLetters:
    """The sends of one channel that failed for good: newest last, bounded, logged once."""

    def __init__(self, *, channel: str, size: int, clock: Callable[[], float] = time.time) -> None:
        self.channel = channel
        self._entries: deque[FailedSend] = deque(maxlen=size)
        self._clock = clock

    @property
    def path(self) -> str:
        return f"/api/channels/{self.channel}/failed"

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[FailedSend]:
        return list(self._entries)

    def add(
        self,
        *,
        chat_id: str,
        kind: str,
        text: str,
        error: str,
        attempts: int,
        confirmation_id: str | None = None,
        **detail: Any,
    ) -> FailedSend:
        entry = FailedSend(
            at=self._clock(),
            chat_id=chat_id,
            kind=kind,
            text=text[:500],
            error=error,
            attempts=attempts,
            confirmation_id=confirmation_id,
            detail=detail,
        )
        self._entries.append(entry)
        log.error(
            f"{self.channel}.send_failed",
            chat_id=chat_id,
            kind=kind,
            error=error,
            attempts=attempts,
            confirmation_id=confirmation_id,
            **detail,
        )
        return entry

    def register(self, app: web.Application) -> None:
        """Add the GET route (before the server starts: aiohttp freezes the router then)."""
        summary = f"{self.channel} messages that could not be delivered"
        serve(app, [Route("get", self.path, self._serve, summary, {200: DEAD_LETTERS})])

    async def _serve(self, _: web.Request) -> web.Response:
        return json_response(
            {"channel": self.channel, "failed": [e.to_dict() for e in self._entries]}
        )
