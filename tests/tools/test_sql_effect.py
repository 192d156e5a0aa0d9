"""The SQL preview's rows and the table key (gateway/tools/sql_effect.py), on SQLite, the
local PostgreSQL and MariaDB.

Each test works on its own uniquely named tables and drops them. PostgreSQL and MariaDB
skip when unreachable, or fail with GATEWAY_TEST_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import SQLAlchemyError

from gateway.tools.sql import SqlDatabase, SqlModifyTool
from gateway.tools.sql_effect import table_key
from tests.services import MARIADB_URL, POSTGRES_URL, mask_url, require_service

POSTGRES = pytest.param("postgresql", marks=pytest.mark.services)
MARIADB = pytest.param("mariadb", marks=pytest.mark.services)


@dataclass
class Db:
    kind: str  # "sqlite" | "postgresql" | "mariadb"
    sql: SqlDatabase
    suffix: str
    drops: list[str] = field(default_factory=list)

    def name(self, stem: str) -> str:
        """A unique table name, dropped after the test."""
        table = f"{stem}_{self.suffix}"
        self.drops.append(f"DROP TABLE IF EXISTS {table}")
        return table

    async def execute(self, *statements: str) -> None:
        async with self.sql.engine.begin() as conn:
            for statement in statements:
                await conn.exec_driver_sql(statement)

    async def rows(self, query: str) -> list[tuple[Any, ...]]:
        async with self.sql.engine.connect() as conn:
            return [tuple(r) for r in (await conn.exec_driver_sql(query)).fetchall()]

    async def key(self, table: str) -> list[str] | None:
        async with self.sql.read_only() as conn:
            return await table_key(conn, table)


@pytest.fixture(params=["sqlite", POSTGRES, MARIADB])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Db]:
    kind: str = request.param
    url = {
        "sqlite": f"sqlite+aiosqlite:///{tmp_path / 'effect.db'}",
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
    d = Db(kind, database, uuid.uuid4().hex[:10])
    try:
        yield d
    finally:
        for statement in reversed(d.drops):
            await d.execute(statement)
        await database.close()


# -- table_key ---------------------------------------------------------------------------------


async def test_table_key_is_the_primary_key(db: Db) -> None:
    one, two = db.name("pk_one"), db.name("pk_two")
    await db.execute(
        f"CREATE TABLE {one} (id INTEGER PRIMARY KEY, note VARCHAR(20))",
        f"CREATE TABLE {two} (region VARCHAR(10) NOT NULL, n INTEGER NOT NULL,"
        " code VARCHAR(10) NOT NULL UNIQUE, PRIMARY KEY (region, n))",
    )
    assert await db.key(one) == ["id"]
    # The primary key wins over a shorter unique key, in its declared column order.
    assert await db.key(two) == ["region", "n"]


async def test_table_key_falls_back_to_a_not_null_unique_key(db: Db) -> None:
    constraint, index = db.name("uq_constraint"), db.name("uq_index")
    await db.execute(
        f"CREATE TABLE {constraint} (code VARCHAR(10) NOT NULL, note VARCHAR(20),"
        f" CONSTRAINT {constraint}_code UNIQUE (code))",
        f"CREATE TABLE {index} (a INTEGER NOT NULL, b INTEGER NOT NULL, note VARCHAR(20))",
        f"CREATE UNIQUE INDEX {index}_ab ON {index} (a, b)",
    )
    assert await db.key(constraint) == ["code"]
    assert await db.key(index) == ["a", "b"]


async def test_table_key_is_none_without_a_usable_key(db: Db) -> None:
    bare, nullable = db.name("no_key"), db.name("null_unique")
    await db.execute(
        f"CREATE TABLE {bare} (id INTEGER, note VARCHAR(20))",
        # A unique column that may be NULL can hold several NULLs: it names no one row.
        f"CREATE TABLE {nullable} (code VARCHAR(10) UNIQUE, note VARCHAR(20))",
    )
    assert await db.key(bare) is None
    assert await db.key(nullable) is None


# -- preview rows ------------------------------------------------------------------------------

ORDERS = [
    (1, "Alice", "120.50", 0),
    (2, "Bob", "80.00", 1),
    (3, "Carol", "45.25", 1),
    (4, "Dave", "300.00", 2),
    (5, "Erin", "15.75", 0),
    (6, "Frank", "99.99", 1),
]


async def orders(db: Db, stem: str = "orders") -> str:
    """A table of six orders (id, customer, amount, status), dropped after the test."""
    table = db.name(stem)
    values = ", ".join(f"({i}, '{c}', {a}, {s})" for i, c, a, s in ORDERS)
    await db.execute(
        f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, customer VARCHAR(50) NOT NULL,"
        " amount NUMERIC(10, 2) NOT NULL, status INTEGER NOT NULL)",
        f"INSERT INTO {table} (id, customer, amount, status) VALUES {values}",
    )
    return table


def tool(db: Db) -> SqlModifyTool:
    return SqlModifyTool(db.sql)


async def effects(db: Db, sql: str) -> list[dict[str, Any]]:
    t = tool(db)
    p = await t.preview(t.parse_args({"sql": sql}))
    assert p.error is None, p.error
    found: list[dict[str, Any]] = p.details["effects"]
    return found


async def test_delete_shows_the_rows_that_would_go(db: Db) -> None:
    table = await orders(db)
    [e] = await effects(db, f"DELETE FROM {table} WHERE status = 1")
    assert (e["kind"], e["table"], e["key"], e["total"]) == ("DELETE", table, ["id"], 3)
    assert e["columns"] == ["id", "customer", "amount", "status"]
    assert [r["key"] for r in e["rows"]] == [["2"], ["3"], ["6"]]
    assert [r["before"]["customer"] for r in e["rows"]] == ["Bob", "Carol", "Frank"]
    assert all("after" not in r for r in e["rows"])
    assert e["keys"] == [["2"], ["3"], ["6"]]
    assert e["not_previewed"] is None
    assert await db.rows(f"SELECT COUNT(*) FROM {table}") == [(6,)]  # nothing went


async def test_update_shows_before_and_after_computed_by_the_database(db: Db) -> None:
    table = await orders(db)
    [e] = await effects(
        db, f"UPDATE {table} SET status = status + 5, customer = UPPER(customer) WHERE id <= 2"
    )
    assert (e["kind"], e["total"], e["columns"]) == ("UPDATE", 2, ["id", "status", "customer"])
    assert e["rows"] == [
        {"key": ["1"], "before": {"status": "0", "customer": "Alice"},
         "after": {"status": "5", "customer": "ALICE"}},
        {"key": ["2"], "before": {"status": "1", "customer": "Bob"},
         "after": {"status": "6", "customer": "BOB"}},
    ]  # fmt: skip
    assert e["keys"] == [["1"], ["2"]]
    assert await db.rows(f"SELECT status FROM {table} WHERE id = 1") == [(0,)]


async def test_update_on_mysql_reads_earlier_assignments_like_the_server(db: Db) -> None:
    """MySQL/MariaDB assign left to right; PostgreSQL and SQLite from the old row."""
    table = await orders(db)
    [e] = await effects(db, f"UPDATE {table} SET status = status + 1, amount = status WHERE id = 4")
    await db.execute(f"UPDATE {table} SET status = status + 1, amount = status WHERE id = 4")
    [(status, amount)] = await db.rows(f"SELECT status, amount FROM {table} WHERE id = 4")
    assert e["rows"][0]["after"]["status"] == str(status) == "3"
    assert float(e["rows"][0]["after"]["amount"]) == float(amount)  # 3 on MariaDB, 2 elsewhere


async def test_insert_values_shows_the_rows_that_would_be_added(db: Db) -> None:
    table = await orders(db)
    [e] = await effects(
        db,
        f"INSERT INTO {table} (id, customer, amount, status) VALUES"
        " (7, 'Gina', 10.5, 1 + 1), (8, 'Hank', 20, 0)",
    )
    assert (e["kind"], e["total"], e["key"]) == ("INSERT", 2, ["id"])
    assert e["columns"] == ["id", "customer", "amount", "status"]
    assert [r["key"] for r in e["rows"]] == [["7"], ["8"]]
    assert e["rows"][0]["after"]["customer"] == "Gina"
    assert e["rows"][0]["after"]["status"] == "2"  # computed, not the text "1 + 1"
    assert all("before" not in r for r in e["rows"])
    assert await db.rows(f"SELECT COUNT(*) FROM {table}") == [(6,)]


async def test_names_are_read_as_the_catalog_spells_them(db: Db) -> None:
    """Unquoted names in another case: PostgreSQL folds them, SQLite ignores the case, and
    MariaDB's table names (on Linux) do not, so there the statement names no table."""
    table = await orders(db)
    [e] = await effects(
        db,
        f"INSERT INTO {table.upper()} (ID, Customer, AMOUNT, status) VALUES (9, 'Ivy', 1, 0)",
    )
    if db.kind == "mariadb":
        assert e["total"] is None and e["not_previewed"]
        return
    assert (e["table"], e["key"], e["total"]) == (table, ["id"], 1)
    assert e["rows"][0]["key"] == ["9"]
    assert e["columns"] == ["id", "customer", "amount", "status"]


