"""The web chat channel: a page, a WebSocket per browser tab, and a REST API for scripts.

A room (session) is shared by URL, so several people can chat in one room like a group.
Everything the gateway says to a room goes to every open tab of it and to the room's
history, which long polls read. A click on a card's button is a ``decide(via="web")``
by the tab's user; the service checks that person may decide.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import structlog
from aiohttp import WSCloseCode, WSMsgType, web

from channels.base import Channel
from channels.webchat.rooms import ChatEntry, EntryKind, Room, Rooms, Socket
from gateway import texts
from gateway.bus import InboundMessage, MessageBus, OutboundKind, OutboundMessage
from gateway.confirm.model import Decision
from gateway.http.jsonapi import ApiError, check_name, read_json_object, required_string

if TYPE_CHECKING:
    from config.settings import WebChatSettings
    from gateway.confirm.service import ConfirmationService
    from gateway.metrics import Metrics

log = structlog.get_logger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
SEND_TIMEOUT_SECONDS = 5.0
MAX_REASON_LENGTH = 500
# Ids are 4-5 Crockford characters; anything much longer is not an id.
MAX_ID_LENGTH = 16

PAGE_HEADERS = {
    # The page only talks to its own origin; user text is inserted as text, never HTML.
    "Content-Security-Policy": (
        "default-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "style-src 'self'; script-src 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


class FrameError(Exception):
    """A WebSocket frame that is not our protocol: the socket is closed with this reason."""


class WebChatChannel(Channel):
    """Browser chat on the shared aiohttp server."""

    name: ClassVar[str] = "webchat"

    def __init__(
        self,
        *,
        settings: WebChatSettings,
        bus: MessageBus,
        confirmations: ConfirmationService,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.bus = bus
        self.confirmations = confirmations
        self.metrics = metrics
        self.clock = clock
        self.rooms = Rooms(max_rooms=settings.max_sessions, history_size=settings.history_size)
        self._started = False
        self._closing = False

    # ------------------------------------------------------------------ lifecycle

    def register_routes(self, app: web.Application) -> None:
        app.router.add_get("/", self.page)
        app.router.add_static("/static/", STATIC_DIR, show_index=False)
        app.router.add_get("/ws", self.websocket)
        app.router.add_post("/api/chat/{session}/messages", self.post_message)
        app.router.add_get("/api/chat/{session}/messages", self.get_messages)

    async def start(self) -> None:
        self._started = True
        self._closing = False

    async def stop(self) -> None:
        self._closing = True
        self._started = False
        closing = []
        for room in self.rooms:
            room.wake()
            for sock in list(room.sockets):
                closing.append(
                    sock.ws.close(code=WSCloseCode.GOING_AWAY, message=b"gateway shutting down")
                )
        await asyncio.gather(*closing, return_exceptions=True)

    @property
    def ready(self) -> bool:
        return self._started

    def status(self) -> dict[str, Any]:
        sockets = sum(len(r.sockets) for r in self.rooms)
        return {
            "name": self.name,
            "ready": self.ready,
            "rooms": len(self.rooms),
            "sockets": sockets,
        }

    # ------------------------------------------------------------------ outbound

    async def send(self, msg: OutboundMessage) -> None:
        room = self.rooms.get(msg.chat_id)
        kind: EntryKind = "text"
        if msg.confirmation is not None and msg.kind is OutboundKind.CONFIRMATION:
            kind = "confirmation"
        elif msg.confirmation is not None and msg.kind is OutboundKind.CONFIRMATION_UPDATE:
            kind = "confirmation_update"
        entry = room.append(
            kind=kind,
            text=msg.text,
            at=self.clock(),
            confirmation=msg.confirmation,
        )
        await self._fan_out(room, entry)

    async def _fan_out(self, room: Room, entry: ChatEntry) -> None:
        sockets = list(room.sockets)
        if not sockets:
            return
        results = await asyncio.gather(
            *(self._send_frame(s, self._message_frame(entry, s.user)) for s in sockets),
            return_exceptions=True,
        )
        for sock, result in zip(sockets, results, strict=True):
            if isinstance(result, BaseException):
                # A tab that went away mid-send: it re-reads the history when it reconnects.
                log.info("webchat.socket_dropped", room=room.name, error=type(result).__name__)
                room.sockets.discard(sock)

    async def _send_frame(self, sock: Socket, frame: dict[str, Any]) -> None:
        await asyncio.wait_for(
            sock.ws.send_str(json.dumps(frame, ensure_ascii=False)), SEND_TIMEOUT_SECONDS
        )

    def _message_frame(self, entry: ChatEntry, user: str | None) -> dict[str, Any]:
        frame = {"type": "message", **entry.to_dict()}
        c = entry.confirmation
        if c is not None and user is not None:
            can: dict[str, dict[str, Any]] = {}
            for d in Decision:
                allowed, why = self.confirmations.may_decide(c, user, d)
                can[d.value] = {"allowed": allowed, "why": why}
            frame["can_decide"] = can
        return frame

    # ------------------------------------------------------------------ inbound

    async def _accept(self, room: Room, user: str, text: str) -> str:
        """Show a person's message in the room, then hand it to the bus."""
        message_id = uuid.uuid4().hex
        entry = room.append(
            kind="text", text=text, at=self.clock(), user=user, message_id=message_id
        )
        await self._fan_out(room, entry)
        await self.bus.publish_inbound(
            InboundMessage(
                channel=self.name,
                chat_id=room.name,
                sender_id=user,
                sender_name=user,
                text=text,
                message_id=message_id,
                # Rooms are shared by URL: anyone with the link may be in it.
                is_group=True,
            )
        )
        return message_id

    def _check_text(self, value: str) -> str:
        text = value.strip()
        if not text:
            raise ApiError(400, "text is empty", field="text")
        limit = self.settings.max_text_length
        if len(text) > limit:
            raise ApiError(
                413, f"text is too long ({len(text)} > {limit} characters)", field="text"
            )
        return text

    # ------------------------------------------------------------------ HTTP

    async def page(self, _: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC_DIR / "index.html", headers=PAGE_HEADERS)

    def _room_from(self, request: web.Request) -> Room:
        """The room named in the path (REST) or the query (WebSocket)."""
        self._refuse_when_closing()
        name = request.match_info.get("session", request.query.get("session"))
        return self.rooms.get(check_name(name, "session"))

    def _refuse_when_closing(self) -> None:
        if self._closing or not self._started:
            raise ApiError(503, "web chat is not running (gateway starting or stopping)")

    async def post_message(self, request: web.Request) -> web.Response:
        room = self._room_from(request)
        data = await read_json_object(request)
        user = check_name(data.get("user"), "user")
        # The body is already bounded by the server's client_max_size; the limit is checked
        # on the trimmed text, so the status is 413 however the text is padded.
        raw = required_string(data, "text", max_length=1 << 20)
        text = self._check_text(raw)
        message_id = await self._accept(room, user, text)
        return web.json_response({"message_id": message_id}, status=202)

    async def get_messages(self, request: web.Request) -> web.Response:
        room = self._room_from(request)
        after = _int_param(request, "after", default=0)
        wait = min(_float_param(request, "wait", default=0.0), self.settings.max_long_poll_seconds)
        user_param = request.query.get("user")
        user = check_name(user_param, "user") if user_param is not None else None
        entries = await room.wait_after(after, wait)
        messages = []
        for e in entries:
            item = self._message_frame(e, user)
            del item["type"]
            messages.append(item)
        return web.json_response({"messages": messages, "last_seq": room.last_seq})

    # ------------------------------------------------------------------ WebSocket

    async def websocket(self, request: web.Request) -> web.StreamResponse:
        room = self._room_from(request)
        user = check_name(request.query.get("user"), "user")
        after = _int_param(request, "after", default=0)
        if len(room.sockets) >= self.settings.max_sockets_per_session:
            raise ApiError(429, "too many open connections in this session")
        ws = web.WebSocketResponse(
            heartbeat=30.0,
            # A frame holds one message; far bigger than the text limit is not ours.
            max_msg_size=max(65536, self.settings.max_text_length * 4 + 4096),
        )
        await ws.prepare(request)
        sock = Socket(ws=ws, user=user)
        hello = {
            "type": "hello",
            "session": room.name,
            "user": user,
            "now": self.clock(),
            "max_text_length": self.settings.max_text_length,
            "last_seq": room.last_seq,
        }
        try:
            await self._send_frame(sock, hello)
            for entry in room.after(after):
                await self._send_frame(sock, self._message_frame(entry, user))
        except (ConnectionError, TimeoutError):
            # The tab went away while catching up: nothing to clean up yet.
            log.info("webchat.gone_during_backlog", room=room.name, user=user)
            return ws
        room.sockets.add(sock)
        if self.metrics is not None:
            self.metrics.webchat_sockets.inc()
        log.info("webchat.connected", room=room.name, user=user)
        try:
            await self._read_frames(room, sock)
        except (ConnectionError, TimeoutError) as exc:
            # Replying to a tab that just closed: the tab's problem, not the gateway's.
            log.info("webchat.reply_failed", room=room.name, error=type(exc).__name__)
        finally:
            room.sockets.discard(sock)
            if self.metrics is not None:
                self.metrics.webchat_sockets.dec()
            log.info("webchat.disconnected", room=room.name, user=user)
        return ws

    async def _read_frames(self, room: Room, sock: Socket) -> None:
        ws = sock.ws
        async for frame in ws:
            if frame.type is WSMsgType.TEXT:
                try:
                    await self._on_frame(room, sock, frame.data)
                except FrameError as exc:
                    # A client that does not speak the protocol: tell it why and hang up.
                    log.info("webchat.bad_frame", room=room.name, error=str(exc))
                    await ws.close(code=WSCloseCode.UNSUPPORTED_DATA, message=str(exc).encode())
                    return
            elif frame.type is WSMsgType.BINARY:
                log.info("webchat.bad_frame", room=room.name, error="binary")
                await ws.close(
                    code=WSCloseCode.UNSUPPORTED_DATA, message=b"binary frames are not supported"
                )
                return
            elif frame.type is WSMsgType.ERROR:
                log.info("webchat.socket_error", room=room.name, error=str(ws.exception()))
                return

    async def _on_frame(self, room: Room, sock: Socket, raw: str) -> None:
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise FrameError("frame is not JSON") from exc
        if not isinstance(data, dict):
            raise FrameError("frame must be a JSON object")
        kind = data.get("type")
        if kind == "message":
            text = data.get("text")
            if not isinstance(text, str):
                raise FrameError("message.text must be a string")
            checked = text.strip()
            if not checked:
                return  # nothing to say, nothing to answer
            limit = self.settings.max_text_length
            if len(checked) > limit:
                # Shown to the person in the page: their words, not an API error.
                error = texts.MESSAGE_TOO_LONG.format(limit=limit)
                await self._send_frame(sock, {"type": "error", "error": error})
                return
            await self._accept(room, sock.user, checked)
        elif kind == "decide":
            await self._on_decide(room, sock, data)
        elif kind == "ping":
            await self._send_frame(sock, {"type": "pong", "now": self.clock()})
        else:
            raise FrameError("unknown frame type: use message, decide or ping")

    async def _on_decide(self, room: Room, sock: Socket, data: dict[str, Any]) -> None:
        cid, decision, reason = data.get("id"), data.get("decision"), data.get("reason")
        if not isinstance(cid, str) or not 0 < len(cid) <= MAX_ID_LENGTH:
            raise FrameError("decide.id must be a confirmation id")
        if decision not in ("approve", "reject"):
            raise FrameError("decide.decision must be approve or reject")
        if reason is not None and not isinstance(reason, str):
            raise FrameError("decide.reason must be a string")
        reason = (reason or "").strip()[:MAX_REASON_LENGTH] or None
        current = await self.confirmations.get(cid)
        # Only this room's confirmations: a web user must not reach another chat's by id.
        if current is None or current.session_key != self._session_key(room):
            await self._send_frame(
                sock,
                {
                    "type": "decision",
                    "id": cid,
                    "outcome": "not_found",
                    "message": texts.unknown_id(cid),
                },
            )
            return
        result = await self.confirmations.decide(
            current.id, Decision(decision), actor=sock.user, via="web", reason=reason
        )
        await self._send_frame(
            sock,
            {
                "type": "decision",
                "id": current.id,
                "outcome": result.outcome.value,
                "message": result.message,
            },
        )

    def _session_key(self, room: Room) -> str:
        return f"{self.name}:{room.name}"


def _int_param(request: web.Request, name: str, *, default: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ApiError(400, f"{name} must be a whole number", field=name) from exc
    if value < 0:
        raise ApiError(400, f"{name} must not be negative", field=name)
    return value


def _float_param(request: web.Request, name: str, *, default: float) -> float:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ApiError(400, f"{name} must be a number of seconds", field=name) from exc
    if not math.isfinite(value) or value < 0:
        raise ApiError(400, f"{name} must be a number of seconds, 0 or more", field=name)
    return value
