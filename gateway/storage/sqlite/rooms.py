"""Web chat rooms in SQLite: a ``room_entries`` table in the confirmation store's file.

One row per kept entry: its number (``seq``, over all rooms), its room, and its fields as
``RoomEntry.dump()`` gives them. The process owns the data dir, so what it keeps in memory is
what the table holds: the table is read once, when the store opens, and then only written.
Its own connection on its own ``SqliteThread``; the confirmation schema's version is not
touched (the table is created if missing, as the conversations' is).

Written behind, in one transaction every ``WRITE_DELAY_SECONDS``: each entry is inserted
once, and what the bounds drop is deleted, in the same transaction, each a single statement
over a JSON array of rows. Why (bench/ingest.py, docs/performance.md): written one by one,
the two entries of a web chat message would cost a thread hop and a commit each (some 25 %
of a message's CPU); batched with ``executemany``, the thread took the GIL back from the
busy loop for every row (7-10 %); a single statement per batch costs a few µs an entry.
``close`` writes what is left, so a restart keeps every line; a process that dies (kill -9)
loses the lines of its last ``WRITE_DELAY_SECONDS`` (docs/deploy.md, "What a crash can
lose"). ``synchronous=NORMAL``: a commit is in the WAL when it returns, fsynced at
checkpoints.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from gateway.runtime import BackgroundTasks
from gateway.storage.rooms import RoomBounds, RoomEntry, RoomStore
from gateway.storage.sqlite.thread import SqliteThread, transaction

WRITE_DELAY_SECONDS = 0.05

_SCHEMA = (
    # No AUTOINCREMENT (a write to sqlite_sequence on every insert): the bounds never drop
    # the newest entry, so max(seq) is the last number given out, and the next process
    # goes on from it.
    """CREATE TABLE IF NOT EXISTS room_entries (
        seq    INTEGER PRIMARY KEY,
        room   TEXT NOT NULL,
        entry  TEXT NOT NULL  -- RoomEntry.dump(): a JSON array, ASCII
    )""",
)
# ?: a JSON array of [seq, room, entry] rows; of numbers.
_PUT = (
    "INSERT INTO room_entries (seq, room, entry) SELECT json_extract(value, '$[0]'),"
    " json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?)"
)
_DROP = "DELETE FROM room_entries WHERE seq IN (SELECT value FROM json_each(?))"


class SqliteRoomStore(RoomStore):
    def __init__(self, db: SqliteThread, bounds: RoomBounds) -> None:
        super().__init__(bounds)
        self._db = db
        self._puts: list[tuple[int, str, str]] = []
        self._drops: list[int] = []
        self._waiting: asyncio.Task[None] | None = None  # a write, sleeping its delay
        self._writes = BackgroundTasks("webchat.rooms")

    @classmethod
    async def open(
        cls, path: Path, bounds: RoomBounds, *, busy_timeout_ms: int = 5_000
    ) -> SqliteRoomStore:
        db = await SqliteThread.connect(
            path, busy_timeout_ms=busy_timeout_ms, synchronous="NORMAL", thread_name="sqlite-rooms"
        )
        try:
            rows = await db.run(_load)
            store = cls(db, bounds)
            entries = (RoomEntry.load(room, seq, dumped) for seq, room, dumped in rows)
            store.kept.restore(entries, rows[-1][0] if rows else 0)
            # Bounds made smaller since: what they drop now goes from the table too.
            kept = {e.seq for e in store.kept.entries()}
            store._drops = [seq for seq, _, _ in rows if seq not in kept]
        except BaseException:
            await db.close()
            raise
        return store

    async def append(self, entry: RoomEntry) -> RoomEntry:
        numbered = entry.numbered(self.kept.last_seq + 1)
        dropped = self._keep(numbered)
        self._puts.append((numbered.seq, numbered.room, numbered.dump()))
        self._drops.extend(gone.seq for gone in dropped)
        if self._waiting is None:
            self._waiting = self._writes.spawn(self._write_later(), name="webchat-rooms-write")
        return numbered

    async def _write_later(self) -> None:
        await asyncio.sleep(WRITE_DELAY_SECONDS)
        self._waiting = None  # from here on, close() lets this write finish
        await self._write()

    async def _write(self) -> None:
        puts, drops = self._puts, self._drops
        self._puts, self._drops = [], []
        if not puts and not drops:
            return
        rows, seqs = json.dumps(puts), json.dumps(drops)

        def write(conn: sqlite3.Connection) -> None:
            if puts:
                conn.execute(_PUT, (rows,))
            if drops:
                conn.execute(_DROP, (seqs,))

        # One thread: writes land in the order they were handed over.
        await self._db.run(lambda conn: transaction(conn, write))

    async def close(self) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None
        try:
            await self._write()
            await self._writes.drain(5.0)
        finally:
            await self._db.close()


def _load(conn: sqlite3.Connection) -> list[tuple[int, str, str]]:
    for statement in _SCHEMA:
        conn.execute(statement)
    rows = conn.execute("SELECT seq, room, entry FROM room_entries ORDER BY seq")
    return [(int(seq), str(room), str(entry)) for seq, room, entry in rows]