async def test_insert_select_shows_the_rows_and_their_keys(db: Db) -> None:
    table = await orders(db)
    archive = db.name("archive")
    await db.execute(
        f"CREATE TABLE {archive} (id INTEGER PRIMARY KEY, customer VARCHAR(50) NOT NULL)"
    )
    [e] = await effects(
        db,
        f"INSERT INTO {archive} (id, customer) SELECT id, customer FROM {table} WHERE status = 0",
    )
    assert (e["table"], e["total"], e["columns"]) == (archive, 2, ["id", "customer"])
    assert sorted(e["keys"]) == [["1"], ["5"]]
    assert sorted(r["after"]["customer"] for r in e["rows"]) == ["Alice", "Erin"]
    assert await db.rows(f"SELECT COUNT(*) FROM {archive}") == [(0,)]


async def test_long_values_are_cut_and_only_five_rows_shown(db: Db) -> None:
    table = db.name("notes")
    await db.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, body VARCHAR(200) NOT NULL)")
    long = "x" * 120
    await db.execute(
        f"INSERT INTO {table} (id, body) VALUES "
        + ", ".join(f"({i}, '{long}')" for i in range(1, 9))
    )
    [e] = await effects(db, f"DELETE FROM {table} WHERE id > 0")
    assert e["total"] == 8
    assert len(e["rows"]) == 5
    body = e["rows"][0]["before"]["body"]
    assert len(body) == 40 and body.endswith("…")
    assert e["keys"] == [[str(i)] for i in range(1, 9)]  # keys are never cut


