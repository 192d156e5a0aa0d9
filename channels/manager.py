"""Starts channels and delivers outbound messages through them, with retry and backoff."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog
from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from channels.base import Channel, ChannelSendError
from gateway.bus import MessageBus, OutboundMessage

log = structlog.get_logger(__name__)

SendFailureListener = Callable[[str, OutboundMessage, BaseException], None]


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, ChannelSendError):
        return exc.retryable
    return isinstance(exc, OSError | asyncio.TimeoutError)


class ChannelManager:
    """Owns the enabled channels and the outbound dispatcher."""

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
        self._dispatcher: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._max_attempts = max_attempts
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._failure_listeners: list[SendFailureListener] = []
        self._started: list[Channel] = []
        # Messages to one chat go out in order: one sender task per chat.
        self._chat_queues: dict[tuple[str, str], asyncio.Queue[OutboundMessage]] = {}

    def add(self, channel: Channel) -> None:
        if channel.name in self.channels:
            raise ValueError(f"channel {channel.name!r} added twice")
        self.channels[channel.name] = channel

    def on_send_failure(self, listener: SendFailureListener) -> None:
        self._failure_listeners.append(listener)

    @property
    def ready(self) -> bool:
        return bool(self._started) and all(c.ready for c in self._started)

    async def start(self) -> None:
        """Start every channel; if one fails, stop the ones already started and re-raise."""
        for channel in self.channels.values():
            try:
                await channel.start()
            except BaseException:
                log.error("channel.start_failed", channel=channel.name)
                await self._stop_channels()
                raise
            self._started.append(channel)
            log.info("channel.started", channel=channel.name)
        self._dispatcher = asyncio.create_task(self._dispatch(), name="outbound-dispatch")

    async def _dispatch(self) -> None:
        while True:
            msg = await self.bus.consume_outbound()
            key = (msg.channel, msg.chat_id)
            queue = self._chat_queues.get(key)
            if queue is None:
                queue = self._chat_queues[key] = asyncio.Queue()
                queue.put_nowait(msg)
                task = asyncio.create_task(self._drain_chat(key, queue), name=f"send-{key}")
                self._inflight.add(task)
                task.add_done_callback(self._inflight.discard)
            else:
                queue.put_nowait(msg)

    async def _drain_chat(
        self, key: tuple[str, str], queue: asyncio.Queue[OutboundMessage]
    ) -> None:
        try:
            while not queue.empty():
                await self._send_one(queue.get_nowait())
        finally:
            self._chat_queues.pop(key, None)

    async def _send_one(self, msg: OutboundMessage) -> None:
        channel = self.channels.get(msg.channel)
        if channel is None:
            log.warning("outbound.no_channel", channel=msg.channel, chat_id=msg.chat_id)
            self._failed(msg.channel, msg, LookupError(f"no channel {msg.channel}"))
            return
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self._max_attempts),
                wait=wait_exponential_jitter(
                    multiplier=self._backoff_initial,
                    max=self._backoff_max,
                    jitter=self._backoff_initial,
                ),
                retry=retry_if_exception(_retryable),
                reraise=False,
            ):
                with attempt:
                    await channel.send(msg)
        except RetryError as exc:
            cause = exc.last_attempt.exception() or exc
            log.error(
                "outbound.send_failed",
                channel=msg.channel,
                chat_id=msg.chat_id,
                kind=msg.kind.value,
                error=str(cause),
                attempts=self._max_attempts,
            )
            self._failed(msg.channel, msg, cause)
        except Exception as exc:
            log.error(
                "outbound.send_failed",
                channel=msg.channel,
                chat_id=msg.chat_id,
                kind=msg.kind.value,
                error=f"{type(exc).__name__}: {exc}",
            )
            self._failed(msg.channel, msg, exc)

    def _failed(self, channel: str, msg: OutboundMessage, exc: BaseException) -> None:
        for listener in self._failure_listeners:
            listener(channel, msg, exc)

    async def drain(self, timeout: float = 5.0) -> None:
        """Send what is queued (shutdown): bounded by ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            if self.bus.outbound.empty() and not self._inflight:
                return
            await asyncio.sleep(0.02)
        log.warning("outbound.drain_timeout", left=self.bus.outbound.qsize())

    async def stop(self, drain_timeout: float = 5.0) -> None:
        if self._dispatcher is not None:
            await self.drain(drain_timeout)
            self._dispatcher.cancel()
            await asyncio.gather(self._dispatcher, return_exceptions=True)
            self._dispatcher = None
        for task in list(self._inflight):
            task.cancel()
        await asyncio.gather(*self._inflight, return_exceptions=True)
        await self._stop_channels()

    async def _stop_channels(self) -> None:
        for channel in reversed(self._started):
            try:
                await channel.stop()
            except Exception:
                log.exception("channel.stop_failed", channel=channel.name)
        self._started.clear()

    def status(self) -> list[dict[str, Any]]:
        return [c.status() for c in self.channels.values()]
