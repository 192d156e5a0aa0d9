"""SQL tools: ``sql_query`` (read-only) and ``sql_modify`` (changes, held for a person).

Statements are classified in sql_analysis.py; databases are reached through SQLAlchemy
async URLs (aiosqlite, asyncpg, aiomysql). The rows a change would touch are read in
sql_effect.py, what a change keeps for its undo in sql_undo.py; this module is the database
handle (its read-only and write transactions, on three backends) and the two tools, one
seam: past 600 lines because each backend's transaction rules live beside each other here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from itertools import zip_longest
from pathlib import Path
from typing import Any, ClassVar

import structlog
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import event
from sqlalchemy.engine import Connection, CursorResult, make_url
from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    IntegrityError,
    NoSuchTableError,
    OperationalError,
)
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import PoolResetState
from sqlglot import exp

from gateway import texts
from gateway.confirm.model import Risk
from gateway.storage.undo import UndoSnapshot
from gateway.tools.base import (
    ApprovedRun,
    EffectChangedError,
    Level,
    Tool,
    ToolFailedError,
    ToolPreview,
)
from gateway.tools.sql_analysis import (
    SQL_DIALECTS,
    SqlAnalysis,
    SqlStatement,
    affects_every_row,
    analyze_sql,
    batch_problem,
)
from gateway.tools.sql_effect import Effect, EffectReader, checkable, drift, not_previewed
from gateway.tools.sql_functions import FunctionAllowList
from gateway.tools.sql_undo import (
    Keeper,
    UndoBook,
    mark_effects,
    restore,
    undo_details,
    undo_verdicts,
)

log = structlog.get_logger(__name__)

# Above this many rows (PostgreSQL's planner estimate, pg_class.reltuples) a table's size
# is the estimate rather than a COUNT(*), which reads the whole table (docs/model.md).
ESTIMATE_ROWS_ABOVE = 1_000_000

# The database stops a read at timeout_seconds and says so; the client gives up only this
# much later, as a backstop for a database that does not answer at all.
_CLIENT_GRACE_SECONDS = 2.0


# The kinds whose row count is rows changed. DDL's is -1 or, on MariaDB, 0: it is said to
# have run, never "? rows" or "0 rows" (issue 26).
_ROW_COUNTED = frozenset({"INSERT", "UPDATE", "DELETE", "MERGE", "SELECT INTO"})
# Whose count of rows touched is the approved total (an INSERT may touch fewer: ON CONFLICT).
_HELD_TO_COUNT = frozenset({"UPDATE", "DELETE"})


class StatementTimeoutError(ToolFailedError, TimeoutError):
    """A read (query or preview count) ran past ``[tools.sql] statement_timeout_seconds``:
    the chat reads the sentence, not the class name; the driver's text is the detail."""


