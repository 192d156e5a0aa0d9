"""The bus drops platform redeliveries (Feishu and DingTalk redeliver unacknowledged events)."""

from __future__ import annotations

from gateway.bus import InboundMessage, MessageBus, PublishResult


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def message(message_id: str, *, channel: str = "feishu") -> InboundMessage:
    return InboundMessage(
        channel=channel, chat_id="oc_1", sender_id="u", text="hi", message_id=message_id
    )


async def test_a_redelivered_message_is_dropped() -> None:
    bus = MessageBus(dedupe_ttl_seconds=60, dedupe_max=10)
    assert await bus.publish_inbound(message("m")) is PublishResult.QUEUED
    assert await bus.publish_inbound(message("m")) is PublishResult.DUPLICATE
    # The same id on another channel is another message.
    assert await bus.publish_inbound(message("m", channel="dingtalk")) is PublishResult.QUEUED
    assert bus.inbound.qsize() == 2


async def test_the_window_counts_from_the_first_sighting() -> None:
    clock = FakeClock()
    bus = MessageBus(dedupe_ttl_seconds=10, dedupe_max=100, clock=clock)
    await bus.publish_inbound(message("a"))
    clock.now += 9
    assert await bus.publish_inbound(message("a")) is PublishResult.DUPLICATE
    clock.now += 1  # 10 s after the first sighting: a redelivery no longer
    assert await bus.publish_inbound(message("a")) is PublishResult.QUEUED
    clock.now += 9.9
    assert await bus.publish_inbound(message("a")) is PublishResult.DUPLICATE


async def test_the_window_is_bounded_oldest_first() -> None:
    clock = FakeClock()
    bus = MessageBus(dedupe_ttl_seconds=3600, dedupe_max=3, clock=clock)
    for name in ("a", "b", "c", "d"):
        clock.now += 1
        assert await bus.publish_inbound(message(name)) is PublishResult.QUEUED
    assert await bus.publish_inbound(message("d")) is PublishResult.DUPLICATE
    assert await bus.publish_inbound(message("c")) is PublishResult.DUPLICATE
    assert await bus.publish_inbound(message("a")) is PublishResult.QUEUED  # forgotten


async def test_messages_without_an_id_are_never_duplicates() -> None:
    bus = MessageBus()
    msg = InboundMessage(channel="console", chat_id="c", sender_id="u", text="hi")
    assert await bus.publish_inbound(msg) is PublishResult.QUEUED
    assert await bus.publish_inbound(msg) is PublishResult.QUEUED
