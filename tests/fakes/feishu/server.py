"""A loopback Feishu (Lark) open platform for tests, speaking the real wire protocol.

Runs on ``ThreadedServer`` (its own thread and event loop: see there why). Endpoints:
``POST /callback/ws/endpoint``, a WebSocket at ``/ws`` carrying pbbp2 frames (the protobuf
classes bundled with lark-oapi), ``POST /open-apis/auth/v3/tenant_access_token/internal``,
``/open-apis/im/v1/messages`` create / reply / patch / update / reactions, and
``GET /open-apis/bot/v3/info``. Every HTTP request is recorded, named by its ``op``; each
card's current content is kept (as sent, then as patched), and a send by open_id lands in
that person's direct chat (``p2p_chat``).
"""

from __future__ import annotations

import base64
import itertools
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from tests.fakes import threaded_server
from tests.fakes.threaded_server import BODY, ThreadedServer

INVALID_TOKEN_CODE = 99991663
RATE_LIMIT_CODE = 99991400


class RecordedRequest(threaded_server.RecordedRequest):
    """One HTTP request, read the Feishu way; ``op`` is a route name (see ``add_routes``)."""

    @property
    def code(self) -> int:
        """The Feishu ``code`` of the answer (0 is success)."""
        return int(self.answer.get("code", 0)) if isinstance(self.answer, dict) else 0

    @property
    def message_id(self) -> str | None:
        """The message the call created or, failing that, addressed."""
        data = self.answer.get("data") if isinstance(self.answer, dict) else None
        created = data.get("message_id") if isinstance(data, dict) else None
        return created or self.match.get("mid")

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
class _State:
    acks: list[Ack] = field(default_factory=list)
    valid_tokens: set[str] = field(default_factory=set)
    uuids: dict[str, str] = field(default_factory=dict)
    pings: int = 0
    # Message id -> the card it shows now (as created, then as last patched).
    cards: dict[str, Any] = field(default_factory=dict)


