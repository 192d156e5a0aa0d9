"""Undo snapshots in SQLite: an ``undo_snapshots`` table in the confirmation store's file
(its own connection, as the grants have; the confirmation schema's version is not
touched). One row per record: the snapshot as JSON, when it expires, which undo took it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import aiosqlite

from gateway.storage.sqlite import connect
from gateway.storage.undo import UndoSnapshot, UndoStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS undo_snapshots (
    confirmation_id  TEXT PRIMARY KEY,
    expires_at       REAL NOT NULL,
    undone_by        TEXT,                 -- the sql_undo record that took it
    body             TEXT NOT NULL         -- UndoSnapshot.body(): JSON
);
CREATE INDEX IF NOT EXISTS undo_snapshots_expires ON undo_snapshots (expires_at);
"""


class SqliteUndoStore(UndoStore):
    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._conn.row_factory = sqlite3.Row

    @classmethod
    async def open(cls, path: Path, *, busy_timeout_ms: int = 5000) -> SqliteUndoStore:
        return cls(await connect(path, _SCHEMA, busy_timeout_ms=busy_timeout_ms))

    async def close(self) -> None:
        await self._conn.close()

    async def put(self, snapshot: UndoSnapshot) -> None:
        await self._conn.execute(
            "INSERT OR REPLACE INTO undo_snapshots (confirmation_id, expires_at, undone_by, body)"
            " VALUES (?, ?, NULL, ?)",
            (snapshot.confirmation_id, snapshot.expires_at, snapshot.body()),
        )

    async def get(self, confirmation_id: str, *, now: float) -> UndoSnapshot | None:
        async with self._conn.execute(
            "SELECT body, undone_by FROM undo_snapshots WHERE confirmation_id = ?"
            " AND expires_at > ?",
            (confirmation_id, now),
        ) as cur:
            row = await cur.fetchone()
        return UndoSnapshot.from_body(row["body"], undone_by=row["undone_by"]) if row else None

    async def claim(self, confirmation_id: str, *, by: str, now: float) -> UndoSnapshot | None:
        # One statement: two undos of one change, from two processes, have one winner.
        async with self._conn.execute(
            "UPDATE undo_snapshots SET undone_by = ? WHERE confirmation_id = ?"
            " AND undone_by IS NULL AND expires_at > ? RETURNING body",
            (by, confirmation_id, now),
        ) as cur:
            row = await cur.fetchone()
        return UndoSnapshot.from_body(row["body"], undone_by=by) if row else None

    async def release(self, confirmation_id: str, *, by: str) -> None:
        await self._conn.execute(
            "UPDATE undo_snapshots SET undone_by = NULL WHERE confirmation_id = ?"
            " AND undone_by = ?",
            (confirmation_id, by),
        )

    async def purge(self, *, before: float) -> int:
        async with self._conn.execute(
            "DELETE FROM undo_snapshots WHERE expires_at <= ?", (before,)
        ) as cur:
            return cur.rowcount
