"""A loopback fake of the DingTalk open platform, run in its own thread and event loop.

It speaks the wire protocol the real ``dingtalk-stream`` SDK uses (see
``shared/reference/feishu-dingtalk-sdks.md`` section B): the stream gateway
(``POST /v1.0/gateway/connections/open`` and a WebSocket that sends SYSTEM / CALLBACK
frames and collects acks), the OAuth token endpoint, a session webhook, the robot
OpenAPI send endpoints and the card instance endpoints. Every HTTP request is
recorded; failures (429 / 5xx) can be injected per method and path.

It runs in its own thread because the SDK (and the gateway under test) must never
share a loop with the server: a blocking call on one side would deadlock the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import WSMsgType, web

T = TypeVar("T")

CHATBOT_TOPIC = "/v1.0/im/bot/messages/get"
_BODY: web.RequestKey[Any] = web.RequestKey("body", object)
CARD_CALLBACK_TOPIC = "/v1.0/card/instances/callback"


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One HTTP request the fake received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    status: int


@dataclass(slots=True)
class _Injection:
    status: int
    times: int
    body: Any
    delay: float = 0.0


@dataclass(slots=True)
class _State:
    """Everything the fake knows; touched only under ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: list[RecordedRequest] = field(default_factory=list)
    arrivals: list[str] = field(default_factory=list)
    acks: list[dict[str, Any]] = field(default_factory=list)
    sent_frames: list[dict[str, Any]] = field(default_factory=list)
    open_bodies: list[dict[str, Any]] = field(default_factory=list)
    connections: int = 0
    active_sockets: list[web.WebSocketResponse] = field(default_factory=list)
    tickets: set[str] = field(default_factory=set)
    tokens: dict[str, float] = field(default_factory=dict)
    cards: dict[str, dict[str, Any]] = field(default_factory=dict)
    injections: dict[tuple[str, str], list[_Injection]] = field(default_factory=dict)


