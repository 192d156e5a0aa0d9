"""Conversations in SQLite: a ``conversations`` table in the confirmation store's file.

One row per session: its kept messages as a JSON array, and ``written``, a counter that
orders sessions by their last write (the least recently written go first past
``max_sessions``; a counter, not a clock, so the order never depends on the time of day).
Its own connection on its own ``SqliteThread``; the confirmation schema's version is not
touched (the table is created if missing, as the grants' are).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from gateway.storage.conversations import ConversationStore, Message, trim_history
from gateway.storage.sqlite.thread import SqliteThread, transaction

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS conversations (
        key       TEXT PRIMARY KEY,
        messages  TEXT NOT NULL,     -- JSON array, oldest first
        written   INTEGER NOT NULL   -- order of the last write, over all sessions
    )""",
    "CREATE INDEX IF NOT EXISTS conversations_written ON conversations (written)",
)


class SqliteConversationStore(ConversationStore):
    def __init__(self, db: SqliteThread, *, max_messages: int, max_sessions: int) -> None:
        super().__init__(max_messages=max_messages, max_sessions=max_sessions)
        self._db = db

    @classmethod
    async def open(
        cls, path: Path, *, max_messages: int, max_sessions: int, busy_timeout_ms: int = 5_000
    ) -> SqliteConversationStore:
        db = await SqliteThread.connect(
            path, busy_timeout_ms=busy_timeout_ms, thread_name="sqlite-conversations"
        )
        try:
            await db.run(_create)
        except BaseException:
            await db.close()
            raise
        return cls(db, max_messages=max_messages, max_sessions=max_sessions)

    async def close(self) -> None:
        await self._db.close()

    async def load(self, key: str) -> list[Message]:
        def load(conn: sqlite3.Connection) -> list[Message]:
            row = conn.execute("SELECT messages FROM conversations WHERE key = ?", (key,))
            found = row.fetchone()
            return list(json.loads(found["messages"])) if found else []

        return await self._db.run(load)

    async def append(self, key: str, added: Sequence[Message]) -> None:
        def append(conn: sqlite3.Connection) -> None:
            found = conn.execute(
                "SELECT messages FROM conversations WHERE key = ?", (key,)
            ).fetchone()
            kept = json.loads(found["messages"]) if found else []
            messages = trim_history([*kept, *added], self.max_messages)
            conn.execute(
                "INSERT INTO conversations (key, messages, written) VALUES"
                " (?, ?, (SELECT coalesce(max(written), 0) + 1 FROM conversations))"
                " ON CONFLICT (key) DO UPDATE SET"
                " messages = excluded.messages, written = excluded.written",
                (key, json.dumps(messages, ensure_ascii=False)),
            )
            if found is None:  # one more session: drop the least recently written past the cap
                conn.execute(
                    "DELETE FROM conversations WHERE written <= (SELECT written FROM"
                    " conversations ORDER BY written DESC LIMIT 1 OFFSET ?)",
                    (self.max_sessions,),
                )

        await self._db.run(lambda conn: transaction(conn, append))

    async def forget(self, key: str) -> None:
        await self._db.run(
            lambda conn: conn.execute("DELETE FROM conversations WHERE key = ?", (key,))
        )


def _create(conn: sqlite3.Connection) -> None:
    for statement in _SCHEMA:
        conn.execute(statement)
