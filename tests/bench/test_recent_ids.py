"""RecentIds, the bus's dedupe window (rewritten for speed; see docs/performance.md)."""

from __future__ import annotations

from gateway.bus import InboundMessage, MessageBus, PublishResult, RecentIds


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_second_sight_within_ttl_is_a_duplicate() -> None:
    clock = FakeClock()
    ids = RecentIds(ttl=10.0, maxsize=100, clock=clock)
    assert ids.seen(("feishu", "m1")) is False
    clock.now += 9.9
    assert ids.seen(("feishu", "m1")) is True
    # Same id on another channel is another message.
    assert ids.seen(("dingtalk", "m1")) is False


def test_expired_ids_are_forgotten_and_not_refreshed_by_a_duplicate() -> None:
    clock = FakeClock()
    ids = RecentIds(ttl=10.0, maxsize=100, clock=clock)
    ids.seen(("c", "a"))
    clock.now += 5
    ids.seen(("c", "b"))
    clock.now += 4
    assert ids.seen(("c", "a")) is True  # a duplicate does not extend the window
    clock.now += 1  # "a" is 10 s old now
    assert ids.seen(("c", "b")) is True
    assert len(ids) == 1
    assert ids.seen(("c", "a")) is False  # recorded again, with a fresh window
    clock.now += 9.9
    assert ids.seen(("c", "a")) is True


def test_size_is_bounded_oldest_first() -> None:
    clock = FakeClock()
    ids = RecentIds(ttl=3600.0, maxsize=3, clock=clock)
    for name in ("a", "b", "c", "d"):
        clock.now += 1
        assert ids.seen(("c", name)) is False
    assert len(ids) == 3
    assert ids.seen(("c", "d")) is True
    assert ids.seen(("c", "a")) is False  # evicted, so new again (and "b" goes)
    assert ids.seen(("c", "c")) is True


async def test_bus_drops_a_redelivered_message() -> None:
    bus = MessageBus(dedupe_ttl_seconds=60, dedupe_max=10)
    msg = InboundMessage(channel="feishu", chat_id="oc_1", sender_id="u", text="hi", message_id="m")
    assert await bus.publish_inbound(msg) is PublishResult.QUEUED
    assert await bus.publish_inbound(msg) is PublishResult.DUPLICATE
    assert bus.inbound.qsize() == 1
