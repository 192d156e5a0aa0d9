"""A loopback Feishu (Lark) open platform for tests, speaking the real wire protocol.

Runs an aiohttp server on 127.0.0.1:0 in its own thread with its own event loop: the
lark-oapi SDK makes blocking HTTP calls from coroutines, so a fake on the SDK's (or the
test's) loop could deadlock. Everything the tests read is guarded by one lock; the async
``wait_*`` helpers poll from the caller's loop, so they work whichever loop the test uses.

Endpoints: ``POST /callback/ws/endpoint``, a WebSocket at ``/ws`` carrying pbbp2 frames
(the protobuf classes bundled with lark-oapi), ``POST /open-apis/auth/v3/tenant_access_token/
internal``, ``/open-apis/im/v1/messages`` create / reply / patch / update, and
``GET /open-apis/bot/v3/info``. Every HTTP request is recorded.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

INVALID_TOKEN_CODE = 99991663
RATE_LIMIT_CODE = 99991400


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request the fake received, and the status it answered with."""

    op: str  # "endpoint" | "token" | "bot_info" | "create" | "reply" | "patch" | "update"
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    status: int
    code: int
    message_id: str | None = None  # the message the call created or addressed
    at: float = 0.0  # time.monotonic() when it arrived (the fake shares the test's clock)

    @property
    def content(self) -> Any:
        """The ``content`` JSON string of a message call, parsed."""
        raw = self.body.get("content") if isinstance(self.body, dict) else None
        return json.loads(raw) if isinstance(raw, str) else None


@dataclass(frozen=True)
class Ack:
    """The client's answer to one DATA frame."""

    message_id: str
    frame_type: str
    code: int
    data: Any  # the callback result (base64-decoded JSON), or None
    headers: dict[str, str]


@dataclass
class _Failure:
    status: int
    code: int
    msg: str
    remaining: int


@dataclass
class _Conn:
    ws: web.WebSocketResponse
    device_id: str
    pings: int = 0
    closed: bool = False


@dataclass
class _State:
    requests: list[RecordedRequest] = field(default_factory=list)
    acks: list[Ack] = field(default_factory=list)
    failures: dict[str, deque[_Failure]] = field(default_factory=dict)
    valid_tokens: set[str] = field(default_factory=set)
    uuids: dict[str, str] = field(default_factory=dict)
    connections_opened: int = 0
    pings: int = 0