class FakeFeishu(ThreadedServer[RecordedRequest]):
    """The fake platform. Use as a context manager or call ``start()`` / ``stop()``."""

    record_type = RecordedRequest

    def __init__(
        self,
        *,
        app_id: str = "cli_fake",
        app_secret: str = "fake-secret",
        bot_open_id: str = "ou_bot",
        ping_interval: int = 1,
        token_expire: int = 7200,
    ) -> None:
        super().__init__(name="fake-feishu")
        self.app_id = app_id
        self.app_secret = app_secret
        self.bot_open_id = bot_open_id
        self.ping_interval = ping_interval
        self.token_expire = token_expire
        self._state = _State()
        self._ids = itertools.count(1)

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/callback/ws/endpoint", self._endpoint, name="endpoint")
        router.add_get("/ws", self._ws, name="ws")
        router.add_post(
            "/open-apis/auth/v3/tenant_access_token/internal", self._token, name="token"
        )
        router.add_get("/open-apis/bot/v3/info", self._bot_info, name="bot_info")
        router.add_post("/open-apis/im/v1/messages", self._create, name="create")
        router.add_post("/open-apis/im/v1/messages/{mid}/reply", self._reply, name="reply")
        router.add_patch("/open-apis/im/v1/messages/{mid}", self._patch, name="patch")
        router.add_put("/open-apis/im/v1/messages/{mid}", self._update, name="update")
        # Not used by the gateway: nanobot adds a reaction to every message it receives
        # (bench/ingest_nanobot.py runs nanobot against this fake).
        router.add_post(
            "/open-apis/im/v1/messages/{mid}/reactions", self._reaction, name="reaction"
        )

    # ---- control from tests (any thread) -----------------------------------------------

    def fail(
        self, op: str, *, status: int = 200, code: int = 0, msg: str = "", times: int = 1
    ) -> None:
        """Answer the next ``times`` calls of ``op`` with this HTTP status and Feishu code."""
        body = {"code": code, "msg": msg or f"injected {code}"}
        self._fail_next(op, status=status, body=body, times=times)

    def expire_tokens(self) -> None:
        """Every token issued so far becomes invalid (code 99991663 on use)."""
        with self._lock:
            self._state.valid_tokens.clear()

    def requests_for(self, *ops: str) -> list[RecordedRequest]:
        return [r for r in self.requests() if r.op in ops]

    @staticmethod
    def p2p_chat(open_id: str) -> str:
        """The chat id of a person's direct chat with the bot (what a send by open_id
        answers with, and what their messages there carry)."""
        return f"oc_p2p_{open_id}"

    def direct_sends(self, open_id: str | None = None) -> list[RecordedRequest]:
        """Messages created in a person's direct chat (``receive_id_type=open_id``)."""
        return [
            r
            for r in self.requests_for("create")
            if r.query.get("receive_id_type") == "open_id"
            and r.status == 200
            and (open_id is None or r.body.get("receive_id") == open_id)
        ]

    def card(self, message_id: str) -> Any:
        """The card a message shows now: as sent, then as last patched (None: not a card)."""
        with self._lock:
            return self._state.cards.get(message_id)

    def patches(self, message_id: str | None = None) -> list[RecordedRequest]:
        """Successful card patches, of one message or all."""
        return [
            r
            for r in self.requests_for("patch")
            if r.status == 200 and (message_id is None or r.match.get("mid") == message_id)
        ]

    @property
    def acks(self) -> list[Ack]:
        with self._lock:
            return list(self._state.acks)

    @property
    def pings(self) -> int:
        with self._lock:
            return self._state.pings

    def send_frame(
        self,
        payload: dict[str, Any] | bytes,
        *,
        frame_type: str = "event",
        message_id: str | None = None,
        chunks: int = 1,
    ) -> str:
        """Push one DATA frame (split into ``chunks`` parts) to the live connection."""
        mid = message_id or "fmid_" + uuid.uuid4().hex[:10]
        raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.call(self._send(raw, frame_type, mid, chunks), timeout=5)
        return mid

    def drop_connection(self) -> None:
        """Close the live WebSocket from the server side, as a Feishu restart would."""
        self.call(self._drop(), timeout=5)

    async def wait_ack(self, message_id: str, *, within: float = 10) -> Ack:
        return await self.wait_until(
            lambda: next((a for a in self.acks if a.message_id == message_id), None),
            within=within,
            what=f"ack of {message_id}",
        )

    async def wait_request(
        self, pred: Callable[[RecordedRequest], bool], *, within: float = 10, what: str = "request"
    ) -> RecordedRequest:
        return await self.wait_until(
            lambda: next((r for r in self.requests() if pred(r)), None), within=within, what=what
        )

    # ---- WebSocket ---------------------------------------------------------------------

    async def _send(self, raw: bytes, frame_type: str, mid: str, chunks: int) -> None:
        ws = self.newest_socket()
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
            await ws.send_bytes(frame.SerializeToString())

    async def _drop(self) -> None:
        for ws in self.live_sockets():
            await ws.close(code=1011, message=b"fake restart")

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        async with self.websocket(request) as ws:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    await self._on_frame(ws, msg.data)
        return ws

    async def _on_frame(self, ws: web.WebSocketResponse, data: bytes) -> None:
        frame = Frame()
        frame.ParseFromString(data)
        headers = {h.key: h.value for h in frame.headers}
        if frame.method == 0:  # CONTROL
            if headers.get("type") == "ping":
                with self._lock:
                    self._state.pings += 1
                pong = Frame()
                pong.SeqID, pong.LogID, pong.service, pong.method = 0, 0, frame.service, 0
                h = pong.headers.add()
                h.key, h.value = "type", "pong"
                pong.payload = json.dumps(self._client_config()).encode()
                await ws.send_bytes(pong.SerializeToString())
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

    # ---- HTTP (recorded, and injected failures answered, by ThreadedServer) -------------

    def _token_ok(self, request: web.Request) -> bool:
        auth = request.headers.get("Authorization", "")
        with self._lock:
            return auth.startswith("Bearer ") and auth[7:] in self._state.valid_tokens

    @staticmethod
    def _invalid_token() -> web.Response:
        result = {"code": INVALID_TOKEN_CODE, "msg": "Invalid access token for authorization"}
        return web.json_response(result, status=400)

    async def _endpoint(self, request: web.Request) -> web.Response:
        body = request[BODY] or {}
        if body.get("AppID") != self.app_id or body.get("AppSecret") != self.app_secret:
            return web.json_response({"code": 1000040344, "msg": "invalid app credentials"})
        device = "dev_" + uuid.uuid4().hex[:8]
        url = f"ws://127.0.0.1:{self.port}/ws?device_id={device}&service_id=7"
        data = {"URL": url, "ClientConfig": self._client_config()}
        return web.json_response({"code": 0, "msg": "ok", "data": data})

    async def _token(self, request: web.Request) -> web.Response:
        body = request[BODY] or {}
        if body.get("app_id") != self.app_id or body.get("app_secret") != self.app_secret:
            # Feishu answers HTTP 200 here, and says no in the code (10014, or 10003).
            return web.json_response({"code": 10014, "msg": "app secret invalid"})
        token = f"t-{next(self._ids)}-{uuid.uuid4().hex[:6]}"
        with self._lock:
            self._state.valid_tokens.add(token)
        result = {
            "code": 0,
            "msg": "ok",
            "tenant_access_token": token,
            "expire": self.token_expire,
        }
        return web.json_response(result)

    async def _bot_info(self, request: web.Request) -> web.Response:
        if not self._token_ok(request):
            return self._invalid_token()
        bot = {"activate_status": 2, "app_name": "fake bot", "open_id": self.bot_open_id}
        return web.json_response({"code": 0, "msg": "ok", "bot": bot})

    def _message_answer(self, request: web.Request, chat_id: str) -> web.Response:
        if not self._token_ok(request):
            return self._invalid_token()
        body = request[BODY]
        idem = body.get("uuid") if isinstance(body, dict) else None
        with self._lock:
            if idem and idem in self._state.uuids:
                mid = self._state.uuids[idem]  # Feishu dedupes sends by uuid (1 h)
            else:
                mid = f"om_out_{next(self._ids)}"
                if idem:
                    self._state.uuids[idem] = mid
            if body.get("msg_type") == "interactive":
                self._state.cards.setdefault(mid, json.loads(body.get("content") or "{}"))
        data = {"message_id": mid, "chat_id": chat_id, "msg_type": body.get("msg_type")}
        return web.json_response({"code": 0, "msg": "success", "data": data})

    async def _create(self, request: web.Request) -> web.Response:
        receiver = (request[BODY] or {}).get("receive_id", "")
        if request.query.get("receive_id_type") == "open_id":
            receiver = self.p2p_chat(receiver)  # the bot's direct chat with that person
        return self._message_answer(request, receiver)

    async def _reply(self, request: web.Request) -> web.Response:
        return self._message_answer(request, "")

    async def _patch(self, request: web.Request) -> web.Response:
        if not self._token_ok(request):
            return self._invalid_token()
        body = request[BODY] or {}
        if request.method == "PATCH" and isinstance(body.get("content"), str):
            with self._lock:
                self._state.cards[request.match_info["mid"]] = json.loads(body["content"])
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _update(self, request: web.Request) -> web.Response:
        return await self._patch(request)

    async def _reaction(self, request: web.Request) -> web.Response:
        if not self._token_ok(request):
            return self._invalid_token()
        body = request[BODY] or {}
        data = {
            "reaction_id": f"r_{next(self._ids)}",
            "message_id": request.match_info["mid"],
            "reaction_type": body.get("reaction_type"),
        }
        return web.json_response({"code": 0, "msg": "success", "data": data})
