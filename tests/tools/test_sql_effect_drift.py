"""What was approved is what runs (issue 24): the drift check of sql_modify, on SQLite, the
local PostgreSQL and MariaDB.

At the tool: an approved preview, the data changed under it, then the run. Through the
whole gateway: ``/sql`` asks, the table changes, ``确认`` — the record says the run failed
with the sentence and the rows are still there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from config.settings import Settings
from gateway import texts
from gateway.app import build
from gateway.bus import InboundMessage, OutboundKind
from gateway.confirm.model import ExecState
from gateway.tools.base import ApprovedRun, EffectChangedError
from gateway.tools.sql import SqlModifyTool
from tests.support import RecordingChannel
from tests.tools.test_sql_effect import Db, orders
from tests.tools.test_sql_effect import db as db  # the three-backend fixture


class Notes:
    """The audit lines a run adds, as the executor would write them."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, kind: str, detail: Mapping[str, Any]) -> None:
        self.lines.append((kind, dict(detail)))


async def approve(
    db: Db, sql: str, *, tolerance: int = 0
) -> tuple[SqlModifyTool, ApprovedRun, Notes]:
    """The preview a person approved, as the record keeps it."""
    db.sql.drift_tolerance = tolerance
    t = SqlModifyTool(db.sql)
    preview = await t.preview(t.parse_args({"sql": sql}))
    notes = Notes()
    return t, ApprovedRun(confirmation_id="K7Q2", details=preview.details, note=notes), notes


async def test_unchanged_rows_run_and_the_check_is_noted(db: Db) -> None:
    table = await orders(db)
    sql = f"DELETE FROM {table} WHERE status = 1"
    t, approved, notes = await approve(db, sql)
    out = await t.run_approved(t.parse_args({"sql": sql}), approved)
    assert out == "DELETE: 3 行 / 3 rows"
    assert await db.rows(f"SELECT COUNT(*) FROM {table}") == [(3,)]
    [(kind, detail)] = notes.lines
    assert (kind, detail["outcome"]) == ("drift_checked", "ok")
    assert detail["checks"][0]["approved"] == detail["checks"][0]["now"] == 3


async def test_a_delete_whose_rows_grew_does_not_run(db: Db) -> None:
    table = await orders(db)
    sql = f"DELETE FROM {table} WHERE status = 1"
    t, approved, notes = await approve(db, sql)
    await db.execute(f"INSERT INTO {table} (id, customer, amount, status) VALUES (7, 'Gus', 1, 1)")
    with pytest.raises(EffectChangedError) as raised:
        await t.run_approved(t.parse_args({"sql": sql}), approved)
    said = str(raised.value)
    assert "数据在批准后已变化" in said and "the data changed since approval" in said
    assert "3 rows approved, 4 now" in said and "批准时 3 行，现在 4 行" in said
    [now] = raised.value.effect
    assert now["total"] == 4 and now["keys"] == [["2"], ["3"], ["6"], ["7"]]
    assert await db.rows(f"SELECT COUNT(*) FROM {table}") == [(7,)]  # nothing went
    [(kind, detail)] = notes.lines
    assert (kind, detail["outcome"]) == ("drift_checked", "changed")


async def test_same_count_other_rows_is_a_change(db: Db) -> None:
    table = await orders(db)
    sql = f"UPDATE {table} SET amount = 0 WHERE status = 1"
    t, approved, _ = await approve(db, sql)
    # Row 2 leaves the set, row 1 joins it: still 3 rows, not the 3 approved.
    await db.execute(
        f"UPDATE {table} SET status = 0 WHERE id = 2", f"UPDATE {table} SET status = 1 WHERE id = 1"
    )
    with pytest.raises(EffectChangedError) as raised:
        await t.run_approved(t.parse_args({"sql": sql}), approved)
    assert "2 rows differ" in str(raised.value)
    assert await db.rows(f"SELECT COUNT(*) FROM {table} WHERE amount = 0") == [(0,)]


async def test_a_tolerance_lets_that_many_rows_of_difference_run(db: Db) -> None:
    table = await orders(db)
    sql = f"DELETE FROM {table} WHERE status = 1"
    t, approved, notes = await approve(db, sql, tolerance=1)
    await db.execute(f"INSERT INTO {table} (id, customer, amount, status) VALUES (7, 'Gus', 1, 1)")
    assert await t.run_approved(t.parse_args({"sql": sql}), approved) == "DELETE: 4 行 / 4 rows"
    assert notes.lines[0][1]["outcome"] == "ok"
    # Two rows more than approved is beyond a tolerance of 1.
    sql = f"DELETE FROM {table} WHERE status = 0"
    t, approved, _ = await approve(db, sql, tolerance=1)
    await db.execute(
        f"INSERT INTO {table} (id, customer, amount, status)"
        " VALUES (8, 'Hal', 1, 0), (9, 'Ida', 1, 0)"
    )
    with pytest.raises(EffectChangedError):
        await t.run_approved(t.parse_args({"sql": sql}), approved)


