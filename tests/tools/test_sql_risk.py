"""Risk from the effect (issue 22): an UPDATE/DELETE that changes every row of its table is
critical however its WHERE is spelled, and so is one whose rows depend on the clock,
randomness or session state; what the parser cannot read is critical and held.

SQLite, the local PostgreSQL (both ways of sizing a table: COUNT(*) and the planner's
estimate) and MariaDB; each test has its own table (tests/tools/test_sql_tools.py).
"""

from __future__ import annotations

import pytest

from gateway import texts
from gateway.confirm.model import Risk
from gateway.tools.sql import SqlDatabase, SqlModifyTool
from gateway.tools.sql_analysis import affects_every_row, analyze_sql
from tests.tools import test_sql_tools
from tests.tools.test_sql_tools import MARIADB, POSTGRES, POSTGRES_URL, Db, preview

db = test_sql_tools.db  # the same fixture: SQLite, PostgreSQL, MariaDB, a table of 6 rows

# WHEREs true of every row of the test table (ids 1-6, none NULL), as the issue found them.
EVERY_ROW = ["id = id", "id IS NOT NULL", "NOT 0", "'1'", "id > -1", "1=1"]
# PostgreSQL has no integer NOT: the same idea in its types.
ON_POSTGRES = {"NOT 0": "NOT FALSE"}


def spelled(db: Db, where: str) -> str:
    return ON_POSTGRES.get(where, where) if db.kind == "postgresql" else where


@pytest.mark.parametrize("where", EVERY_ROW)
@pytest.mark.parametrize("kind", ["DELETE FROM {t}", "UPDATE {t} SET status = 9"])
async def test_a_where_true_of_every_row_is_critical_however_spelled(
    db: Db, kind: str, where: str
) -> None:
    sql = f"{kind.format(t=db.table)} WHERE {spelled(db, where)}"
    p = await preview(SqlModifyTool(db.sql), sql)
    assert p.error is None
    assert p.details["rows_affected"] == 6
    assert p.risk is Risk.CRITICAL, sql
    assert p.details["warning"]
    assert await db.ids() == [1, 2, 3, 4, 5, 6]


async def test_a_where_true_of_some_rows_keeps_its_risk(db: Db) -> None:
    tool = SqlModifyTool(db.sql)
    for where, rows in (("id = 3", 1), ("id < 6", 5), ("id > 100", 0)):
        p = await preview(tool, f"DELETE FROM {db.table} WHERE {where}")
        assert (p.details["rows_affected"], p.risk) == (rows, Risk.MEDIUM), where


async def test_tables_of_no_row_one_row_and_two_rows(db: Db) -> None:
    """The rule, at its edges: every row of a table of two rows or more is critical; a
    one-row or empty table has no "rest" to tell a targeted change from a sweeping one."""
    tool = SqlModifyTool(db.sql)
    small = db.name("small")
    db.drops.append(f"DROP TABLE IF EXISTS {small}")
    await db.execute(f"CREATE TABLE {small} (id INTEGER PRIMARY KEY)")
    sweep = f"DELETE FROM {small} WHERE id = id"
    assert (await preview(tool, sweep)).risk is Risk.MEDIUM  # empty: changes nothing
    await db.execute(f"INSERT INTO {small} (id) VALUES (1)")
    p = await preview(tool, sweep)
    assert (p.details["rows_affected"], p.risk) == (1, Risk.MEDIUM)
    await db.execute(f"INSERT INTO {small} (id) VALUES (2)")
    p = await preview(tool, sweep)
    assert (p.details["rows_affected"], p.risk) == (2, Risk.CRITICAL)
    p = await preview(tool, f"DELETE FROM {small} WHERE id = 2")
    assert (p.details["rows_affected"], p.risk) == (1, Risk.MEDIUM)
    # Without WHERE it stays critical by its spelling, even on an empty table.
    await db.execute(f"DELETE FROM {small}")
    assert (await preview(tool, f"DELETE FROM {small}")).risk is Risk.CRITICAL


@pytest.mark.parametrize("db", [POSTGRES], indirect=True)
@pytest.mark.parametrize("where", EVERY_ROW)
async def test_postgres_big_tables_are_sized_by_the_planner_estimate(db: Db, where: str) -> None:
    await db.execute(f"ANALYZE {db.table}")
    # Every table counts as big here: its size is pg_class.reltuples, not a COUNT(*).
    estimating = SqlDatabase(POSTGRES_URL, estimate_rows_above=0)
    try:
        tool = SqlModifyTool(estimating)
        statement = analyze_sql(f"DELETE FROM {db.table} WHERE id = 3", "postgres").statements[0]
        assert await estimating.table_rows(statement) == (6, True)
        p = await preview(tool, f"DELETE FROM {db.table} WHERE {spelled(db, where)}")
        assert (p.details["rows_affected"], p.risk) == (6, Risk.CRITICAL)
        if where == "id = id":  # the others are caught by their spelling first
            assert "about 6 rows" in p.details["warning"]
        p = await preview(tool, f"DELETE FROM {db.table} WHERE id = 3")
        assert (p.details["rows_affected"], p.risk) == (1, Risk.MEDIUM)
    finally:
        await estimating.close()
    assert await db.ids() == [1, 2, 3, 4, 5, 6]


