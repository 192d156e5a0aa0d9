"""The message bus: inbound and outbound queues, with reply interception on the way in."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from gateway.confirm.model import Confirmation

log = structlog.get_logger(__name__)

_EMPTY: Mapping[str, Any] = MappingProxyType({})


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


class RecentIds:
    """Keys seen within the last ``ttl`` seconds, at most ``maxsize`` of them.

    Every message passes through here, so it is kept to one dict lookup and one insert:
    with a single TTL for all keys, insertion order is expiry order, and expired keys are
    dropped from the front of a deque. (cachetools.TTLCache did the same job at about five
    times the cost per message: bench/confirm_roundtrip.py, docs/performance.md.)
    """

    __slots__ = ("_clock", "_live", "_maxsize", "_order", "_ttl")

    def __init__(
        self, *, ttl: float, maxsize: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl = ttl
        self._maxsize = maxsize
        self._clock = clock
        self._live: set[tuple[str, str]] = set()
        self._order: deque[tuple[float, tuple[str, str]]] = deque()

    def __len__(self) -> int:
        return len(self._live)

    def seen(self, key: tuple[str, str]) -> bool:
        """Record ``key``; True when it was already recorded and has not expired."""
        now = self._clock()
        live = self._live
        order = self._order
        # Each live key has exactly one deque entry, so popping an entry forgets its key.
        while order and order[0][0] <= now:
            live.remove(order.popleft()[1])
        if key in live:
            return True
        live.add(key)
        order.append((now + self._ttl, key))
        if len(live) > self._maxsize:
            live.remove(order.popleft()[1])
        return False


Interceptor = Callable[[InboundMessage], Awaitable[bool]]
InboundListener = Callable[[InboundMessage, PublishResult], None]


class MessageBus:
    """Inbound and outbound asyncio queues.

    ``publish_inbound`` drops platform redeliveries, then offers the message to the
    confirmation service; only what is not a decision reaches the agent's queue.
    """

    def __init__(self, *, dedupe_ttl_seconds: float = 8 * 3600, dedupe_max: int = 100_000) -> None:
        self.inbound: asyncio.Queue[InboundMessage] = asyncio.Queue()
        self.outbound: asyncio.Queue[OutboundMessage] = asyncio.Queue()
        # Feishu redelivers for up to ~7 h; DingTalk redelivers late acks. Bounded both ways.
        self._seen = RecentIds(ttl=dedupe_ttl_seconds, maxsize=dedupe_max)
        self._interceptor: Interceptor | None = None
        self._listeners: list[InboundListener] = []
        # One intake at a time per session, so two copies of a reply (or a reply and a
        # following message) are intercepted in the order they arrived.
        self._session_locks: dict[str, asyncio.Lock] = {}
        self._lock_users: dict[str, int] = {}

    def set_interceptor(self, interceptor: Interceptor) -> None:
        self._interceptor = interceptor

    def add_inbound_listener(self, listener: InboundListener) -> None:
        """Called for every inbound message with what became of it (metrics)."""
        self._listeners.append(listener)

    def is_duplicate(self, channel: str, message_id: str | None) -> bool:
        """Record the id; True when it was already seen. Channels may call it early."""
        if not message_id:
            return False
        return self._seen.seen((channel, message_id))

    async def publish_inbound(self, msg: InboundMessage) -> PublishResult:
        if self.is_duplicate(msg.channel, msg.message_id):
            log.info("bus.duplicate_dropped", channel=msg.channel, message_id=msg.message_id)
            result = PublishResult.DUPLICATE
        else:
            key = msg.session_key
            lock = self._session_locks.get(key)
            if lock is None:
                lock = self._session_locks[key] = asyncio.Lock()
            self._lock_users[key] = self._lock_users.get(key, 0) + 1
            try:
                async with lock:
                    intercepted = False
                    if self._interceptor is not None and not msg.from_bot:
                        intercepted = await self._interceptor(msg)
                    if intercepted:
                        result = PublishResult.INTERCEPTED
                    else:
                        self.inbound.put_nowait(msg)
                        result = PublishResult.QUEUED
            finally:
                # Drop idle locks so a long-running daemon does not keep one per chat forever.
                users = self._lock_users[key] - 1
                if users:
                    self._lock_users[key] = users
                else:
                    del self._lock_users[key]
                    del self._session_locks[key]
        for listener in self._listeners:
            listener(msg, result)
        return result

    async def consume_inbound(self) -> InboundMessage:
        return await self.inbound.get()

    async def publish_outbound(self, msg: OutboundMessage) -> None:
        self.post_outbound(msg)

    def post_outbound(self, msg: OutboundMessage) -> None:
        """``publish_outbound`` for callers that must not yield (the confirmation service)."""
        self.outbound.put_nowait(msg)

    async def consume_outbound(self) -> OutboundMessage:
        return await self.outbound.get()
