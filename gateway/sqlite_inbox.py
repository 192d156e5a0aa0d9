"""The inbox in SQLite: its own file, ``inbox.db``, in the data dir.

Its own file rather than a table in ``confirmations.db``: the two are written at
different rates by different parts, and neither should wait on the other's write lock.

Durable against the process dying (kill -9, OOM, a crash), which is what the inbox
promises; an OS crash or power cut may lose the last stored messages. WAL with
``synchronous=NORMAL``: a commit is in the WAL file (the OS's page cache) when ``put``
returns, and the WAL is fsynced only at checkpoints. The fsync on every commit
(``synchronous=FULL``) was the largest single cost of an inbound message: about 400 of
1,500-1,800 µs of server CPU per web chat message (bench/ingest.py, docs/performance.md),
paid on every message against the case where the whole machine goes down within seconds
after the platform was told we have the message. docs/deploy.md ("What a crash can lose")
says so to operators.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import structlog

from gateway.bus import InboundMessage
from gateway.confirm.sqlite_thread import SqliteThread, transaction
from gateway.inbox import Inbox, dump_message, load_message, message_key
from gateway.runtime import BackgroundTasks

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

    Runs on its own ``SqliteThread`` in autocommit mode: every method is one statement,
    atomic without a transaction around it. ``put`` and ``taken`` that arrive while
    earlier ones are on the thread are written together next, in one transaction and
    one thread hop (group commit): the hop, not the statement, was most of what a put
    cost (bench/ingest_nanobot.py).
    """

    def __init__(self, db: SqliteThread, *, owner: str | None = None) -> None:
        super().__init__(owner=owner)
        self._db = db
        self._queued: list[_Write] = []
        self._writing = False
        self._writer = BackgroundTasks("inbox")

    @classmethod
    async def open(
        cls, path: str | Path, *, owner: str | None = None, busy_timeout_ms: int = 5_000
    ) -> SqliteInbox:
        """Open (and create if needed) the file, in WAL mode, with the schema."""
        db = await SqliteThread.connect(
            path, busy_timeout_ms=busy_timeout_ms, synchronous="NORMAL", thread_name="inbox"
        )
        try:
            version = await db.run(_migrate)
        except BaseException:
            await db.close()
            raise
        if version > SCHEMA_VERSION:
            await db.close()
            raise RuntimeError(
                f"inbox database {path} has schema {version}, this gateway knows "
                f"{SCHEMA_VERSION}: upgrade the gateway or use another data_dir"
            )
        log.info("inbox.sqlite_opened", path=str(path))
        return cls(db, owner=owner)

    async def close(self) -> None:
        await self._writer.stop(5.0)  # the writes already queued, then the file
        await self._db.close()

    async def put(self, msg: InboundMessage) -> bool:
        channel, message_id = message_key(msg)
        row = (channel, message_id, dump_message(msg), time.time(), self.owner)
        return await self._write(_PUT, row) == 1

    async def taken(self, channel: str, message_id: str, *, at: float | None = None) -> None:
        await self._write(_TAKEN, (time.time() if at is None else at, channel, message_id))

    async def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        """``sql`` run on the thread with the writes queued beside it; its row count."""
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queued.append((sql, params, done))
        if not self._writing:
            self._writing = True
            self._writer.spawn(self._write_queued(), name="inbox-write")
        return await done

    async def _write_queued(self) -> None:
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                statements = [(sql, params) for sql, params, _ in batch]
                try:
                    counts = await self._db.run(
                        functools.partial(_write_all, statements=statements)
                    )
                except Exception as exc:  # each caller gets it: not stored, not acked
                    for *_, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                    continue
                except BaseException:  # cancelled (close): nothing is waited for in vain
                    for *_, done in batch + self._queued:
                        done.cancel()
                    self._queued = []
                    raise
                for (*_, done), count in zip(batch, counts, strict=True):
                    if not done.done():  # its caller may have given up
                        done.set_result(count)
        finally:
            # No await between the empty queue and here: a write queued after this
            # starts a writer of its own.
            self._writing = False

    async def adopt(self, alive: Collection[str]) -> list[InboundMessage]:
        keep = (self.owner, *alive)
        # One statement: atomic against another process adopting from the same file.
        sql = (
            "UPDATE inbox SET owner = ? WHERE taken_at IS NULL AND (owner IS NULL"
            f" OR owner NOT IN ({', '.join('?' * len(keep))})) RETURNING seq, body"
        )
        rows = await self._db.run(lambda conn: conn.execute(sql, (self.owner, *keep)).fetchall())
        rows.sort(key=lambda row: int(row[0]))  # RETURNING has no ORDER BY
        return [load_message(row[1]) for row in rows]

    async def untaken(self) -> list[InboundMessage]:
        sql = "SELECT body FROM inbox WHERE taken_at IS NULL ORDER BY seq"
        rows = await self._db.run(lambda conn: conn.execute(sql).fetchall())
        return [load_message(row[0]) for row in rows]

    async def purge(self, before: float) -> int:
        sql = "DELETE FROM inbox WHERE taken_at < ?"
        return await self._db.run(lambda conn: conn.execute(sql, (before,)).rowcount)


# A statement, its parameters, and the future its caller awaits (the row count).
_Write = tuple[str, tuple[Any, ...], "asyncio.Future[int]"]


def _write_all(
    conn: sqlite3.Connection, statements: list[tuple[str, tuple[Any, ...]]]
) -> list[int]:
    """Each statement's row count; several in one transaction, which commits once."""
    if len(statements) == 1:
        sql, params = statements[0]
        return [conn.execute(sql, params).rowcount]
    return transaction(
        conn, lambda c: [c.execute(sql, params).rowcount for sql, params in statements]
    )


_PUT = (
    "INSERT OR IGNORE INTO inbox (channel, message_id, body, stored_at, owner)"
    " VALUES (?, ?, ?, ?, ?)"
)
_TAKEN = "UPDATE inbox SET taken_at = ? WHERE channel = ? AND message_id = ? AND taken_at IS NULL"


def _migrate(conn: sqlite3.Connection) -> int:
    """Create the schema; the file's schema version as it was (newer ones are refused)."""
    for statement in _SCHEMA:
        conn.execute(statement)
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version == 1:  # issue 13: owners; a v1 row has none, and any process adopts it
        conn.execute("ALTER TABLE inbox ADD COLUMN owner TEXT")
    if version <= SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return version
