"""The base of the loopback platform fakes: an aiohttp app in a private thread and loop.

The fake runs on 127.0.0.1:<free port> in its own thread with its own event loop, because
the SDKs under test must never share a loop with it: lark-oapi makes blocking HTTP calls
from coroutines and dingtalk-stream blocks a thread of its own, so a fake on the SDK's (or
the test's) loop could deadlock. Everything the tests read is guarded by ``_lock``; the
``wait_*`` coroutines poll from the caller's loop, so they work whichever loop the test uses.

Every HTTP request is recorded (WebSocket upgrades are not), and the next answers to a
route can be replaced by an injected failure, optionally held back (a hung server).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Hashable
from concurrent.futures import Future
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar

from aiohttp import web

from gateway.http.server import stop_runner

T = TypeVar("T")

BODY: web.RequestKey[Any] = web.RequestKey("body", object)
"""The request body, parsed by the recording middleware (JSON, else text, else None)."""


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request a fake received, and what it answered."""

    op: str  # the name the fake gave the route, e.g. "create"; "" if it gave none
    method: str
    path: str
    query: dict[str, str]
    match: dict[str, str]  # the path's variables, e.g. {"mid": "om_1"}
    headers: dict[str, str]
    body: Any
    status: int
    answer: Any  # the JSON the fake answered with, or None
    at: float  # time.monotonic() when answered (the fake shares the test's clock)


R = TypeVar("R", bound=RecordedRequest)


@dataclass
class _Injection:
    status: int
    body: Any
    remaining: int
    delay: float


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", "replace")


