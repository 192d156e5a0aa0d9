"""SQL tools: ``sql_query`` (read-only) and ``sql_modify`` (changes, held for a person).

Statements are classified with sqlglot (several statements, comments, CTEs); what cannot
be parsed is refused with the parser's message. Databases are reached through SQLAlchemy
async URLs (aiosqlite, asyncpg, aiomysql).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import sqlglot
import structlog
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlglot import exp
from sqlglot.errors import SqlglotError

from gateway.confirm.model import Risk
from gateway.tools.base import Level, Tool, ToolPreview

log = structlog.get_logger(__name__)

_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgres", "mysql": "mysql", "mariadb": "mysql"}
_MODIFY_KINDS = (
    exp.Insert,
    exp.Update,
    exp.Delete,
    exp.Merge,
    exp.Create,
    exp.Drop,
    exp.Alter,
    exp.TruncateTable,
    exp.Grant,
    exp.Command,
    exp.Pragma,
    exp.Set,
    exp.Copy,
)
_KIND_NAMES: dict[type[exp.Expression], str] = {
    exp.Insert: "INSERT",
    exp.Update: "UPDATE",
    exp.Delete: "DELETE",
    exp.Merge: "MERGE",
    exp.Create: "CREATE",
    exp.Drop: "DROP",
    exp.Alter: "ALTER",
    exp.TruncateTable: "TRUNCATE",
    exp.Grant: "GRANT",
    exp.Pragma: "PRAGMA",
    exp.Set: "SET",
    exp.Copy: "COPY",
}


@dataclass(frozen=True, slots=True)
class SqlStatement:
    sql: str
    kind: str
    tables: tuple[str, ...]
    has_where: bool
    read_only: bool
    expression: exp.Expression = field(repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class SqlAnalysis:
    text: str
    statements: tuple[SqlStatement, ...] = ()
    error: str | None = None

    @property
    def read_only(self) -> bool:
        return bool(self.statements) and all(s.read_only for s in self.statements)

    @property
    def kind(self) -> str:
        kinds = list(dict.fromkeys(s.kind for s in self.statements))
        return "+".join(kinds)

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t for s in self.statements for t in s.tables))

    @property
    def risk(self) -> Risk:
        risk = Risk.LOW if self.read_only else Risk.MEDIUM
        for s in self.statements:
            if s.kind in ("DROP", "TRUNCATE") or (
                s.kind in ("UPDATE", "DELETE") and not s.has_where
            ):
                return Risk.CRITICAL
            if s.kind in ("ALTER", "GRANT", "COMMAND", "MERGE", "PRAGMA", "SET", "COPY"):
                risk = Risk.HIGH
        return risk

    @property
    def warning(self) -> str | None:
        for s in self.statements:
            if s.kind in ("UPDATE", "DELETE") and not s.has_where:
                return f"{s.kind} 没有 WHERE，将影响整表 / {s.kind} without WHERE affects every row"
            if s.kind in ("DROP", "TRUNCATE"):
                return f"{s.kind} 不可撤销 / {s.kind} cannot be undone"
        return None


def _kind_of(e: exp.Expression) -> str:
    for cls, name in _KIND_NAMES.items():
        if isinstance(e, cls):
            return name
    if isinstance(e, exp.Query):
        return "SELECT"
    if isinstance(e, exp.Command):
        return "COMMAND"
    return type(e).__name__.upper()


def _tables(e: exp.Expression) -> tuple[str, ...]:
    ctes = {c.alias_or_name for c in e.find_all(exp.CTE)}
    names = [t.name for t in e.find_all(exp.Table) if t.name and t.name not in ctes]
    return tuple(dict.fromkeys(names))


def analyze_sql(text: str, dialect: str = "sqlite") -> SqlAnalysis:
    """Split and classify SQL. Unparseable input comes back with ``error`` set."""
    stripped = text.strip()
    if not stripped:
        return SqlAnalysis(text, error="empty statement / 语句为空")
    try:
        parsed = sqlglot.parse(stripped, read=dialect)
    except SqlglotError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return SqlAnalysis(text, error=f"SQL parse error / 无法解析: {first}")
    expressions = [e for e in parsed if e is not None and not isinstance(e, exp.Semicolon)]
    if not expressions:
        return SqlAnalysis(text, error="no statement found / 没有语句")
    statements = []
    single = len(expressions) == 1
    for e in expressions:
        assert isinstance(e, exp.Expression)
        kind = _kind_of(e)
        # A data-changing node anywhere (e.g. a CTE with DELETE ... RETURNING) is not read-only.
        read_only = isinstance(e, exp.Query) and e.find(*_MODIFY_KINDS) is None
        where = e.args.get("where")
        statements.append(
            SqlStatement(
                # What the person approves is what runs: the original text for one statement,
                # sqlglot's rendering of each statement when there are several.
                sql=stripped.rstrip(";").strip() if single else e.sql(dialect=dialect),
                kind=kind,
                tables=_tables(e),
                has_where=where is not None,
                read_only=read_only,
                expression=e,
            )
        )
    return SqlAnalysis(text, statements=tuple(statements))


class SqlDatabase:
    """One database behind the SQL tools."""

    def __init__(self, url: str, *, max_rows: int = 50, timeout_seconds: float = 30.0) -> None:
        self.url = url
        self.engine: AsyncEngine = create_async_engine(url)
        self.backend = make_url(url).get_backend_name()
        self.dialect = _DIALECTS.get(self.backend, self.backend)
        self.max_rows = max_rows
        self.timeout_seconds = timeout_seconds

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

    async def count_affected(self, statement: SqlStatement) -> int | None:
        """Rows an UPDATE/DELETE would touch: SELECT COUNT(*) with the same table and WHERE."""
        e = statement.expression
        if statement.kind not in ("UPDATE", "DELETE"):
            return None
        table = e.this if isinstance(e.this, exp.Table) else e.find(exp.Table)
        # Joins / USING / FROM in UPDATE make a single-table count wrong: say "unknown".
        if table is None or e.args.get("joins") or e.args.get("using") or e.args.get("from"):
            return None
        where = e.args.get("where")
        query = exp.select("COUNT(*)").from_(table.copy())
        if where is not None:
            query = query.where(where.this.copy())
        sql = query.sql(dialect=self.dialect)
        async with self.engine.connect() as conn:
            result = await conn.exec_driver_sql(sql)
            value = result.scalar_one()
            await conn.rollback()
        return int(value)

    async def query(self, analysis: SqlAnalysis) -> str:
        """Run read-only statements inside a read-only transaction; a text table back."""
        outputs = []
        async with self.engine.connect() as conn:
            if self.backend == "sqlite":
                await conn.exec_driver_sql("PRAGMA query_only = ON")
            elif self.backend == "postgresql":
                await conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            elif self.dialect == "mysql":
                await conn.rollback()
                await conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            try:
                for s in analysis.statements:
                    result = await asyncio.wait_for(
                        conn.exec_driver_sql(s.sql), timeout=self.timeout_seconds
                    )
                    columns = list(result.keys())
                    rows = result.fetchmany(self.max_rows + 1)
                    outputs.append(_format_rows(columns, rows, self.max_rows))
            finally:
                await conn.rollback()
                if self.backend == "sqlite":
                    await conn.exec_driver_sql("PRAGMA query_only = OFF")
                    await conn.commit()
        return "\n\n".join(outputs)

    async def modify(self, analysis: SqlAnalysis) -> str:
        """Run every statement in one transaction; all or nothing."""
        counts = []
        async with self.engine.begin() as conn:
            for s in analysis.statements:
                result = await asyncio.wait_for(
                    conn.exec_driver_sql(s.sql), timeout=self.timeout_seconds
                )
                counts.append(f"{s.kind}: {result.rowcount if result.rowcount >= 0 else '?'} rows")
        return "; ".join(counts)


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
        return ToolPreview(
            summary=f"查询 query {', '.join(analysis.tables) or '-'}",
            details={
                "statement": analysis.text.strip(),
                "kind": analysis.kind,
                "tables": list(analysis.tables),
            },
            risk=Risk.LOW,
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

    async def preview(self, args: BaseModel) -> ToolPreview:
        analysis = self.analyze(args)
        if analysis.error:
            return ToolPreview(summary=analysis.text, error=analysis.error)
        if analysis.read_only:
            return ToolPreview(
                summary=analysis.text,
                error="只读查询请用 sql_query / read-only statements go through sql_query",
            )
        rows: int | None = 0
        for s in analysis.statements:
            try:
                n = await self.db.count_affected(s)
            except Exception as exc:
                log.warning("sql.count_failed", error=str(exc))
                n = None
            if s.kind in ("UPDATE", "DELETE"):
                rows = None if (n is None or rows is None) else rows + n
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
        }
        if analysis.warning:
            details["warning"] = analysis.warning
        rows_text = f"，影响 {rows} 行 / {rows} rows" if rows is not None else ""
        return ToolPreview(
            summary=f"{analysis.kind} {', '.join(analysis.tables) or ''}{rows_text}".strip(),
            details=details,
            risk=analysis.risk,
        )

    async def run(self, args: BaseModel) -> str:
        analysis = self.analyze(args)
        if analysis.error:
            raise ValueError(analysis.error)
        return await self.db.modify(analysis)