class FakeFeishu:
    """The fake platform. Use as a context manager or call ``start()`` / ``stop()``."""

    def __init__(
        self,
        *,
        app_id: str = "cli_fake",
        app_secret: str = "fake-secret",
        bot_open_id: str = "ou_bot",
        ping_interval: int = 1,
        token_expire: int = 7200,
    ) -> None:
        self.app_id = app_id
        self.app_secret = app_secret
        self.bot_open_id = bot_open_id
        self.ping_interval = ping_interval
        self.token_expire = token_expire
        self._lock = threading.Lock()
        self._state = _State()
        self._ids = itertools.count(1)
        self._conns: list[_Conn] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self.port = 0

    # ---- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeFeishu:
        self._thread = threading.Thread(target=self._run, name="fake-feishu", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake Feishu did not start")
        return self

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)
        self._loop = None

    def __enter__(self) -> FakeFeishu:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        app = web.Application()
        app.router.add_post("/callback/ws/endpoint", self._endpoint)
        app.router.add_get("/ws", self._ws)
        app.router.add_post("/open-apis/auth/v3/tenant_access_token/internal", self._token)
        app.router.add_get("/open-apis/bot/v3/info", self._bot_info)
        app.router.add_post("/open-apis/im/v1/messages", self._create)
        app.router.add_post("/open-apis/im/v1/messages/{mid}/reply", self._reply)
        app.router.add_patch("/open-apis/im/v1/messages/{mid}", self._patch)
        app.router.add_put("/open-apis/im/v1/messages/{mid}", self._update)
        self._runner = web.AppRunner(app, handle_signals=False)
        loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _shutdown(self) -> None:
        for conn in list(self._conns):
            await conn.ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # ---- control from tests (any thread) -----------------------------------------------

    def fail(
        self, op: str, *, status: int = 200, code: int = 0, msg: str = "", times: int = 1
    ) -> None:
        """Answer the next ``times`` calls of ``op`` with this HTTP status and Feishu code."""
        with self._lock:
            self._state.failures.setdefault(op, deque()).append(
                _Failure(status=status, code=code, msg=msg or f"injected {code}", remaining=times)
            )

    def expire_tokens(self) -> None:
        """Every token issued so far becomes invalid (code 99991663 on use)."""
        with self._lock:
            self._state.valid_tokens.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._state.requests)

    def requests_for(self, *ops: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.op in ops]

    @property
    def acks(self) -> list[Ack]:
        with self._lock:
            return list(self._state.acks)

    @property
    def connections_opened(self) -> int:
        with self._lock:
            return self._state.connections_opened

    @property
    def pings(self) -> int:
        with self._lock:
            return self._state.pings

    @property
    def live_connections(self) -> int:
        with self._lock:
            return sum(1 for c in self._conns if not c.closed)

    def send_frame(
        self,
        payload: dict[str, Any] | bytes,
        *,
        frame_type: str = "event",
        message_id: str | None = None,
        chunks: int = 1,
    ) -> str:
        """Push one DATA frame (split into ``chunks`` parts) to the live connection."""
        loop = self._loop
        assert loop is not None, "fake not started"
        mid = message_id or "fmid_" + uuid.uuid4().hex[:10]
        raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        asyncio.run_coroutine_threadsafe(self._send(raw, frame_type, mid, chunks), loop).result(5)
        return mid

    def drop_connection(self) -> None:
        """Close the live WebSocket from the server side, as a Feishu restart would."""
        loop = self._loop
        assert loop is not None, "fake not started"
        asyncio.run_coroutine_threadsafe(self._drop(), loop).result(5)

    async def wait_connected(self, *, opened: int = 1, within: float = 10) -> None:
        """Until at least ``opened`` connections were made and one is live."""
        await self._poll(
            lambda: self.connections_opened >= opened and self.live_connections > 0,
            within,
            f"{opened} connection(s)",
        )

    async def wait_ack(self, message_id: str, *, within: float = 10) -> Ack:
        found: list[Ack] = []

        def check() -> bool:
            found[:] = [a for a in self.acks if a.message_id == message_id]
            return bool(found)

        await self._poll(check, within, f"ack of {message_id}")
        return found[0]

    async def wait_request(
        self, pred: Callable[[RecordedRequest], bool], *, within: float = 10, what: str = "request"
    ) -> RecordedRequest:
        found: list[RecordedRequest] = []

        def check() -> bool:
            found[:] = [r for r in self.requests if pred(r)]
            return bool(found)

        await self._poll(check, within, what)
        return found[0]

    @staticmethod
    async def _poll(cond: Callable[[], bool], within: float, what: str) -> None:
        deadline = time.monotonic() + within
        while not cond():
            if time.monotonic() > deadline:
                raise TimeoutError(f"fake Feishu: no {what} within {within}s")
            await asyncio.sleep(0.02)

    # ---- WebSocket ---------------------------------------------------------------------

    async def _send(self, raw: bytes, frame_type: str, mid: str, chunks: int) -> None:
        conn = next((c for c in reversed(self._conns) if not c.closed), None)
        if conn is None:
            raise RuntimeError("no live connection to send a frame on")
        size = -(-len(raw) // chunks)
        for seq in range(chunks):
            frame = Frame()
            frame.SeqID = next(self._ids)
            frame.LogID = next(self._ids)
            frame.service = 1
            frame.method = 1  # DATA
            for key, value in (
                ("type", frame_type),
                ("message_id", mid),
                ("trace_id", "trace_" + mid),
                ("sum", str(chunks)),
                ("seq", str(seq)),
            ):
                h = frame.headers.add()
                h.key, h.value = key, value
            frame.payload = raw[seq * size : (seq + 1) * size]
            await conn.ws.send_bytes(frame.SerializeToString())

    async def _drop(self) -> None:
        for conn in self._conns:
            if not conn.closed:
                conn.closed = True
                await conn.ws.close(code=1011, message=b"fake restart")

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        conn = _Conn(ws=ws, device_id=request.query.get("device_id", ""))
        with self._lock:
            self._conns.append(conn)
            self._state.connections_opened += 1
        try:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    await self._on_frame(conn, msg.data)
        finally:
            conn.closed = True
        return ws

    async def _on_frame(self, conn: _Conn, data: bytes) -> None:
        frame = Frame()
        frame.ParseFromString(data)
        headers = {h.key: h.value for h in frame.headers}
        if frame.method == 0:  # CONTROL
            if headers.get("type") == "ping":
                with self._lock:
                    self._state.pings += 1
                conn.pings += 1
                pong = Frame()
                pong.SeqID, pong.LogID, pong.service, pong.method = 0, 0, frame.service, 0
                h = pong.headers.add()
                h.key, h.value = "type", "pong"
                pong.payload = json.dumps(self._client_config()).encode()
                await conn.ws.send_bytes(pong.SerializeToString())
            return
        body = json.loads(frame.payload or b"{}")
        raw_data = body.get("data")
        decoded = json.loads(base64.b64decode(raw_data)) if raw_data else None
        ack = Ack(
            message_id=headers.get("message_id", ""),
            frame_type=headers.get("type", ""),
            code=int(body.get("code", 0)),
            data=decoded,
            headers=headers,
        )
        with self._lock:
            self._state.acks.append(ack)

    def _client_config(self) -> dict[str, int]:
        return {
            "ReconnectCount": -1,
            "ReconnectInterval": 1,
            "ReconnectNonce": 0,
            "PingInterval": self.ping_interval,
        }

    # ---- HTTP --------------------------------------------------------------------------

    def _take_failure(self, op: str) -> _Failure | None:
        with self._lock:
            queue = self._state.failures.get(op)
            if not queue:
                return None
            failure = queue[0]
            failure.remaining -= 1
            if failure.remaining <= 0:
                queue.popleft()
            return failure

    async def _record(
        self,
        request: web.Request,
        op: str,
        handler: Callable[[Any], tuple[int, dict[str, Any], str | None]],
        *,
        needs_token: bool = True,
    ) -> web.Response:
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        failure = self._take_failure(op)
        message_id: str | None = request.match_info.get("mid")
        if failure is not None:
            status, result = failure.status, {"code": failure.code, "msg": failure.msg}
        elif needs_token and not self._token_ok(request):
            status = 400
            result = {"code": INVALID_TOKEN_CODE, "msg": "Invalid access token for authorization"}
        else:
            status, result, created = handler(body)
            message_id = created or message_id
        with self._lock:
            self._state.requests.append(
                RecordedRequest(
                    op=op,
                    method=request.method,
                    path=request.path,
                    query=dict(request.query),
                    headers=dict(request.headers),
                    body=body,
                    status=status,
                    code=int(result.get("code", 0)),
                    message_id=message_id,
                    at=time.monotonic(),
                )
            )
        return web.json_response(result, status=status)

    def _token_ok(self, request: web.Request) -> bool:
        auth = request.headers.get("Authorization", "")
        with self._lock:
            return auth.startswith("Bearer ") and auth[7:] in self._state.valid_tokens

    async def _endpoint(self, request: web.Request) -> web.Response:
        def answer(body: Any) -> tuple[int, dict[str, Any], str | None]:
            if body.get("AppID") != self.app_id or body.get("AppSecret") != self.app_secret:
                return 200, {"code": 1000040344, "msg": "invalid app credentials"}, None
            device = "dev_" + uuid.uuid4().hex[:8]
            url = f"ws://127.0.0.1:{self.port}/ws?device_id={device}&service_id=7"
            data = {"URL": url, "ClientConfig": self._client_config()}
            return 200, {"code": 0, "msg": "ok", "data": data}, None

        return await self._record(request, "endpoint", answer, needs_token=False)

    async def _token(self, request: web.Request) -> web.Response:
        def answer(body: Any) -> tuple[int, dict[str, Any], str | None]:
            if body.get("app_id") != self.app_id or body.get("app_secret") != self.app_secret:
                return 400, {"code": 10014, "msg": "app secret invalid"}, None
            token = f"t-{next(self._ids)}-{uuid.uuid4().hex[:6]}"
            with self._lock:
                self._state.valid_tokens.add(token)
            result = {
                "code": 0,
                "msg": "ok",
                "tenant_access_token": token,
                "expire": self.token_expire,
            }
            return 200, result, None

        return await self._record(request, "token", answer, needs_token=False)

    async def _bot_info(self, request: web.Request) -> web.Response:
        def answer(_: Any) -> tuple[int, dict[str, Any], str | None]:
            bot = {"activate_status": 2, "app_name": "fake bot", "open_id": self.bot_open_id}
            return 200, {"code": 0, "msg": "ok", "bot": bot}, None

        return await self._record(request, "bot_info", answer)

    def _message_answer(self, body: Any, chat_id: str) -> tuple[int, dict[str, Any], str | None]:
        idem = body.get("uuid") if isinstance(body, dict) else None
        with self._lock:
            if idem and idem in self._state.uuids:
                mid = self._state.uuids[idem]  # Feishu dedupes sends by uuid (1 h)
            else:
                mid = f"om_out_{next(self._ids)}"
                if idem:
                    self._state.uuids[idem] = mid
        data = {"message_id": mid, "chat_id": chat_id, "msg_type": body.get("msg_type")}
        return 200, {"code": 0, "msg": "success", "data": data}, mid

    async def _create(self, request: web.Request) -> web.Response:
        return await self._record(
            request, "create", lambda b: self._message_answer(b, b.get("receive_id", ""))
        )

    async def _reply(self, request: web.Request) -> web.Response:
        return await self._record(request, "reply", lambda b: self._message_answer(b, ""))

    async def _patch(self, request: web.Request) -> web.Response:
        return await self._record(
            request, "patch", lambda _: (200, {"code": 0, "msg": "success", "data": {}}, None)
        )

    async def _update(self, request: web.Request) -> web.Response:
        return await self._record(
            request, "update", lambda _: (200, {"code": 0, "msg": "success", "data": {}}, None)
        )
