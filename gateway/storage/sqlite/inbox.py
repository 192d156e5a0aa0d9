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

``put`` and ``taken``, one of each per inbound message on the way to its answer, run on
the gateway's loop through a connection of their own: without an fsync a one-row commit
takes tens of µs, where handing it to a thread and back cost several times that (waking
the thread was a third of the loop's CPU per Feishu event; with it the two writes were
about 360 of 760 µs per web chat message in bench/ingest.py). The thread keeps what can
take long: opening and migrating, the scans (untaken, adopt), the purge (in chunks, so a
put never waits long for the write lock) and the checkpoints, which are the only fsyncs.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Collection
from pathlib import Path

import structlog

from gateway.bus import InboundMessage
from gateway.runtime import BackgroundTasks
from gateway.storage.inbox import Inbox, dump_message, load_message, message_key
from gateway.storage.sqlite.thread import SqliteThread

log = structlog.get_logger(__name__)

SCHEMA_VERSION = 2
# Writes on the loop between two checkpoints on the thread (a WAL of a few MB).
CHECKPOINT_EVERY = 500
# Should the WAL still grow past this many pages (checkpoints that never catch up with a
# loop that never pauses), the loop's connection checkpoints once itself: a few ms.
BACKSTOP_PAGES = 20_000
# At most this long does a put wait for the write lock (held by the thread's purge, one
# chunk at a time) before it fails: not stored, so not acknowledged.
WRITER_BUSY_MS = 1_000
PURGE_CHUNK = 1_000

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

    Every method is one statement (the purge a few), in autocommit mode: atomic without
    a transaction around it. ``put`` and ``taken`` run on the loop (see the module
    docstring), the rest on the file's ``SqliteThread``.
    """

    def __init__(
        self,
        db: SqliteThread,
        writer: sqlite3.Connection,
        *,
        owner: str | None = None,
        checkpoint_every: int = CHECKPOINT_EVERY,
    ) -> None:
        super().__init__(owner=owner)
        self._db = db
        self._writer = writer
        self._checkpoint_every = checkpoint_every
        self._writes = 0
        self._checkpoints = BackgroundTasks("inbox")

    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        owner: str | None = None,
        busy_timeout_ms: int = 5_000,
        checkpoint_every: int = CHECKPOINT_EVERY,
    ) -> SqliteInbox:
        """Open (and create if needed) the file, in WAL mode, with the schema."""
        db = await SqliteThread.connect(
            path, busy_timeout_ms=busy_timeout_ms, synchronous="NORMAL", thread_name="inbox"
        )
        try:
            version = await db.run(_migrate)
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"inbox database {path} has schema {version}, this gateway knows "
                    f"{SCHEMA_VERSION}: upgrade the gateway or use another data_dir"
                )
            writer = _loop_writer(path, busy_timeout_ms=min(busy_timeout_ms, WRITER_BUSY_MS))
        except BaseException:
            await db.close()
            raise
        log.info("inbox.sqlite_opened", path=str(path))
        return cls(db, writer, owner=owner, checkpoint_every=checkpoint_every)

    async def close(self) -> None:
        await self._checkpoints.stop(5.0)
        self._writer.close()
        await self._db.close()

    async def put(self, msg: InboundMessage) -> bool:
        channel, message_id = message_key(msg)
        row = (channel, message_id, dump_message(msg), time.time(), self.owner)
        stored = self._writer.execute(_PUT, row).rowcount == 1
        self._wrote()
        return stored

    async def taken(self, channel: str, message_id: str, *, at: float | None = None) -> None:
        self._writer.execute(_TAKEN, (time.time() if at is None else at, channel, message_id))
        self._wrote()

    def _wrote(self) -> None:
        # The thread copies the WAL into the file (and fsyncs) every so many writes, so
        # the loop's connection never has to (its own checkpoint is only a backstop).
        self._writes += 1
        if self._writes >= self._checkpoint_every and not self._checkpoints:
            self._writes = 0
            self._checkpoints.spawn(self._db.run(_checkpoint), name="inbox-checkpoint")

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
        # In chunks: the loop's put waits for the write lock at most one chunk long.
        sql = (
            "DELETE FROM inbox WHERE seq IN"
            f" (SELECT seq FROM inbox WHERE taken_at < ? LIMIT {PURGE_CHUNK})"
        )
        purged = 0
        while True:
            count = await self._db.run(lambda conn: conn.execute(sql, (before,)).rowcount)
            purged += count
            if count < PURGE_CHUNK:
                return purged


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


def _loop_writer(path: str | Path, *, busy_timeout_ms: int) -> sqlite3.Connection:
    """The connection ``put`` and ``taken`` use, on the loop (the file is in WAL mode)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")
    except BaseException:
        conn.close()
        raise
    return conn


def _checkpoint(conn: sqlite3.Connection) -> None:
    # PASSIVE: never waits for (or holds up) the loop's writes.
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
