"""What the SQL preview costs per ask (issue 24): ``sql_modify``'s preview with its rows
against the row count it replaced, at 1, 100 and 10,000 matching rows.

One table of ``--table-rows`` rows (20,000 by default; ``id`` primary key, ``bucket`` not
indexed: bucket 1 holds 1 row, 2 holds 100, 3 holds 10,000, the rest 0). Per size and
statement (``DELETE … WHERE bucket = k`` and ``UPDATE … SET amount = amount * 2 WHERE
bucket = k``), in one process and alternating:

- ``count``: the preview before issue 24, for the same statement: the analysis, the
  allow-list, a ``read_only()`` ``SELECT COUNT(*) … WHERE`` and, from 2 rows on, the table's
  ``COUNT(*)`` (the every-row risk), each on its own read-only connection, as
  ``SqlDatabase.count_affected`` and ``table_rows`` did;
- ``rows``: ``SqlModifyTool.preview`` as it is now (the rows, keys, total, and the same
  every-row risk).

The figure is wall time per ask (median of ``--rounds`` rounds of ``--asks`` asks each,
one at a time), and the ratio rows/count. SQLite is a file in a temp dir; PostgreSQL
(``--postgres URL``) a table of its own in that database, dropped afterwards.

Run: .venv/bin/python bench/sql_preview.py [--asks 50] [--rounds 5] [--table-rows 20000]
     [--postgres postgresql+asyncpg://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import structlog  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from sqlglot import exp  # noqa: E402

from gateway.tools.sql import SqlDatabase, SqlModifyTool  # noqa: E402
from gateway.tools.sql_analysis import analyze_sql  # noqa: E402

SIZES = {1: 1, 100: 2, 10_000: 3}  # matching rows -> bucket


async def fill(db: SqlDatabase, table: str, rows: int) -> None:
    buckets = [1] + [2] * 100 + [3] * 10_000
    buckets += [0] * max(0, rows - len(buckets))
    async with db.engine.begin() as conn:
        await conn.exec_driver_sql(
            f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, customer VARCHAR(50) NOT NULL,"
            " amount NUMERIC(10, 2) NOT NULL, bucket INTEGER NOT NULL)"
        )
        for start in range(0, len(buckets), 1000):
            chunk = buckets[start : start + 1000]
            values = ", ".join(
                f"({start + i + 1}, 'customer {start + i + 1}', {(start + i) % 997}.50, {b})"
                for i, b in enumerate(chunk)
            )
            await conn.exec_driver_sql(
                f"INSERT INTO {table} (id, customer, amount, bucket) VALUES {values}"
            )


async def old_count(db: SqlDatabase, sql: str) -> None:
    """The preview's database work before issue 24 (count_affected + table_rows)."""
    analysis = analyze_sql(sql, db.dialect)
    db.functions.disallowed((s.expression for s in analysis.statements), analysis.source)
    for s in analysis.statements:
        e = s.expression
        assert isinstance(e, exp.Update | exp.Delete)
        query = exp.select("COUNT(*)").from_(e.this.copy())
        where = e.args.get("where")
        if where is not None:
            query = query.where(where.this.copy())
        async with db.read_only() as conn:
            n = int((await db._read(conn, query.sql(dialect=db.dialect))).scalar_one())
        if n >= 2:
            await db.table_rows(s)


async def timed(asks: int, one: Callable[[], Awaitable[object]]) -> float:
    """Seconds per ask, ``asks`` one after another."""
    started = time.perf_counter()
    for _ in range(asks):
        await one()
    return (time.perf_counter() - started) / asks


async def bench(name: str, url: str, args: argparse.Namespace) -> None:
    db = SqlDatabase(url, timeout_seconds=30)
    table = f"bench_preview_{uuid.uuid4().hex[:8]}"
    tool = SqlModifyTool(db)
    try:
        await fill(db, table, args.table_rows)
        print(f"\n{name}: {args.table_rows} rows, {args.asks} asks x {args.rounds} rounds")
        print(f"{'statement':<8} {'rows':>6} {'count ms':>9} {'rows ms':>9} {'rows/count':>10}")
        for verb, template in (
            ("DELETE", "DELETE FROM {t} WHERE bucket = {b}"),
            ("UPDATE", "UPDATE {t} SET amount = amount * 2 WHERE bucket = {b}"),
        ):
            for matching, bucket in SIZES.items():
                sql = template.format(t=table, b=bucket)
                parsed = tool.parse_args({"sql": sql})
                preview = await tool.preview(parsed)  # warm, and check it reads what we think
                assert preview.details["effects"][0]["total"] == matching, preview.details
                old, new = [], []

                async def before(sql: str = sql) -> None:
                    await old_count(db, sql)

                async def now(parsed: BaseModel = parsed) -> None:
                    await tool.preview(parsed)

                for _ in range(args.rounds):
                    old.append(await timed(args.asks, before))
                    new.append(await timed(args.asks, now))
                o, n = statistics.median(old) * 1000, statistics.median(new) * 1000
                print(f"{verb:<8} {matching:>6} {o:>9.2f} {n:>9.2f} {n / o:>10.2f}")
    finally:
        async with db.engine.begin() as conn:
            await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        await db.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--asks", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--table-rows", type=int, default=20_000)
    parser.add_argument("--postgres", default=None, help="also on this PostgreSQL URL")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as tmp:
        await bench("SQLite", f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}", args)
    if args.postgres:
        await bench("PostgreSQL", args.postgres, args)


if __name__ == "__main__":
    asyncio.run(main())
