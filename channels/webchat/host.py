"""What the web chat's REST and WebSocket handlers use of their channel, as a protocol.

``WebChatChannel`` (channel.py) builds ``ChatRest`` (rest.py) and ``ChatSockets``
(websocket.py) with itself; they reach it through this surface only, so neither imports
the channel and no import runs back up (tests/core/test_imports.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from aiohttp import web

    from channels.webchat.limits import OpenConnections
    from channels.webchat.rooms import Room, Socket
    from config.channel_settings import WebChatSettings
    from gateway.bus import SenderIdentity
    from gateway.confirm.service import ConfirmationService
    from gateway.logs import RateLimitedLine
    from gateway.metrics import Metrics
    from gateway.storage.rooms import RoomEntry


class ChatHost(Protocol):
    """The web chat channel, as its REST and WebSocket handlers see it."""

    settings: WebChatSettings
    confirmations: ConfirmationService
    metrics: Metrics | None
    clock: Callable[[], float]
    max_json_depth: int
    open_sockets: OpenConnections
    long_polls: OpenConnections
    refused_log: RateLimitedLine

    async def accept(
        self, room: Room, user: str, text: str, identity: SenderIdentity, *, address: str
    ) -> RoomEntry: ...

    def check_text(self, value: str) -> str: ...

    def message_frame(
        self, entry: RoomEntry, user: str | None, identity: SenderIdentity
    ) -> dict[str, Any]: ...

    def room_from(self, request: web.Request) -> Room: ...

    async def send_frame(self, sock: Socket, frame: dict[str, Any]) -> None: ...

    def sender(self, request: web.Request, typed: object) -> tuple[str, SenderIdentity]: ...

    def session_key(self, room: Room) -> str: ...
