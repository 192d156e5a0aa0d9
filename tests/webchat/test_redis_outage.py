"""Redis down and overloaded, through a real gateway (issue 13, items 3, 4 and 6).

The gateway reaches Redis through a TCP proxy the test stops and starts: an outage of this
gateway's Redis only (the Redis on this machine is shared with other tests).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
import structlog.testing

from config.settings import Settings
from gateway import texts
from gateway.app import build
from gateway.bus import InboundMessage
from gateway.confirm.model import ExecState, Status
from gateway.storage.backends import open_grant_store
from gateway.storage.confirmations import StoreUnavailableError
from gateway.storage.inbox import MemoryInbox
from gateway.storage.redis.confirmations import RedisConfirmationStore
from tests.confirm.records import make
from tests.fakes.tcp_proxy import TcpProxy
from tests.services import REDIS_URL
from tests.webchat.support import (
    base_url,
    eventually,
    make_settings,
    next_frame,
    order_exists,
    running_gateway,
)
from tests.webchat.test_rest import poll, say, wait_for_kind

pytestmark = pytest.mark.services


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def _through_proxy(tmp_path: Path, prefix: str, proxy: TcpProxy, **confirmation: Any) -> Settings:
    """Settings whose Redis store is reached through ``proxy`` (closing it cuts Redis off)."""
    url = urlsplit(REDIS_URL)._replace(netloc=proxy.url_host).geturl()
    return make_settings(
        tmp_path,
        confirmation={"store": "redis", "redis_url": url, "redis_prefix": prefix, **confirmation},
    )


async def _readyz(http: aiohttp.ClientSession) -> tuple[int, dict[str, Any]]:
    async with http.get("/readyz") as resp:
        body: dict[str, Any] = await resp.json()
        return resp.status, body


async def test_redis_down_fails_closed_and_everything_resumes_when_it_returns(
    tmp_path: Path, prefix: str, proxy: TcpProxy
) -> None:
    settings = _through_proxy(tmp_path, prefix, proxy)
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        status, body = await _readyz(http)
        assert (status, body["store"]) == (200, {"ready": True, "reason": None})

        await proxy.stop()  # Redis is gone for this gateway
        status, body = await _readyz(http)
        assert status == 503
        assert body["store"]["ready"] is False and "Redis" in body["store"]["reason"]
        async with http.get("/api/confirmations") as resp:
            assert resp.status == 503, await resp.text()
            assert "store is unavailable" in (await resp.json())["error"]

        # The inbox is in Redis too: not stored, so not accepted (invariant 9). The sender
        # (a platform redelivers by itself) is told to send it again.
        body = {"user": "alice", "text": "/sql DELETE FROM orders WHERE id = 3"}
        async with http.post("/api/chat/room/messages", json=body) as resp:
            assert resp.status == 503, await resp.text()
            assert resp.headers["Retry-After"] == "5"
        assert order_exists(settings.data_dir, 3)  # failed closed: nothing ran

        await proxy.start()  # Redis is back: no restart
        await eventually(lambda: _ready(http))
        await say(http, "room2", "alice", "/sql DELETE FROM orders WHERE id = 3")
        card = await wait_for_kind(http, "room2", "confirmation", "pending")
        await say(http, "room2", "alice", f"确认 {card['confirmation']['id']}")
        await wait_for_kind(http, "room2", "confirmation_update", "approved")
        await eventually(lambda: _gone(settings.data_dir, 3))


async def test_a_tab_is_told_when_its_message_cannot_be_stored_and_stays_open(
    tmp_path: Path, prefix: str, proxy: TcpProxy
) -> None:
    settings = _through_proxy(tmp_path, prefix, proxy)
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
        http.ws_connect("/ws?session=tab&user=alice") as ws,
    ):
        await next_frame(ws, lambda f: f["type"] == "hello")
        await proxy.stop()
        await ws.send_json({"type": "message", "text": "/sql SELECT 1"})
        error = await next_frame(ws, lambda f: f["type"] == "error")
        assert error["error"] == texts.STORE_UNAVAILABLE_MESSAGE
        await proxy.start()
        await ws.send_json({"type": "message", "text": "/sql SELECT 1"})  # sent again
        await next_frame(ws, lambda f: f["type"] == "message" and f["user"] is None)


async def test_redis_gone_after_a_message_was_stored_tells_the_chat(
    tmp_path: Path, prefix: str, proxy: TcpProxy
) -> None:
    # Stored before Redis went away (here: an inbox of this process's own, as a platform's
    # message is), the message reaches the intercept, which cannot tell a reply from a
    # request without the store: the chat is told, once the room can be written again.
    # (A web chat tab's own line is refused at once: its room is in Redis too, see above.)
    settings = _through_proxy(tmp_path, prefix, proxy)
    async with (
        await build(settings, inbox=MemoryInbox()) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        await proxy.stop()
        await gw.bus.publish_inbound(
            InboundMessage(
                channel="webchat",
                chat_id="room",
                sender_id="alice",
                text="/sql DELETE FROM orders WHERE id = 3",
                message_id="m1",
                is_group=True,
            )
        )
        assert order_exists(settings.data_dir, 3)  # failed closed: nothing ran
        await proxy.start()  # the refusal is sent again until its room takes it
        refusal = texts.STORE_UNAVAILABLE_MESSAGE

        async def told() -> bool:
            return any(m["text"] == refusal for m in (await poll(http, "room"))["messages"])

        await eventually(told)


async def _ready(http: aiohttp.ClientSession) -> bool:
    return (await _readyz(http))[0] == 200


async def _gone(data_dir: Path, order_id: int) -> bool:
    return not order_exists(data_dir, order_id)


async def test_a_full_pool_queues_callers_then_fails_closed(prefix: str) -> None:
    name = f"pool-{uuid.uuid4().hex[:8]}"
    store = await RedisConfirmationStore.from_url(
        REDIS_URL, prefix=prefix, max_connections=2, pool_timeout_seconds=5, client_name=name
    )
    try:
        # Backpressure: 300 concurrent writers on 2 connections wait their turn; none fails.
        await asyncio.gather(*(store.create(make(f"Q{n:03d}")) for n in range(300)))
        assert await store.count(Status.PENDING) == 300

        tight = await RedisConfirmationStore.from_url(
            REDIS_URL, prefix=prefix, max_connections=2, pool_timeout_seconds=0.2
        )
        try:
            async with tight.lifecycle_feed() as one, tight.lifecycle_feed() as two:
                readers = [asyncio.ensure_future(anext(f)) for f in (one, two)]
                try:
                    # Both connections sit in XREAD: the next caller waits 0.2 s, then is
                    # refused with the store's own error, not a MaxConnectionsError.
                    await eventually(lambda: _both_held(tight))
                    with pytest.raises(StoreUnavailableError):
                        await tight.create(make("LATE"))
                finally:
                    for r in readers:
                        r.cancel()
                    await asyncio.gather(*readers, return_exceptions=True)
            await tight.create(make("LATE"))  # connections back: it goes through
        finally:
            await tight.close()
    finally:
        await store.close()


async def _both_held(store: RedisConfirmationStore) -> bool:
    pool = store._redis.connection_pool
    return len(pool._in_use_connections) == 2  # type: ignore[attr-defined]


async def test_grants_share_the_bounded_pool(tmp_path: Path, prefix: str) -> None:
    # The grant store had a client of its own, with redis-py's pool of 100: at 500
    # concurrent chats its reads failed with MaxConnectionsError (issue 13). Now it queues
    # for the confirmations' bounded pool like every other store call.
    settings = make_settings(
        tmp_path,
        confirmation={"store": "redis", "redis_url": REDIS_URL, "redis_prefix": prefix},
    )
    store = await RedisConfirmationStore.from_url(
        REDIS_URL, prefix=prefix, max_connections=2, pool_timeout_seconds=30
    )
    try:
        grants = await open_grant_store(settings, store)
        reads = await asyncio.gather(*(grants.live(0.0) for _ in range(300)))
        assert reads == [[]] * 300
        await grants.close()
        assert await store.unavailable() is None  # the shared client is still open
    finally:
        await store.close()


async def test_a_stop_closes_the_shared_client_last(tmp_path: Path, prefix: str) -> None:
    # The confirmations store closed the Redis client it shares before the web chat rooms
    # stopped following their feed: at every stop the rooms' reader logged a reconnect,
    # and could leave a connection open.
    settings = make_settings(
        tmp_path,
        confirmation={"store": "redis", "redis_url": REDIS_URL, "redis_prefix": prefix},
    )
    gw = await build(settings)
    await gw.start()
    async with aiohttp.ClientSession(base_url=base_url(gw)) as http:
        await say(http, "room", "alice", "/sql SELECT 1")
        await wait_for_kind(http, "room", "text")
    with structlog.testing.capture_logs() as logs:
        await gw.stop()
    assert [e for e in logs if e["log_level"] in ("warning", "error")] == []


async def test_stop_with_redis_down_returns_and_leaves_the_call_to_the_next_start(
    tmp_path: Path, prefix: str, proxy: TcpProxy
) -> None:
    # gateway.stop() raised when the store was gone at stop time: channels and the HTTP
    # server stayed up and SIGTERM did not exit 0. Now each step that needs the store says
    # so in one line, the rest of the stop runs, and nothing is approved or run: the call
    # stays pending, owned by the stopped instance, for the next start to adopt.
    lease = 15.0
    settings = _through_proxy(tmp_path, prefix, proxy, lease_seconds=lease)
    gw = await build(settings)
    await gw.start()
    async with aiohttp.ClientSession(base_url=base_url(gw)) as http:
        await say(http, "room", "alice", "/sql DELETE FROM orders WHERE id = 3")
        card = await wait_for_kind(http, "room", "confirmation", "pending")
    cid = card["confirmation"]["id"]
    stopped_instance = gw.confirmations.instance.id

    await proxy.stop()
    with structlog.testing.capture_logs() as logs:
        await gw.stop()  # returns, does not raise
    assert gw.stopped.is_set() and not gw.ready
    down = [e for e in logs if e["event"] == "confirm.stop_store_unavailable"]
    assert [e["step"] for e in down] == ["cancel_pending", "interrupt_running", "leave"], logs
    assert all("Redis" in e["error"] for e in down)
    assert "adopt" in down[0]["meaning"]
    assert gw.http is not None and gw.http.url  # closed below: nothing answers there
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession(base_url=base_url(gw)) as http:
            await poll(http, "room")

    await proxy.start()  # Redis is back
    store = await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix)
    try:
        left = await store.get(cid)
        assert left is not None
        assert left.status is Status.PENDING and left.owner == stopped_instance
        assert left.execution.state is ExecState.WAITING
    finally:
        await store.close()
    assert order_exists(settings.data_dir, 3)  # nothing ran

    # The next start: the stopped instance's heartbeat could not be removed, so it is
    # judged dead once older than the lease (a clock one lease ahead), and its call adopted:
    # the chat sees the prompt again. Stopped with Redis up, the call is cancelled.
    later = await build(settings, clock=lambda: time.time() + lease + 1)
    async with later, aiohttp.ClientSession(base_url=base_url(later)) as http:
        # The room is kept in Redis: the prompt shown again after the first one.
        async def shown_again() -> dict[str, Any] | None:
            lines = (await poll(http, "room", after=card["seq"]))["messages"]
            return next((m for m in lines if m["kind"] == "confirmation"), None)

        again = await eventually(shown_again)
        assert again["confirmation"]["id"] == cid
    store = await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix)
    try:
        final = await store.get(cid)
        assert final is not None and final.status is Status.CANCELLED
        assert final.execution.state is not ExecState.SUCCEEDED
    finally:
        await store.close()
    assert order_exists(settings.data_dir, 3)
