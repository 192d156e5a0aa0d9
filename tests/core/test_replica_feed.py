"""The cross-replica finished feed survives disconnects (issue 13, item 2).

One ``CLIENT KILL`` used to end the follower for good: from then on another replica's
decision reached the waiting turn only at its deadline. Now the feed reconnects and reads on
from the last stream id it gave out, catching up on what finished while it was away.
"""

from __future__ import annotations

import asyncio
import uuid
from urllib.parse import urlsplit

import pytest
from redis.asyncio import Redis

from gateway.confirm.model import Status
from gateway.storage.redis.confirmations import RedisConfirmationStore
from tests.confirm.records import T0, make
from tests.core.harness import Harness
from tests.fakes.tcp_proxy import TcpProxy
from tests.services import REDIS_URL

# The turn's own deadline: a wake that waited for it would take this long.
DEADLINE = 60.0

pytestmark = pytest.mark.services


def _via(proxy: TcpProxy) -> str:
    parts = urlsplit(REDIS_URL)
    return parts._replace(netloc=proxy.url_host).geturl()


async def _kill_clients(name: str) -> int:
    """CLIENT KILL every connection named ``name`` (this test's replica only: the Redis is
    shared with other tests)."""
    admin = Redis.from_url(REDIS_URL)
    try:
        killed = 0
        for client in await admin.client_list():
            if client.get("name") == name:
                killed += int(await admin.execute_command("CLIENT", "KILL", "ID", client["id"]))
        return killed
    finally:
        await admin.aclose()


async def _wait_reading(name: str) -> None:
    admin = Redis.from_url(REDIS_URL)
    try:
        async with asyncio.timeout(10):
            while not any(
                c.get("name") == name and c.get("cmd") == "xread" for c in await admin.client_list()
            ):
                await asyncio.sleep(0.02)
    finally:
        await admin.aclose()


async def test_the_feed_catches_up_on_what_finished_while_it_was_away(prefix: str) -> None:
    parts = urlsplit(REDIS_URL)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    await proxy.start()
    away = await RedisConfirmationStore.from_url(_via(proxy), prefix=prefix)
    deciding = await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix)
    try:
        for cid in ("GAP1", "GAP2", "BACK"):
            await deciding.create(make(cid))
        async with away.lifecycle_feed() as feed:
            first = asyncio.ensure_future(anext(feed))  # reading, blocked in XREAD
            await proxy.stop()  # Redis is gone for this replica
            for cid in ("GAP1", "GAP2"):
                await deciding.finish(cid, Status.CANCELLED, by=None, via="s", reason=None, now=T0)
            assert not first.done()
            await proxy.start()
            async with asyncio.timeout(10):
                got = [(await first).id, (await anext(feed)).id]
            assert got == ["GAP1", "GAP2"]
            await deciding.finish("BACK", Status.CANCELLED, by=None, via="s", reason=None, now=T0)
            async with asyncio.timeout(10):
                assert (await anext(feed)).id == "BACK"
    finally:
        await away.close()
        await deciding.close()
        await proxy.stop()


async def test_client_kill_then_a_cross_replica_approval_still_reaches_the_asker(
    prefix: str,
) -> None:
    name = f"replica-a-{uuid.uuid4().hex[:8]}"
    store_a = await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix, client_name=name)
    store_b = await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix)
    a, b = Harness(store=store_a, timeout=DEADLINE), Harness(store=store_b, timeout=DEADLINE)
    await a.service.recover()
    await b.service.recover()
    try:
        await _wait_reading(name)  # A's follower blocks in XREAD: the kill hits it there
        assert await _kill_clients(name) >= 1
        seen_at_a = a.events("resolved")  # what A's live views hear
        _, conf = await a.ask()
        await b.reply("确认")  # the platform delivered the reply to replica B
        # Well before the deadline: A heard it through the feed, read again after the kill.
        async with asyncio.timeout(DEADLINE / 6):
            final = await seen_at_a.get()
        assert (final.id, final.status) == (conf.id, Status.APPROVED)
        assert conf.id not in a.service.deadlines
    finally:
        for h in (a, b):
            await h.service.shutdown()
        await store_a.close()
        await store_b.close()