class SqlDatabase:
    """One database behind the SQL tools."""

    def __init__(
        self,
        url: str,
        *,
        max_rows: int = 50,
        timeout_seconds: float = 30.0,
        estimate_rows_above: int = ESTIMATE_ROWS_ABOVE,
        allowed_functions: Iterable[str] = (),
        drift_tolerance: int = 0,
    ) -> None:
        self.url = url
        self.engine: AsyncEngine = create_async_engine(url)
        self.backend = make_url(url).get_backend_name()
        # Where approved changes and undos run. On SQLite a write transaction that reads
        # first (the drift check, the undo's snapshot) must take the write lock at BEGIN:
        # two deferred ones that both read, then write, leave one "database is locked" at
        # once, without waiting (tests/process/test_votes_serve.py: two calls approved by
        # one reply, the second failed).
        self.writer: AsyncEngine = self.engine
        if self.backend == "sqlite":
            _transactional_sqlite(self.engine)
            self.writer = self.engine.execution_options(sqlite_begin="IMMEDIATE")
        self.dialect = SQL_DIALECTS.get(self.backend, self.backend)
        _reset_on_return(self.engine, self.dialect)
        self.max_rows = max_rows
        self.timeout_seconds = timeout_seconds
        self.estimate_rows_above = estimate_rows_above
        # What auto queries and previews may call (sql_functions.py, docs/sql-safety.md).
        self.functions = FunctionAllowList(self.dialect, allowed_functions)
        # Rows of difference between the approved effect and the one at run time that
        # still run (docs/model.md, "Drift"); 0: exactly what was approved.
        self.drift_tolerance = drift_tolerance

    async def close(self) -> None:
        await self.engine.dispose()

    async def ensure_demo(self) -> None:
        """Create the demo ``orders`` table with a few rows if it does not exist."""
        if self.backend == "sqlite":
            database = make_url(self.url).database
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
        async with self.engine.begin() as conn:
            await conn.exec_driver_sql(
                "CREATE TABLE IF NOT EXISTS orders ("
                " id INTEGER PRIMARY KEY, customer VARCHAR(100) NOT NULL,"
                " amount NUMERIC(10, 2) NOT NULL, status INTEGER NOT NULL)"
            )
            count = (await conn.exec_driver_sql("SELECT COUNT(*) FROM orders")).scalar_one()
            if count == 0:
                rows = [
                    (1, "Alice", 120.50, 0),
                    (2, "Bob", 80.00, 1),
                    (3, "Carol", 45.25, 1),
                    (4, "Dave", 300.00, 2),
                    (5, "Erin", 15.75, 0),
                    (6, "Frank", 99.99, 1),
                    (7, "Grace", 250.00, 2),
                    (8, "Heidi", 60.40, 0),
                ]
                values = ", ".join(f"({i}, '{c}', {a}, {s})" for i, c, a, s in rows)
                await conn.exec_driver_sql(
                    f"INSERT INTO orders (id, customer, amount, status) VALUES {values}"
                )
        log.info("sql.demo_ready", url=make_url(self.url).render_as_string(hide_password=True))

    @asynccontextmanager
    async def read_only(self) -> AsyncIterator[AsyncConnection]:
        """A connection in a read-only transaction with a statement timeout, rolled back.

        The database enforces it, not the classifier: a function with side effects, a
        sequence or a locking read inside a "SELECT" fails instead of writing, and a
        statement running past ``timeout_seconds`` is stopped by the server. What the
        session keeps (the timeout, a lock a function took) is undone when the connection
        goes back to the pool (``_reset_on_return``).
        """
        seconds = self.timeout_seconds
        async with self.engine.connect() as conn:
            if self.backend == "sqlite":
                await conn.exec_driver_sql("PRAGMA query_only = ON")
                # SQLite has no statement timeout: a progress handler stops the statement
                # (sqlite3 raises "interrupted") once the deadline has passed.
                deadline = time.monotonic() + seconds
                driver = (await conn.get_raw_connection()).driver_connection
                assert driver is not None  # a checked-out connection has one
                await driver.set_progress_handler(lambda: time.monotonic() > deadline, 1000)
            elif self.backend == "postgresql":
                await conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                await conn.exec_driver_sql(f"SET LOCAL statement_timeout = {int(seconds * 1000)}")
            elif self.dialect == "mysql":
                await conn.rollback()
                if getattr(conn.dialect, "is_mariadb", False):
                    await conn.exec_driver_sql(f"SET SESSION max_statement_time = {seconds:g}")
                else:  # MySQL: SELECT statements only, in milliseconds
                    await conn.exec_driver_sql(
                        f"SET SESSION max_execution_time = {int(seconds * 1000)}"
                    )
                # Applies to the next transaction, which the first statement below starts.
                await conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            try:
                yield conn
            finally:
                await conn.rollback()

    async def _read(self, conn: AsyncConnection, sql: str) -> CursorResult[Any]:
        """One statement on a ``read_only`` connection; a timeout says which setting to raise."""
        try:
            return await asyncio.wait_for(
                conn.exec_driver_sql(sql), timeout=self.timeout_seconds + _CLIENT_GRACE_SECONDS
            )
        except TimeoutError as exc:
            raise StatementTimeoutError(
                texts.statement_timed_out(self.timeout_seconds), detail="no answer in time"
            ) from exc
        except DBAPIError as exc:
            if _timed_out(exc):
                raise StatementTimeoutError(
                    texts.statement_timed_out(self.timeout_seconds), detail=str(exc.orig)
                ) from exc
            raise _failed(exc) from exc

    def _effect_reader(self, conn: AsyncConnection) -> EffectReader:
        return EffectReader(
            conn=conn,
            read=self._read,
            dialect=self.dialect,
            estimate_rows_above=self.estimate_rows_above,
        )

    async def read_effects(self, statement: SqlStatement, index: int) -> list[Effect]:
        """What ``statement`` (number ``index`` of its call) would change, read before anyone
        approved it: its rows, their total, the columns that go (gateway/tools/sql_effect.py).

        Runs read-only like every preview, so an expression with side effects fails to read
        rather than changing anything. A statement it cannot read says so in its entry.
        """
        try:
            async with self.read_only() as conn:
                return await self._effect_reader(conn).effects(statement, index)
        except ToolFailedError as exc:  # a timeout or a refusal, in a sentence of its own
            log.info("sql.preview_failed", error=exc.detail.splitlines()[0])
            return [not_previewed(index, statement, texts.effect_read_refused(str(exc)))]
        except Exception as exc:  # any driver or catalog error just means "cannot preview"
            log.info("sql.preview_failed", error=(str(exc).splitlines() or [""])[0])
            return [not_previewed(index, statement, texts.EFFECT_READ_FAILED)]

    async def table_rows(self, statement: SqlStatement) -> tuple[int, bool] | None:
        """Rows in the table an UPDATE/DELETE changes, and whether that is an estimate
        (EffectReader.table_rows). ``None`` for a statement that is not on one table."""
        e = statement.target if statement.target is not None else statement.expression
        table = e.this if isinstance(e, exp.Update | exp.Delete) else None
        if not isinstance(table, exp.Table):
            return None
        async with self.read_only() as conn:
            return await self._effect_reader(conn).table_rows(table)

    async def query(self, analysis: SqlAnalysis) -> str:
        """Run read-only statements inside a read-only transaction; a text table back."""
        outputs = []
        async with self.read_only() as conn:
            for s in analysis.statements:
                result = await self._read(conn, s.sql)
                columns = list(result.keys())
                rows = result.fetchmany(self.max_rows + 1)
                outputs.append(_format_rows(columns, rows, self.max_rows))
        return "\n\n".join(outputs)

    async def modify(
        self,
        analysis: SqlAnalysis,
        approved: ApprovedRun | None = None,
        *,
        keeper: Keeper | None = None,
    ) -> str:
        """Run every statement in one transaction; all or nothing.

        With ``approved`` (a call a person approved), each statement first reads its effect
        again in the same transaction and compares it with the one the approver saw
        (``details["effects"]``); a difference beyond ``drift_tolerance`` rolls everything
        back and raises EffectChangedError (docs/model.md, "Drift"). ``keeper`` keeps the
        rows each statement changes for its undo, in the same transaction, and stores them
        before the commit (gateway/tools/sql_undo.py, docs/undo.md).
        """
        counts = []
        checks: list[dict[str, Any]] = []
        seen = list(approved.details.get("effects") or []) if approved is not None else []
        try:
            async with self.writer.begin() as conn:
                for index, s in enumerate(analysis.statements):
                    # What the approver was shown of this statement, to hold the run to.
                    was = [e for e in seen if e.get("statement") == index and checkable(e)]
                    now = await self._check_drift(conn, s, index, was, checks) if was else None
                    sql = s.sql if keeper is None else await keeper.before(conn, index, s)
                    result = await asyncio.wait_for(
                        conn.exec_driver_sql(sql), timeout=self.timeout_seconds
                    )
                    n = result.rowcount if s.kind in _ROW_COUNTED and result.rowcount >= 0 else None
                    if now is not None and n is not None:
                        self._check_touched(s, index, was, n, now, checks)
                    if keeper is not None:
                        returned = await keeper.after(conn, index, s, result)
                        n = n if returned is None else returned  # INSERT ... RETURNING
                    counts.append(texts.statement_done(s.kind, n))
                kept = await keeper.finish() if keeper is not None else None
        except EffectChangedError:
            if approved is not None:
                await approved.note("drift_checked", {"outcome": "changed", "checks": checks})
            raise
        except DBAPIError as exc:
            raise _failed(exc) from exc
        if approved is not None:
            # "not_checked": the approver saw no rows to hold the run to (cannot preview).
            outcome = "ok" if checks else "not_checked"
            await approved.note("drift_checked", {"outcome": outcome, "checks": checks})
        done = "; ".join(counts)
        return done if kept is None else f"{done}\n{kept}"

    async def restore(self, snapshot: UndoSnapshot) -> int:
        """Undo a kept change in one transaction (gateway/tools/sql_undo.restore); rows
        restored. ChangedSinceError, rolled back, when rows changed since."""
        try:
            async with self.writer.begin() as conn:
                return await restore(conn, snapshot, dialect=self.dialect)
        except DBAPIError as exc:
            raise _failed(exc) from exc

    async def _check_drift(
        self,
        conn: AsyncConnection,
        statement: SqlStatement,
        index: int,
        was: Sequence[Mapping[str, Any]],
        checks: list[dict[str, Any]],
    ) -> list[Effect]:
        """Read statement ``index``'s effect again, just before it runs, and raise
        EffectChangedError if it is not ``was``, what the approver was shown of it (``checks``
        gets what was found); the effect read. Not called where nothing was shown: the
        approver saw "cannot preview"."""
        try:
            now = await self._effect_reader(conn).effects(statement, index)
        except NoSuchTableError:  # gone since approval: nothing to compare is a change too
            now = [not_previewed(index, statement, texts.EFFECT_READ_FAILED)]
        found = [drift(a, b, self.drift_tolerance) for a, b in zip_longest(was, now)]
        checks += [c for c in found if c is not None]
        changed = [c for c in found if c is not None and c["changed"]]
        if changed:
            raise EffectChangedError(
                texts.effect_changed(changed),
                detail=f"statement {index}: {changed}",
                effect=now,
            )
        return now

    def _check_touched(
        self,
        statement: SqlStatement,
        index: int,
        was: Sequence[Mapping[str, Any]],
        touched: int,
        now: list[Effect],
        checks: list[dict[str, Any]],
    ) -> None:
        """Hold what a DELETE or UPDATE touched to the approved total as well: the drift
        check and the change share a transaction but not a lock, so on PostgreSQL and MariaDB
        another session may commit between them; the rows the change itself counted show it.
        Beyond ``drift_tolerance`` it raises EffectChangedError and everything rolls back."""
        if statement.kind not in _HELD_TO_COUNT or len(was) != 1:
            return
        total = int(was[0]["total"])
        if abs(touched - total) <= self.drift_tolerance:
            return
        check = {
            "statement": index,
            "kind": statement.kind,
            "table": was[0].get("table"),
            "approved": total,
            "now": touched,
            "touched": True,  # counted by the change, not by the check before it
            "changed": True,
        }
        checks.append(check)
        raise EffectChangedError(
            texts.effect_changed([check]), detail=f"statement {index}: {check}", effect=now
        )


