"""A loopback fake of the DingTalk open platform, on ``ThreadedServer`` (its own thread).

It speaks the wire protocol the real ``dingtalk-stream`` SDK uses (see
``shared/reference/feishu-dingtalk-sdks.md`` section B): the stream gateway
(``POST /v1.0/gateway/connections/open`` and a WebSocket that sends SYSTEM / CALLBACK
frames and collects acks), the OAuth token endpoint, a session webhook, the robot
OpenAPI send endpoints and the card instance endpoints. Every HTTP request is
recorded; failures (429 / 5xx) can be injected per method and path.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.threaded_server import BODY, RecordedRequest, ThreadedServer

CHATBOT_TOPIC = "/v1.0/im/bot/messages/get"
CARD_CALLBACK_TOPIC = "/v1.0/card/instances/callback"


@dataclass(slots=True)
class _State:
    """What the fake knows beyond the recorded requests; touched only under ``_lock``."""

    acks: list[dict[str, Any]] = field(default_factory=list)
    sent_frames: list[dict[str, Any]] = field(default_factory=list)
    open_bodies: list[dict[str, Any]] = field(default_factory=list)
    tickets: set[str] = field(default_factory=set)
    tokens: dict[str, float] = field(default_factory=dict)
    cards: dict[str, dict[str, Any]] = field(default_factory=dict)
    # outTrackId -> the open space it was delivered to, e.g. "dtv1.card//IM_ROBOT.bob".
    spaces: dict[str, str] = field(default_factory=dict)


class FakeDingTalk(ThreadedServer[RecordedRequest]):
    """Loopback DingTalk. Use as ``with FakeDingTalk(...) as fake:`` from any thread.

    Methods whose names start with ``wait_`` are coroutines meant for the test's
    own event loop; they poll the shared state and never block that loop.
    """

    record_type = RecordedRequest

    def __init__(
        self,
        *,
        client_id: str = "ding-client-id",
        client_secret: str = "ding-client-secret",
        token_ttl: int = 7200,
    ) -> None:
        super().__init__(name="fake-dingtalk")
        self.client_id = client_id
        self.client_secret = client_secret
        self.token_ttl = token_ttl
        self._state = _State()
        self._frame_ids = itertools.count(1)
        self._token_ids = itertools.count(1)

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1.0/gateway/connections/open", self._open_connection)
        router.add_get("/connect", self._websocket)
        router.add_post("/v1.0/oauth2/accessToken", self._access_token)
        router.add_post("/robot/sendBySession", self._session_webhook)
        router.add_post("/v1.0/robot/groupMessages/send", self._group_send)
        router.add_post("/v1.0/robot/oToMessages/batchSend", self._oto_send)
        router.add_post("/v1.0/card/instances", self._card_create)
        router.add_put("/v1.0/card/instances", self._card_update)
        router.add_post("/v1.0/card/instances/deliver", self._card_deliver)
        router.add_post("/v1.0/card/instances/createAndDeliver", self._card_create_deliver)

    # ----------------------------------------------------------------- inspection

    def session_webhook(self, session: str = "s1") -> str:
        return f"{self.url}/robot/sendBySession?session={session}"

    @property
    def acks(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._state.acks)

    def ack_for(self, message_id: str) -> dict[str, Any] | None:
        for ack in self.acks:
            if ack.get("headers", {}).get("messageId") == message_id:
                return ack
        return None

    def acks_for(self, message_id: str) -> list[dict[str, Any]]:
        return [a for a in self.acks if a.get("headers", {}).get("messageId") == message_id]

    @property
    def open_bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._state.open_bodies)

    def card(self, out_track_id: str) -> dict[str, Any] | None:
        """The card's current ``cardParamMap`` as last created or updated."""
        with self._lock:
            card = self._state.cards.get(out_track_id)
            return dict(card) if card is not None else None

    @property
    def cards(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {k: dict(v) for k, v in self._state.cards.items()}

    def cards_in(self, open_space_id: str) -> dict[str, dict[str, Any]]:
        """outTrackId -> current params of the cards delivered to one open space, e.g. a
        person's one-to-one chat with the robot ``dtv1.card//IM_ROBOT.<staff id>``."""
        with self._lock:
            tracks = [t for t, space in self._state.spaces.items() if space == open_space_id]
        return {t: c for t, c in self.cards.items() if t in tracks}

    def one_to_one_sends(self, staff_id: str | None = None) -> list[dict[str, Any]]:
        """Robot one-to-one messages (``oToMessages/batchSend``) as ``{userIds, msgKey,
        msgParam}`` with ``msgParam`` parsed; only those to ``staff_id`` when given."""
        out = []
        for r in self.requests("/v1.0/robot/oToMessages/batchSend"):
            body = dict(r.body or {})
            if r.status != 200 or (staff_id is not None and staff_id not in body["userIds"]):
                continue
            body["msgParam"] = json.loads(body.get("msgParam") or "{}")
            out.append(body)
        return out

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
        if body is None:
            body = {"code": "Throttling", "message": "injected failure"}
        self._fail_next((method.upper(), path), status=status, body=body, times=times, delay=delay)

    def _injection_key(self, request: web.Request) -> Hashable:
        return (request.method, request.path)

    def revoke_tokens(self) -> None:
        """Invalidate every access token handed out so far (DingTalk answers 401)."""
        with self._lock:
            self._state.tokens.clear()

    # ------------------------------------------------------------------- waiting

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
        self.call(self._send(frame))
        return message_id

    async def _send(self, frame: dict[str, Any]) -> None:
        ws = self.newest_socket()
        with self._lock:
            self._state.sent_frames.append(frame)
        await ws.send_str(json.dumps(frame, ensure_ascii=False))

    def _frame(
        self, frame_type: str, topic: str, data: Any, message_id: str | None
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

    def send_callback(self, topic: str, data: Any) -> str:
        """A CALLBACK frame on ``topic`` carrying ``data`` as JSON, whatever its shape."""
        return self.send_frame(self._frame("CALLBACK", topic, data, None))

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

    # ------------------------------------- HTTP (recorded by ThreadedServer)

    def _token_ok(self, request: web.Request) -> bool:
        token = request.headers.get("x-acs-dingtalk-access-token", "")
        with self._lock:
            expires = self._state.tokens.get(token)
        return expires is not None and expires > time.time()

    @staticmethod
    def _unauthorized() -> web.Response:
        return web.json_response(
            {"code": "InvalidAuthentication", "message": "不合法的access_token"}, status=401
        )

    async def _open_connection(self, request: web.Request) -> web.Response:
        body = request[BODY] or {}
        with self._lock:
            self._state.open_bodies.append(body)
        if body.get("clientId") != self.client_id or body.get("clientSecret") != self.client_secret:
            return web.json_response(
                {"code": "authFailed", "message": "clientId or clientSecret invalid"}, status=401
            )
        ticket = uuid.uuid4().hex
        with self._lock:
            self._state.tickets.add(ticket)
        return web.json_response(
            {"endpoint": f"ws://127.0.0.1:{self.port}/connect", "ticket": ticket}
        )

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        with self._lock:
            known = ticket in self._state.tickets
            self._state.tickets.discard(ticket)
        if not known:
            return web.Response(status=403, text="bad ticket")
        async with self.websocket(request) as ws:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    try:
                        ack = json.loads(msg.data)
                    except ValueError:
                        ack = {"invalid": msg.data}
                    with self._lock:
                        self._state.acks.append(ack)
                    self._apply_card_ack(ack)
        return ws

    def _apply_card_ack(self, ack: dict[str, Any]) -> None:
        """A card callback's ack may carry new card data: apply it like DingTalk does."""
        message_id = ack.get("headers", {}).get("messageId")
        with self._lock:
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
        with self._lock:
            self._state.cards.setdefault(out_track_id, {}).update(params)

    async def _access_token(self, request: web.Request) -> web.Response:
        body = request[BODY] or {}
        if body.get("appKey") != self.client_id or body.get("appSecret") != self.client_secret:
            return web.json_response(
                {"code": "invalidClientIdOrSecret", "message": "无效的clientId或clientSecret"},
                status=400,
            )
        token = f"tok-{next(self._token_ids)}"
        with self._lock:
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
        with self._lock:
            if replace or out_track_id not in self._state.cards:
                self._state.cards[out_track_id] = params
            else:
                self._state.cards[out_track_id].update(params)
        return out_track_id

    async def _card_create(self, request: web.Request) -> web.Response:
        if not self._token_ok(request):
            return self._unauthorized()
        out_track_id = self._store_card(request[BODY] or {}, replace=True)
        return web.json_response({"success": True, "result": out_track_id})

    async def _card_deliver(self, request: web.Request) -> web.Response:
        if not self._token_ok(request):
            return self._unauthorized()
        body = request[BODY] or {}
        return web.json_response(
            {
                "success": True,
                "result": [{"spaceId": body.get("openSpaceId", ""), "success": True}],
            }
        )

    async def _card_create_deliver(self, request: web.Request) -> web.Response:
        if not self._token_ok(request):
            return self._unauthorized()
        body = request[BODY] or {}
        out_track_id = self._store_card(body, replace=True)
        with self._lock:
            self._state.spaces[out_track_id] = str(body.get("openSpaceId", ""))
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
        body = request[BODY] or {}
        out_track_id = str(body.get("outTrackId", ""))
        with self._lock:
            known = out_track_id in self._state.cards
        if not known:
            return web.json_response(
                {"code": "param.cardNotExist", "message": "卡片不存在"}, status=400
            )
        # cardUpdateOptions.updateCardDataByKey=true merges; the default replaces.
        merge = bool(body.get("cardUpdateOptions", {}).get("updateCardDataByKey"))
        self._store_card(body, replace=not merge)
        return web.json_response({"success": True, "result": True})
