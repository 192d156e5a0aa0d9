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

from gateway.tools.sql import SqlDatabase
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
