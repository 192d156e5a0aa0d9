"""Bounded history never separates a tool result from the call that asked for it."""

from __future__ import annotations

from typing import Any

from gateway.storage.conversations import trim_history


def turn(n: int, tools: int = 0) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": f"q{n}"}]
    if tools:
        calls = [{"id": f"c{n}_{i}", "type": "function"} for i in range(tools)]
        msgs.append({"role": "assistant", "content": None, "tool_calls": calls})
        msgs += [{"role": "tool", "tool_call_id": c["id"], "content": "r"} for c in calls]
    msgs.append({"role": "assistant", "content": f"a{n}"})
    return msgs


def test_under_the_limit_nothing_is_dropped() -> None:
    history = turn(1) + turn(2)
    assert trim_history(history, 10) == history


def test_cut_starts_at_a_user_message() -> None:
    history = turn(1, tools=2) + turn(2, tools=1)  # 5 + 4 messages
    for limit in range(2, 9):
        kept = trim_history(history, limit)
        assert len(kept) <= limit
        assert not kept or kept[0]["role"] == "user"
        ids = {c["id"] for m in kept for c in m.get("tool_calls", [])}
        assert all(m["tool_call_id"] in ids for m in kept if m["role"] == "tool")
    assert trim_history(history, 4) == turn(2, tools=1)
    assert trim_history(history, 3) == []