def test_the_every_row_rule() -> None:
    assert not affects_every_row(0, 0, estimated=False)
    assert not affects_every_row(1, 1, estimated=False)
    assert affects_every_row(2, 2, estimated=False)
    assert not affects_every_row(5, 6, estimated=False)
    # The planner's estimate drifts by up to 10% between ANALYZE runs.
    assert affects_every_row(1_800_000, 2_000_000, estimated=True)
    assert not affects_every_row(1_700_000, 2_000_000, estimated=True)


# -- the clock, randomness, session state -----------------------------------------------------

CLOCK = {
    "sqlite": "unixepoch() > 4102444800",
    "postgresql": "now() > '2100-01-01'",
    "mariadb": "UNIX_TIMESTAMP() > 4102444800",
}
RANDOM = {"sqlite": "abs(random()) % 3", "postgresql": "floor(random() * 3)::int"}


async def test_a_clock_dependent_where_is_critical(db: Db) -> None:
    """Issue 22: "… OR unixepoch() > T" counted 1 row, was approved after T and deleted
    every row."""
    sql = f"DELETE FROM {db.table} WHERE id = 3 OR {CLOCK[db.kind]}"
    p = await preview(SqlModifyTool(db.sql), sql)
    assert p.details["rows_affected"] == 1  # today
    assert p.risk is Risk.CRITICAL
    assert "clock" in p.details["warning"]
    # What a statement writes may use the clock: the rows it changes do not depend on it.
    value = RANDOM.get(db.kind, "FLOOR(RAND() * 3)")
    p = await preview(SqlModifyTool(db.sql), f"UPDATE {db.table} SET status = {value} WHERE id = 3")
    assert (p.details["rows_affected"], p.risk) == (1, Risk.MEDIUM)


@pytest.mark.parametrize(
    ("dialect", "where"),
    [
        ("sqlite", "id = 3 OR unixepoch() > 4102444800"),
        ("sqlite", "created < datetime('now')"),
        ("sqlite", "created < date()"),
        ("sqlite", "created < strftime('%s')"),
        ("sqlite", "created < CURRENT_TIMESTAMP"),
        ("sqlite", "random() % 2 = 0"),
        ("sqlite", "id = last_insert_rowid()"),
        ("postgres", "created < now()"),
        ("postgres", "created < current_date"),
        ("postgres", "created < 'now'::timestamp"),
        ("postgres", "created < clock_timestamp()"),
        ("postgres", "id = nextval('s')"),
        ("postgres", "id = currval('s')"),
        ("postgres", "token = gen_random_uuid()"),
        ("postgres", "owner = current_setting('app.user')"),
        ("postgres", "id IN (SELECT id FROM t WHERE created < localtimestamp)"),
        ("mysql", "created < NOW()"),
        ("mysql", "created < SYSDATE()"),
        ("mysql", "RAND() < 0.5"),
        ("mysql", "id = LAST_INSERT_ID()"),
        ("mysql", "token = UUID()"),
        ("mysql", "id = @picked"),
    ],
)
def test_volatile_spellings_are_critical(dialect: str, where: str) -> None:
    a = analyze_sql(f"DELETE FROM t WHERE {where}", dialect)
    assert a.error is None
    assert a.statements[0].volatile, where
    assert a.risk is Risk.CRITICAL


@pytest.mark.parametrize(
    ("dialect", "sql"),
    [
        ("sqlite", "DELETE FROM t WHERE unixepoch(created) < 1700000000"),
        ("sqlite", "DELETE FROM t WHERE date(created) = '2025-01-01'"),
        ("sqlite", "UPDATE t SET seen = datetime('now') WHERE id = 3"),
        ("postgres", "INSERT INTO t (id, at) VALUES (1, now())"),
        ("mysql", "UPDATE t SET token = UUID() WHERE id = 3"),
    ],
)
def test_deterministic_rows_keep_their_risk(dialect: str, sql: str) -> None:
    a = analyze_sql(sql, dialect)
    assert a.statements[0].volatile is None
    assert a.risk is Risk.MEDIUM


# -- what the parser cannot read -------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "sql"),
    [
        ("sqlite", "REPLACE INTO audit_log (id) VALUES (1)"),
        ("sqlite", "VACUUM INTO '/tmp/copy.db'"),
        ("postgres", "DO $$ BEGIN DELETE FROM audit_log; END $$"),
    ],
)
def test_an_opaque_command_is_critical_and_unreadable(dialect: str, sql: str) -> None:
    a = analyze_sql(sql, dialect)
    assert a.error is None
    assert a.statements[0].opaque
    assert a.tables == ()  # which is why table rules must match it anyway
    assert a.risk is Risk.CRITICAL
    assert a.unreadable is not None and sql.split()[0] in a.unreadable


def test_several_statements_are_unreadable() -> None:
    assert analyze_sql("SELECT 1; SELECT 2", "sqlite").unreadable == texts.several_statements(2)
    assert analyze_sql("SELECT 1", "sqlite").unreadable is None


@pytest.mark.parametrize("db", ["sqlite", MARIADB], indirect=True)
async def test_an_opaque_command_is_previewed_as_critical(db: Db) -> None:
    p = await preview(SqlModifyTool(db.sql), f"REPLACE INTO {db.table} VALUES (1, 'x', 1, 0)")
    assert p.error is None
    assert p.risk is Risk.CRITICAL
    assert p.hold == texts.opaque_statement("REPLACE")
