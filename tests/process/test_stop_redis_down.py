"""SIGTERM while Redis is unreachable: ``gateway serve`` still stops cleanly and exits 0.

The gateway reaches the shared Redis through a TCP proxy the test closes (an outage of this
gateway's Redis only). The stop used to raise at its first store step, so the process never
got to close its channels and HTTP server. Now each such step logs one line and the call
stays pending, owned by the stopped instance, for another replica or the next start.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest

from gateway.confirm.model import ExecState, Status
from gateway.storage.redis.confirmations import RedisConfirmationStore
from tests.fakes.tcp_proxy import TcpProxy
from tests.process.replica_support import pending_id
from tests.services import REDIS_URL
from tests.webchat.support import ServeProcess, order_exists

pytestmark = pytest.mark.services


async def test_sigterm_with_redis_unreachable_exits_0_and_leaves_the_call_pending(
    tmp_path: Path, prefix: str, proxy: TcpProxy
) -> None:
    through = urlsplit(REDIS_URL)._replace(netloc=proxy.url_host).geturl()
    serve = ServeProcess(
        tmp_path=tmp_path,
        env={
            "GATEWAY_CONFIRMATION__STORE": "redis",
            "GATEWAY_CONFIRMATION__REDIS_URL": through,
            "GATEWAY_CONFIRMATION__REDIS_PREFIX": prefix,
        },
    )
    # In threads: start and stop block, and the proxy on this loop must keep serving.
    await asyncio.to_thread(serve.start, 60)
    try:
        async with aiohttp.ClientSession(base_url=serve.url) as http:
            body = {"user": "alice", "text": "/sql DELETE FROM orders WHERE id = 3"}
            async with http.post("/api/chat/room/messages", json=body) as resp:
                assert resp.status == 202, await resp.text()
            cid = await pending_id(http, "room")

        await proxy.stop()  # Redis is gone for this gateway
        code = await asyncio.to_thread(serve.stop, 30)
    finally:
        await asyncio.to_thread(serve.stop)
    assert code == 0, "".join(serve.lines[-40:])
    logged = [json.loads(line) for line in serve.lines if line.startswith("{")]
    down = [e for e in logged if e.get("event") == "confirm.stop_store_unavailable"]
    assert [e["step"] for e in down] == ["cancel_pending", "interrupt_running", "leave"]
    assert all(e["error"].startswith("Redis: ") for e in down)

    # Nothing ran and nothing was decided: the call waits for its adoption.
    assert order_exists(serve.data_dir, 3)
    store = await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix)
    try:
        left = await store.get(cid)
        assert left is not None
        assert left.status is Status.PENDING and left.execution.state is ExecState.WAITING
        assert left.owner in {i.id for i in await store.list_instances()}  # its beat stays
    finally:
        await store.close()
