"""Outbound delivery: retry with backoff, give up cleanly, keep per-chat order."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from channels.base import Channel, ChannelSendError
from channels.manager import ChannelManager
from gateway.bus import OUTBOUND_ROOM, MessageBus, OutboundMessage


class FlakyChannel(Channel):
    name: ClassVar[str] = "flaky"

    def __init__(self, failures: int, *, retryable: bool = True) -> None:
        self.failures = failures
        self.retryable = retryable
        self.attempts = 0
        self.delivered: list[str] = []

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def send(self, msg: OutboundMessage) -> None:
        self.attempts += 1
        if self.failures > 0:
            self.failures -= 1
            raise ChannelSendError("rate limited", retryable=self.retryable)
        self.delivered.append(msg.text)


async def run(channel: FlakyChannel, texts: list[str]) -> list[tuple[str, str]]:
    bus = MessageBus()
    manager = ChannelManager(bus=bus, max_attempts=3, backoff_initial=0.01, backoff_max=0.02)
    failed: list[tuple[str, str]] = []
    manager.on_send_failure(lambda ch, msg, exc: failed.append((ch, msg.text)))
    manager.add(channel)
    await manager.start()
    for t in texts:
        await bus.publish_outbound(OutboundMessage(channel="flaky", chat_id="c", text=t))
    await manager.stop(drain_timeout=5)
    return failed


async def test_retries_then_delivers() -> None:
    ch = FlakyChannel(failures=2)
    assert await run(ch, ["hi"]) == []
    assert ch.delivered == ["hi"]
    assert ch.attempts == 3


async def test_gives_up_and_reports() -> None:
    ch = FlakyChannel(failures=10)
    assert await run(ch, ["lost?"]) == [("flaky", "lost?")]
    assert ch.attempts == 3


async def test_non_retryable_is_not_retried() -> None:
    ch = FlakyChannel(failures=1, retryable=False)
    assert await run(ch, ["x", "y"]) == [("flaky", "x")]
    assert ch.attempts == 2
    assert ch.delivered == ["y"]


async def test_order_kept_per_chat() -> None:
    ch = FlakyChannel(failures=1)
    texts = [f"m{i}" for i in range(20)]
    await run(ch, texts)
    assert ch.delivered == texts


async def test_unknown_channel_is_reported_not_crashing() -> None:
    bus = MessageBus()
    manager = ChannelManager(bus=bus)
    failed: list[str] = []
    reported = asyncio.Event()

    def on_failure(channel: str, msg: OutboundMessage, exc: BaseException) -> None:
        failed.append(channel)
        reported.set()

    manager.on_send_failure(on_failure)
    delivered = FlakyChannel(0)
    manager.add(delivered)
    await manager.start()
    await bus.publish_outbound(OutboundMessage(channel="nowhere", chat_id="c", text="?"))
    await asyncio.wait_for(reported.wait(), 5)
    # The dispatcher lives on: the next message is delivered.
    await bus.publish_outbound(OutboundMessage(channel="flaky", chat_id="c", text="next"))
    await manager.stop()
    assert failed == ["nowhere"]
    assert delivered.delivered == ["next"]


class GatedChannel(Channel):
    """Holds each send until the test lets it go, to see which sends overlap."""

    name: ClassVar[str] = "gated"

    def __init__(self) -> None:
        self.started: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.arrived = asyncio.Condition()

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def send(self, msg: OutboundMessage) -> None:
        gate = self.gates.setdefault(msg.text, asyncio.Event())
        async with self.arrived:
            self.started.append(msg.text)
            self.arrived.notify_all()
        await gate.wait()

    async def wait_started(self, *texts: str) -> None:
        async with self.arrived:
            await asyncio.wait_for(
                self.arrived.wait_for(lambda: all(t in self.started for t in texts)), 5
            )


async def test_a_slow_chat_does_not_hold_up_another_chat() -> None:
    bus = MessageBus()
    manager = ChannelManager(bus=bus)
    channel = GatedChannel()
    manager.add(channel)
    await manager.start()
    await bus.publish_outbound(OutboundMessage(channel="gated", chat_id="a", text="a1"))
    await bus.publish_outbound(OutboundMessage(channel="gated", chat_id="a", text="a2"))
    await bus.publish_outbound(OutboundMessage(channel="gated", chat_id="b", text="b1"))
    # b1 starts while a1 is still being sent; a2 waits for a1.
    await channel.wait_started("a1", "b1")
    assert "a2" not in channel.started
    channel.gates.setdefault("a1", asyncio.Event()).set()
    await channel.wait_started("a2")
    for gate in ("a2", "b1"):
        channel.gates.setdefault(gate, asyncio.Event()).set()
    assert await manager.drain(timeout=5)
    await manager.stop()
    assert channel.started.index("a1") < channel.started.index("a2")


class HeldChannel(Channel):
    """Every send waits for ``go``; ``all_sending`` is set once OUTBOUND_ROOM sends began."""

    name: ClassVar[str] = "held"

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.all_sending = asyncio.Event()
        self.sending = 0

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def send(self, msg: OutboundMessage) -> None:
        self.sending += 1
        if self.sending == OUTBOUND_ROOM:
            self.all_sending.set()
        await self.go.wait()


async def test_work_that_can_wait_waits_until_sends_end() -> None:
    # The prompts a restart shows again (100,000 after a crash) wait like this: behind
    # what is being sent, never holding up the answers to new messages.
    bus = MessageBus()
    manager = ChannelManager(bus=bus)
    channel = HeldChannel()
    manager.add(channel)
    for i in range(OUTBOUND_ROOM):  # each in its own chat: all sent at once
        await bus.publish_outbound(OutboundMessage(channel="held", chat_id=f"c{i}", text="x"))
    waiting = asyncio.create_task(bus.outbound_room())  # nothing sends before the start
    await manager.start()
    await channel.all_sending.wait()  # all taken off the queue, none sent yet
    assert bus.outbound.empty() and bus.outbound_busy == OUTBOUND_ROOM
    assert not waiting.done()
    channel.go.set()
    await waiting
    await manager.stop(drain_timeout=5)
    assert bus.outbound_busy == 0
