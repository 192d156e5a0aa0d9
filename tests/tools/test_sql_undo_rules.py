"""What can be undone, read before anyone approves (the card says so), and how long a
snapshot is kept: the verdicts on a real SQLite database, the sweep on the SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.confirm.ledger import AuditLog
from gateway.confirm.retention import DAY, Retention
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from gateway.storage.sqlite.undo import SqliteUndoStore
from gateway.storage.undo import KeptChange, MemoryUndoStore, UndoSnapshot
from gateway.tools.sql import SqlArgs, SqlDatabase, SqlModifyTool
from gateway.tools.sql_undo import UndoBook

T0 = 1_800_000_000.0


@pytest.fixture
async def tool(tmp_path: Path) -> AsyncIterator[SqlModifyTool]:
    db = SqlDatabase(f"sqlite+aiosqlite:///{tmp_path / 'rules.db'}")
    async with db.engine.begin() as conn:
        await conn.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)")
        await conn.exec_driver_sql("CREATE TABLE bare (a INTEGER, b INTEGER)")
        await conn.exec_driver_sql("INSERT INTO t VALUES (1, 1), (2, 2), (3, 3)")
    records = MemoryConfirmationStore()
    book = UndoBook(
        store=MemoryUndoStore(),
        confirmations=records,
        audit=AuditLog(store=records, clock=lambda: T0),
        max_rows=2,
    )
    yield SqlModifyTool(db, undo=book)
    await db.close()


@pytest.mark.parametrize(
    ("sql", "why"),
    [
        ("DELETE FROM t WHERE id = 1", None),
        ("UPDATE t SET v = 9 WHERE id IN (1, 2)", None),
        ("INSERT INTO t (id, v) VALUES (7, 7)", None),
        ("DELETE FROM t WHERE id > 0", "more than 2 rows"),
        ("DELETE FROM bare WHERE a = 1", "no primary or unique key"),
        ("UPDATE t SET id = id + 10 WHERE id = 1", "changes a key column"),
        ("INSERT INTO t (id, v) VALUES (1, 5) ON CONFLICT (id) DO UPDATE SET v = 5", "upsert"),
        ("DROP TABLE bare", "DROP cannot be undone"),
        ("DELETE FROM t WHERE id = 1; DROP TABLE bare", "DROP cannot be undone"),
    ],
)
async def test_the_preview_says_whether_and_why_not(
    tool: SqlModifyTool, sql: str, why: str | None
) -> None:
    preview = await tool.preview(SqlArgs(sql=sql))
    undo = preview.details["undo"]
    assert undo["undoable"] is (why is None)
    if why is not None:
        assert why in undo["why"]


async def test_the_sweep_drops_snapshots_past_undo_days(tmp_path: Path) -> None:
    undo = await SqliteUndoStore.open(tmp_path / "confirmations.db")
    now = [T0]
    retention = Retention(
        store=MemoryConfirmationStore(), keep_days=30, clock=lambda: now[0], undo=undo
    )
    change = KeptChange(0, "DELETE", "t", ["id"], ["id", "v"], before=[[1, 1]])
    for cid, days in (("OLD1", 1), ("NEW2", 7)):
        await undo.put(UndoSnapshot(cid, T0, T0 + days * DAY, [change]))
    try:
        now[0] = T0 + 2 * DAY
        await retention.purge_once()
        assert await undo.get("OLD1", now=T0) is None  # gone from the table
        assert await undo.get("NEW2", now=now[0]) is not None
        now[0] = T0 + 7 * DAY
        await retention.purge_once()
        assert await undo.get("NEW2", now=T0) is None
    finally:
        await undo.close()
