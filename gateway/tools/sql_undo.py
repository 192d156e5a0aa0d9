"""Undo of a SQL change (issue 24, item 3; docs/undo.md): what is kept, and ``sql_undo``.

Keeping: ``sql_modify`` runs each statement of an approved call in one transaction
(``SqlDatabase.modify``). With an ``UndoBook`` it hands that transaction a ``Keeper``,
which, per statement, reads the rows it will change before it runs (``SELECT * ... FOR
UPDATE`` with the statement's own table and WHERE), and what it left after: UPDATE rows by
key again, DELETE keys gone, INSERT rows through ``RETURNING *`` (SQLite >= 3.35,
PostgreSQL, MariaDB >= 10.5). The snapshot is stored (gateway/storage/undo.py) before the
transaction commits: a change that cannot keep its promised undo does not happen.

Not undoable, said on the card before anyone approves (``undo_verdicts``, from the
preview): DDL and other kinds; several tables, a data-modifying CTE, an upsert; a table
without a primary or unique key; an UPDATE of a key column; more than ``undo_max_rows``.

Undoing: ``sql_undo`` is a tool like any other, held for a person (``UNDO_ALWAYS_HELD``),
with its own preview of the rows it restores. Its run takes the snapshot once
(``UndoStore.claim``), checks in its transaction that every row is as the change left it
(else it refuses and names the keys, and gives the snapshot back), then restores: deleted
rows inserted again, updated rows set back by key, inserted rows deleted — statements in
reverse order. Its asking, running and refusal are audit events on the original record.

One module on purpose (past ~600 lines): keeping and restoring are the two halves of one
format — how a value is encoded, how a row is found again by key, what "as the change left
it" compares — and each half is only right if the other reads it the same way.
"""

from __future__ import annotations

import asyncio
import base64
import math
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from datetime import time as dtime
from decimal import Decimal
from typing import Any, ClassVar

import structlog
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import text
from sqlalchemy.engine import CursorResult
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlglot import exp

from gateway.confirm.ids import canonical_id, new_call_id
from gateway.confirm.ledger import AuditLog
from gateway.confirm.model import Confirmation, ExecState, Risk, ToolCall
from gateway.confirm.service import ConfirmationService
from gateway.storage.confirmations import ConfirmationStore
from gateway.storage.undo import KeptChange, UndoSnapshot, UndoStore
from gateway.texts import undo as words
from gateway.tools.base import ApprovedRun, Level, Tool, ToolFailedError, ToolPreview
from gateway.tools.runner import ToolOutcome, ToolRunner, TurnContext
from gateway.tools.sql_analysis import SqlAnalysis, SqlStatement
from gateway.tools.sql_effect import table_key

log = structlog.get_logger(__name__)

DAY = 24 * 3600.0
UNDOABLE_KINDS = frozenset({"INSERT", "UPDATE", "DELETE"})
# Keys per IN list when rows are read or restored by key.
_CHUNK = 500
# Rows shown in the undo's preview, as the change's own preview shows them.
_SHOWN = 5
_SHORT = 40


# ------------------------------------------------------------------ values, as kept


