"""The message bus: inbound and outbound queues, with reply interception on the way in."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import structlog
from cachetools import TTLCache

from gateway.runtime import KeyedSerial

if TYPE_CHECKING:
    from gateway.confirm.model import Confirmation

log = structlog.get_logger(__name__)

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class SenderIdentity(StrEnum):
    """How far a sender's id can be believed; web chat sets it in ``metadata["identity"]``.

    Platforms authenticate their users; a web chat name is typed unless a login proxy
    vouches for it (gateway.http.identity).
    """

    VERIFIED = "verified"  # named by a trusted login proxy
    LOCAL = "local"  # typed, on this machine (loopback, not forwarded)
    SELF_DECLARED = "self-declared"  # typed, from elsewhere: its decisions do not count


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundMessage:
    """A message from a person, as a channel adapter built it."""

    channel: str
    chat_id: str
    sender_id: str
    text: str
    message_id: str | None = None
    is_group: bool = False
    sender_name: str | None = None
    reply_to: str | None = None
    session_key: str = ""
    from_bot: bool = False
    metadata: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    received_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if not self.session_key:
            # The adapter owns the session key; channel:chat is the default.
            object.__setattr__(self, "session_key", f"{self.channel}:{self.chat_id}")


class OutboundKind(StrEnum):
    TEXT = "text"
    CONFIRMATION = "confirmation"
    CONFIRMATION_UPDATE = "confirmation_update"


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboundMessage:
    """A message for a chat. ``text`` is always a full rendering, whatever the kind."""

    channel: str
    chat_id: str
    text: str
    kind: OutboundKind = OutboundKind.TEXT
    confirmation: Confirmation | None = None
    session_key: str = ""
    reply_to: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    def __post_init__(self) -> None:
        if not self.session_key:
            object.__setattr__(self, "session_key", f"{self.channel}:{self.chat_id}")


class PublishResult(StrEnum):
    QUEUED = "queued"  # on the inbound queue for the agent
    INTERCEPTED = "intercepted"  # handled by the confirmation service (decided, or told why not)
    DUPLICATE = "duplicate"  # same channel + message id seen recently: dropped


Interceptor = Callable[[InboundMessage], Awaitable[bool]]
InboundListener = Callable[[InboundMessage, PublishResult], None]


class MessageBus:
    """Inbound and outbound asyncio queues.

    ``publish_inbound`` drops platform redeliveries, then offers the message to the
    confirmation service; only what is not a decision reaches the agent's queue.
    """

    def __init__(
        self,
        *,
        dedupe_ttl_seconds: float = 8 * 3600,
        dedupe_max: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inbound: asyncio.Queue[InboundMessage] = asyncio.Queue()
        self.outbound: asyncio.Queue[OutboundMessage] = asyncio.Queue()
        # Feishu redelivers for up to ~7 h; DingTalk redelivers late acks. Bounded both ways.
        self._seen: TTLCache[tuple[str, str], bool] = TTLCache(
            maxsize=dedupe_max, ttl=dedupe_ttl_seconds, timer=clock
        )
        self._interceptor: Interceptor | None = None
        self._listeners: list[InboundListener] = []
        # One intake at a time per session, so two copies of a reply (or a reply and a
        # following message) are intercepted in the order they arrived.
        self._intake = KeyedSerial()

    def set_interceptor(self, interceptor: Interceptor) -> None:
        self._interceptor = interceptor

    def add_inbound_listener(self, listener: InboundListener) -> None:
        """Called for every inbound message with what became of it (metrics)."""
        self._listeners.append(listener)

    def is_duplicate(self, channel: str, message_id: str | None) -> bool:
        """Record the id; True when it was already seen. Channels may call it early.

        A duplicate does not extend the window: it counts from the first sighting.
        """
        if not message_id:
            return False
        key = (channel, message_id)
        if key in self._seen:
            return True
        self._seen[key] = True
        return False

    async def publish_inbound(self, msg: InboundMessage) -> PublishResult:
        if self.is_duplicate(msg.channel, msg.message_id):
            log.info("bus.duplicate_dropped", channel=msg.channel, message_id=msg.message_id)
            result = PublishResult.DUPLICATE
        else:
            async with self._intake.hold(msg.session_key):
                if self._interceptor is not None and not msg.from_bot:
                    intercepted = await self._interceptor(msg)
                else:
                    intercepted = False
                if intercepted:
                    result = PublishResult.INTERCEPTED
                else:
                    self.inbound.put_nowait(msg)
                    result = PublishResult.QUEUED
        for listener in self._listeners:
            listener(msg, result)
        return result

    async def consume_inbound(self) -> InboundMessage:
        return await self.inbound.get()

    async def publish_outbound(self, msg: OutboundMessage) -> None:
        self.outbound.put_nowait(msg)

    async def consume_outbound(self) -> OutboundMessage:
        return await self.outbound.get()