class FakeDingTalk:
    """Loopback DingTalk. Use as ``with FakeDingTalk(...) as fake:`` from any thread.

    Methods whose names start with ``wait_`` are coroutines meant for the test's
    own event loop; they poll the shared state and never block that loop.
    """

    def __init__(
        self,
        *,
        client_id: str = "ding-client-id",
        client_secret: str = "ding-client-secret",
        token_ttl: int = 7200,
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.token_ttl = token_ttl
        self._state = _State()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._frame_ids = itertools.count(1)
        self._token_ids = itertools.count(1)

    # ----------------------------------------------------------------- lifecycle

    def __enter__(self) -> FakeDingTalk:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fake-dingtalk", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake DingTalk did not start")
        if self._startup_error is not None:
            raise RuntimeError("fake DingTalk failed to start") from self._startup_error

    def stop(self) -> None:
        loop = self._loop
        if loop is None or self._thread is None:
            return
        with contextlib.suppress(Exception):
            self._call(self._shutdown(), timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        self._thread.join(10)
        self._loop = None

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            loop.run_until_complete(self._startup())
        except BaseException as exc:  # reported to start() in the caller's thread
            self._startup_error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _startup(self) -> None:
        app = web.Application(middlewares=[self._record_middleware])
        app.router.add_post("/v1.0/gateway/connections/open", self._open_connection)
        app.router.add_get("/connect", self._websocket)
        app.router.add_post("/v1.0/oauth2/accessToken", self._access_token)
        app.router.add_post("/robot/sendBySession", self._session_webhook)
        app.router.add_post("/v1.0/robot/groupMessages/send", self._group_send)
        app.router.add_post("/v1.0/robot/oToMessages/batchSend", self._oto_send)
        app.router.add_post("/v1.0/card/instances", self._card_create)
        app.router.add_put("/v1.0/card/instances", self._card_update)
        app.router.add_post("/v1.0/card/instances/deliver", self._card_deliver)
        app.router.add_post("/v1.0/card/instances/createAndDeliver", self._card_create_deliver)
        # A short shutdown: a test may leave a deliberately hung request behind.
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self._port = int(sockets[0].getsockname()[1])

    async def _shutdown(self) -> None:
        with self._state.lock:
            sockets = list(self._state.active_sockets)
        for ws in sockets:
            with contextlib.suppress(Exception):
                await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _call(self, coro: Any, timeout: float = 10) -> Any:
        loop = self._loop
        if loop is None:
            raise RuntimeError("fake DingTalk is not running")
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(coro, loop)
        return fut.result(timeout)

    # ------------------------------------------------------------------ addresses

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def session_webhook(self, session: str = "s1") -> str:
        return f"{self.base_url}/robot/sendBySession?session={session}"

    # ----------------------------------------------------------------- inspection

    def requests(self, path: str | None = None, method: str | None = None) -> list[RecordedRequest]:
        with self._state.lock:
            found = list(self._state.requests)
        return [
            r
            for r in found
            if (path is None or r.path == path) and (method is None or r.method == method)
        ]

    def arrived(self, path: str) -> int:
        """Requests to ``path`` received so far, answered or not (``requests`` lists answered)."""
        with self._state.lock:
            return sum(1 for p in self._state.arrivals if p == path)

    @property
    def acks(self) -> list[dict[str, Any]]:
        with self._state.lock:
            return list(self._state.acks)

    def ack_for(self, message_id: str) -> dict[str, Any] | None:
        for ack in self.acks:
            if ack.get("headers", {}).get("messageId") == message_id:
                return ack
        return None

    def acks_for(self, message_id: str) -> list[dict[str, Any]]:
        return [a for a in self.acks if a.get("headers", {}).get("messageId") == message_id]

    @property
    def connections(self) -> int:
        """How many stream WebSocket connections were accepted so far."""
        with self._state.lock:
            return self._state.connections

    @property
    def open_bodies(self) -> list[dict[str, Any]]:
        with self._state.lock:
            return list(self._state.open_bodies)

    @property
    def connected(self) -> bool:
        with self._state.lock:
            return any(not ws.closed for ws in self._state.active_sockets)

    def card(self, out_track_id: str) -> dict[str, Any] | None:
        """The card's current ``cardParamMap`` as last created or updated."""
        with self._state.lock:
            card = self._state.cards.get(out_track_id)
            return dict(card) if card is not None else None

    @property
    def cards(self) -> dict[str, dict[str, Any]]:
        with self._state.lock:
            return {k: dict(v) for k, v in self._state.cards.items()}

    def inject(
        self,
        method: str,
        path: str,
        status: int,
        *,
        times: int = 1,
        body: Any = None,
        delay: float = 0.0,
    ) -> None:
        """Answer the next ``times`` requests on ``method path`` with ``status``.

        ``delay`` holds each answer back that many seconds (a hung server).
        """
        with self._state.lock:
            self._state.injections.setdefault((method.upper(), path), []).append(
                _Injection(status=status, times=times, body=body, delay=delay)
            )

    def revoke_tokens(self) -> None:
        """Invalidate every access token handed out so far (DingTalk answers 401)."""
        with self._state.lock:
            self._state.tokens.clear()

    # ------------------------------------------------------------------- waiting

    async def wait_until(
        self, predicate: Callable[[], T], *, within: float = 5.0, what: str = "condition"
    ) -> T:
        """Poll ``predicate`` from the caller's loop until it returns something truthy."""
        deadline = time.monotonic() + within
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"fake DingTalk: timed out waiting for {what}")
            await asyncio.sleep(0.02)

    async def wait_connected(self, count: int = 1, *, within: float = 5.0) -> None:
        """Wait until ``count`` stream connections were made and one is open."""
        await self.wait_until(
            lambda: self.connections >= count and self.connected,
            within=within,
            what=f"stream connection #{count}",
        )

    async def wait_ack(self, message_id: str, *, within: float = 5.0) -> dict[str, Any]:
        return await self.wait_until(
            lambda: self.ack_for(message_id), within=within, what=f"ack of {message_id}"
        )

    async def wait_requests(
        self, path: str, count: int = 1, *, method: str | None = None, within: float = 5.0
    ) -> list[RecordedRequest]:
        return await self.wait_until(
            lambda: found if len(found := self.requests(path, method)) >= count else [],
            within=within,
            what=f"{count} request(s) to {path}",
        )

    # ------------------------------------------------------------------- frames

    def next_frame_id(self) -> str:
        return f"frame-{next(self._frame_ids)}-{uuid.uuid4().hex[:8]}"

    def send_frame(self, frame: dict[str, Any]) -> str:
        """Send a raw frame on the newest open stream socket; returns its messageId."""
        message_id = str(frame.get("headers", {}).get("messageId", ""))
        self._call(self._send(frame))
        return message_id

    async def _send(self, frame: dict[str, Any]) -> None:
        with self._state.lock:
            sockets = [ws for ws in self._state.active_sockets if not ws.closed]
        if not sockets:
            raise RuntimeError("no open stream connection to send a frame on")
        with self._state.lock:
            self._state.sent_frames.append(frame)
        await sockets[-1].send_str(json.dumps(frame, ensure_ascii=False))

    def _frame(
        self, frame_type: str, topic: str, data: dict[str, Any], message_id: str | None
    ) -> dict[str, Any]:
        return {
            "specVersion": "1.0",
            "type": frame_type,
            "headers": {
                "appId": "fake-app",
                "connectionId": "fake-conn",
                "contentType": "application/json",
                "messageId": message_id or self.next_frame_id(),
                "time": str(int(time.time() * 1000)),
                "topic": topic,
            },
            "data": json.dumps(data, ensure_ascii=False),
        }

    def send_system(self, topic: str, data: dict[str, Any] | None = None) -> str:
        """SYSTEM frame, e.g. ``ping`` (data echoed in the ack) or ``disconnect``."""
        return self.send_frame(self._frame("SYSTEM", topic, data or {}, None))

    def chatbot_payload(
        self,
        *,
        text: str,
        msg_id: str | None = None,
        conversation_type: str = "1",
        conversation_id: str = "cid-1",
        sender_staff_id: str = "staff-1",
        sender_nick: str = "张三",
        is_in_at_list: bool | None = None,
        webhook_valid_for: float = 3600.0,
        session: str = "s1",
        msgtype: str = "text",
        robot_code: str | None = None,
        created_ago: float = 0.0,
    ) -> dict[str, Any]:
        """A chatbot message as the stream delivers it on ``/v1.0/im/bot/messages/get``."""
        now_ms = int(time.time() * 1000)
        payload: dict[str, Any] = {
            "conversationId": conversation_id,
            "chatbotCorpId": "corp-1",
            "chatbotUserId": "bot-user-1",
            "msgId": msg_id or f"msg-{uuid.uuid4().hex[:12]}",
            "senderNick": sender_nick,
            "isAdmin": False,
            "senderStaffId": sender_staff_id,
            "sessionWebhookExpiredTime": now_ms + int(webhook_valid_for * 1000),
            "createAt": now_ms - int(created_ago * 1000),
            "senderCorpId": "corp-1",
            "conversationType": conversation_type,
            "senderId": f"$:LWCP_v1:${sender_staff_id}",
            "sessionWebhook": self.session_webhook(session),
            "robotCode": robot_code or self.client_id,
            "msgtype": msgtype,
        }
        if msgtype == "text":
            payload["text"] = {"content": text}
        elif msgtype == "richText":
            payload["content"] = {"richText": [{"text": text}]}
        if conversation_type == "2":
            payload["conversationTitle"] = "测试群"
            payload["isInAtList"] = True if is_in_at_list is None else is_in_at_list
            if payload["isInAtList"]:
                payload["atUsers"] = [{"dingtalkId": "$:LWCP_v1:$bot"}]
        elif is_in_at_list is not None:
            payload["isInAtList"] = is_in_at_list
        return payload

    def send_chatbot_message(
        self, *, frame_id: str | None = None, payload: dict[str, Any] | None = None, **kw: Any
    ) -> str:
        """Send a CALLBACK frame with a chatbot message; returns the frame messageId."""
        data = payload if payload is not None else self.chatbot_payload(**kw)
        return self.send_frame(self._frame("CALLBACK", CHATBOT_TOPIC, data, frame_id))

    def send_card_callback(
        self,
        *,
        out_track_id: str,
        user_id: str,
        action_id: str,
        params: dict[str, Any] | None = None,
        frame_id: str | None = None,
    ) -> str:
        """Send a card button click on ``/v1.0/card/instances/callback``."""
        data = {
            "type": "actionCallback",
            "outTrackId": out_track_id,
            "corpId": "corp-1",
            "userId": user_id,
            "userIdType": 1,
            "content": json.dumps(
                {"cardPrivateData": {"actionIds": [action_id], "params": params or {}}}
            ),
            "extension": "{}",
        }
        return self.send_frame(self._frame("CALLBACK", CARD_CALLBACK_TOPIC, data, frame_id))

    # ---------------------------------------------------------------- HTTP side

    @web.middleware
    async def _record_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        raw = await request.read() if request.can_read_body else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        key = (request.method, request.path)
        injected: _Injection | None = None
        with self._state.lock:
            self._state.arrivals.append(request.path)
            queue = self._state.injections.get(key)
            if queue:
                injected = queue[0]
                injected.times -= 1
                if injected.times <= 0:
                    queue.pop(0)
        if injected is not None:
            if injected.delay:
                await asyncio.sleep(injected.delay)
            response: web.StreamResponse = web.json_response(
                injected.body
                if injected.body is not None
                else {"code": "Throttling", "message": "injected failure"},
                status=injected.status,
            )
        else:
            request[_BODY] = body
            response = await handler(request)
        if request.path != "/connect":
            with self._state.lock:
                self._state.requests.append(
                    RecordedRequest(
                        method=request.method,
                        path=request.path,
                        query=dict(request.query),
                        headers=dict(request.headers),
                        body=body,
                        status=response.status,
                    )
                )
        return response

    def _token_ok(self, request: web.Request) -> bool:
        token = request.headers.get("x-acs-dingtalk-access-token", "")
        with self._state.lock:
            expires = self._state.tokens.get(token)
        return expires is not None and expires > time.time()

    @staticmethod
    def _unauthorized() -> web.Response:
        return web.json_response(
            {"code": "InvalidAuthentication", "message": "不合法的access_token"}, status=401
        )

    async def _open_connection(self, request: web.Request) -> web.Response:
        body = request[_BODY] or {}
        with self._state.lock:
            self._state.open_bodies.append(body)
        if body.get("clientId") != self.client_id or body.get("clientSecret") != self.client_secret:
            return web.json_response(
                {"code": "authFailed", "message": "clientId or clientSecret invalid"}, status=401
            )
        ticket = uuid.uuid4().hex
        with self._state.lock:
            self._state.tickets.add(ticket)
        return web.json_response(
            {"endpoint": f"ws://127.0.0.1:{self._port}/connect", "ticket": ticket}
        )

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        with self._state.lock:
            known = ticket in self._state.tickets
            self._state.tickets.discard(ticket)
        if not known:
            return web.Response(status=403, text="bad ticket")
        ws = web.WebSocketResponse(heartbeat=None)
        await ws.prepare(request)
        with self._state.lock:
            self._state.connections += 1
            self._state.active_sockets.append(ws)
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    try:
                        ack = json.loads(msg.data)
                    except ValueError:
                        ack = {"invalid": msg.data}
                    with self._state.lock:
                        self._state.acks.append(ack)
                    self._apply_card_ack(ack)
        finally:
            with self._state.lock:
                if ws in self._state.active_sockets:
                    self._state.active_sockets.remove(ws)
        return ws

    def _apply_card_ack(self, ack: dict[str, Any]) -> None:
        """A card callback's ack may carry new card data: apply it like DingTalk does."""
        message_id = ack.get("headers", {}).get("messageId")
        with self._state.lock:
            frame = next(
                (
                    f
                    for f in reversed(self._state.sent_frames)
                    if f["headers"]["messageId"] == message_id
                ),
                None,
            )
        if frame is None or frame["headers"]["topic"] != CARD_CALLBACK_TOPIC:
            return
        try:
            response = json.loads(ack.get("data") or "{}").get("response") or {}
        except (ValueError, AttributeError):
            return
        params = (
            (response.get("cardData") or {}).get("cardParamMap")
            if isinstance(response, dict)
            else None
        )
        if not params:
            return
        out_track_id = json.loads(frame["data"])["outTrackId"]
        with self._state.lock:
            self._state.cards.setdefault(out_track_id, {}).update(params)

    async def _access_token(self, request: web.Request) -> web.Response:
        body = request[_BODY] or {}
        if body.get("appKey") != self.client_id or body.get("appSecret") != self.client_secret:
            return web.json_response(
                {"code": "invalidClientIdOrSecret", "message": "无效的clientId或clientSecret"},
                status=400,
            )
        token = f"tok-{next(self._token_ids)}"
        with self._state.lock:
            self._state.tokens[token] = time.time() + self.token_ttl
        return web.json_response({"accessToken": token, "expireIn": self.token_ttl})

    async def _session_webhook(self, request: web.Request) -> web.Response:
        return web.json_response({"errcode": 0, "errmsg": "ok"})

    async def _group_send(self, request: web.Request) -> web.Response:
        if not self._token_ok(request):
            return self._unauthorized()
        return web.json_response({"processQueryKey": uuid.uuid4().hex})

    async def _oto_send(self, request: web.Request) -> web.Response:
        if not self._token_ok(request):
            return self._unauthorized()
        return web.json_response(
            {
                "processQueryKey": uuid.uuid4().hex,
                "invalidStaffIdList": [],
                "flowControlledStaffIdList": [],
            }
        )

    def _store_card(self, body: dict[str, Any], *, replace: bool) -> str:
        out_track_id = str(body.get("outTrackId", ""))
        params = dict(body.get("cardData", {}).get("cardParamMap", {}))
        with self._state.lock:
            if replace or out_track_id not in self._state.cards:
                self._state.cards[out_track_id] = params
            else:
                self._state.cards[out_track_id].update(params)
        return out_track_id

    async def _card_create(self, request: web.Request) -> web.Response:
        if not self._token_ok(request):
            return self._unauthorized()
        out_track_id = self._store_card(request[_BODY] or {}, replace=True)
        return web.json_response({"success": True, "result": out_track_id})

    async def _card_deliver(self, request: web.Request) -> web.Response:
        if not self._token_ok(request):
            return self._unauthorized()
        body = request[_BODY] or {}
        return web.json_response(
            {
                "success": True,
                "result": [{"spaceId": body.get("openSpaceId", ""), "success": True}],
            }
        )

    async def _card_create_deliver(self, request: web.Request) -> web.Response:
        if not self._token_ok(request):
            return self._unauthorized()
        body = request[_BODY] or {}
        out_track_id = self._store_card(body, replace=True)
        return web.json_response(
            {
                "success": True,
                "result": {
                    "outTrackId": out_track_id,
                    "deliverResults": [{"spaceId": body.get("openSpaceId", ""), "success": True}],
                },
            }
        )

    async def _card_update(self, request: web.Request) -> web.Response:
        if not self._token_ok(request):
            return self._unauthorized()
        body = request[_BODY] or {}
        out_track_id = str(body.get("outTrackId", ""))
        with self._state.lock:
            known = out_track_id in self._state.cards
        if not known:
            return web.json_response(
                {"code": "param.cardNotExist", "message": "卡片不存在"}, status=400
            )
        # cardUpdateOptions.updateCardDataByKey=true merges; the default replaces.
        merge = bool(body.get("cardUpdateOptions", {}).get("updateCardDataByKey"))
        self._store_card(body, replace=not merge)
        return web.json_response({"success": True, "result": True})
