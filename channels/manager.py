"""Starts channels and delivers outbound messages through them, with retry and backoff."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

from channels.base import Channel, ChannelSendError
from config.settings import ConfigError
from gateway.bus import MessageBus, OutboundMessage
from gateway.runtime import BackgroundTasks, KeyedSerial, after_failure_retrying

log = structlog.get_logger(__name__)

SendFailureListener = Callable[[str, OutboundMessage, BaseException], None]
SentListener = Callable[[str, OutboundMessage, float], None]


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, ChannelSendError):
        return exc.retryable
    return isinstance(exc, OSError | asyncio.TimeoutError)


class ChannelManager:
    """Owns the enabled channels and the outbound dispatcher.

    Each outbound message is sent by a task of its own; messages to one chat go out one at
    a time, in the order they were queued (``KeyedSerial`` per channel and chat), while
    other chats go on in parallel.
    """

    def __init__(
        self,
        *,
        bus: MessageBus,
        max_attempts: int = 4,
        backoff_initial: float = 0.5,
        backoff_max: float = 10.0,
    ) -> None:
        self.bus = bus
        self.channels: dict[str, Channel] = {}
        self._max_attempts = max_attempts
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._failure_listeners: list[SendFailureListener] = []
        self._sent_listeners: list[SentListener] = []
        self._started: list[Channel] = []
        self._dispatcher = BackgroundTasks("channels.dispatch")
        self._sends = BackgroundTasks("channels.send")
        self._per_chat = KeyedSerial()

    def add(self, channel: Channel) -> None:
        if channel.name in self.channels:
            raise ValueError(f"channel {channel.name!r} added twice")
        self.channels[channel.name] = channel

    def on_send_failure(self, listener: SendFailureListener) -> None:
        self._failure_listeners.append(listener)

    def on_sent(self, listener: SentListener) -> None:
        """Called with (channel, message, seconds including retries) after each delivery."""
        self._sent_listeners.append(listener)

    @property
    def ready(self) -> bool:
        return bool(self._started) and all(c.ready for c in self._started)

    async def start(self) -> None:
        """Start every channel; if one fails, stop the ones already started and re-raise."""
        for channel in self.channels.values():
            try:
                await channel.start()
            except ConfigError:
                # Says what to fix; whoever reports configuration errors shows it once.
                await self._stop_channels()
                raise
            except BaseException:
                log.error("channel.start_failed", channel=channel.name)
                await self._stop_channels()
                raise
            self._started.append(channel)
            log.info("channel.started", channel=channel.name)
        self._dispatcher.spawn(self._dispatch(), name="outbound-dispatch")

    async def _dispatch(self) -> None:
        while True:
            self._deliver(await self.bus.consume_outbound())

    def _deliver(self, msg: OutboundMessage) -> None:
        # No await between taking a message off the queue and queueing for its chat's
        # turn: that is what keeps one chat's messages in order.
        self.bus.send_started()
        task = self._sends.spawn(self._send_in_turn(msg), name=f"send-{msg.channel}-{msg.chat_id}")
        # A callback, not a finally: a task cancelled before its first step runs none.
        task.add_done_callback(lambda _: self.bus.send_ended())

    async def _send_in_turn(self, msg: OutboundMessage) -> None:
        async with self._per_chat.hold(f"{msg.channel}\x00{msg.chat_id}"):
            await self._send_one(msg)

    async def _send_one(self, msg: OutboundMessage) -> None:
        channel = self.channels.get(msg.channel)
        if channel is None:
            log.warning("outbound.no_channel", channel=msg.channel, chat_id=msg.chat_id)
            self._failed(msg.channel, msg, LookupError(f"no channel {msg.channel}"))
            return
        attempts = 0
        started = time.monotonic()

        async def send() -> None:
            nonlocal attempts
            attempts += 1
            await channel.send(msg)

        try:
            await after_failure_retrying(
                send,
                attempts=self._max_attempts,
                initial=self._backoff_initial,
                maximum=self._backoff_max,
                retry_on=_retryable,
            )
        except Exception as exc:  # a failed send is reported, never the dispatcher's end
            log.error(
                "outbound.send_failed",
                channel=msg.channel,
                chat_id=msg.chat_id,
                kind=msg.kind.value,
                error=f"{type(exc).__name__}: {exc}",
                attempts=attempts,
            )
            self._failed(msg.channel, msg, exc)
            return
        for listener in self._sent_listeners:
            listener(msg.channel, msg, time.monotonic() - started)

    def _failed(self, channel: str, msg: OutboundMessage, exc: BaseException) -> None:
        for listener in self._failure_listeners:
            listener(channel, msg, exc)

    async def drain(self, timeout: float = 5.0) -> bool:
        """Send what is queued (shutdown), for at most ``timeout``; True when all went out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            while not self.bus.outbound.empty():
                self._deliver(self.bus.outbound.get_nowait())
            if not await self._sends.drain(max(0.0, deadline - loop.time())):
                log.warning("outbound.drain_timeout", left=len(self._sends))
                return False
            if self.bus.outbound.empty():
                return True

    async def stop(self, drain_timeout: float = 5.0) -> None:
        if len(self._dispatcher):
            await self.drain(drain_timeout)
            await self._dispatcher.cancel()
        await self._sends.cancel()
        await self._stop_channels()

    async def _stop_channels(self) -> None:
        for channel in reversed(self._started):
            try:
                await channel.stop()
            except Exception:  # one channel's failed stop must not keep the others running
                log.exception("channel.stop_failed", channel=channel.name)
        self._started.clear()

    def status(self) -> list[dict[str, Any]]:
        return [c.status() for c in self.channels.values()]
