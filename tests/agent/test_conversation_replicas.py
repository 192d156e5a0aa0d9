"""Replicas share the conversation (issue 23, item 2): two gateways on one Redis; a
follow-up that reaches the second carries what the first was told and answered.

Before conversations were stored each process kept its own: the second gateway sent the
model the follow-up alone.
"""

from __future__ import annotations

import pytest

from tests.agent.conftest import GatewayFactory, say
from tests.fakes.openai_server import FakeOpenAI, text
from tests.services import REDIS_URL

pytestmark = pytest.mark.services

FIRST = "记住了：蓝色 / noted: blue"
SECOND = "你说过蓝色 / you said blue"


async def test_a_follow_up_on_another_replica_carries_the_conversation(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI, prefix: str
) -> None:
    fake_llm.script(text(FIRST), text(SECOND))
    redis = {"store": "redis", "redis_url": REDIS_URL, "redis_prefix": prefix}
    one, chat_one = await start_gateway(confirmation=redis)
    two, chat_two = await start_gateway(confirmation=redis)

    await say(one, "我喜欢蓝色 / I like blue")
    await chat_one.wait_text(FIRST)
    await say(two, "我喜欢什么颜色？ / which colour do I like?")
    await chat_two.wait_text(SECOND)

    sent = [(m["role"], str(m.get("content"))) for m in fake_llm.requests[-1].messages]
    assert [role for role, _ in sent] == ["system", "user", "assistant", "user"]
    assert "I like blue" in sent[1][1]
    assert sent[2][1] == FIRST
    assert "which colour" in sent[3][1]
