"""Confirmation records for the store tests."""

from __future__ import annotations

from dataclasses import replace

from gateway.confirm.model import Confirmation, Risk, ToolCall, Vote

T0 = 1_763_000_000.123456  # many significant digits: floats must round-trip exactly
TIMEOUT = 300.0


def make(
    cid: str,
    *,
    session: str = "console:alice",
    created_at: float = T0,
    timeout: float = TIMEOUT,
    **changes: object,
) -> Confirmation:
    c = Confirmation(
        id=cid,
        session_key=session,
        channel="console",
        chat_id=session.split(":", 1)[-1],
        requester="alice",
        is_group=False,
        tool_call=ToolCall(name="sql_modify", args={"sql": "DELETE FROM t"}, call_id=f"call-{cid}"),
        summary=f"DELETE t ({cid})",
        created_at=created_at,
        expires_at=created_at + timeout,
    )
    return replace(c, **changes)  # type: ignore[arg-type]


def full_record(cid: str = "K7Q2") -> Confirmation:
    """Every field away from its default, with unicode, nesting and awkward floats."""
    return Confirmation(
        id=cid,
        session_key="feishu:oc_群聊:thread",
        channel="feishu",
        chat_id="oc_群聊",
        requester="ou_requester",
        is_group=True,
        tool_call=ToolCall(
            name="sql_modify",
            args={"sql": "DELETE FROM orders WHERE status = 1 -- 删除", "n": [1, 2.5, None]},
            call_id="call_0001",
        ),
        summary="DELETE orders，影响 3 行 / 3 rows",
        details={
            "statement": "DELETE FROM orders WHERE status = 1",
            "kind": "DELETE",
            "tables": ["orders"],
            "rows_affected": 3,
            "has_where": True,
            "nested": {"a": {"b": "中文"}},
        },
        risk=Risk.CRITICAL,
        approvers=("ou_boss", "ou_ops"),
        four_eyes=True,
        approvals=3,
        votes=(Vote(actor="ou_boss", person="ou_boss", at=T0 + 1.000001, via="card"),),
        created_at=T0,
        expires_at=T0 + 299.987654321,
        prompt_refs={"feishu.message_id": "om_123", "card": "c-1"},
    )