def encode(value: Any) -> Any:
    """A database value as JSON keeps it, so that the undo binds the same type back."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, date):
        return {"$date": value.isoformat()}
    if isinstance(value, dtime):
        return {"$time": value.isoformat()}
    if isinstance(value, timedelta):
        return {"$interval": value.total_seconds()}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    return {"$text": str(value)}


def decode(value: Any) -> Any:
    """The value ``encode`` kept, as the driver takes it."""
    if not isinstance(value, dict):
        return value
    (tag, raw), *_ = value.items()
    decoders: dict[str, Callable[[Any], Any]] = {
        "$float": float,
        "$decimal": Decimal,
        "$datetime": datetime.fromisoformat,
        "$date": date.fromisoformat,
        "$time": dtime.fromisoformat,
        "$interval": lambda s: timedelta(seconds=s),
        "$bytes": base64.b64decode,
        "$uuid": uuid.UUID,
        "$text": str,
    }
    return decoders[tag](raw)


def shown(value: Any) -> str:
    """A kept value as a card shows it: a short string."""
    v = decode(value)
    s = "NULL" if v is None else str(v)
    return s if len(s) <= _SHORT else s[: _SHORT - 1] + "…"


# ------------------------------------------------------------------ tables and keys


def _plain_table(e: exp.Expression) -> exp.Table | None:
    node = e.this
    if isinstance(node, exp.Schema):  # INSERT INTO t (a, b)
        node = node.this
    return node if isinstance(node, exp.Table) else None


def _table_sql(table: exp.Table, dialect: str) -> str:
    bare = table.copy()
    bare.set("alias", None)
    return bare.sql(dialect=dialect)


def _table_name(table: exp.Table) -> str:
    """``schema.table`` or ``table``, unquoted, as table_key (the inspector) takes it."""
    return ".".join(p for p in (table.db, table.name) if p)


# ------------------------------------------------------------------ what cannot be undone


def static_refusal(s: SqlStatement) -> str | None:
    """Why ``s`` cannot be undone, as far as its text says; None when it might be."""
    if s.kind not in UNDOABLE_KINDS:
        return words.NOT_UNDOABLE_KIND.format(kind=s.kind)
    e = s.expression
    if s.target is not None and s.target is not e:
        return words.NOT_UNDOABLE_FORM  # a DELETE/UPDATE inside a CTE
    if _plain_table(e) is None or e.args.get("with_") or e.args.get("with"):
        return words.NOT_UNDOABLE_FORM
    if any(e.args.get(k) for k in ("joins", "using", "from", "from_", "tables", "returning")):
        return words.NOT_UNDOABLE_FORM
    if isinstance(e, exp.Insert) and (e.args.get("conflict") or e.args.get("alternative")):
        return words.NOT_UNDOABLE_FORM  # ON CONFLICT / ON DUPLICATE KEY / OR REPLACE
    return None


def has_returning(conn: AsyncConnection) -> bool:
    """Whether the database answers ``INSERT ... RETURNING`` (how the rows an INSERT added
    are kept): SQLite 3.35+, PostgreSQL, MariaDB 10.5+; MySQL has no RETURNING."""
    dialect = conn.dialect
    version = tuple(dialect.server_version_info or ())
    if dialect.name == "sqlite":
        return sqlite3.sqlite_version_info >= (3, 35)
    if dialect.name == "postgresql":
        return True
    return bool(getattr(dialect, "is_mariadb", False)) and version >= (10, 5)


def _sets_key(s: SqlStatement, key: Sequence[str]) -> bool:
    """An UPDATE that assigns one of the key columns (the row could not be found again)."""
    if s.kind != "UPDATE":
        return False
    names = {k.lower() for k in key}
    for assignment in s.expression.args.get("expressions") or []:
        target = assignment.this if isinstance(assignment, exp.EQ) else None
        if isinstance(target, exp.Column) and target.name.lower() in names:
            return True
    return False


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether one statement of a call can be undone, and why not."""

    statement: int
    undoable: bool
    why: str | None = None