def _hold(blocked: Sequence[str], analysis: SqlAnalysis) -> str | None:
    """Why a SQL call must wait for a person whatever its level: it calls a function off
    the allow-list, or the gateway cannot fully read it (tools/policy.py fails closed)."""
    reasons = [texts.functions_not_allowed(blocked) if blocked else None, analysis.unreadable]
    return " · ".join(r for r in reasons if r) or None


def _transactional_sqlite(engine: AsyncEngine) -> None:
    """Make SQLite transactions real: BEGIN at the start, DDL included.

    The sqlite3 module only opens a transaction before INSERT/UPDATE/DELETE, so in a batch
    like ``DROP TABLE a; INSERT INTO missing ...`` the DROP ran in autocommit and stayed
    even though the batch failed. This is SQLAlchemy's documented recipe for aiosqlite.
    """

    @event.listens_for(engine.sync_engine, "connect")
    def _no_implicit_transactions(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Connection) -> None:
        # sqlite_begin="IMMEDIATE" on the writer engine (SqlDatabase.writer).
        mode = conn.get_execution_options().get("sqlite_begin", "")
        conn.exec_driver_sql(f"BEGIN {mode}".strip())


# What the drivers say when a statement names a table or column that is not there, or does
# not parse (SQLite reports both as OperationalError, PostgreSQL and MariaDB as
# ProgrammingError).
_MISSING = ("no such table", "no such column", "does not exist", "doesn't exist", "unknown column")
_SYNTAX = ("syntax error", "syntax to use")
_READ_ONLY = ("read-only transaction", "read only transaction", "readonly database")


