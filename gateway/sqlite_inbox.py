"""The inbox in SQLite: its own file, ``inbox.db``, in the data dir.

Its own file rather than a table in ``confirmations.db``: the two are written at
different rates by different parts, and neither should wait on the other's write lock.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from pathlib import Path

import aiosqlite
import structlog

from gateway.bus import InboundMessage
from gateway.inbox import Inbox, dump_message, load_message, message_key

log = structlog.get_logger(__name__)

SCHEMA_VERSION = 2

_SCHEMA = (
    # seq: the order messages were put, for untaken() "oldest first".
    """CREATE TABLE IF NOT EXISTS inbox (
        seq         INTEGER PRIMARY KEY,
        channel     TEXT NOT NULL,
        message_id  TEXT NOT NULL,
        body        TEXT NOT NULL,  -- InboundMessage.to_dict() as JSON
        stored_at   REAL NOT NULL,
        taken_at    REAL,           -- NULL: still to be processed
        owner       TEXT,           -- the instance that put or adopted it (NULL: v1 rows)
        UNIQUE (channel, message_id)
    )""",
    # untaken() reads taken_at IS NULL at start; purge() reads taken_at < T.
    "CREATE INDEX IF NOT EXISTS inbox_taken ON inbox (taken_at)",
)


class SqliteInbox(Inbox):
    """Inbound messages in one SQLite file; ``open(path)`` makes it.

    Takes an ``aiosqlite`` connection in autocommit mode: every method is one statement,
    so one thread hop, and atomic without a transaction around it.
    """

    def __init__(self, conn: aiosqlite.Connection, *, owner: str | None = None) -> None:
        super().__init__(owner=owner)
        self._conn = conn

    @classmethod
    async def open(
        cls, path: str | Path, *, owner: str | None = None, busy_timeout_ms: int = 5_000
    ) -> SqliteInbox:
        """Open (and create if needed) the file, in WAL mode, with the schema."""
        conn = await aiosqlite.connect(str(path), isolation_level=None)
        try:
            await conn.execute("PRAGMA journal_mode = WAL")
            # FULL: put() returning means the message survives a power cut too, and the
            # platform is told we have it right after. NORMAL would survive kill -9 alike
            # (the WAL is in the OS's cache) but a power cut could lose the last messages
            # already acknowledged: the platform would never send them again.
            await conn.execute("PRAGMA synchronous = FULL")
            await conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            for statement in _SCHEMA:
                await conn.execute(statement)
            cursor = await conn.execute("PRAGMA user_version")
            row = await cursor.fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"inbox database {path} has schema {version}, this gateway knows "
                    f"{SCHEMA_VERSION}: upgrade the gateway or use another data_dir"
                )
            if version == 1:  # issue 13: owners; a v1 row has none, any process adopts it
                await conn.execute("ALTER TABLE inbox ADD COLUMN owner TEXT")
            await conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            await conn.close()
            raise
        log.info("inbox.sqlite_opened", path=str(path))
        return cls(conn, owner=owner)

    async def close(self) -> None:
        await self._conn.close()

    async def put(self, msg: InboundMessage) -> bool:
        channel, message_id = message_key(msg)
        cursor = await self._conn.execute(
            "INSERT OR IGNORE INTO inbox (channel, message_id, body, stored_at, owner)"
            " VALUES (?, ?, ?, ?, ?)",
            (channel, message_id, dump_message(msg), time.time(), self.owner),
        )
        return cursor.rowcount == 1

    async def taken(self, channel: str, message_id: str, *, at: float | None = None) -> None:
        await self._conn.execute(
            "UPDATE inbox SET taken_at = ?"
            " WHERE channel = ? AND message_id = ? AND taken_at IS NULL",
            (time.time() if at is None else at, channel, message_id),
        )

    async def adopt(self, alive: Collection[str]) -> list[InboundMessage]:
        keep = [self.owner, *alive]
        marks = ", ".join("?" * len(keep))
        # One statement: atomic against another process adopting from the same file.
        cursor = await self._conn.execute(
            f"UPDATE inbox SET owner = ? WHERE taken_at IS NULL"
            f" AND (owner IS NULL OR owner NOT IN ({marks})) RETURNING seq, body",
            (self.owner, *keep),
        )
        rows = sorted(await cursor.fetchall())  # RETURNING has no ORDER BY
        return [load_message(body) for _, body in rows]

    async def untaken(self) -> list[InboundMessage]:
        cursor = await self._conn.execute(
            "SELECT body FROM inbox WHERE taken_at IS NULL ORDER BY seq"
        )
        rows = await cursor.fetchall()
        return [load_message(row[0]) for row in rows]

    async def purge(self, before: float) -> int:
        cursor = await self._conn.execute("DELETE FROM inbox WHERE taken_at < ?", (before,))
        return cursor.rowcount