async def undo_verdicts(
    conn: AsyncConnection,
    analysis: SqlAnalysis,
    counts: Sequence[int | None],
    *,
    dialect: str,
    max_rows: int,
) -> list[Verdict]:
    """Each statement's verdict, for the preview: read before anyone approves."""
    verdicts = []
    total = 0
    for i, s in enumerate(analysis.statements):
        why = static_refusal(s)
        table = _plain_table(s.expression) if why is None else None
        if table is not None:
            name = _table_sql(table, dialect)
            try:
                key = await table_key(conn, _table_name(table))
            except Exception as exc:  # a table the database does not know: say so
                log.info("sql.undo_key_unread", table=name, error=str(exc).splitlines()[0])
                key, why = None, words.NOT_UNDOABLE_UNKNOWN.format(table=name)
            if why is None and not key:
                why = words.NOT_UNDOABLE_NO_KEY.format(table=name)
            elif why is None and key and _sets_key(s, key):
                why = words.NOT_UNDOABLE_KEY_SET.format(table=name)
            elif why is None and s.kind == "INSERT" and not has_returning(conn):
                why = words.NOT_UNDOABLE_NO_RETURNING
        n = counts[i] if i < len(counts) else None
        total += n or 0
        if why is None and total > max_rows:
            why = words.NOT_UNDOABLE_TOO_MANY.format(limit=max_rows)
        verdicts.append(Verdict(i, why is None, why))
    return verdicts


def undo_details(verdicts: Sequence[Verdict], *, days: float) -> dict[str, Any]:
    """What the preview's details carry about undo: the call's verdict, and each effect
    entry's (``details["effects"]``, helper "effect") gets ``undoable`` /
    ``not_undoable_why`` through ``mark_effects``."""
    why = next((v.why for v in verdicts if not v.undoable), None)
    return {"undo": {"undoable": why is None, "why": why, "days": days}}


def mark_effects(effects: Any, verdicts: Sequence[Verdict]) -> None:
    """Add ``undoable`` / ``not_undoable_why`` to each entry of the preview's effects."""
    if not isinstance(effects, list):
        return
    by_index = {v.statement: v for v in verdicts}
    for entry in effects:
        if isinstance(entry, dict) and entry.get("statement") in by_index:
            v = by_index[entry["statement"]]
            entry["undoable"] = v.undoable
            entry["not_undoable_why"] = v.why


# ------------------------------------------------------------------ SQL by key


def _q(conn: AsyncConnection, name: str) -> str:
    return conn.dialect.identifier_preparer.quote(name)


def _key_match(
    conn: AsyncConnection, key: Sequence[str], keys: Sequence[Sequence[Any]]
) -> tuple[str, tuple[Any, ...]]:
    """``k IN (?, ?)`` or ``(a, b) IN ((?, ?), ...)`` for ``keys``, in the driver's own
    parameter style, and the values (``text()`` would parse 500 names per chunk again)."""
    width = len(key)
    marks = _marks(conn, len(keys) * width)
    if width == 1:
        groups = marks
    else:
        groups = [
            "(" + ", ".join(marks[r * width : (r + 1) * width]) + ")" for r in range(len(keys))
        ]
    cols = ", ".join(_q(conn, k) for k in key)
    left = f"({cols})" if width > 1 else cols
    return f"{left} IN ({', '.join(groups)})", tuple(decode(v) for k in keys for v in k)


def _marks(conn: AsyncConnection, count: int) -> list[str]:
    """``count`` placeholders as the driver writes them (aiosqlite ?, aiomysql %s, asyncpg $n)."""
    style = conn.dialect.paramstyle
    if style == "qmark":
        return ["?"] * count
    if style == "format":
        return ["%s"] * count
    if style == "numeric_dollar":
        return [f"${i + 1}" for i in range(count)]
    if style == "numeric":
        return [f":{i + 1}" for i in range(count)]
    raise ValueError(f"no undo for a driver with paramstyle {style!r}")


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]


def _locking(dialect: str) -> str:
    return "" if dialect == "sqlite" else " FOR UPDATE"


async def _rows_by_key(
    conn: AsyncConnection,
    table: str,
    key: Sequence[str],
    keys: Sequence[Sequence[Any]],
    *,
    dialect: str,
) -> tuple[list[str], dict[tuple[Any, ...], list[Any]]]:
    """Whole rows of ``table`` whose key is in ``keys``, encoded, by encoded key."""
    columns: list[str] = []
    found: dict[tuple[Any, ...], list[Any]] = {}
    for part in _chunks(keys):
        match, params = _key_match(conn, key, part)
        sql = f"SELECT * FROM {table} WHERE {match}{_locking(dialect)}"
        result = await conn.exec_driver_sql(sql, params)
        columns = list(result.keys())
        at = [columns.index(k) for k in key]
        for row in result.fetchall():
            values = [encode(v) for v in row]
            found[_freeze([values[i] for i in at])] = values
    return columns, found