def _failed(exc: DBAPIError) -> ToolFailedError:
    """A driver error as one sentence naming its kind; the raw text rides along as detail."""
    said = str(exc.orig).lower()
    if isinstance(exc, IntegrityError):
        kind = "constraint"
    elif isinstance(exc, DataError):
        kind = "value"
    elif any(m in said for m in _MISSING):
        kind = "missing"
    elif any(m in said for m in _SYNTAX):
        kind = "syntax"
    elif any(m in said for m in _READ_ONLY):
        kind = "read_only"
    elif isinstance(exc, OperationalError):
        kind = "unavailable"
    else:
        kind = "refused"
    return ToolFailedError(texts.database_failed(kind), detail=f"{type(exc).__name__}: {exc}")


def _timed_out(exc: DBAPIError) -> bool:
    """Whether the database stopped the statement for running past its timeout."""
    orig = exc.orig
    if getattr(orig, "sqlstate", None) == "57014":  # PostgreSQL: query_canceled
        return True
    code = orig.args[0] if orig is not None and orig.args else None
    # MariaDB: max_statement_time exceeded; MySQL: max_execution_time exceeded.
    if code in (1969, 3024):
        return True
    # SQLite: the progress handler of read_only stopped it.
    return str(orig) == "interrupted"


# PostgreSQL's DISCARD ALL without its DEALLOCATE ALL: the driver (asyncpg) keeps prepared
# statements of its own, which DEALLOCATE ALL would pull out from under it.
_POSTGRES_RESET = (
    "CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; UNLISTEN *; "
    "SELECT pg_advisory_unlock_all(); DISCARD PLANS; DISCARD TEMP; DISCARD SEQUENCES"
)


