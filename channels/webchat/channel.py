"""The web chat channel: a page, a WebSocket per browser tab, and a REST API for scripts.

A room (session) is shared by URL, so several people can chat in one room like a group.
Everything said in a room goes into its history, in the room store (gateway/storage/rooms.py),
and from there to every open tab of it and to its long polls. A click on a card's button is
a ``decide(via="web")`` by the tab's user; the service checks that person may decide.

The web chat is its own platform: its rooms are stored like the conversations. On SQLite a
restart keeps them; on Redis every replica reads the same rooms, and what one replica posts
to a room (a card it asked, a decision it took, a call it ran or adopted, an answer) reaches
the tabs and polls of that room on every replica, once, in order.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import structlog
from aiohttp import WSCloseCode, web

from channels.base import Channel, ChannelSendError, follow_run_ends
from channels.webchat.limits import OpenConnections, SenderRateLimit
from channels.webchat.page import render_page
from channels.webchat.rest import ChatRest
from channels.webchat.rooms import Room, Rooms, Socket
from channels.webchat.websocket import ChatSockets
from gateway import texts
from gateway.bus import (
    InboundMessage,
    MessageBus,
    OutboundKind,
    OutboundMessage,
    SenderIdentity,
)
from gateway.http.identity import identity_of
from gateway.http.jsonapi import DEFAULT_MAX_JSON_DEPTH, ApiError, check_name
from gateway.http.openapi import chat_routes, serve
from gateway.logs import RateLimitedLine
from gateway.runtime import BackgroundTasks
from gateway.storage.confirmations import StoreUnavailableError
from gateway.storage.rooms import (
    EntryKind,
    MemoryRoomStore,
    RoomBounds,
    RoomEntry,
    RoomStore,
    as_shown,
)
from gateway.texts import nudges as nudge_texts

if TYPE_CHECKING:
    from config.channel_settings import WebChatSettings
    from gateway.confirm.service import ConfirmationService
    from gateway.metrics import Metrics

log = structlog.get_logger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
SEND_TIMEOUT_SECONDS = 5.0

PAGE_HEADERS = {
    # The page only talks to its own origin; user text is inserted as text, never HTML.
    "Content-Security-Policy": (
        "default-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "style-src 'self'; script-src 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


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
        history: RoomStore | None = None,
        clock: Callable[[], float] = time.time,
        max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
    ) -> None:
        """``history``: the rooms' store (gateway.storage.backends.open_rooms); without
        one, rooms are kept in memory."""
        self.settings = settings
        self.max_json_depth = max_json_depth
        self.bus = bus
        self.confirmations = confirmations
        self.metrics = metrics
        self._page = render_page()
        self.clock = clock
        self.history = history or MemoryRoomStore(
            RoomBounds(
                history_size=settings.history_size,
                room_bytes=settings.history_bytes_per_room,
                total_bytes=settings.history_bytes_total,
                max_rooms=settings.max_sessions,
            )
        )
        self.rooms = Rooms(self.history.kept, max_rooms=settings.max_sessions)
        self._deliveries = BackgroundTasks("webchat.deliver")
        self.rate_limit = SenderRateLimit(
            per_minute=settings.messages_per_minute,
            per_address_minute=settings.messages_per_minute_per_address,
            clock=clock,
        )
        # Each open WebSocket and waiting long poll holds a file descriptor (issue 22).
        self.open_sockets = OpenConnections(
            kind="sockets",
            total=settings.max_sockets,
            per_address=settings.max_sockets_per_address,
        )
        self.long_polls = OpenConnections(
            kind="long_polls",
            total=settings.max_long_polls,
            per_address=settings.max_long_polls_per_address,
        )
        self.refused_log = RateLimitedLine("webchat.over_limit", interval=60.0)
        self._started = False
        self._closing = False
        self._unsubscribe: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ lifecycle

    def register_routes(self, app: web.Application) -> None:
        app.router.add_get("/", self.page)
        app.router.add_static("/static/", STATIC_DIR, show_index=False)
        sockets, rest = ChatSockets(self), ChatRest(self)
        app.router.add_get("/ws", sockets.websocket)
        serve(app, chat_routes(rest.post_message, rest.get_messages))

    async def start(self) -> None:
        self._started = True
        self._closing = False
        if not self._unsubscribe:
            self._unsubscribe = [
                self.history.listen(self._on_kept),
                follow_run_ends(self.name, self.confirmations, self.bus),
            ]

    async def stop(self) -> None:
        self._closing = True
        self._started = False
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe = []
        closing = []
        for room in self.rooms:
            room.wake()
            for sock in list(room.sockets):
                closing.append(
                    sock.ws.close(code=WSCloseCode.GOING_AWAY, message=b"gateway shutting down")
                )
        await self._deliveries.cancel()
        await asyncio.gather(*closing, return_exceptions=True)

    @property
    def ready(self) -> bool:
        return self._started

    def status(self) -> dict[str, Any]:
        sockets = sum(len(r.sockets) for r in self.rooms)
        return {
            "name": self.name,
            "ready": self.ready,
            "reason": None if self.ready else "not started",
            "rooms": len(self.rooms),
            "sockets": sockets,
        }

    # ------------------------------------------------------------------ outbound

    async def send(self, msg: OutboundMessage) -> None:
        kind: EntryKind = "text"
        if msg.confirmation is not None and msg.kind is OutboundKind.CONFIRMATION:
            kind = "confirmation"
        elif msg.confirmation is not None and msg.kind is OutboundKind.CONFIRMATION_UPDATE:
            kind = "confirmation_update"
        text = msg.text
        if msg.mentions:  # a reminder: the page has no mention markup, names are enough
            text = nudge_texts.mention_line(msg.mentions) + "\n" + text
        entry = RoomEntry(
            room=msg.chat_id,
            kind=kind,
            text=text,
            at=self.clock(),
            confirmation=as_shown(msg.confirmation) if msg.confirmation else None,
        )
        try:
            await self.history.append(entry)
        except StoreUnavailableError as exc:
            # Redis away: the room is there, so the manager tries again with backoff.
            raise ChannelSendError(f"web chat room not stored: {exc}") from exc

    def _on_kept(self, entry: RoomEntry) -> None:
        """An entry was kept in a room (appended here or, on Redis, by any replica): wake the
        room's long polls here and send it to its tabs here.

        One task per room sends, entry after entry, so the tabs get them in order and a slow
        tab holds up neither the store's feed nor other rooms.
        """
        room = self.rooms.find(entry.room)
        if room is None:
            return
        room.wake()
        if not room.sockets:
            return
        room.outbox.append(entry)
        if not room.sending:
            room.sending = True
            self._deliveries.spawn(self._deliver(room), name=f"webchat-deliver-{room.name}")

    async def _deliver(self, room: Room) -> None:
        try:
            while room.outbox:
                await self._fan_out(room, room.outbox.popleft())
        finally:
            room.sending = False

    async def _fan_out(self, room: Room, entry: RoomEntry) -> None:
        # A tab that joined meanwhile was sent it with the history it caught up on.
        sockets = [s for s in room.sockets if s.seen < entry.seq]
        if not sockets:
            return
        results = await asyncio.gather(
            *(self.send_frame(s, self.message_frame(entry, s.user, s.identity)) for s in sockets),
            return_exceptions=True,
        )
        for sock, result in zip(sockets, results, strict=True):
            if isinstance(result, BaseException):
                # A tab that went away mid-send: it re-reads the history when it reconnects.
                log.info("webchat.socket_dropped", room=room.name, error=type(result).__name__)
                room.sockets.discard(sock)
            else:
                sock.seen = max(sock.seen, entry.seq)

    async def send_frame(self, sock: Socket, frame: dict[str, Any]) -> None:
        """One JSON frame to one tab, bounded in time (a stuck tab must not stall a room)."""
        try:
            text = json.dumps(frame, ensure_ascii=False)
            await asyncio.wait_for(sock.ws.send_str(text), SEND_TIMEOUT_SECONDS)
        except UnicodeEncodeError:
            # A lone surrogate that did not come through the edge (a model's output, say):
            # escaped as \udXXX it is valid JSON, and the tab keeps working. send_str
            # encodes before it writes, so nothing was sent yet.
            await asyncio.wait_for(sock.ws.send_str(json.dumps(frame)), SEND_TIMEOUT_SECONDS)

    def message_frame(
        self, entry: RoomEntry, user: str | None, identity: SenderIdentity
    ) -> dict[str, Any]:
        """A history entry as sent to ``user`` (with what they may decide on a prompt)."""
        frame = {"type": "message", **entry.to_dict()}
        c = entry.confirmation
        if c is not None:
            frame["card"] = texts.web_card(c)
        if c is not None and user is not None:
            # What this person may press: the core's judgement, rendered here.
            verified = identity is not SenderIdentity.SELF_DECLARED
            frame["can_decide"] = self.confirmations.card_view(
                c, user, verified=verified
            ).can_decide()
        return frame

    # ------------------------------------------------------------------ inbound

    def sender(self, request: web.Request, typed: object) -> tuple[str, SenderIdentity]:
        """Who is writing: the login proxy's name when it vouches, else the typed ``user``."""
        trusted = identity_of(request)
        user = trusted.user(request)
        if user is not None:
            return user, SenderIdentity.VERIFIED
        return check_name(typed, "user"), trusted.of(request)

    async def accept(
        self,
        room: Room,
        user: str,
        text: str,
        identity: SenderIdentity,
        *,
        address: str,
    ) -> RoomEntry:
        """Show a person's message in the room, then hand it to the bus; its history entry.

        Raises SlowDown when ``user`` is over ``messages_per_minute``, or the client
        ``address`` over ``messages_per_minute_per_address``: nothing is kept then; and
        StoreUnavailableError when the room cannot be stored (nothing is taken).
        """
        self.rate_limit.take(user, address=address)
        message_id = uuid.uuid4().hex
        entry = await self.history.append(
            RoomEntry(
                room=room.name,
                kind="text",
                text=text,
                at=self.clock(),
                user=user,
                message_id=message_id,
            )
        )
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
                # A typed name from elsewhere: the intercept does not take its decisions.
                metadata={"identity": identity.value},
            )
        )
        return entry

    def check_text(self, value: str) -> str:
        """The trimmed text of a REST message, or ApiError 400 / 413."""
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
        return web.Response(text=self._page, content_type="text/html", headers=PAGE_HEADERS)

    def room_from(self, request: web.Request) -> Room:
        """The room named in the path (REST) or the query (WebSocket)."""
        self.refuse_when_closing()
        name = request.match_info.get("session", request.query.get("session"))
        return self.rooms.get(check_name(name, "session"))

    def refuse_when_closing(self) -> None:
        """ApiError 503 while the gateway starts or stops."""
        if self._closing or not self._started:
            raise ApiError(503, "web chat is not running (gateway starting or stopping)")

    def session_key(self, room: Room) -> str:
        return f"{self.name}:{room.name}"
