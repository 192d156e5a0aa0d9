"""kill -9 a replica between acknowledging a Feishu message and answering it (issue 13,
item 6): another replica answers it, once.

Two real ``gateway serve`` processes share one Redis under this test's prefix and hold a
long connection each to the loopback Feishu, which pushes the message to replica A. A
stores it in the Redis inbox, acknowledges it, and asks the model, which holds its
answer (a model that thinks). A is killed with ``SIGKILL``; Feishu will not send the
message again (it was acknowledged). Replica B, once A's heartbeat and the message have
been idle for the lease, adopts it, asks the model again and answers: the chat gets one
answer, and the inbox holds nothing more that anyone could process again.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gateway.storage.redis.inbox import GROUP
from tests.fakes.feishu import FakeFeishu, RecordedRequest
from tests.fakes.feishu.events import message_event
from tests.fakes.openai_server import FakeOpenAI, hold, text
from tests.process.replica_support import ReplicaSet
from tests.services import REDIS_URL
from tests.webchat.support import eventually

pytestmark = pytest.mark.services

LEASE = 3.0
ANSWER = "只答一次 / answered once"


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeOpenAI, FakeFeishu]]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with (
        FakeOpenAI() as model,
        FakeFeishu(app_id="cli_" + uuid.uuid4().hex[:10], bot_open_id="ou_bot") as feishu,
    ):
        # A's request is held until the end (A dies with it); B's gets the answer.
        model.script(hold(), text(ANSWER))
        yield model, feishu
        model.release()  # A's request, still held for a process long gone


def answers(feishu: FakeFeishu) -> list[RecordedRequest]:
    sent = feishu.requests_for("create", "reply")
    return [r for r in sent if ANSWER in json.dumps(r.content, ensure_ascii=False)]


async def test_a_message_acknowledged_by_a_killed_replica_is_answered_once_by_another(
    tmp_path: Path, fakes: tuple[FakeOpenAI, FakeFeishu], prefix: str
) -> None:
    model, feishu = fakes
    replicas = ReplicaSet(
        tmp_path,
        redis_url=REDIS_URL,
        prefix=prefix,
        fake=model,
        lease=LEASE,
        GATEWAY_CHANNELS__WEBCHAT__ENABLED="false",
        GATEWAY_CHANNELS__FEISHU__ENABLED="true",
        GATEWAY_CHANNELS__FEISHU__APP_ID=feishu.app_id,
        GATEWAY_CHANNELS__FEISHU__APP_SECRET=feishu.app_secret,
        GATEWAY_CHANNELS__FEISHU__DOMAIN=feishu.url,
        GATEWAY_CHANNELS__FEISHU__ALLOW_FROM='["*"]',
    )
    redis = Redis.from_url(REDIS_URL)
    try:
        b = replicas.start("b")
        await eventually(lambda: _sockets(feishu, 1), timeout=30)
        a = replicas.start("a")  # connected last: Feishu pushes to A's connection
        await eventually(lambda: _sockets(feishu, 2), timeout=30)

        event = message_event(
            chat_id="oc_kill", sender="ou_alice", text="你好 hello", app_id=feishu.app_id
        )
        frame = feishu.send_frame(event)
        ack = await feishu.wait_ack(frame, within=20)
        assert ack.code == 200  # stored in Redis, then acknowledged: Feishu is done with it
        await model.wait_requests(1, within=20)  # A's turn: the model thinks...
        a.kill_9()  # ...and A dies before anything was said

        found = await eventually(lambda: _answered(feishu), timeout=LEASE * 3 + 20)
        assert found[0].body.get("msg_type") in ("text", "interactive", "post")
        # Nothing is left in the inbox: no replica can process the message again.
        stream = f"{prefix}:inbox"
        assert await redis.xlen(stream) == 0
        assert (await redis.xpending(stream, GROUP))["pending"] == 0
        assert len(model.requests) == 2  # A's (cut off) and B's
        assert len(answers(feishu)) == 1
        assert b.errors() == []
    finally:
        replicas.stop()
        await redis.aclose()


async def _sockets(feishu: FakeFeishu, count: int) -> bool:
    return len(feishu.live_sockets()) == count


async def _answered(feishu: FakeFeishu) -> list[RecordedRequest] | None:
    return answers(feishu) or None
