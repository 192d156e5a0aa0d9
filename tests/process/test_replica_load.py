"""500 concurrent chats across two replicas on Redis (issue 13): 0 errors, 0 lost cards.

Before the bounded pool, this load exhausted redis-py's default pool (MaxConnectionsError:
HTTP 500s, 132 cards never sent). Two real ``gateway serve`` processes share one Redis
under this test's prefix; every chat asks on one replica and is approved by a chat reply on
the other (bench/replicas_load.py drives it, and reports the figures of the same run).
``GATEWAY_TEST_REPLICA_CHATS`` sets fewer chats on a slow machine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.replicas_load import LOAD_SETTINGS, drive, runs_not_once
from tests.fakes.openai_server import FakeOpenAI
from tests.process.replica_support import ReplicaSet, script_model
from tests.services import REDIS_URL, redis_prefix

pytestmark = [pytest.mark.services, pytest.mark.timeout(900)]

CHATS = int(os.environ.get("GATEWAY_TEST_REPLICA_CHATS", "500"))


@pytest.fixture
def fake_llm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    with FakeOpenAI() as server:
        script_model(server, 2 * CHATS + 10)
        yield server


async def test_concurrent_chats_on_two_replicas_lose_nothing(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    async with redis_prefix() as prefix:
        group = ReplicaSet(
            tmp_path,
            redis_url=REDIS_URL,
            prefix=prefix,
            fake=fake_llm,
            lease=15.0,
            # Callers queue for the bounded pool (64 connections) for up to 30 s, not 5: on
            # a shared 2-core machine the wait is for CPU, not Redis (the bench keeps 5 s).
            GATEWAY_CONFIRMATION__REDIS_POOL_TIMEOUT_SECONDS="30",
            **LOAD_SETTINGS,
        )
        try:
            a, b = group.start("a"), group.start("b")
            for i in range(CHATS):
                group.open_gate(f"c{i}")
            result = await drive([a.url, b.url], CHATS, timeout=600.0)
            assert result.errors == []
            assert result.lost_cards == []
            assert runs_not_once(group.runs_of(), CHATS) == {}
            assert len(result.decide_to_claim) == CHATS  # each woke its turn, which ran it
        finally:
            group.stop()
        assert a.errors() == [] and b.errors() == []
