"""The record's own copies: a decision changes the decision fields and nothing else."""

from __future__ import annotations

from dataclasses import fields, replace

from gateway.confirm.model import Confirmation, ExecState, Execution, Status, ToolCall
from tests.confirm.records import full_record


def test_finished_keeps_every_other_field() -> None:
    # Confirmation.finished spells its fields out (speed); a field added to the record and
    # not to finished() would be dropped to its default on every decision.
    before = replace(
        full_record(),
        status=Status.APPROVED,
        decided_by="carol",
        decided_at=1.5,
        decided_via="text",
        reason="ok",
        feedback=True,
        execution=Execution(state=ExecState.CLAIMED, claimed_by="i-1", attempts=1),
        owner="i-1",
        idempotent=True,
        continuation={"messages": [{"role": "user", "content": "删"}]},
    )
    defaults = Confirmation(
        id="x",
        session_key="x",
        channel="x",
        chat_id="x",
        requester="x",
        is_group=False,
        tool_call=ToolCall(name="x", args={}, call_id="x"),
        summary="x",
        created_at=0.0,
        expires_at=0.0,
    )
    untouched = [
        f.name for f in fields(Confirmation) if getattr(before, f.name) == getattr(defaults, f.name)
    ]
    assert untouched == [], "set every field away from its default here"
    after = before.finished(
        Status.REJECTED, by="bob", at=before.created_at + 7, via="card", reason="no", feedback=False
    )
    assert after == replace(
        before,
        status=Status.REJECTED,
        decided_by="bob",
        decided_at=before.created_at + 7,
        decided_via="card",
        reason="no",
        feedback=False,
    )