class ThreadedServer(Generic[R]):
    """Use as ``with Fake(...) as fake:`` or call ``start()`` / ``stop()``, from any thread.

    Subclasses add their routes in ``add_routes`` and read the parsed body as
    ``request[BODY]``. ``record_type`` lets a fake record a subclass of ``RecordedRequest``
    with properties of its own.
    """

    record_type: type[R]

    def __init__(self, *, name: str) -> None:
        self.name = name
        self.port = 0
        self._lock = threading.Lock()
        self._requests: list[R] = []
        self._arrivals: list[str] = []
        self._injections: dict[Hashable, deque[_Injection]] = {}
        self._sockets: list[web.WebSocketResponse] = []
        self._sockets_opened = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._outage: int | None = None

    def add_routes(self, router: web.UrlDispatcher) -> None:
        raise NotImplementedError

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        ready: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), name=self.name)
        self._thread.daemon = True
        self._thread.start()
        ready.result(timeout=10)
        return self

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        try:
            self.call(self._shutdown())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            self._loop = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def call(self, coro: Coroutine[Any, Any, T], *, timeout: float = 10) -> T:
        """Run ``coro`` on the fake's loop and return its result, from any other thread."""
        loop = self._loop
        if loop is None:
            raise RuntimeError(f"{self.name} is not running")
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    def _run(self, ready: Future[None]) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            loop.run_until_complete(self._startup())
        except BaseException as exc:  # reported to start() in the caller's thread
            self._loop = None
            loop.close()
            ready.set_exception(exc)
            return
        ready.set_result(None)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _startup(self) -> None:
        app = web.Application(middlewares=[self._record])
        self.add_routes(app.router)
        # A short shutdown: a test may leave a deliberately hung request behind.
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = int(self._runner.addresses[0][1])

    async def _shutdown(self) -> None:
        for ws in self.live_sockets():
            await ws.close()
        if self._runner is not None:
            await stop_runner(self._runner)

    # ---- recording and injected failures -----------------------------------------------

    def requests(self, path: str | None = None, method: str | None = None) -> list[R]:
        """Requests answered so far, in order; only those to ``path`` / with ``method``."""
        with self._lock:
            found = list(self._requests)
        return [
            r
            for r in found
            if (path is None or r.path == path) and (method is None or r.method == method)
        ]

    def arrived(self, path: str) -> int:
        """Requests to ``path`` received so far, answered or not (``requests`` lists answered)."""
        with self._lock:
            return sum(1 for p in self._arrivals if p == path)

    def _fail_next(
        self, key: Hashable, *, status: int, body: Any, times: int = 1, delay: float = 0.0
    ) -> None:
        """Answer the next ``times`` requests keyed ``key`` with ``status`` and ``body``.

        ``delay`` holds each answer back that many seconds (a hung server).
        """
        with self._lock:
            self._injections.setdefault(key, deque()).append(
                _Injection(status=status, body=body, remaining=times, delay=delay)
            )

    def start_outage(self, status: int = 503) -> None:
        """Answer every request (WebSocket upgrades too) with ``status`` until ``end_outage``."""
        with self._lock:
            self._outage = status

    def end_outage(self) -> None:
        with self._lock:
            self._outage = None

    def _injection_key(self, request: web.Request) -> Hashable:
        """What ``_fail_next`` keys on: by default the name of the request's route."""
        return request.match_info.route.name or ""

    def _take_injection(self, request: web.Request) -> _Injection | None:
        with self._lock:
            queue = self._injections.get(self._injection_key(request))
            if not queue:
                return None
            injection = queue[0]
            injection.remaining -= 1
            if injection.remaining <= 0:
                queue.popleft()
            return injection

    @web.middleware
    async def _record(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        body = _parse(await request.read() if request.can_read_body else b"")
        request[BODY] = body
        with self._lock:
            self._arrivals.append(request.path)
        with self._lock:
            outage = self._outage
        injection = self._take_injection(request) if outage is None else None
        response: web.StreamResponse
        if outage is not None:
            response = web.json_response({"code": -1, "msg": "outage"}, status=outage)
        elif injection is not None:
            if injection.delay:
                await asyncio.sleep(injection.delay)
            response = web.json_response(injection.body, status=injection.status)
        else:
            response = await handler(request)
        if isinstance(response, web.WebSocketResponse):
            return response
        raw = response.body if isinstance(response, web.Response) else None
        answer = _parse(raw) if isinstance(raw, bytes) else None
        record = self.record_type(
            op=request.match_info.route.name or "",
            method=request.method,
            path=request.path,
            query=dict(request.query),
            match=dict(request.match_info),
            headers=dict(request.headers),
            body=body,
            status=response.status,
            answer=answer,
            at=time.monotonic(),
        )
        with self._lock:
            self._requests.append(record)
        return response

    # ---- WebSockets --------------------------------------------------------------------

    @asynccontextmanager
    async def websocket(self, request: web.Request) -> AsyncIterator[web.WebSocketResponse]:
        """Accept a WebSocket that ``live_sockets`` lists until it closes and ``stop`` closes."""
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        with self._lock:
            self._sockets.append(ws)
            self._sockets_opened += 1
        try:
            yield ws
        finally:
            with self._lock:
                self._sockets.remove(ws)

    def live_sockets(self) -> list[web.WebSocketResponse]:
        """The open WebSockets, oldest first."""
        with self._lock:
            return [ws for ws in self._sockets if not ws.closed]

    def newest_socket(self) -> web.WebSocketResponse:
        live = self.live_sockets()
        if not live:
            raise RuntimeError(f"{self.name}: no open connection to send a frame on")
        return live[-1]

    @property
    def connections_opened(self) -> int:
        """How many WebSocket connections were accepted so far."""
        with self._lock:
            return self._sockets_opened

    @property
    def live_connections(self) -> int:
        return len(self.live_sockets())

    # ---- waiting (from the test's loop) ------------------------------------------------

    async def wait_until(
        self, predicate: Callable[[], T | None], *, within: float = 5.0, what: str = "condition"
    ) -> T:
        """Poll ``predicate`` from the caller's loop until it returns something truthy."""
        deadline = time.monotonic() + within
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: timed out waiting for {what}")
            await asyncio.sleep(0.02)

    async def wait_connected(self, opened: int = 1, *, within: float = 10.0) -> None:
        """Until at least ``opened`` connections were accepted and one is open."""
        await self.wait_until(
            lambda: self.connections_opened >= opened and self.live_connections > 0,
            within=within,
            what=f"{opened} connection(s)",
        )