def _reset_on_return(engine: AsyncEngine, dialect: str) -> None:
    """Every connection goes back to the pool as a new session would start.

    A query or preview may leave session state behind that the next call on the pooled
    connection would inherit: the read-only statement timeout, a lock a function took
    (``pg_advisory_lock``, ``GET_LOCK``), settings, SQLite's ``query_only``. This is the
    one place that undoes it, for every connection; a reset that fails makes the pool
    close the connection instead of reusing it.
    """

    @event.listens_for(engine.sync_engine, "reset")
    def _reset(dbapi_connection: Any, _record: Any, state: PoolResetState) -> None:
        if state.terminate_only or not state.asyncio_safe:
            return  # the connection is closed, not reused: nothing of it survives
        dbapi_connection.rollback()
        if dialect == "postgres":
            # The driver's own connection: one simple query, outside any transaction.
            dbapi_connection.run_async(lambda c: c.execute(_POSTGRES_RESET))
            return
        cursor = dbapi_connection.cursor()
        try:
            if dialect == "mysql":
                cursor.execute("DO RELEASE_ALL_LOCKS()")
                if getattr(engine.dialect, "is_mariadb", False):
                    cursor.execute("SET SESSION max_statement_time = DEFAULT")
                else:
                    cursor.execute("SET SESSION max_execution_time = DEFAULT")
            elif dialect == "sqlite":
                cursor.execute("PRAGMA query_only = OFF")
                dbapi_connection.run_async(lambda c: c.set_progress_handler(None, 0))
        finally:
            cursor.close()


def _format_rows(columns: list[str], rows: Any, max_rows: int) -> str:
    shown = list(rows)[:max_rows]
    lines = [" | ".join(columns)]
    lines += [" | ".join("NULL" if v is None else str(v) for v in row) for row in shown]
    if len(rows) > max_rows:
        lines.append(f"… (first {max_rows} rows / 仅显示前 {max_rows} 行)")
    lines.append(f"({len(shown)} row{'s' if len(shown) != 1 else ''})")
    return "\n".join(lines)


class SqlArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sql: str = Field(description="The SQL statement(s) to run")


class _SqlTool(Tool):
    params: ClassVar[type[BaseModel]] = SqlArgs

    def __init__(self, db: SqlDatabase) -> None:
        self.db = db

    def analyze(self, args: BaseModel) -> SqlAnalysis:
        assert isinstance(args, SqlArgs)
        return analyze_sql(args.sql, self.db.dialect)