async def test_a_batch_rolls_back_when_a_later_statement_drifted(db: Db) -> None:
    table = await orders(db)
    other = await orders(db, "other")
    sql = f"DELETE FROM {table} WHERE id = 1; DELETE FROM {other} WHERE status = 2"
    t, approved, _ = await approve(db, sql)
    await db.execute(f"UPDATE {other} SET status = 2 WHERE id = 1")
    with pytest.raises(EffectChangedError):
        await t.run_approved(t.parse_args({"sql": sql}), approved)
    assert await db.rows(f"SELECT COUNT(*) FROM {table}") == [(6,)]  # the first one too


async def test_a_grown_table_stops_an_approved_truncate_or_drop(db: Db) -> None:
    table = await orders(db)
    sql = f"TRUNCATE TABLE {table}" if db.kind != "sqlite" else f"DROP TABLE {table}"
    t, approved, _ = await approve(db, sql)
    await db.execute(f"INSERT INTO {table} (id, customer, amount, status) VALUES (7, 'Gus', 1, 1)")
    with pytest.raises(EffectChangedError) as raised:
        await t.run_approved(t.parse_args({"sql": sql}), approved)
    assert "6 rows approved, 7 now" in str(raised.value)
    assert await db.rows(f"SELECT COUNT(*) FROM {table}") == [(7,)]


async def test_a_table_gone_since_approval_is_a_change(db: Db) -> None:
    table = await orders(db)
    sql = f"DELETE FROM {table} WHERE status = 1"
    t, approved, _ = await approve(db, sql)
    await db.execute(f"DROP TABLE {table}")
    with pytest.raises(EffectChangedError) as raised:
        await t.run_approved(t.parse_args({"sql": sql}), approved)
    assert "3 rows approved, cannot be counted now" in str(raised.value)


async def test_nothing_shown_is_nothing_to_hold_the_run_to(db: Db) -> None:
    sql = f"CREATE TABLE {db.name('fresh')} (id INTEGER PRIMARY KEY)"
    t, approved, notes = await approve(db, sql)
    await t.run_approved(t.parse_args({"sql": sql}), approved)
    assert notes.lines == [("drift_checked", {"outcome": "not_checked", "checks": []})]


# -- through the whole gateway ------------------------------------------------------------------


async def test_through_the_gateway_a_grown_delete_fails_with_the_sentence(
    db: Db, make_settings: Callable[..., Settings]
) -> None:
    table = await orders(db)
    settings = make_settings(
        tools={"sql": {"url": db.sql.url}},
        confirmation={"store": "memory", "timeout_seconds": 30},
    )
    gw = await build(settings, serve_http=False)
    rec = RecordingChannel()
    gw.channels.add(rec)
    n = 0

    async def say(text: str) -> None:
        nonlocal n
        n += 1
        await gw.bus.publish_inbound(
            InboundMessage(
                channel="rec", chat_id="c1", sender_id="alice", text=text, message_id=f"m{n}"
            )
        )

    async with gw:
        await say(f"/sql DELETE FROM {table} WHERE status = 1")
        prompt = await rec.next(OutboundKind.CONFIRMATION)
        asked = prompt.confirmation
        assert asked is not None and asked.details["effects"][0]["total"] == 3
        # The approver saw three rows; a fourth matches by the time they approve.
        await db.execute(
            f"INSERT INTO {table} (id, customer, amount, status) VALUES (7, 'Gus', 1, 1)"
        )
        await say("确认")
        await rec.next(contains=texts.EFFECT_CHANGED_EN)
        record = await gw.confirmations.store.get(asked.id)
        assert record is not None
        assert record.execution.state is ExecState.FAILED
        assert record.execution.result is not None
        assert texts.EFFECT_CHANGED_ZH in record.execution.result
        assert "3 rows approved, 4 now" in record.execution.result
        events = await gw.confirmations.store.events(asked.id)
        requested = next(e for e in events if e.kind == "requested")
        assert requested.detail["effects"][0]["keys"] == [["2"], ["3"], ["6"]]  # what was shown
        checked = next(e for e in events if e.kind == "drift_checked")
        assert checked.detail["outcome"] == "changed"
        # Asked again (gateway/confirm/again.py) with a fresh preview: the four rows now.
        again = await rec.next(OutboundKind.CONFIRMATION)
        assert again.confirmation is not None and again.confirmation.id != asked.id
        [fresh] = again.confirmation.details["effects"]
        assert fresh["total"] == 4 and fresh["keys"] == [["2"], ["3"], ["6"], ["7"]]
    assert await db.rows(f"SELECT COUNT(*) FROM {table} WHERE status = 1") == [(4,)]