async def test_many_rows_show_the_total_but_keep_no_keys(db: Db) -> None:
    table = db.name("many")
    await db.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
    await db.execute(
        f"INSERT INTO {table} (id, n) VALUES " + ", ".join(f"({i}, {i % 2})" for i in range(1, 251))
    )
    [e] = await effects(db, f"DELETE FROM {table} WHERE n = 1")
    assert (e["total"], len(e["rows"]), e["keys"]) == (125, 5, None)


async def test_drop_truncate_and_alter_show_rows_and_columns_that_go(db: Db) -> None:
    table = await orders(db)
    [drop] = await effects(db, f"DROP TABLE {table}")
    assert (drop["kind"], drop["total"]) == ("DROP", 6)
    assert drop["dropped_columns"] == ["id", "customer", "amount", "status"]
    [alter] = await effects(db, f"ALTER TABLE {table} DROP COLUMN amount")
    assert (alter["kind"], alter["total"], alter["dropped_columns"]) == ("ALTER", 6, ["amount"])
    if db.kind != "sqlite":  # SQLite has no TRUNCATE
        [truncate] = await effects(db, f"TRUNCATE TABLE {table}")
        assert (truncate["kind"], truncate["total"], truncate["dropped_columns"]) == (
            "TRUNCATE",
            6,
            [],
        )
    assert await db.rows(f"SELECT COUNT(*) FROM {table}") == [(6,)]