class SqlQueryTool(_SqlTool):
    name: ClassVar[str] = "sql_query"
    description: ClassVar[str] = (
        "Run a read-only SQL query (SELECT / WITH ... SELECT) and return the rows. "
        "Statements that change data are refused; use sql_modify for those."
    )
    default_level: ClassVar[Level] = "auto"
    risk: ClassVar[Risk] = Risk.LOW
    # A read in a read-only transaction: running it again changes nothing.
    idempotent: ClassVar[bool] = True

    async def preview(self, args: BaseModel) -> ToolPreview:
        analysis = self.analyze(args)
        if analysis.error:
            return ToolPreview(summary=analysis.text, error=analysis.error)
        if not analysis.read_only:
            return ToolPreview(
                summary=analysis.text,
                error=f"sql_query 只读，{analysis.kind} 请用 sql_modify / sql_query is read-only; "
                f"{analysis.kind} needs sql_modify",
            )
        details: dict[str, Any] = {
            "statement": analysis.text.strip(),
            "kind": analysis.kind,
            "tables": list(analysis.tables),
            "grant_scope": analysis.grant_scope,
        }
        # Runs with nobody asked only if it calls nothing outside the allow-list.
        blocked = self.db.functions.disallowed(
            (s.expression for s in analysis.statements), analysis.source
        )
        if blocked:
            details["functions_not_allowed"] = list(blocked)
        return ToolPreview(
            summary=f"查询 query {', '.join(analysis.tables) or '-'}",
            details=details,
            risk=Risk.LOW,
            hold=_hold(blocked, analysis),
        )

    async def run(self, args: BaseModel) -> str:
        analysis = self.analyze(args)
        if analysis.error or not analysis.read_only:
            # preview refuses these first; checked again so run() is safe on its own.
            raise ValueError(analysis.error or "sql_query is read-only")
        return await self.db.query(analysis)


