"""One SQLite connection on one worker thread: each store operation is one thread hop.

Why not aiosqlite: it hops to its thread and back for every statement and every fetch, so
a confirmation round trip (create, list_pending, finish) cost 12 hops; here each store
operation runs whole on the thread as one function, 3 hops for that round trip
(docs/performance.md, "Store cost at 100k pending", bench/store_backlog.py). One thread
also serialises the operations of a handle, so no lock is needed to keep a transaction's
statements together.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal, TypeVar

T = TypeVar("T")


class SqliteThread:
    """Runs functions of a ``sqlite3.Connection`` on the one thread that owns it."""

    def __init__(self, executor: ThreadPoolExecutor, conn: sqlite3.Connection) -> None:
        self._executor = executor
        self._conn = conn
        self._closed = False

    @classmethod
    async def connect(
        cls,
        path: str | Path,
        *,
        busy_timeout_ms: int,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        thread_name: str = "sqlite-confirm",
    ) -> SqliteThread:
        """Open ``path`` in autocommit mode on a new thread, in WAL mode.

        ``synchronous``: FULL fsyncs the WAL on every commit; NORMAL only at checkpoints
        (a commit survives the process dying, not a power cut: see the inbox for when
        that is the right trade).
        """
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(str(path), isolation_level=None)
            try:
                conn.row_factory = sqlite3.Row
                # WAL: readers never block the writer. The confirmation store keeps
                # synchronous=FULL: a decision that was reported as made survives a power
                # cut, not only a process crash.
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {synchronous}")
                conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            except BaseException:
                conn.close()
                raise
            return conn

        try:
            conn = await asyncio.get_running_loop().run_in_executor(executor, connect)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(executor, conn)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(conn)`` on the thread: one hop there and back."""
        if self._closed:
            raise ValueError("the confirmations database is closed: no active connection")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, self._conn)

    async def close(self) -> None:
        """Close the connection and let the thread end; a second call does nothing."""
        if self._closed:
            return
        try:
            await self.run(sqlite3.Connection.close)
        finally:
            self._closed = True
            self._executor.shutdown(wait=False)


def transaction(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``fn(conn)`` between ``BEGIN IMMEDIATE`` and ``COMMIT``; rolled back on error.

    IMMEDIATE takes the write lock up front, so two processes on one file queue at BEGIN
    (within busy_timeout) instead of failing later with SQLITE_BUSY mid-transaction.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result
