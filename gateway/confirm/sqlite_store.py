"""SQLite backend: the embedded default of ``gateway serve``.

Durable (WAL, fsync on commit) and auditable: every create and every status change also
appends a row to ``confirmation_events`` in the same transaction, so the log and the
records never disagree. Several processes may share one file: the compare-and-set is a
single ``UPDATE ... WHERE status = 'pending'``, which SQLite serialises with its write lock.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite
import structlog

from gateway.confirm.model import AuditEvent, Confirmation, ExecState, Instance, Status
from gateway.confirm.store import ConfirmationExistsError, ConfirmationStore, FinishedIds

log = structlog.get_logger(__name__)

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS confirmations (
    id           TEXT PRIMARY KEY,
    session_key  TEXT NOT NULL,
    channel      TEXT NOT NULL,
    chat_id      TEXT NOT NULL,
    requester    TEXT NOT NULL,
    is_group     INTEGER NOT NULL,
    tool_call    TEXT NOT NULL,              -- JSON {name, args, call_id}
    summary      TEXT NOT NULL,
    details      TEXT NOT NULL DEFAULT '{}', -- JSON
    risk         TEXT NOT NULL,
    approvers    TEXT NOT NULL DEFAULT '[]', -- JSON list
    four_eyes    INTEGER NOT NULL DEFAULT 0,
    created_at   REAL NOT NULL,
    expires_at   REAL NOT NULL,
    status       TEXT NOT NULL,
    decided_by   TEXT,
    decided_at   REAL,
    decided_via  TEXT,
    reason       TEXT,
    feedback     INTEGER NOT NULL DEFAULT 0,
    prompt_refs  TEXT NOT NULL DEFAULT '{}'  -- JSON {key: value}
);
CREATE INDEX IF NOT EXISTS confirmations_session_status
    ON confirmations (session_key, status);
CREATE INDEX IF NOT EXISTS confirmations_status_created
    ON confirmations (status, created_at);
CREATE INDEX IF NOT EXISTS confirmations_created
    ON confirmations (created_at);

CREATE TABLE IF NOT EXISTS confirmation_events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    id      TEXT NOT NULL,   -- the confirmation id
    at      REAL NOT NULL,
    status  TEXT NOT NULL,   -- the status the confirmation entered
    actor   TEXT,
    via     TEXT,
    reason  TEXT
);
CREATE INDEX IF NOT EXISTS confirmation_events_id ON confirmation_events (id);
-- The audit log is append-only: rewriting history must fail loudly, not silently succeed.
CREATE TRIGGER IF NOT EXISTS confirmation_events_no_update
    BEFORE UPDATE ON confirmation_events
    BEGIN SELECT RAISE(ABORT, 'confirmation_events is append-only'); END;
CREATE TRIGGER IF NOT EXISTS confirmation_events_no_delete
    BEFORE DELETE ON confirmation_events
    BEGIN SELECT RAISE(ABORT, 'confirmation_events is append-only'); END;
"""