def _freeze(values: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(repr(v) for v in values)


def key_text(values: Sequence[Any]) -> str:
    """A row's key as people read it: ``3`` or ``(3, 'eu')``."""
    parts = [shown(v) for v in values]
    return parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")"


# ------------------------------------------------------------------ keeping, in the change


@dataclass(slots=True)
class _Pending:
    """One statement's rows, read before it ran."""

    table: str
    key: list[str]
    columns: list[str]
    before: dict[tuple[Any, ...], list[Any]]


@dataclass(slots=True)
class Keeper:
    """Keeps the rows one approved call changes, inside its transaction (``modify``).

    ``before`` each statement, ``after`` it, ``finish`` before the commit. Once something
    cannot be kept (``refused``), nothing more is read and nothing is stored: an undo of
    part of a batch would leave the data in a state nobody saw.
    """

    book: UndoBook
    confirmation_id: str
    dialect: str
    changes: list[KeptChange] = field(default_factory=list)
    refused: str | None = None
    _pending: _Pending | None = None

    @property
    def rows(self) -> int:
        return sum(c.rows for c in self.changes)

    async def before(self, conn: AsyncConnection, index: int, s: SqlStatement) -> str:
        """Read what ``s`` will change; the SQL to run for it (INSERT: with RETURNING *)."""
        self._pending = None
        if self.refused is not None:
            return s.sql
        why = static_refusal(s)
        table = _plain_table(s.expression)
        if why is not None or table is None:
            self.refused = why or words.NOT_UNDOABLE_FORM
            return s.sql
        name = _table_sql(table, self.dialect)
        key = await table_key(conn, _table_name(table))
        if not key:
            self.refused = words.NOT_UNDOABLE_NO_KEY.format(table=name)
            return s.sql
        if _sets_key(s, key):
            self.refused = words.NOT_UNDOABLE_KEY_SET.format(table=name)
            return s.sql
        if s.kind == "INSERT":
            if not has_returning(conn):
                self.refused = words.NOT_UNDOABLE_NO_RETURNING
                return s.sql
            self._pending = _Pending(name, key, [], {})
            return s.sql.rstrip().rstrip(";") + " RETURNING *"
        room = self.book.max_rows - self.rows
        query = self._select(s, table, limit=room + 1)
        result = await conn.exec_driver_sql(query)
        columns = list(result.keys())
        rows = [[encode(v) for v in r] for r in result.fetchall()]
        if len(rows) > room:
            self.refused = words.NOT_UNDOABLE_TOO_MANY.format(limit=self.book.max_rows)
            return s.sql
        at = [columns.index(k) for k in key]
        before = {_freeze([r[i] for i in at]): r for r in rows}
        self._pending = _Pending(name, key, columns, before)
        return s.sql

    def _select(self, s: SqlStatement, table: exp.Table, *, limit: int) -> str:
        """The rows an UPDATE/DELETE would change: its table, WHERE, ORDER BY and LIMIT."""
        e = s.expression
        query = exp.select("*").from_(table.copy())
        where = e.args.get("where")
        if where is not None:
            query = query.where(where.this.copy())
        order = e.args.get("order")
        if order is not None:
            query.set("order", order.copy())
        own = e.args.get("limit")
        if own is not None:
            query.set("limit", own.copy())
        else:
            query = query.limit(limit)
        sql = query.sql(dialect=self.dialect)
        return sql + _locking(self.dialect)

    async def after(
        self, conn: AsyncConnection, index: int, s: SqlStatement, result: CursorResult[Any]
    ) -> int | None:
        """Read what ``s`` left; the rows it changed (INSERT RETURNING: its row count)."""
        pending, self._pending = self._pending, None
        if s.kind == "INSERT" and pending is not None:
            columns = list(result.keys())
            rows = [[encode(v) for v in r] for r in result.fetchall()]
            if len(rows) > self.book.max_rows - self.rows:
                self.refused = words.NOT_UNDOABLE_TOO_MANY.format(limit=self.book.max_rows)
            elif self.refused is None:
                if not all(k in columns for k in pending.key):
                    self.refused = words.NOT_UNDOABLE_UNMATCHED
                else:
                    self.changes.append(
                        KeptChange(index, "INSERT", pending.table, pending.key, columns, after=rows)
                    )
            return len(rows)
        if pending is None or self.refused is not None:
            return None
        keys = [self._key_values(pending, r) for r in pending.before.values()]
        columns, now = await _rows_by_key(
            conn, pending.table, pending.key, keys, dialect=self.dialect
        )
        changed = result.rowcount
        if s.kind == "DELETE":
            gone = [r for k, r in pending.before.items() if k not in now]
            if changed >= 0 and len(gone) != changed:
                self.refused = words.NOT_UNDOABLE_UNMATCHED
                return None
            if gone:
                self.changes.append(
                    KeptChange(index, "DELETE", pending.table, pending.key, pending.columns, gone)
                )
            return None
        before, after = [], []
        for k, row in pending.before.items():
            left = now.get(k)
            if left is None:  # the row went (a trigger?): its key no longer finds it
                self.refused = words.NOT_UNDOABLE_UNMATCHED
                return None
            if left != row:
                before.append(row)
                after.append(left)
        if before:
            self.changes.append(
                KeptChange(index, "UPDATE", pending.table, pending.key, columns, before, after)
            )
        return None

    @staticmethod
    def _key_values(pending: _Pending, row: Sequence[Any]) -> list[Any]:
        return [row[pending.columns.index(k)] for k in pending.key]

    async def finish(self) -> str:
        """Store the snapshot (before the commit); the line the result ends with."""
        return await self.book.keep(self)


class UndoBook:
    """Where ``sql_modify`` keeps its snapshots and ``sql_undo`` finds them, and the rules
    (``[tools.sql] undo_max_rows``, ``undo_days``)."""

    def __init__(
        self,
        *,
        store: UndoStore,
        confirmations: ConfirmationStore,
        audit: AuditLog,
        max_rows: int = 10_000,
        days: float = 7.0,
        clock: Callable[[], float] = time.time,
        approvers: Iterable[str] = (),
    ) -> None:
        self.store = store
        # [confirmation] approvers: besides a change's own requester and approvers, who
        # may ask for its undo (may_ask_undo).
        self.approvers = tuple(approvers)
        self.confirmations = confirmations
        self.audit = audit
        self.max_rows = max_rows
        self.days = days
        self.clock = clock

    def keeper(self, confirmation_id: str, dialect: str) -> Keeper:
        return Keeper(book=self, confirmation_id=confirmation_id, dialect=dialect)

    async def keep(self, keeper: Keeper) -> str:
        cid = keeper.confirmation_id
        if keeper.refused is not None or not keeper.changes:
            why = keeper.refused or words.NOT_UNDOABLE_UNMATCHED
            await self.audit.add(cid, "undo_not_kept", why=why)
            return words.kept_nothing(why)
        now = self.clock()
        await self.store.put(
            UndoSnapshot(
                confirmation_id=cid,
                taken_at=now,
                expires_at=now + self.days * DAY,
                changes=keeper.changes,
            )
        )
        await self.audit.add(cid, "undo_offered", rows=keeper.rows, days=self.days)
        return words.undo_hint(cid)

    def may_ask_undo(self, original: Confirmation, *, session_key: str, asker: str) -> bool:
        """Whether ``asker`` in ``session_key`` may ask to undo ``original``: only in the
        chat of the change, and only someone who could have decided it."""
        allowed = (original.requester, *original.approvers, *self.approvers)
        return session_key == original.session_key and asker in allowed


# ------------------------------------------------------------------ the sql_undo tool


class UndoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    confirmation_id: str = Field(description="The id of the sql_modify call to undo (e.g. K7Q2)")


@dataclass(frozen=True, slots=True)
class Found:
    """The change an undo is about, and what it kept."""

    original: Confirmation
    snapshot: UndoSnapshot


class SqlUndoTool(Tool):
    """``sql_undo``: restore the rows one approved ``sql_modify`` call changed."""

    name: ClassVar[str] = "sql_undo"
    description: ClassVar[str] = (
        "Undo an approved sql_modify call by its confirmation id: deleted rows come back, "
        "updated rows are set back, inserted rows go. A person must approve it."
    )
    params: ClassVar[type[BaseModel]] = UndoArgs
    default_level: ClassVar[Level] = "confirm"
    risk: ClassVar[Risk] = Risk.MEDIUM

    def __init__(self, *, db: Any, book: UndoBook) -> None:
        self.db = db  # gateway.tools.sql.SqlDatabase (not imported: sql.py imports this module)
        self.book = book

    async def find(self, confirmation_id: str) -> Found | str:
        """The change and its snapshot, or the sentence saying why there is nothing to undo."""
        cid = canonical_id(confirmation_id.strip())
        original = await self.book.confirmations.get(cid)
        if original is None:
            return words.nothing_to_undo(cid)
        if original.tool_call.name != "sql_modify":
            return words.not_an_undoable_tool(cid, original.tool_call.name)
        snapshot = await self.book.store.get(cid, now=self.book.clock())
        # Interrupted (the process died around the commit): the snapshot was stored before
        # the commit, and the restore's check finds whether the change happened at all.
        ran = (ExecState.SUCCEEDED, ExecState.INTERRUPTED)
        if snapshot is None or original.execution.state not in ran:
            return words.nothing_to_undo(cid)
        if snapshot.undone_by is not None:
            return words.already_undone(cid, snapshot.undone_by)
        return Found(original, snapshot)

    async def preview(self, args: BaseModel) -> ToolPreview:
        assert isinstance(args, UndoArgs)
        found = await self.find(args.confirmation_id)
        if isinstance(found, str):
            return ToolPreview(summary=f"sql_undo {args.confirmation_id}", error=found)
        original, snapshot = found.original, found.snapshot
        tables = list(dict.fromkeys(c.table for c in snapshot.changes))
        steps = [words.undo_step(c.kind, c.table, c.rows) for c in reversed(snapshot.changes)]
        details: dict[str, Any] = {
            "statement": words.undo_statement(original.id, steps),
            "kind": "UNDO",
            "tables": tables,
            "rows_affected": snapshot.rows,
            "undo_of": original.id,
            # The undo is asked like the change was: four-eyes if it was (runner.py).
            "four_eyes_as_original": original.four_eyes,
            "approvals_as_original": original.approvals,
            "effects": [_effect(c) for c in reversed(snapshot.changes)],
        }
        return ToolPreview(
            summary=words.undo_summary(original.id, tables, snapshot.rows),
            details=details,
            risk=original.risk,
            hold=words.UNDO_ALWAYS_HELD,
        )

    async def run(self, args: BaseModel) -> str:
        raise ToolFailedError(
            words.UNDO_ALWAYS_HELD, detail="sql_undo runs only as an approved confirmation"
        )

    async def run_approved(self, args: BaseModel, approved: ApprovedRun) -> str:
        """Take the snapshot once, check the rows are as the change left them, restore."""
        assert isinstance(args, UndoArgs)
        cid = canonical_id(args.confirmation_id.strip())
        me = approved.confirmation_id
        audit = self.book.audit
        # Asked from a chat by ``撤销 K7Q2``, ask_undo checked who asks; a model may call
        # sql_undo itself, in any chat: the same rule, here, before anything is taken.
        original = await self.book.confirmations.get(cid)
        asked = await self.book.confirmations.get(me)
        if (
            original is None
            or asked is None
            or not self.book.may_ask_undo(
                original, session_key=asked.session_key, asker=asked.requester
            )
        ):
            await audit.add(cid, "undo_refused", undo=me, why="not allowed to ask")
            raise ToolFailedError(words.UNDO_ASK_NOT_ALLOWED, detail=f"asked by {me}")
        taken = await self.book.store.claim(cid, by=me, now=self.book.clock())
        if taken is None:
            found = await self.find(cid)
            why = found if isinstance(found, str) else words.nothing_to_undo(cid)
            await audit.add(cid, "undo_refused", undo=me, why=why)
            raise ToolFailedError(why, detail="snapshot gone or taken")
        try:
            changed = await self.db.restore(taken)
        except BaseException as exc:
            await asyncio.shield(self.book.store.release(cid, by=me))
            if isinstance(exc, ChangedSinceError):
                await audit.add(cid, "undo_refused", undo=me, keys=exc.keys)
                raise ToolFailedError(words.undo_changed_since(exc.keys), detail=str(exc)) from exc
            if isinstance(exc, Exception):
                await audit.add(cid, "undo_refused", undo=me, why=f"{type(exc).__name__}: {exc}")
            raise
        await audit.add(cid, "undo_done", undo=me, rows=changed, actor=asked.decided_by)
        return words.undo_done(cid, changed)


def _effect(c: KeptChange) -> dict[str, Any]:
    """The undo's preview of one kept statement, in the preview contract's shape: what the
    row is now (as the change left it) -> what it becomes."""
    inverse = {"DELETE": "INSERT", "UPDATE": "UPDATE", "INSERT": "DELETE"}[c.kind]
    at = [c.columns.index(k) for k in c.key]
    shown_rows: list[dict[str, Any]] = []
    if c.kind == "DELETE":
        for row in c.before[:_SHOWN]:
            shown_rows.append({"key": [shown(row[i]) for i in at], "after": _named(c.columns, row)})
    elif c.kind == "INSERT":
        for row in c.after[:_SHOWN]:
            shown_rows.append(
                {"key": [shown(row[i]) for i in at], "before": _named(c.columns, row)}
            )
    else:
        for old, new in list(zip(c.before, c.after, strict=True))[:_SHOWN]:
            diff = [n for n, a, b in zip(c.columns, old, new, strict=True) if a != b]
            shown_rows.append(
                {
                    "key": [shown(old[i]) for i in at],
                    "before": {n: shown(new[c.columns.index(n)]) for n in diff},
                    "after": {n: shown(old[c.columns.index(n)]) for n in diff},
                }
            )
    rows = c.before if c.kind != "INSERT" else c.after
    keys = [[shown(r[i]) for i in at] for r in rows] if len(rows) <= 100 else None
    return {
        "statement": c.statement,
        "kind": inverse,
        "table": c.table,
        "key": c.key,
        "total": c.rows,
        "columns": c.columns,
        "rows": shown_rows,
        "keys": keys,
        "dropped_columns": [],
        "not_previewed": None,
    }


def _named(columns: Sequence[str], row: Sequence[Any]) -> dict[str, str]:
    return {n: shown(v) for n, v in zip(columns, row, strict=True)}


async def ask_undo(
    runner: ToolRunner, confirmations: ConfirmationService, target: str, turn: TurnContext
) -> ToolOutcome | None:
    """``撤销 K7Q2`` in a chat: ask for ``sql_undo`` of K7Q2, held like any call.

    Asked only in the chat of the change, by its requester or one of its approvers (who
    could have decided the change); None when the chat was told why not.
    """
    original = await confirmations.get(target)
    if original is None or original.session_key != turn.session_key:
        await turn.say(words.nothing_to_undo(target))
        return None
    tool = runner.registry.get("sql_undo")
    if not isinstance(tool, SqlUndoTool):
        await turn.say(words.nothing_to_undo(target))
        return None
    if not tool.book.may_ask_undo(original, session_key=turn.session_key, asker=turn.sender_id):
        await turn.say(words.UNDO_ASK_NOT_ALLOWED)
        return None
    call = ToolCall(name="sql_undo", args={"confirmation_id": original.id}, call_id=new_call_id())
    outcome = await runner.invoke(call, turn)
    if outcome.confirmation is not None:
        await confirmations.audit.add(
            original.id, "undo_asked", actor=turn.sender_id, undo=outcome.confirmation.id
        )
    return outcome


# ------------------------------------------------------------------ restoring


class ChangedSinceError(Exception):
    """Rows changed after the change an undo would undo; ``keys`` names them."""

    def __init__(self, keys: list[str]) -> None:
        super().__init__("changed since: " + ", ".join(keys))
        self.keys = keys


async def restore(conn: AsyncConnection, snapshot: UndoSnapshot, *, dialect: str) -> int:
    """Put back what ``snapshot`` kept, in ``conn``'s transaction; rows restored.

    Statements are undone last first; each checks first that its rows are exactly as the
    change left them (ChangedSinceError names those that are not: the caller rolls back).
    """
    restored = 0
    for c in reversed(snapshot.changes):
        at = [c.columns.index(k) for k in c.key]
        expected = c.after if c.kind in ("UPDATE", "INSERT") else []
        kept_rows = c.before if c.kind == "DELETE" else c.after
        keys = [[r[i] for i in at] for r in kept_rows]
        columns, now = await _rows_by_key(conn, c.table, c.key, keys, dialect=dialect)
        if c.kind == "DELETE":
            back = [key_text(k) for k in keys if _freeze(k) in now]
        else:
            by_key = {_freeze([r[i] for i in at]): r for r in expected}
            back = [
                key_text(k)
                for k in keys
                if now.get(_freeze(k)) is None
                or _reordered(columns, now[_freeze(k)], c.columns) != by_key[_freeze(k)]
            ]
        if back:
            raise ChangedSinceError(back)
        table = c.table
        if c.kind == "DELETE":
            names = ", ".join(_q(conn, n) for n in c.columns)
            marks = ", ".join(f":c{i}" for i in range(len(c.columns)))
            await conn.execute(
                text(f"INSERT INTO {table} ({names}) VALUES ({marks})"),
                [{f"c{i}": decode(v) for i, v in enumerate(r)} for r in c.before],
            )
        elif c.kind == "UPDATE":
            rest = [n for n in c.columns if n not in c.key]
            sets = ", ".join(f"{_q(conn, n)} = :c{c.columns.index(n)}" for n in rest)
            where = " AND ".join(f"{_q(conn, k)} = :c{c.columns.index(k)}" for k in c.key)
            await conn.execute(
                text(f"UPDATE {table} SET {sets} WHERE {where}"),
                [{f"c{i}": decode(v) for i, v in enumerate(r)} for r in c.before],
            )
        else:
            for part in _chunks(keys):
                match, params = _key_match(conn, c.key, part)
                await conn.exec_driver_sql(f"DELETE FROM {table} WHERE {match}", params)
        restored += c.rows
    return restored


def _reordered(columns: Sequence[str], row: Sequence[Any], order: Sequence[str]) -> list[Any]:
    """``row`` (in ``columns`` order) in the kept ``order``; a column since dropped or
    added makes it differ (the table changed shape: refuse rather than guess)."""
    if list(columns) == list(order):
        return list(row)
    named: Mapping[str, Any] = dict(zip(columns, row, strict=True))
    return [named.get(n, {"$missing": True}) for n in order]
