"""sql_query / sql_modify against SQLite, the local PostgreSQL and MariaDB.

Each test works on its own uniquely named table (and sequence / function) and drops it.
PostgreSQL and MariaDB skip when unreachable, or fail with GATEWAY_TEST_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from gateway.confirm.model import Risk
from gateway.tools.base import ToolFailedError, ToolPreview
from gateway.tools.sql import SqlDatabase, SqlModifyTool, SqlQueryTool
from gateway.tools.sql_analysis import analyze_sql
from tests.services import MARIADB_URL, POSTGRES_URL, mask_url, require_service

ROWS = [
    (1, "Alice", "120.50", 0),
    (2, "Bob", "80.00", 1),
    (3, "Carol", "45.25", 1),
    (4, "Dave", "300.00", 2),
    (5, "Erin", "15.75", 0),
    (6, "Frank", "99.99", 1),
]


@dataclass
class Db:
    kind: str  # "sqlite" | "postgresql" | "mariadb"
    sql: SqlDatabase
    table: str
    drops: list[str] = field(default_factory=list)

    def name(self, stem: str) -> str:
        """A unique object name, dropped after the test."""
        return f"{stem}_{self.table.rsplit('_', 1)[-1]}"

    async def execute(self, statement: str) -> None:
        async with self.sql.engine.begin() as conn:
            await conn.exec_driver_sql(statement)

    async def rows(self, query: str) -> list[tuple[Any, ...]]:
        async with self.sql.engine.connect() as conn:
            result = await conn.exec_driver_sql(query)
            return [tuple(r) for r in result.fetchall()]

    async def ids(self) -> list[int]:
        return [int(r[0]) for r in await self.rows(f"SELECT id FROM {self.table} ORDER BY id")]


POSTGRES = pytest.param("postgresql", marks=pytest.mark.services)
MARIADB = pytest.param("mariadb", marks=pytest.mark.services)


@pytest.fixture(params=["sqlite", POSTGRES, MARIADB])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Db]:
    kind: str = request.param
    url = {
        "sqlite": f"sqlite+aiosqlite:///{tmp_path / 'tools.db'}",
        "postgresql": POSTGRES_URL,
        "mariadb": MARIADB_URL,
    }[kind]
    database = SqlDatabase(url, timeout_seconds=10)
    try:
        async with database.engine.connect() as conn:
            await conn.exec_driver_sql("SELECT 1")
    except (OSError, SQLAlchemyError) as exc:
        await database.close()
        require_service(f"{kind} at {mask_url(url)}", exc)
    table = f"orders_{uuid.uuid4().hex[:10]}"
    d = Db(kind, database, table)
    d.drops.append(f"DROP TABLE IF EXISTS {table}")
    await d.execute(
        f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, customer VARCHAR(50) NOT NULL,"
        " amount NUMERIC(10, 2) NOT NULL, status INTEGER NOT NULL)"
    )
    values = ", ".join(f"({i}, '{c}', {a}, {s})" for i, c, a, s in ROWS)
    await d.execute(f"INSERT INTO {table} (id, customer, amount, status) VALUES {values}")
    try:
        yield d
    finally:
        for statement in reversed(d.drops):
            await d.execute(statement)
        await database.close()


async def preview(tool: SqlQueryTool | SqlModifyTool, sql: str) -> ToolPreview:
    return await tool.preview(tool.parse_args({"sql": sql}))


async def run(tool: SqlQueryTool | SqlModifyTool, sql: str) -> Any:
    return await tool.run(tool.parse_args({"sql": sql}))


# -- classification (no database) -------------------------------------------------------------

DIALECTS = ["sqlite", "postgres", "mysql"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_several_statements_are_split_and_all_classified(dialect: str) -> None:
    a = analyze_sql("SELECT * FROM orders; DELETE FROM orders WHERE id = 1;", dialect)
    assert a.error is None
    assert [s.kind for s in a.statements] == ["SELECT", "DELETE"]
    assert a.kind == "SELECT+DELETE"
    assert not a.read_only  # one writer makes the whole text a write
    assert a.tables == ("orders",)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_comments_do_not_hide_or_invent_statements(dialect: str) -> None:
    a = analyze_sql("-- monthly report\nSELECT * FROM orders /* all */ WHERE id = 1;", dialect)
    assert a.error is None
    assert a.read_only
    assert len(a.statements) == 1
    # A statement inside a comment is a comment: nothing to classify, nothing runs.
    b = analyze_sql("SELECT 1 -- ; DROP TABLE orders", dialect)
    assert b.read_only
    assert [s.kind for s in b.statements] == ["SELECT"]
    # ... but a write after a comment is still a write.
    c = analyze_sql("/* harmless */ DELETE FROM orders", dialect)
    assert c.kind == "DELETE"
    assert c.risk is Risk.CRITICAL


@pytest.mark.parametrize("dialect", DIALECTS)
def test_read_only_cte_names_are_not_tables(dialect: str) -> None:
    a = analyze_sql(
        "WITH big AS (SELECT * FROM orders WHERE amount > 100) SELECT * FROM big", dialect
    )
    assert a.read_only
    assert a.tables == ("orders",)


def test_data_modifying_cte_is_a_write_with_its_real_kind_and_risk() -> None:
    a = analyze_sql(
        "WITH gone AS (DELETE FROM orders WHERE status = 1 RETURNING *) SELECT * FROM gone",
        "postgres",
    )
    assert not a.read_only
    assert a.kind == "DELETE"
    assert a.tables == ("orders",)
    assert a.risk is Risk.MEDIUM
    # Without a WHERE inside the CTE the whole table goes: critical, as at top level.
    b = analyze_sql("WITH gone AS (DELETE FROM orders RETURNING *) SELECT * FROM gone", "postgres")
    assert b.risk is Risk.CRITICAL
    assert b.warning is not None


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("SELECT * FROM", "Expected table name"),
        ("SELEC * FROM orders", "Required keyword"),
        ("SELECT (1", "Expecting )"),
    ],
)
async def test_unparseable_is_refused_with_the_parsers_message(sql: str, fragment: str) -> None:
    a = analyze_sql(sql, "sqlite")
    assert a.error is not None
    assert fragment in a.error
    assert a.statements == ()
    assert not a.read_only
    database = SqlDatabase("sqlite+aiosqlite:///:memory:")
    try:
        for tool in (SqlQueryTool(database), SqlModifyTool(database)):
            p = await preview(tool, sql)
            assert p.error == a.error
            with pytest.raises(ValueError, match="parse error"):
                await run(tool, sql)
    finally:
        await database.close()


def test_empty_text_is_refused() -> None:
    assert analyze_sql("  ;; ", "sqlite").error is not None
    assert analyze_sql("", "sqlite").error is not None


@pytest.mark.parametrize("sql", ["SAVEPOINT a", "orders", "1 + 1", "SELECT 1; RELEASE a"])
def test_expressions_that_are_not_statements_are_refused(sql: str) -> None:
    a = analyze_sql(sql, "postgres")
    assert a.error is not None
    assert "not a SQL statement" in a.error


@pytest.mark.parametrize(
    ("sql", "dialect"),
    [
        ("SELECT * FROM orders FOR UPDATE", "postgres"),
        ("SELECT * FROM orders WHERE id = 1 FOR UPDATE", "mysql"),
        ("SELECT * INTO orders_copy FROM orders", "postgres"),
    ],
)
def test_reads_that_lock_or_write_are_not_read_only(sql: str, dialect: str) -> None:
    assert not analyze_sql(sql, dialect).read_only


def test_mysql_executable_comments_are_refused() -> None:
    # MySQL/MariaDB run the inside of /*! ... */: the parser would see one statement and
    # the server another ("WHERE id = 1" shown, "OR 1=1" run).
    for sql in (
        "DELETE FROM orders WHERE id = 1 /*! OR 1=1 */",
        "SELECT * FROM orders /*!50000 INTO OUTFILE '/tmp/x' */",
        "SELECT 1 /*M! , sleep(1) */",
    ):
        a = analyze_sql(sql, "mysql")
        assert a.error is not None, sql
        assert "/*!" in a.error
    # In a string it is just text; elsewhere it is an ordinary comment.
    assert analyze_sql("SELECT '/*! x */' AS s", "mysql").error is None
    assert analyze_sql("SELECT 1 /*! OR 1=1 */", "postgres").error is None


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM orders WHERE id = 1; COMMIT; DELETE FROM orders",
        "BEGIN; DELETE FROM orders WHERE id = 1",
        "ROLLBACK",
    ],
)
async def test_transaction_control_is_refused(sql: str) -> None:
    database = SqlDatabase("sqlite+aiosqlite:///:memory:")
    try:
        p = await preview(SqlModifyTool(database), sql)
        assert p.error is not None
        assert "transaction" in p.error.lower()
        with pytest.raises(ValueError, match=r"(?i)transaction"):
            await run(SqlModifyTool(database), sql)
    finally:
        await database.close()


@pytest.mark.parametrize(
    ("sql", "risk"),
    [
        ("UPDATE orders SET status = 0", Risk.CRITICAL),
        ("DELETE FROM orders", Risk.CRITICAL),
        ("DELETE FROM orders WHERE 1 = 1", Risk.CRITICAL),
        ("UPDATE orders SET status = 0 WHERE TRUE", Risk.CRITICAL),
        ("DROP TABLE orders", Risk.CRITICAL),
        ("TRUNCATE TABLE orders", Risk.CRITICAL),
        ("INSERT INTO orders VALUES (9, 'x', 1, 0); DELETE FROM orders", Risk.CRITICAL),
        ("DELETE FROM orders WHERE id = 1", Risk.MEDIUM),
        ("INSERT INTO orders VALUES (9, 'x', 1, 0)", Risk.MEDIUM),
        ("ALTER TABLE orders ADD COLUMN note TEXT", Risk.HIGH),
        ("SELECT * FROM orders", Risk.LOW),
    ],
)
def test_risk(sql: str, risk: Risk) -> None:
    a = analyze_sql(sql, "postgres")
    assert a.error is None
    assert a.risk is risk
    if risk is Risk.CRITICAL:
        assert a.warning


# -- against real databases -------------------------------------------------------------------


async def test_sql_query_returns_rows(db: Db) -> None:
    tool = SqlQueryTool(db.sql)
    sql = f"SELECT id, customer FROM {db.table} WHERE status = 1 ORDER BY id"
    p = await preview(tool, sql)
    assert p.error is None
    assert p.risk is Risk.LOW
    assert p.details["tables"] == [db.table]
    out = await run(tool, sql)
    assert "Bob" in out
    assert "Carol" in out
    assert "Alice" not in out
    assert "(3 rows)" in out


async def test_sql_query_with_cte_and_comments(db: Db) -> None:
    sql = (
        f"-- who paid most\nWITH big AS (SELECT * FROM {db.table} WHERE amount > 100)"
        " SELECT customer FROM big /* just names */ ORDER BY customer"
    )
    out = await run(SqlQueryTool(db.sql), sql)
    assert "Alice" in out
    assert "Dave" in out
    assert "(2 rows)" in out


async def test_sql_query_refuses_writes(db: Db) -> None:
    tool = SqlQueryTool(db.sql)
    for sql in (
        f"DELETE FROM {db.table} WHERE id = 1",
        f"SELECT 1; DELETE FROM {db.table} WHERE id = 1",
        f"UPDATE {db.table} SET status = 9",
    ):
        p = await preview(tool, sql)
        assert p.error is not None
        assert "sql_modify" in p.error
        with pytest.raises(ValueError, match="read-only"):
            await run(tool, sql)
    assert await db.ids() == [1, 2, 3, 4, 5, 6]


async def test_query_connection_is_read_only_even_without_the_classifier(db: Db) -> None:
    # Bypass classification: the database itself must refuse the write.
    with pytest.raises(ToolFailedError):
        await db.sql.query(analyze_sql(f"DELETE FROM {db.table} WHERE id = 1", db.sql.dialect))
    assert await db.ids() == [1, 2, 3, 4, 5, 6]
    # The pooled connection is usable for writes again afterwards.
    await run(SqlModifyTool(db.sql), f"DELETE FROM {db.table} WHERE id = 6")
    assert await db.ids() == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("db", [POSTGRES], indirect=True)
async def test_postgres_side_effects_cannot_run_through_sql_query(db: Db) -> None:
    fn, seq = db.name("wipe"), db.name("seq")
    db.drops += [f"DROP FUNCTION IF EXISTS {fn}()", f"DROP SEQUENCE IF EXISTS {seq}"]
    await db.execute(
        f"CREATE FUNCTION {fn}() RETURNS integer LANGUAGE sql AS "
        f"$$ DELETE FROM {db.table} WHERE id = 1; SELECT 1 $$"
    )
    await db.execute(f"CREATE SEQUENCE {seq}")
    tool = SqlQueryTool(db.sql)
    # Both look like plain SELECTs to a parser; the read-only transaction stops them.
    assert (await preview(tool, f"SELECT {fn}()")).error is None
    with pytest.raises(ToolFailedError, match="read-only"):
        await run(tool, f"SELECT {fn}()")
    with pytest.raises(ToolFailedError, match="read-only"):
        await run(tool, f"SELECT nextval('{seq}')")
    assert await db.ids() == [1, 2, 3, 4, 5, 6]
    assert (await db.rows(f"SELECT is_called FROM {seq}"))[0][0] is False
    # FOR UPDATE is refused up front, and the connection would refuse it too.
    assert (await preview(tool, f"SELECT * FROM {db.table} FOR UPDATE")).error is not None
    with pytest.raises(ToolFailedError, match="read-only"):
        await db.sql.query(analyze_sql(f"SELECT * FROM {db.table} FOR UPDATE", "postgres"))


@pytest.mark.parametrize("db", [MARIADB], indirect=True)
async def test_mariadb_side_effects_cannot_run_through_sql_query(db: Db) -> None:
    fn = db.name("wipe")
    db.drops.append(f"DROP FUNCTION IF EXISTS {fn}")
    await db.execute(
        f"CREATE FUNCTION {fn}() RETURNS INT MODIFIES SQL DATA "
        f"BEGIN DELETE FROM {db.table} WHERE id = 1; RETURN 1; END"
    )
    tool = SqlQueryTool(db.sql)
    assert (await preview(tool, f"SELECT {fn}()")).error is None
    with pytest.raises(ToolFailedError, match="read-only"):
        await run(tool, f"SELECT {fn}()")
    assert await db.ids() == [1, 2, 3, 4, 5, 6]


async def test_rows_affected_is_counted_before_running(db: Db) -> None:
    tool = SqlModifyTool(db.sql)
    p = await preview(tool, f"DELETE FROM {db.table} WHERE status = 1")
    assert p.error is None
    assert p.details["rows_affected"] == 3
    assert p.details["kind"] == "DELETE"
    assert p.details["has_where"] is True
    assert p.risk is Risk.MEDIUM
    assert "3" in p.summary
    assert await db.ids() == [1, 2, 3, 4, 5, 6]  # preview changed nothing

    p = await preview(tool, f"UPDATE {db.table} SET status = 9 WHERE amount < 100")
    assert p.details["rows_affected"] == 4
    p = await preview(tool, f"UPDATE {db.table} SET status = 9 WHERE customer = 'Nobody'")
    assert p.details["rows_affected"] == 0
    # A batch: counts add up over different tables ...
    other = db.name("other")
    db.drops.append(f"DROP TABLE IF EXISTS {other}")
    await db.execute(f"CREATE TABLE {other} (id INTEGER PRIMARY KEY)")
    await db.execute(f"INSERT INTO {other} (id) VALUES (1), (2)")
    p = await preview(tool, f"DELETE FROM {other}; DELETE FROM {db.table} WHERE status = 1")
    assert p.details["rows_affected"] == 5
    assert p.risk is Risk.CRITICAL
    # ... but a count taken before an earlier statement changes the same table is unknown.
    p = await preview(tool, f"DELETE FROM {db.table} WHERE id = 2; DELETE FROM {db.table}")
    assert p.details["rows_affected"] is None

    out = await run(tool, f"DELETE FROM {db.table} WHERE status = 1")
    assert "3 rows" in out
    assert await db.ids() == [1, 4, 5]


@pytest.mark.parametrize("db", [MARIADB], indirect=True)
async def test_rows_affected_honours_mysql_limit(db: Db) -> None:
    p = await preview(SqlModifyTool(db.sql), f"DELETE FROM {db.table} WHERE status = 1 LIMIT 2")
    assert p.details["rows_affected"] == 2


# MariaDB 10.11 has no WITH before DELETE.
@pytest.mark.parametrize("db", ["sqlite", POSTGRES], indirect=True)
async def test_rows_affected_with_a_cte(db: Db) -> None:
    sql = (
        f"WITH cheap AS (SELECT id FROM {db.table} WHERE amount < 50) "
        f"DELETE FROM {db.table} WHERE id IN (SELECT id FROM cheap)"
    )
    p = await preview(SqlModifyTool(db.sql), sql)
    assert p.details["rows_affected"] == 2
    await run(SqlModifyTool(db.sql), sql)
    assert await db.ids() == [1, 2, 4, 6]


@pytest.mark.parametrize("db", [POSTGRES], indirect=True)
async def test_postgres_data_modifying_cte_is_counted_and_held(db: Db) -> None:
    sql = f"WITH gone AS (DELETE FROM {db.table} WHERE status = 0 RETURNING id) SELECT * FROM gone"
    assert (await preview(SqlQueryTool(db.sql), sql)).error is not None
    p = await preview(SqlModifyTool(db.sql), sql)
    assert p.error is None
    assert p.details["kind"] == "DELETE"
    assert p.details["rows_affected"] == 2
    assert await db.ids() == [1, 2, 3, 4, 5, 6]
    await run(SqlModifyTool(db.sql), sql)
    assert await db.ids() == [2, 3, 4, 6]


@pytest.mark.parametrize("db", [POSTGRES], indirect=True)
async def test_counting_never_runs_side_effects(db: Db) -> None:
    seq = db.name("seq")
    db.drops.append(f"DROP SEQUENCE IF EXISTS {seq}")
    await db.execute(f"CREATE SEQUENCE {seq}")
    p = await preview(SqlModifyTool(db.sql), f"DELETE FROM {db.table} WHERE id = nextval('{seq}')")
    assert p.error is None
    assert p.details["rows_affected"] is None  # could not count without a side effect
    assert (await db.rows(f"SELECT is_called FROM {seq}"))[0][0] is False


@pytest.mark.parametrize(
    "template",
    [
        "DELETE FROM {t}",
        "UPDATE {t} SET status = 0",
        "DELETE FROM {t} WHERE 1 = 1",
        "DROP TABLE {t}",
        "TRUNCATE TABLE {t}",
    ],
)
async def test_critical_statements(db: Db, template: str) -> None:
    tool = SqlModifyTool(db.sql)
    p = await preview(tool, template.format(t=db.table))
    assert p.error is None
    assert p.risk is Risk.CRITICAL
    assert p.details["warning"]
    if template.startswith(("DELETE", "UPDATE")):
        assert p.details["rows_affected"] == 6
    assert await db.ids() == [1, 2, 3, 4, 5, 6]


async def test_multi_statement_batch_is_all_or_nothing(db: Db) -> None:
    tool = SqlModifyTool(db.sql)
    missing = db.name("missing")
    sql = (
        f"INSERT INTO {db.table} (id, customer, amount, status) VALUES (100, 'Zed', 1, 0); "
        f"UPDATE {db.table} SET status = 7 WHERE id = 1; "
        f"INSERT INTO {missing} (id) VALUES (1)"
    )
    p = await preview(tool, sql)
    assert p.error is None
    assert p.details["statement_count"] == 3
    with pytest.raises(ToolFailedError):
        await run(tool, sql)
    assert await db.ids() == [1, 2, 3, 4, 5, 6]
    assert await db.rows(f"SELECT status FROM {db.table} WHERE id = 1") == [(0,)]

    ok = (
        f"INSERT INTO {db.table} (id, customer, amount, status) VALUES (100, 'Zed', 1, 0); "
        f"DELETE FROM {db.table} WHERE status = 1"
    )
    out = await run(tool, ok)
    assert "INSERT: 1 行 / 1 row" in out
    assert "DELETE: 3 行 / 3 rows" in out
    assert await db.ids() == [1, 4, 5, 100]


async def test_batch_with_ddl_is_all_or_nothing_or_refused(db: Db) -> None:
    tool = SqlModifyTool(db.sql)
    other, missing = db.name("other"), db.name("missing")
    db.drops.append(f"DROP TABLE IF EXISTS {other}")
    sql = f"DROP TABLE {db.table}; CREATE TABLE {other} (a INT); INSERT INTO {missing} VALUES (1)"
    p = await preview(tool, sql)
    if db.kind == "mariadb":
        # MariaDB commits around DDL, so it cannot be undone: refused instead of half-run.
        assert p.error is not None
        assert "DDL" in p.error
        with pytest.raises(ValueError, match="DDL"):
            await run(tool, sql)
    else:
        assert p.error is None
        with pytest.raises(ToolFailedError):
            await run(tool, sql)
    assert await db.ids() == [1, 2, 3, 4, 5, 6]  # the table was not dropped
    with pytest.raises(DBAPIError):
        await db.rows(f"SELECT * FROM {other}")
    # A lone DDL statement is fine everywhere.
    await run(tool, f"CREATE TABLE {other} (a INT)")
    assert await db.rows(f"SELECT * FROM {other}") == []


async def test_ddl_results_say_done_not_a_question_mark(db: Db) -> None:
    """DDL has no row count (rowcount -1): it read "DROP: ? 行 / ? rows" (issue 26)."""
    tool = SqlModifyTool(db.sql)
    other = db.name("other")
    db.drops.append(f"DROP TABLE IF EXISTS {other}")
    assert await run(tool, f"CREATE TABLE {other} (a INT)") == "CREATE: 已执行 / done"
    assert await run(tool, f"DROP TABLE {other}") == "DROP: 已执行 / done"
