"""The message bus: inbound and outbound queues, with reply interception on the way in."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection

import structlog

from gateway.messages import InboundMessage as InboundMessage
from gateway.messages import OutboundKind as OutboundKind
from gateway.messages import OutboundMessage as OutboundMessage
from gateway.messages import PublishResult as PublishResult
from gateway.messages import SenderIdentity as SenderIdentity
from gateway.runtime import BackgroundTasks, KeyedSerial
from gateway.storage.inbox import KEEP_TAKEN_SECONDS, Inbox

log = structlog.get_logger(__name__)


# Work that can wait (prompts shown again after a restart: a dead process may leave
# 100,000) waits until fewer outbound messages than this are queued or being sent, so it
# never floods a platform or holds up the answers to new messages behind it.
OUTBOUND_ROOM = 32

Interceptor = Callable[[InboundMessage], Awaitable[bool]]
InboundListener = Callable[[InboundMessage, PublishResult], None]


class MessageBus:
    """Inbound and outbound asyncio queues.

    ``publish_inbound`` drops platform redeliveries, stores the message in the inbox
    (when there is one), then offers it to the confirmation service; only what is not a
    decision reaches the agent's queue. A message is marked taken in the inbox when it
    was decided on the way in, or (``mark_taken``) before its turn's first effect.
    """

    def __init__(
        self,
        *,
        inbox: Inbox | None = None,
        dedupe_ttl_seconds: float = 8 * 3600,
        dedupe_max: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inbox = inbox
        self._housekeeping = BackgroundTasks("bus-inbox")
        self.inbound: asyncio.Queue[InboundMessage] = asyncio.Queue()
        self.outbound: asyncio.Queue[OutboundMessage] = asyncio.Queue()
        self._sending = 0  # taken off the queue by the channel manager, send not ended
        self._outbound_room = asyncio.Event()
        self._outbound_room.set()
        # Feishu redelivers for up to ~7 h; DingTalk redelivers late acks. Bounded both ways.
        # (channel, message id) -> when it expires. One TTL for all, so insertion order is
        # expiry order. Not cachetools.TTLCache: ~20 µs more per message id, in
        # bench/confirm_roundtrip.py --store memory µs per round trip.
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._dedupe_ttl = dedupe_ttl_seconds
        self._dedupe_max = dedupe_max
        self._clock = clock
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
        seen, now = self._seen, self._clock()
        while seen and next(iter(seen.values())) <= now:
            seen.popitem(last=False)
        key = (channel, message_id)
        if key in seen:
            return True
        if len(seen) >= self._dedupe_max:
            seen.popitem(last=False)
        seen[key] = now + self._dedupe_ttl
        return False

    async def publish_inbound(self, msg: InboundMessage) -> PublishResult:
        """Store, then intercept or queue ``msg``; returns once it is stored.

        Channels acknowledge the platform after this returns (invariant 9). When storing
        fails it raises, and the channel must not acknowledge: the platform redelivers.
        """
        if self.is_duplicate(msg.channel, msg.message_id) or not await self._store(msg):
            log.info("bus.duplicate_dropped", channel=msg.channel, message_id=msg.message_id)
            result = PublishResult.DUPLICATE
        else:
            result = await self._deliver(msg)
        for listener in self._listeners:
            listener(msg, result)
        return result

    async def start(self) -> None:
        """Replay the inbox, then purge its taken messages once an hour (when it has one).

        A shared inbox (Redis) is not replayed here: its other owners may be live
        replicas, and gateway/confirm/replicas.py adopts the dead ones' messages with
        their confirmations (``adopt_inbox``).
        """
        if self.inbox is not None:
            if not self.inbox.shared:
                await self.adopt_inbox(alive=())  # this process's own: earlier runs are over
            self._housekeeping.spawn(self._purge_hourly(self.inbox), name="inbox-purge")

    async def stop(self) -> None:
        """Close the inbox; call after the last publish_inbound and mark_taken."""
        await self._housekeeping.cancel()
        if self.inbox is not None:
            await self.inbox.close()

    async def _purge_hourly(self, inbox: Inbox) -> None:
        while True:
            try:
                purged = await inbox.purge(time.time() - KEEP_TAKEN_SECONDS)
                log.debug("bus.inbox_purged", count=purged)
            except Exception:  # a full disk, a locked file: try again in an hour, keep serving
                log.exception("bus.inbox_purge_failed")
            await asyncio.sleep(3600)

    async def adopt_inbox(self, alive: Collection[str]) -> int:
        """Publish here what processes not in ``alive`` stored and never took; how many.

        With a shared inbox, at every adoption scan (the start's runs in the background,
        while the channels already bring messages). Each such message is delivered once, by
        the one process that adopted it; a platform's redelivery of it is a duplicate (its
        id is stored), whichever comes first.
        """
        if self.inbox is None:
            return 0
        stored = await self.inbox.adopt(alive)
        for msg in stored:
            self.is_duplicate(msg.channel, msg.message_id)  # remember the id in memory too
            result = await self._deliver(msg)
            for listener in self._listeners:
                listener(msg, result)
        if stored:
            log.info("bus.inbox_replayed", count=len(stored))
        return len(stored)

    async def mark_taken(self, msg: InboundMessage) -> None:
        """``msg`` is handled, or its turn is about to show or do something: from here on
        a crash does not process it again (its tool calls may have run)."""
        if self.inbox is None or not _storable(msg):
            return
        try:
            await self.inbox.taken(msg.channel, msg.message_id or "")
        except Exception:  # the turn goes on; the cost is one replay after a crash
            log.exception("bus.inbox_taken_failed", message_id=msg.message_id)

    async def _store(self, msg: InboundMessage) -> bool:
        """False for a redelivery the inbox already holds (from this run or an earlier)."""
        if self.inbox is None or not _storable(msg):
            return True
        try:
            return await self.inbox.put(msg)
        except BaseException:
            # Not stored, so not acknowledged: the redelivery must not look like a duplicate.
            self._seen.pop((msg.channel, msg.message_id or ""), None)
            raise

    async def _deliver(self, msg: InboundMessage) -> PublishResult:
        async with self._intake.hold(msg.session_key):
            if self._interceptor is not None and not msg.from_bot and msg.resumes is None:
                intercepted = await self._interceptor(msg)
            else:
                intercepted = False
            if intercepted:
                # Handled here (a decision, or the person was told why not): no turn.
                await self.mark_taken(msg)
                return PublishResult.INTERCEPTED
            self.inbound.put_nowait(msg)
            return PublishResult.QUEUED

    async def consume_inbound(self) -> InboundMessage:
        return await self.inbound.get()

    async def publish_outbound(self, msg: OutboundMessage) -> None:
        self.outbound.put_nowait(msg)
        self._check_room()

    async def consume_outbound(self) -> OutboundMessage:
        msg = await self.outbound.get()
        self._check_room()
        return msg

    @property
    def outbound_busy(self) -> int:
        """Outbound messages queued or being sent."""
        return self.outbound.qsize() + self._sending

    async def outbound_room(self) -> None:
        """Wait until fewer than ``OUTBOUND_ROOM`` messages are queued or being sent.

        For work that can wait. Before the channels start nothing is sent, so it waits
        for them: never await it in a step the start waits for.
        """
        while not self._outbound_room.is_set():
            await self._outbound_room.wait()

    def send_started(self) -> None:
        """The channel manager took a message off the queue to send it."""
        self._sending += 1
        self._check_room()

    def send_ended(self) -> None:
        """That message's send ended (sent, given up or cancelled)."""
        self._sending -= 1
        self._check_room()

    def _check_room(self) -> None:
        if self.outbound_busy < OUTBOUND_ROOM:
            self._outbound_room.set()
        else:
            self._outbound_room.clear()


def _storable(msg: InboundMessage) -> bool:
    # Only a message with a platform id is stored: the id is what recognises the platform's
    # redelivery, and only a platform redelivers. Without one (the console, web chat
    # paths that give none) nobody was promised anything and nothing would be resent; the
    # bot's own echoes are never a turn, so there is nothing to process later.
    return bool(msg.message_id) and not msg.from_bot