class SqlModifyTool(_SqlTool):
    name: ClassVar[str] = "sql_modify"
    description: ClassVar[str] = (
        "Change data or schema: INSERT, UPDATE, DELETE, MERGE, CREATE, ALTER, DROP, TRUNCATE. "
        "A person must approve each call in the chat before it runs."
    )
    default_level: ClassVar[Level] = "confirm"
    risk: ClassVar[Risk] = Risk.MEDIUM

    def __init__(self, db: SqlDatabase, *, undo: UndoBook | None = None) -> None:
        super().__init__(db)
        # Where an approved call keeps the rows it changes for sql_undo (None: no undo).
        self.undo = undo

    async def preview(self, args: BaseModel) -> ToolPreview:
        analysis = self.analyze(args)
        if analysis.error:
            return ToolPreview(summary=analysis.text, error=analysis.error)
        if analysis.read_only:
            return ToolPreview(
                summary=analysis.text,
                error="只读查询请用 sql_query / read-only statements go through sql_query",
            )
        problem = batch_problem(analysis, self.db.dialect)
        if problem:
            return ToolPreview(summary=analysis.text, error=problem)
        rows: int | None = 0
        written: set[str] = set()
        # Risk from the effect, not the spelling (issue 22: "WHERE id = id" was medium): an
        # UPDATE/DELETE that changes every row of its table, or whose rows could not be
        # counted, is critical like one without WHERE (docs/model.md, "Risk from the effect").
        effect: str | None = None
        blocked = self.db.functions.disallowed(
            (s.expression for s in analysis.statements), analysis.source
        )
        not_counted: dict[str, None] = {}
        effects: list[Effect] = []
        for index, s in enumerate(analysis.statements):
            n: int | None = None
            sweeping: str | None = texts.sql_uncounted(s.kind)  # until it is counted
            # The preview runs before anyone approved: not when the statement calls a
            # function outside the allow-list (pg_terminate_backend in a WHERE would run in
            # the SELECT that reads its rows).
            calls = self.db.functions.disallowed([s.expression], analysis.source)
            if calls:
                not_counted.update(dict.fromkeys(calls))
                found = [not_previewed(index, s, texts.not_previewed(calls))]
            elif written.intersection(s.tables):
                # Read before the batch runs, the rows are wrong for a table an earlier
                # statement of the same batch changes: say "unknown", not a wrong number.
                found = [not_previewed(index, s, texts.EFFECT_AFTER_EARLIER)]
            else:
                found = await self.db.read_effects(s, index)
            effects += found
            if s.kind in ("UPDATE", "DELETE"):
                n = found[0]["total"]
                if n is not None:
                    try:
                        sweeping = await self._every_row(s, n)
                    except Exception as exc:  # any driver error just means "unknown"
                        log.info("sql.count_failed", error=str(exc).splitlines()[0])
                rows = None if (n is None or rows is None) else rows + n
                effect = effect or sweeping
            written.update(s.tables)
        if not any(s.kind in ("UPDATE", "DELETE") for s in analysis.statements):
            rows = None
        details: dict[str, Any] = {
            "statement": "; ".join(s.sql for s in analysis.statements),
            "kind": analysis.kind,
            "tables": list(analysis.tables),
            "rows_affected": rows,
            "statement_count": len(analysis.statements),
            "has_where": all(
                s.has_where for s in analysis.statements if s.kind in ("UPDATE", "DELETE")
            ),
            "grant_scope": analysis.grant_scope,
            # The rows a person approves; checked again when the call runs (issue 24).
            "effects": effects,
        }
        notes = [w for w in (analysis.warning or effect,) if w]
        if blocked:
            details["functions_not_allowed"] = list(blocked)
        if not_counted:
            notes.append(texts.not_previewed(list(not_counted)))
        if notes:
            details["warning"] = " · ".join(notes)
        if self.undo is not None:
            details.update(await self._undo_verdict(analysis, effects))
        rows_text = f"，影响 {texts.rows(rows)}" if rows is not None else ""
        return ToolPreview(
            summary=f"{analysis.kind} {', '.join(analysis.tables) or ''}{rows_text}".strip(),
            details=details,
            risk=Risk.CRITICAL if effect else analysis.risk,
            hold=_hold(blocked, analysis),
        )

    async def _every_row(self, s: SqlStatement, n: int) -> str | None:
        """The warning when changing ``n`` rows changes every row of the table, else None."""
        if n < 2:  # never every row (affects_every_row): no need to size the table
            return None
        size = await self.db.table_rows(s)
        if size is None:
            return texts.sql_uncounted(s.kind)
        total, estimated = size
        if not affects_every_row(n, total, estimated=estimated):
            return None
        table = s.target.this.name if s.target is not None else s.tables[0]
        return texts.sql_every_row(s.kind, table, total, estimated=estimated)

    async def _undo_verdict(self, analysis: SqlAnalysis, effects: list[Effect]) -> dict[str, Any]:
        """Whether the call can be undone, read before anyone approves (sql_undo.py): the
        card says so. Each entry of ``effects`` gets its own verdict too."""
        assert self.undo is not None
        totals: dict[int, int] = {}
        for e in effects:  # the preview's rows per statement, INSERT included
            if isinstance(e.get("total"), int):
                totals[e["statement"]] = totals.get(e["statement"], 0) + e["total"]
        counted = [totals.get(i) for i in range(len(analysis.statements))]
        async with self.db.read_only() as conn:
            verdicts = await undo_verdicts(
                conn, analysis, counted, dialect=self.db.dialect, max_rows=self.undo.max_rows
            )
        mark_effects(effects, verdicts)
        return undo_details(verdicts, days=self.undo.days)

    async def run(self, args: BaseModel) -> str:
        return await self._modify(args, None)

    async def run_approved(self, args: BaseModel, approved: ApprovedRun) -> str:
        """Run what a person approved, only if its rows are still the ones they saw; and
        keep what it changes for sql_undo, by the record's id (docs/undo.md)."""
        return await self._modify(args, approved)

    async def _modify(self, args: BaseModel, approved: ApprovedRun | None) -> str:
        analysis = self.analyze(args)
        # preview refuses these first; checked again so run() is safe on its own.
        problem = analysis.error or batch_problem(analysis, self.db.dialect)
        if problem:
            raise ValueError(problem)
        keeper = None
        if approved is not None and self.undo is not None:
            keeper = self.undo.keeper(approved.confirmation_id, self.db.dialect)
        return await self.db.modify(analysis, approved, keeper=keeper)