_COLUMNS = (
    "id, session_key, channel, chat_id, requester, is_group, tool_call, summary, details,"
    " risk, approvers, four_eyes, created_at, expires_at, status, decided_by, decided_at,"
    " decided_via, reason, feedback, prompt_refs"
)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One row of the append-only audit log."""

    seq: int
    confirmation_id: str
    at: float
    status: Status
    actor: str | None
    via: str | None
    reason: str | None


def _json(value: Any) -> str:
    # default=str: details come from tools and may hold a Decimal or a date; the audit copy
    # is for people, so a string rendering beats refusing to store the confirmation.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _row_to_confirmation(row: sqlite3.Row) -> Confirmation:
    return Confirmation.from_dict(
        {
            "id": row["id"],
            "session_key": row["session_key"],
            "channel": row["channel"],
            "chat_id": row["chat_id"],
            "requester": row["requester"],
            "is_group": bool(row["is_group"]),
            "tool_call": json.loads(row["tool_call"]),
            "summary": row["summary"],
            "details": json.loads(row["details"]),
            "risk": row["risk"],
            "approvers": json.loads(row["approvers"]),
            "four_eyes": bool(row["four_eyes"]),
            "created_at": row["created_at"],
            "expires_at": row["expires_at"],
            "status": row["status"],
            "decided_by": row["decided_by"],
            "decided_at": row["decided_at"],
            "decided_via": row["decided_via"],
            "reason": row["reason"],
            "feedback": bool(row["feedback"]),
            "prompt_refs": json.loads(row["prompt_refs"]),
        }
    )


class SqliteConfirmationStore(ConfirmationStore):
    """Confirmations in one SQLite file, with an append-only audit log.

    Takes an open ``aiosqlite`` connection (autocommit mode, ``isolation_level=None``);
    ``open(path)`` makes one with WAL and the schema. One connection is one thread, and
    a transaction on it is shared by every coroutine using it, so an ``asyncio.Lock``
    keeps each operation's statements together.
    """

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._conn.row_factory = sqlite3.Row
        self._lock = asyncio.Lock()
        self._finished = FinishedIds()

    @classmethod
    async def open(
        cls, path: str | Path, *, busy_timeout_ms: int = 5_000
    ) -> SqliteConfirmationStore:
        """Open (and create if needed) the database file, in WAL mode, with the schema."""
        conn = await aiosqlite.connect(str(path), isolation_level=None)
        try:
            # WAL: readers never block the writer; synchronous=FULL: a decision that was
            # reported as made survives a power cut, not only a process crash.
            await conn.execute("PRAGMA journal_mode = WAL")
            await conn.execute("PRAGMA synchronous = FULL")
            await conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            store = cls(conn)
            await store.migrate()
        except BaseException:
            await conn.close()
            raise
        log.info("confirm.sqlite_opened", path=str(path))
        return store

    async def migrate(self) -> None:
        """Create the tables if missing; refuse a file written by a newer schema."""
        async with self._transaction():
            # IF NOT EXISTS everywhere: opening an existing file is a no-op.
            for statement in _split_script(_SCHEMA):
                await self._conn.execute(statement)
            cursor = await self._conn.execute("PRAGMA user_version")
            row = await cursor.fetchone()
            version = int(row[0]) if row else 0
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"confirmations database has schema {version}, this gateway knows "
                    f"{SCHEMA_VERSION}: upgrade the gateway or use another data_dir"
                )
            await self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    async def close(self) -> None:
        await self._conn.close()

    async def create(self, confirmation: Confirmation) -> None:
        c = confirmation
        values = (
            c.id,
            c.session_key,
            c.channel,
            c.chat_id,
            c.requester,
            int(c.is_group),
            _json(c.tool_call.to_dict()),
            c.summary,
            _json(dict(c.details)),
            c.risk.value,
            _json(list(c.approvers)),
            int(c.four_eyes),
            c.created_at,
            c.expires_at,
            c.status.value,
            c.decided_by,
            c.decided_at,
            c.decided_via,
            c.reason,
            int(c.feedback),
            _json(dict(c.prompt_refs)),
        )
        async with self._transaction():
            try:
                await self._conn.execute(
                    f"INSERT INTO confirmations ({_COLUMNS}) VALUES ({', '.join('?' * 21)})",
                    values,
                )
            except sqlite3.IntegrityError as exc:
                raise ConfirmationExistsError(c.id) from exc
            await self._append_event(
                c.id,
                at=c.created_at,
                status=c.status,
                actor=c.requester,
                via=c.channel,
                reason=None,
            )

    async def get(self, confirmation_id: str) -> Confirmation | None:
        async with self._lock:
            return await self._get(confirmation_id)

    async def list_pending(self, session_key: str) -> list[Confirmation]:
        return await self._select(
            "WHERE session_key = ? AND status = 'pending' ORDER BY created_at, rowid",
            (session_key,),
        )

    async def _list_first(
        self,
        *,
        status: Status | None = None,
        session_key: str | None = None,
        limit: int = 200,
    ) -> list[Confirmation]:
        clauses: list[str] = []
        params: list[Any] = []
        if status is not None:
            clauses.append("status = ?")
            params.append(status.value)
        if session_key is not None:
            clauses.append("session_key = ?")
            params.append(session_key)
        where = f"WHERE {' AND '.join(clauses)} " if clauses else ""
        params.append(max(0, limit))
        return await self._select(f"{where}ORDER BY created_at DESC, rowid DESC LIMIT ?", params)

    async def list_all_pending(self) -> builtins.list[Confirmation]:
        return await self._select("WHERE status = 'pending' ORDER BY created_at, rowid", ())

    async def finish(
        self,
        confirmation_id: str,
        status: Status,
        *,
        by: str | None,
        via: str | None,
        reason: str | None,
        now: float,
        feedback: bool = False,
    ) -> tuple[Confirmation | None, bool]:
        if not status.is_terminal:
            raise ValueError("finish() moves a confirmation to a terminal status")
        # A person's decision counts only before the deadline; expiry and cancellation
        # are allowed whenever the record is still pending.
        needs_deadline = status in (Status.APPROVED, Status.REJECTED)
        async with self._transaction():
            cursor = await self._conn.execute(
                "UPDATE confirmations SET status = ?, decided_by = ?, decided_at = ?,"
                " decided_via = ?, reason = ?, feedback = ?"
                " WHERE id = ? AND status = 'pending' AND (? = 0 OR expires_at > ?)",
                (
                    status.value,
                    by,
                    now,
                    via,
                    reason,
                    int(feedback),
                    confirmation_id,
                    int(needs_deadline),
                    now,
                ),
            )
            changed = cursor.rowcount == 1
            if changed:
                await self._append_event(
                    confirmation_id, at=now, status=status, actor=by, via=via, reason=reason
                )
            current = await self._get(confirmation_id)
        if changed:
            self._finished.announce(confirmation_id)
        return current, changed

    def finished_feed(self) -> AbstractAsyncContextManager[AsyncIterator[str]]:
        # Not shared (one gateway serves a data dir): its own finishes are the whole feed.
        return self._finished.feed()

    async def set_prompt_ref(self, confirmation_id: str, key: str, value: str) -> None:
        async with self._transaction():
            cursor = await self._conn.execute(
                "SELECT prompt_refs FROM confirmations WHERE id = ?", (confirmation_id,)
            )
            row = await cursor.fetchone()
            if row is None:
                return
            refs = {**json.loads(row["prompt_refs"]), key: value}
            await self._conn.execute(
                "UPDATE confirmations SET prompt_refs = ? WHERE id = ?",
                (_json(refs), confirmation_id),
            )

    async def audit_log(self, confirmation_id: str | None = None) -> builtins.list[AuditEntry]:
        """The audit rows, oldest first; of one confirmation when an id is given."""
        where, params = ("WHERE id = ? ", (confirmation_id,)) if confirmation_id else ("", ())
        async with self._lock:
            cursor = await self._conn.execute(
                f"SELECT seq, id, at, status, actor, via, reason FROM confirmation_events "
                f"{where}ORDER BY seq",
                params,
            )
            rows = await cursor.fetchall()
        return [
            AuditEntry(
                seq=r["seq"],
                confirmation_id=r["id"],
                at=r["at"],
                status=Status(r["status"]),
                actor=r["actor"],
                via=r["via"],
                reason=r["reason"],
            )
            for r in rows
        ]

    # -- internals ---------------------------------------------------------------------------

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn, self._lock)

    async def _append_event(
        self,
        confirmation_id: str,
        *,
        at: float,
        status: Status,
        actor: str | None,
        via: str | None,
        reason: str | None,
    ) -> None:
        await self._conn.execute(
            "INSERT INTO confirmation_events (id, at, status, actor, via, reason)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (confirmation_id, at, status.value, actor, via, reason),
        )

    async def _get(self, confirmation_id: str) -> Confirmation | None:
        cursor = await self._conn.execute(
            f"SELECT {_COLUMNS} FROM confirmations WHERE id = ?", (confirmation_id,)
        )
        row = await cursor.fetchone()
        return None if row is None else _row_to_confirmation(row)

    async def _select(self, tail: str, params: Any) -> builtins.list[Confirmation]:
        async with self._lock:
            cursor = await self._conn.execute(
                f"SELECT {_COLUMNS} FROM confirmations {tail}", params
            )
            rows = await cursor.fetchall()
        return [_row_to_confirmation(r) for r in rows]

    # ------------------------------------------------------------ the execution ledger
    # Not yet on this backend: the ledger lands here next (issue 12). The service does not
    # call these yet; the ledger contract suite lists only the backends that have them.

    async def claim(
        self, confirmation_id: str, *, instance: str, now: float, lease: float
    ) -> Confirmation | None:
        raise NotImplementedError

    async def start_execution(
        self, confirmation_id: str, *, instance: str, now: float
    ) -> Confirmation | None:
        raise NotImplementedError

    async def finish_execution(
        self,
        confirmation_id: str,
        *,
        instance: str,
        state: ExecState,
        result: str | None,
        now: float,
    ) -> Confirmation | None:
        raise NotImplementedError

    async def adopt(
        self, confirmation_id: str, *, from_owner: str | None, to_owner: str
    ) -> Confirmation | None:
        raise NotImplementedError

    async def list_unsettled(self, *, instance: str) -> builtins.list[Confirmation]:
        raise NotImplementedError

    async def list_approved_waiting(self) -> builtins.list[Confirmation]:
        raise NotImplementedError

    async def heartbeat(self, instance: Instance, *, lease: float) -> None:
        raise NotImplementedError

    async def list_instances(self) -> builtins.list[Instance]:
        raise NotImplementedError

    async def forget_instance(self, instance_id: str) -> None:
        raise NotImplementedError

    async def add_event(self, event: AuditEvent) -> None:
        raise NotImplementedError

    async def events(self, confirmation_id: str) -> builtins.list[AuditEvent]:
        raise NotImplementedError

    async def purge(self, *, before: float) -> int:
        raise NotImplementedError

    async def page(
        self,
        *,
        status: Status | None = None,
        session_key: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[builtins.list[Confirmation], str | None]:
        items = await self._list_first(status=status, session_key=session_key, limit=limit)
        return items, None

    async def count(self, status: Status) -> int:
        raise NotImplementedError


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` under the store's lock; rolls back on error.

    IMMEDIATE takes the write lock up front, so two processes on one file queue at BEGIN
    (within busy_timeout) instead of failing later with SQLITE_BUSY mid-transaction.
    """

    def __init__(self, conn: aiosqlite.Connection, lock: asyncio.Lock) -> None:
        self._conn = conn
        self._lock = lock

    async def __aenter__(self) -> None:
        await self._lock.acquire()
        try:
            await self._conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._lock.release()
            raise

    async def __aexit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        try:
            await self._conn.execute("COMMIT" if exc_type is None else "ROLLBACK")
        finally:
            self._lock.release()


def _split_script(script: str) -> list[str]:
    """Statements of the schema script (triggers keep their inner ``;``)."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--") and not buffer.strip():
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    return [s for s in statements if s]