async def test_a_table_without_a_key_shows_rows_without_keys(db: Db) -> None:
    table = db.name("loose")
    await db.execute(
        f"CREATE TABLE {table} (a INTEGER, b VARCHAR(10))",
        f"INSERT INTO {table} (a, b) VALUES (1, 'x'), (1, 'y'), (2, 'z')",
    )
    [e] = await effects(db, f"DELETE FROM {table} WHERE a = 1")
    assert (e["key"], e["total"], e["keys"]) == (None, 2, None)
    assert sorted(r["before"]["b"] for r in e["rows"]) == ["x", "y"]
    assert all(r["key"] is None for r in e["rows"])


async def test_what_cannot_be_previewed_says_so_and_is_still_held(db: Db) -> None:
    table = await orders(db)
    other = await orders(db, "other")
    t = tool(db)
    # A join: a single-table SELECT would show the wrong rows.
    sql = (
        f"UPDATE {table} SET status = 9 WHERE id IN (SELECT id FROM {other})"
        if db.kind == "sqlite"
        else f"DELETE FROM {table} USING {other} WHERE {table}.id = {other}.id"
        if db.kind == "postgresql"
        else f"DELETE {table} FROM {table} JOIN {other} ON {table}.id = {other}.id"
    )
    p = await t.preview(t.parse_args({"sql": sql}))
    [e] = p.details["effects"]
    if db.kind == "sqlite":  # a subquery is readable: shown
        assert e["total"] == 6 and e["not_previewed"] is None
    else:
        assert e["total"] is None and e["rows"] == []
        assert "无法预览" in e["not_previewed"] and "cannot show" in e["not_previewed"]
    # An earlier statement of the batch changes the table: its rows would be wrong.
    p = await t.preview(
        t.parse_args({"sql": f"DELETE FROM {table} WHERE id = 1; DELETE FROM {table} WHERE id > 3"})
    )
    first, second = p.details["effects"]
    assert (first["total"], second["total"]) == (1, None)
    assert "earlier statement" in second["not_previewed"]
    assert t.default_level == "confirm"  # held whatever the preview could read


async def test_preview_never_calls_a_function_off_the_allow_list(db: Db) -> None:
    table = await orders(db)
    call = {
        "sqlite": "load_extension('x')",
        "postgresql": "pg_sleep(0)",
        "mariadb": "SLEEP(0)",
    }[db.kind]
    t = tool(db)
    p = await t.preview(
        t.parse_args({"sql": f"DELETE FROM {table} WHERE id = 1 AND {call} IS NULL"})
    )
    [e] = p.details["effects"]
    assert e["total"] is None and e["rows"] == []
    assert "cannot preview" in e["not_previewed"]


@pytest.mark.parametrize("db", [POSTGRES, MARIADB], indirect=True)
async def test_reading_the_rows_never_writes_even_through_an_allowed_function(db: Db) -> None:
    """An UPDATE's SET expressions are evaluated by the preview's SELECT: one that writes
    (here a function on the allow-list that inserts a row) fails in the read-only
    transaction, so the preview says it cannot show the rows, and nothing was written."""
    table = await orders(db)
    log_table = db.name("log")
    bump = f"bump_{db.suffix}"
    await db.execute(f"CREATE TABLE {log_table} (n INTEGER)")
    if db.kind == "postgresql":
        db.drops.insert(0, f"DROP FUNCTION IF EXISTS {bump}()")
        await db.execute(
            f"CREATE FUNCTION {bump}() RETURNS integer LANGUAGE sql AS"
            f" $$ INSERT INTO {log_table} VALUES (1); SELECT 7 $$"
        )
    else:
        db.drops.insert(0, f"DROP FUNCTION IF EXISTS {bump}")
        await db.execute(
            f"CREATE FUNCTION {bump}() RETURNS INT MODIFIES SQL DATA"
            f" BEGIN INSERT INTO {log_table} VALUES (1); RETURN 7; END"
        )
    db.sql.functions = type(db.sql.functions)(db.sql.dialect, [bump])
    [e] = await effects(db, f"UPDATE {table} SET status = {bump}() WHERE id = 1")
    assert e["rows"] == [] and e["total"] is None
    assert e["not_previewed"].startswith("无法预览 / cannot preview")
    assert "read-only query cannot change data" in e["not_previewed"]  # the database said no
    assert await db.rows(f"SELECT COUNT(*) FROM {log_table}") == [(0,)]
    assert await db.rows(f"SELECT status FROM {table} WHERE id = 1") == [(0,)]
