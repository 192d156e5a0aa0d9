"""The Redis inbox beyond the contract: its keys' lifetimes, claims only after the lease,
Redis down, and adoption through real gateways on real Redis (issue 13, item 6).

A dead replica is what ``kill -9`` leaves in Redis: its messages pending under its consumer
name and a heartbeat that has gone stale. tests/process/test_inbox_replicas.py does the
same with real processes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit

import pytest
from redis.asyncio import Redis

from config.settings import Settings
from gateway.app import build
from gateway.bus import InboundMessage, PublishResult
from gateway.confirm.model import Instance
from gateway.storage.confirmations import StoreUnavailableError
from gateway.storage.inbox import KEEP_TAKEN_SECONDS
from gateway.storage.redis.confirmations import RedisConfirmationStore
from gateway.storage.redis.inbox import GROUP, RedisInbox
from tests.fakes.tcp_proxy import TcpProxy
from tests.services import REDIS_URL
from tests.support import RecordingChannel

pytestmark = pytest.mark.services

LEASE = 1.0


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    client = Redis.from_url(REDIS_URL)
    yield client
    await client.aclose()


def said(text: str, message_id: str, *, chat: str = "c1") -> InboundMessage:
    return InboundMessage(
        channel="rec", chat_id=chat, sender_id="alice", text=text, message_id=message_id
    )


async def inbox_of(redis: Redis, prefix: str, owner: str, idle: float = 0) -> RedisInbox:
    return await RedisInbox.open(redis, prefix=prefix, owner=owner, claim_idle_seconds=idle)


async def pending_of(redis: Redis, prefix: str, consumer: str) -> list[int]:
    """Idle milliseconds of each message pending under ``consumer``."""
    rows = await redis.xpending_range(f"{prefix}:inbox", GROUP, "-", "+", 100, consumer)
    return [int(r["time_since_delivered"]) for r in rows]


async def test_keys_live_a_day_from_put_and_from_taken_and_the_stream_keeps_only_untaken(
    redis: Redis, prefix: str
) -> None:
    inbox = await inbox_of(redis, prefix, "A")
    await inbox.put(said("hi", "m1"))
    await inbox.put(said("hi", "m2"))
    seen = f"{prefix}:inbox-seen:rec:m1"
    assert KEEP_TAKEN_SECONDS - 60 < await redis.ttl(seen) <= KEEP_TAKEN_SECONDS
    at = time.time() - 3600
    await inbox.taken("rec", "m1", at=at)
    assert await redis.pexpiretime(seen) == pytest.approx((at + KEEP_TAKEN_SECONDS) * 1000, abs=2)
    assert await redis.xlen(f"{prefix}:inbox") == 1  # m1 acknowledged and deleted
    assert await inbox.put(said("hi", "m1")) is False
    assert await inbox.purge(time.time()) == 0  # TTLs forget, not purge


async def test_a_dead_owner_is_claimed_only_after_a_lease_idle_then_forgotten(
    redis: Redis, prefix: str
) -> None:
    dead = await inbox_of(redis, prefix, "dead")
    await dead.put(said("hi", "m1"))
    patient = await inbox_of(redis, prefix, "B", idle=3600)
    # Delivered a moment ago: a replica that started after the adopter listed the
    # instances looks dead to it; the lease of idleness keeps its messages its own.
    assert await patient.adopt(alive=()) == []
    assert len(await pending_of(redis, prefix, "dead")) == 1
    eager = await inbox_of(redis, prefix, "C")
    assert [m.message_id for m in await eager.adopt(alive=())] == ["m1"]
    consumers = {c["name"] for c in await redis.xinfo_consumers(f"{prefix}:inbox", GROUP)}
    assert consumers == {b"C"}  # the dead consumer holds nothing more: forgotten


async def test_the_stream_gone_is_made_again(redis: Redis, prefix: str) -> None:
    inbox = await inbox_of(redis, prefix, "A")
    await inbox.put(said("hi", "m1"))
    await redis.delete(f"{prefix}:inbox")  # FLUSHDB, or an operator's DEL
    assert await inbox.adopt(alive=()) == []
    assert await inbox.put(said("hi", "m2")) is True
    assert [m.message_id for m in await inbox.untaken()] == ["m2"]
    await inbox.taken("rec", "m2")
    assert await inbox.untaken() == []


@pytest.fixture
async def through_proxy(proxy: TcpProxy, prefix: str) -> AsyncIterator[RedisConfirmationStore]:
    """A store whose client reaches the shared Redis through ``proxy``."""
    parts = urlsplit(REDIS_URL)
    store = await RedisConfirmationStore.from_url(
        parts._replace(netloc=proxy.url_host).geturl(), prefix=prefix
    )
    yield store
    await store.close()


async def test_redis_down_refuses_to_store(
    proxy: TcpProxy, through_proxy: RedisConfirmationStore, prefix: str
) -> None:
    """Redis gone before the command went out, and still gone when the put asks what
    became of it: the error stands, nothing was stored, and the message is welcome once
    Redis is back."""
    inbox = await inbox_of(through_proxy.client, prefix, "A")
    await proxy.stop()
    with pytest.raises(StoreUnavailableError):
        await inbox.put(said("hi", "m1"))
    await proxy.start()
    assert await inbox.untaken() == []
    assert await inbox.put(said("hi", "m1")) is True


async def test_a_put_whose_reply_was_lost_is_known_stored_and_a_redelivery_is_not(
    proxy: TcpProxy, through_proxy: RedisConfirmationStore, prefix: str
) -> None:
    """The write happened, the connection broke before its reply: the put asks Redis and
    says stored (the message is processed here, not told "not stored" and sent again);
    a later redelivery of it is a duplicate. Found by the long chaos run: a web chat POST
    answered 503, its message sat in the live replica's pending list, the client sent it
    again, and one message made two calls."""
    inbox = await inbox_of(through_proxy.client, prefix, "A")
    proxy.lose_next_reply()
    assert await inbox.put(said("hi", "m1")) is True
    assert proxy.replies_lost == 1
    assert [m.message_id for m in await inbox.untaken()] == ["m1"]
    assert await inbox.put(said("hi", "m1")) is False  # the redelivery
    # Another put's entry (a redelivery that won) is not this put's: a duplicate.
    other = await inbox_of(through_proxy.client, prefix, "B")
    await other.put(said("hi", "m2"))
    proxy.lose_next_reply()
    assert await inbox.put(said("hi", "m2")) is False


async def test_a_put_redis_executes_after_it_gave_up_stores_nothing(
    proxy: TcpProxy, prefix: str, redis: Redis
) -> None:
    """Redis paused past the client's read timeout: the put gave up unanswered, and Redis
    executes it when the pause ends. Said "not stored", it must not be: the late put
    refuses itself, the seen key stays free, and the platform's redelivery is stored (the
    long chaos run: two calls from one message, each behind a Redis pause)."""
    url = urlsplit(REDIS_URL)._replace(netloc=proxy.url_host).geturl()
    store = await RedisConfirmationStore.from_url(url, prefix=prefix, socket_timeout=0.3)
    try:
        inbox = await inbox_of(store.client, prefix, "A")
        proxy.hold_next_command(b"held-back")
        with pytest.raises(StoreUnavailableError):
            await inbox.put(said("held-back", "m1"))
        assert proxy.held.is_set()
        given_up = [k async for k in redis.scan_iter(f"{prefix}:inbox-given-up:*")]
        assert len(given_up) == 1
        proxy.release()  # the pause ends: Redis executes the put now
        await asyncio.wait_for(proxy.held_answered.wait(), 10)
        assert await redis.exists(f"{prefix}:inbox-seen:rec:m1") == 0
        assert await inbox.untaken() == []
        assert await inbox.put(said("held-back", "m1")) is True  # the redelivery
        assert [m.message_id for m in await inbox.untaken()] == ["m1"]
    finally:
        await store.close()


# ---------------------------------------------------------------------- through gateways


@pytest.fixture
def redis_settings(make_settings: Callable[..., Settings], prefix: str) -> Settings:
    return make_settings(
        confirmation={
            "store": "redis",
            "redis_url": REDIS_URL,
            "redis_prefix": prefix,
            "lease_seconds": LEASE,
        }
    )


async def heartbeat(prefix: str, instance_id: str, *, seen_at: float) -> None:
    store = await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix)
    try:
        instance = Instance(id=instance_id, pid=1, host="h", started_at=seen_at, seen_at=seen_at)
        await store.heartbeat(instance, lease=LEASE)
    finally:
        await store.close()


async def test_a_dead_replicas_acknowledged_messages_are_answered_once_by_a_live_one(
    redis_settings: Settings, redis: Redis, prefix: str
) -> None:
    dead = await inbox_of(redis, prefix, "dead-1")
    for i in (1, 2):
        await dead.put(said(f"/m{i}", f"m{i}"))
    await heartbeat(prefix, "dead-1", seen_at=time.time() - 60)  # killed a minute ago
    rec = RecordingChannel()
    gw = await build(redis_settings, serve_http=False)
    gw.channels.add(rec)
    async with gw:
        await rec.wait_for(lambda m: m.reply_to == "m2")
        # Its platform redelivers one of them late: stored, so a duplicate.
        assert await gw.bus.publish_inbound(said("/m1", "m1")) is PublishResult.DUPLICATE
        await gw.bus.publish_inbound(said("/m3", "m3"))
        await rec.wait_for(lambda m: m.reply_to == "m3")
        assert [m.reply_to for m in rec.sent] == ["m1", "m2", "m3"]
        assert await dead.untaken() == []


async def test_a_live_replicas_messages_stay_its_own_however_long_it_thinks(
    redis_settings: Settings, redis: Redis, prefix: str
) -> None:
    live = await inbox_of(redis, prefix, "live-1")
    await live.put(said("/m1", "m1"))
    await heartbeat(prefix, "live-1", seen_at=time.time() + 3600)  # beats all along
    gw = await build(redis_settings, serve_http=False)
    async with gw:
        # Idle past the lease (a model that thinks long), and still not adopted.
        idle = await pending_of(redis, prefix, "live-1")
        while idle[0] < 2 * LEASE * 1000:
            await gw.confirmations.adopt_dead()
            await asyncio.sleep(0.05)
            idle = await pending_of(redis, prefix, "live-1")
        await gw.confirmations.adopt_dead()
        assert len(await pending_of(redis, prefix, "live-1")) == 1
        assert gw.bus.inbound.empty()
