"""The conversation store's contract, on every backend (memory, SQLite, Redis)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.storage.conftest import BACKENDS, Backend

pytestmark = pytest.mark.parametrize("backend", BACKENDS, indirect=True)


def exchange(n: int, *, tools: int = 0) -> list[dict[str, Any]]:
    """One turn: the user's message, the model's calls and their results, its answer."""
    turn: list[dict[str, Any]] = [{"role": "user", "content": f"问题 {n} / q{n}"}]
    for t in range(tools):
        call = {"id": f"c{n}.{t}", "type": "function", "function": {"name": "sql_query"}}
        turn.append({"role": "assistant", "content": None, "tool_calls": [call]})
        turn.append({"role": "tool", "tool_call_id": f"c{n}.{t}", "content": "1 row"})
    turn.append({"role": "assistant", "content": f"a{n}"})
    return turn


async def test_a_session_without_history_loads_empty(backend: Backend) -> None:
    store = await backend.open()
    assert await store.load("feishu:chat1") == []


async def test_what_one_handle_appends_another_loads(backend: Backend) -> None:
    writer = await backend.open()
    await writer.append("feishu:chat1", exchange(1, tools=1))
    await writer.append("feishu:chat1", exchange(2))
    reader = await backend.open()  # a restarted process (SQLite), another replica (Redis)
    assert await reader.load("feishu:chat1") == exchange(1, tools=1) + exchange(2)
    assert await reader.load("feishu:chat2") == []


async def test_history_is_cut_at_a_user_message_within_max_messages(backend: Backend) -> None:
    store = await backend.open(max_messages=5)
    await store.append("s", exchange(1))
    await store.append("s", exchange(2, tools=1))  # 4 messages: 6 in all, one too many
    assert await store.load("s") == exchange(2, tools=1)
    await store.append("s", exchange(3))  # the newest 5 start mid-turn 2: cut to turn 3
    assert await store.load("s") == exchange(3)


async def test_the_least_recently_written_session_goes_past_max_sessions(
    backend: Backend,
) -> None:
    store = await backend.open(max_sessions=2)
    await store.append("a", exchange(1))
    await store.append("b", exchange(2))
    await store.append("a", exchange(3))  # a written again: b is now the oldest
    await store.append("c", exchange(4))
    assert await store.load("b") == []
    assert await store.load("a") == exchange(1) + exchange(3)
    assert await store.load("c") == exchange(4)


async def test_turns_ending_at_once_each_stay_whole(backend: Backend) -> None:
    one, two = await backend.open(), await backend.open()
    turns = [exchange(n) for n in range(12)]
    await asyncio.gather(
        *((one if n % 2 else two).append("group", turns[n]) for n in range(len(turns)))
    )
    kept = await one.load("group")
    assert len(kept) == 2 * len(turns)
    pairs = [kept[i : i + 2] for i in range(0, len(kept), 2)]
    assert sorted(pairs, key=lambda p: str(p[0]["content"])) == sorted(
        turns, key=lambda p: str(p[0]["content"])
    )


async def test_forget_drops_one_session(backend: Backend) -> None:
    store = await backend.open()
    await store.append("a", exchange(1))
    await store.append("b", exchange(2))
    await store.forget("a")
    assert await store.load("a") == []
    assert await store.load("b") == exchange(2)
