"""Grants in SQLite: a ``grants`` table and an append-only ``grant_events`` audit table,
in the confirmation store's file (its own connection; the confirmation schema's version
is not touched)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import aiosqlite

from gateway.confirm.model import Grant, GrantEvent
from gateway.storage.grants import GrantStore
from gateway.storage.sqlite import connect

_SCHEMA = """
CREATE TABLE IF NOT EXISTS grants (
    id          TEXT PRIMARY KEY,
    expires_at  REAL NOT NULL,
    revoked_at  REAL,
    body        TEXT NOT NULL              -- JSON of the Grant
);
CREATE INDEX IF NOT EXISTS grants_expires ON grants (expires_at);
CREATE TABLE IF NOT EXISTS grant_events (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    grant_id  TEXT NOT NULL,
    at        REAL NOT NULL,
    kind      TEXT NOT NULL,               -- given | used | revoked
    actor     TEXT,
    detail    TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS grant_events_grant ON grant_events (grant_id);
CREATE TRIGGER IF NOT EXISTS grant_events_no_update BEFORE UPDATE ON grant_events
    BEGIN SELECT RAISE(ABORT, 'grant_events is append-only'); END;
CREATE TRIGGER IF NOT EXISTS grant_events_no_delete BEFORE DELETE ON grant_events
    BEGIN SELECT RAISE(ABORT, 'grant_events is append-only'); END;
"""


class SqliteGrantStore(GrantStore):
    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._conn.row_factory = sqlite3.Row

    @classmethod
    async def open(cls, path: Path, *, busy_timeout_ms: int = 5000) -> SqliteGrantStore:
        return cls(await connect(path, _SCHEMA, busy_timeout_ms=busy_timeout_ms))

    async def close(self) -> None:
        await self._conn.close()

    async def add(self, grant: Grant) -> None:
        await self._conn.execute(
            "INSERT INTO grants (id, expires_at, revoked_at, body) VALUES (?, ?, ?, ?)",
            (grant.id, grant.expires_at, grant.revoked_at, _body(grant)),
        )

    async def get(self, grant_id: str) -> Grant | None:
        async with self._conn.execute("SELECT body FROM grants WHERE id = ?", (grant_id,)) as cur:
            row = await cur.fetchone()
        return Grant.from_dict(json.loads(row["body"])) if row else None

    async def live(self, now: float) -> list[Grant]:
        async with self._conn.execute(
            "SELECT body FROM grants WHERE expires_at > ? AND revoked_at IS NULL"
            " ORDER BY json_extract(body, '$.created_at')",
            (now,),
        ) as cur:
            rows = await cur.fetchall()
        return [Grant.from_dict(json.loads(r["body"])) for r in rows]

    async def revoke(self, grant_id: str, *, by: str, now: float) -> Grant | None:
        # One statement: two revokes of one grant, from two processes, have one winner.
        async with self._conn.execute(
            "UPDATE grants SET revoked_at = ?,"
            " body = json_set(body, '$.revoked_at', ?, '$.revoked_by', ?)"
            " WHERE id = ? AND revoked_at IS NULL AND expires_at > ? RETURNING body",
            (now, now, by, grant_id, now),
        ) as cur:
            row = await cur.fetchone()
        return Grant.from_dict(json.loads(row["body"])) if row else None

    async def record(self, event: GrantEvent) -> None:
        await self._conn.execute(
            "INSERT INTO grant_events (grant_id, at, kind, actor, detail) VALUES (?, ?, ?, ?, ?)",
            (event.grant_id, event.at, event.kind, event.actor, event.detail),
        )

    async def events(self, grant_id: str) -> list[GrantEvent]:
        async with self._conn.execute(
            "SELECT grant_id, at, kind, actor, detail FROM grant_events WHERE grant_id = ?"
            " ORDER BY seq",
            (grant_id,),
        ) as cur:
            rows = await cur.fetchall()
        return [GrantEvent(**dict(r)) for r in rows]


def _body(grant: Grant) -> str:
    return json.dumps(grant.to_dict(), ensure_ascii=False, separators=(",", ":"), default=str)