async def test_two_approved_changes_at_once_both_run(db: Db) -> None:
    """Two calls approved by one reply run side by side, each reading its rows again first.
    On SQLite two deferred transactions that read and then write left the second with
    "database is locked" at once (found by tests/process/test_votes_serve.py); the writer
    takes the lock at BEGIN, so the second waits its turn."""
    table = await orders(db)
    first, second = f"DELETE FROM {table} WHERE id = 2", f"DELETE FROM {table} WHERE id = 3"
    (t1, a1, _), (t2, a2, _) = await approve(db, first), await approve(db, second)
    for _ in range(5):  # the race is the point: run the pair a few times
        outs = await asyncio.gather(
            t1.run_approved(t1.parse_args({"sql": first}), a1),
            t2.run_approved(t2.parse_args({"sql": second}), a2),
            return_exceptions=True,
        )
        assert outs == ["DELETE: 1 行 / 1 row"] * 2, outs
        await db.execute(
            f"INSERT INTO {table} (id, customer, amount, status) "
            "VALUES (2, 'Bob', 80, 1), (3, 'Carol', 45.25, 1)"
        )


async def _waits_for_a_row_lock(db: Db, table: str) -> None:
    """Until a statement on ``table`` waits for a row lock another session holds."""
    query = {
        "postgresql": "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        f" AND position('{table}' in query) > 0",
        "mariadb": "SELECT COUNT(*) FROM information_schema.INNODB_TRX"
        f" WHERE trx_state = 'LOCK WAIT' AND INSTR(trx_query, '{table}') > 0",
    }[db.kind]
    for _ in range(100):
        if (await db.rows(query))[0][0]:
            return
        # MariaDB fills INNODB_TRX from a cache it refreshes when 0.1 s old: read it slower.
        await asyncio.sleep(0.15)
    raise AssertionError(f"nothing on {table} waited for the row lock")


async def test_a_row_committed_between_the_check_and_the_change_rolls_it_back(db: Db) -> None:
    """The check and the change share a transaction, not a lock: on PostgreSQL and MariaDB
    another session can commit between them. Here it holds a lock on an approved row, so the
    approved DELETE (its check passed: 3 rows) waits at that row; then it moves the row out of
    the WHERE and commits. The DELETE touches 2 rows, not the 3 approved: everything rolls
    back. (SQLite's writer holds the whole database from BEGIN: nobody commits between.)"""
    if db.kind == "sqlite":
        pytest.skip("SQLite's approved change holds the database lock from BEGIN")
    table = await orders(db)
    sql = f"DELETE FROM {table} WHERE status = 1"  # rows 2, 3 and 6
    t, approved, notes = await approve(db, sql)
    async with db.sql.engine.connect() as other:
        await other.begin()
        await other.exec_driver_sql(f"UPDATE {table} SET customer = 'held' WHERE id = 2")
        run = asyncio.create_task(t.run_approved(t.parse_args({"sql": sql}), approved))
        await _waits_for_a_row_lock(db, table)
        await other.exec_driver_sql(f"UPDATE {table} SET status = 0 WHERE id = 2")
        await other.commit()
    with pytest.raises(EffectChangedError) as raised:
        await run
    assert "3 rows approved, 2 now" in str(raised.value)
    assert await db.rows(f"SELECT COUNT(*) FROM {table}") == [(6,)]  # nothing went
    [(kind, detail)] = notes.lines
    assert (kind, detail["outcome"]) == ("drift_checked", "changed")
    assert detail["checks"][-1] == {
        "statement": 0,
        "kind": "DELETE",
        "table": table,
        "approved": 3,
        "now": 2,
        "touched": True,
        "changed": True,
    }


async def test_an_update_that_leaves_some_rows_as_they_were_runs(db: Db) -> None:
    """The change's own count is of rows matched, not rows whose values moved (MariaDB
    counts the latter unless asked otherwise): setting rows to what some already hold is
    the approved change and runs."""
    table = await orders(db)
    sql = f"UPDATE {table} SET amount = 80 WHERE status = 1"  # row 2 already holds 80
    t, approved, notes = await approve(db, sql)
    assert await t.run_approved(t.parse_args({"sql": sql}), approved) == "UPDATE: 3 行 / 3 rows"
    assert notes.lines[0][1]["outcome"] == "ok"
