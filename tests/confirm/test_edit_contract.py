"""Approving with edited arguments, in the store contract: the new call is written by the
same compare-and-set as ``pending -> approved``, on every backend.

An edit and any other decision, the expiry or a cancel race for one record: exactly one
wins, and the call on record is the edited one only when the edit won.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.confirm.model import CallEdit, Confirmation, ExecState, Risk, Status, ToolCall
from gateway.storage.confirmations import ConfirmationStore
from tests.confirm.conftest import LEDGER_BACKENDS, Backend
from tests.confirm.records import T0, make

LEASE = 15.0


def edit_of(c: Confirmation, sql: str, *, by: str = "bob") -> CallEdit:
    return CallEdit(
        tool_call=ToolCall(name=c.tool_call.name, args={"sql": sql}, call_id=c.tool_call.call_id),
        summary=f"edited: {sql}",
        details={
            "statement": sql,
            "edited": {"by": by, "args_before": dict(c.tool_call.args), "note": "只删 3 号"},
        },
        risk=Risk.HIGH,
        four_eyes=True,
    )


@pytest.mark.parametrize("backend", LEDGER_BACKENDS, indirect=True)
class TestEditContract:
    async def test_an_approval_with_an_edit_stores_the_new_call(self, backend: Backend) -> None:
        store, other = await backend.open(), await backend.open()
        c = make("ED01")
        await store.create(c)
        edit = edit_of(c, "DELETE FROM t WHERE id = 3")
        done, changed = await store.finish(
            "ED01", Status.APPROVED, by="bob", via="admin", reason="only 3", now=T0 + 1, edit=edit
        )
        assert changed and done is not None
        assert done == c.edited(edit).finished(
            Status.APPROVED, by="bob", at=T0 + 1, via="admin", reason="only 3"
        )
        assert done.tool_call.args == {"sql": "DELETE FROM t WHERE id = 3"}
        assert (done.summary, done.risk, done.four_eyes) == (edit.summary, Risk.HIGH, True)
        assert done.edit_note is not None and done.edit_note["args_before"] == c.tool_call.args
        # Another handle (replica, process) reads the same edited record ...
        assert await other.get("ED01") == done
        # ... and whoever claims it runs the edited call.
        claimed = await other.claim("ED01", instance="i1", now=T0 + 2, lease=LEASE)
        assert claimed is not None and claimed.tool_call == edit.tool_call
        assert claimed.execution.state is ExecState.CLAIMED
        # Listings show the call as approved.
        assert await store.list(status=Status.APPROVED) == [claimed]

    async def test_a_refused_approval_leaves_the_call_as_asked(
        self, store: ConfirmationStore
    ) -> None:
        c = make("ED02", timeout=10)
        await store.create(c)
        edit = edit_of(c, "DELETE FROM t WHERE id = 4")
        # Past the deadline: refused, nothing changed.
        late, changed = await store.finish(
            "ED02", Status.APPROVED, by="bob", via="admin", reason=None, now=c.expires_at, edit=edit
        )
        assert not changed and late == c
        # Settled first: a later edit changes nothing either.
        rejected, _ = await store.finish(
            "ED02", Status.REJECTED, by="alice", via="text", reason="no", now=T0 + 1
        )
        again, changed = await store.finish(
            "ED02", Status.APPROVED, by="bob", via="admin", reason=None, now=T0 + 2, edit=edit
        )
        assert not changed and again == rejected
        assert rejected is not None and rejected.tool_call == c.tool_call
        assert await store.get("ED02") == rejected

    @pytest.mark.parametrize("status", [Status.REJECTED, Status.EXPIRED, Status.CANCELLED])
    async def test_an_edit_comes_only_with_an_approval(
        self, store: ConfirmationStore, status: Status
    ) -> None:
        c = make("ED03")
        await store.create(c)
        with pytest.raises(ValueError, match="only with approved"):
            await store.finish(
                "ED03", status, by="b", via="admin", reason=None, now=T0 + 1, edit=edit_of(c, "x")
            )
        assert await store.get("ED03") == c

    async def test_edit_against_cancel_reject_and_expiry_has_one_winner(
        self, backend: Backend
    ) -> None:
        handles = [await backend.open(), await backend.open()]
        others = [Status.CANCELLED, Status.REJECTED, Status.EXPIRED]
        for round_ in range(8):
            cid = f"RC{round_:02d}"
            c = make(cid)
            await handles[0].create(c)
            edit = edit_of(c, f"DELETE FROM t WHERE id = {round_}")
            calls = [
                handles[0].finish(
                    cid,
                    Status.APPROVED,
                    by="editor",
                    via="admin",
                    reason=None,
                    now=T0 + 1,
                    edit=edit,
                ),
                *(
                    handles[(i + 1) % 2].finish(
                        cid, status, by=f"other{i}", via="text", reason="r", now=T0 + 1
                    )
                    for i, status in enumerate(others)
                ),
            ]
            if round_ % 2:
                calls.reverse()  # sometimes the others are sent first
            results = await asyncio.gather(*calls)
            assert sum(changed for _, changed in results) == 1
            final = await handles[1].get(cid)
            assert final is not None
            assert all(record == final for record, _ in results)
            if final.status is Status.APPROVED:
                assert final.decided_by == "editor"
                assert final.tool_call == edit.tool_call
            else:
                assert final.tool_call == c.tool_call
                assert final.edit_note is None
                assert final.execution.state is ExecState.SKIPPED
