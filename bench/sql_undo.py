"""The undo snapshot's cost per run: an approved UPDATE of 1, 100 and 10,000 rows, with and
without keeping its rows for undo, in the same process, alternating.

What is timed is ``SqlDatabase.modify`` — the run of an approved ``sql_modify`` call, its
transaction and commit — against a table of ``--table-rows`` rows (``id`` primary key,
three more columns). "with undo" hands it a ``Keeper`` (gateway/tools/sql_undo.py): the
``SELECT ... FOR UPDATE`` of the rows before, their read-back by key after, and the snapshot
stored in the undo store (SQLite ``confirmations.db`` in a temp dir, as ``gateway serve``
keeps it; ``--store memory`` for the store-free cost) before the commit. Each run changes
the same rows again (``amount = amount + 1``), so every run changes exactly N rows.

Run: .venv/bin/python bench/sql_undo.py [--url sqlite+aiosqlite:///...] [--repeat 15]
     [--rows 1,100,10000] [--table-rows 20000] [--store sqlite|memory]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gateway.confirm.ledger import AuditLog
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from gateway.storage.sqlite.undo import SqliteUndoStore
from gateway.storage.undo import MemoryUndoStore, UndoStore
from gateway.tools.sql import SqlDatabase
from gateway.tools.sql_analysis import analyze_sql
from gateway.tools.sql_undo import UndoBook


@dataclass(frozen=True, slots=True)
class Figures:
    rows: int
    plain_ms: float  # median per run without undo
    undo_ms: float  # median per run with the snapshot kept
    kept_rows: int  # rows the last snapshot held (checks the run kept them all)


async def prepare(db: SqlDatabase, table: str, table_rows: int) -> None:
    async with db.engine.begin() as conn:
        await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
        await conn.exec_driver_sql(
            f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, customer VARCHAR(50) NOT NULL,"
            " amount NUMERIC(12, 2) NOT NULL, note VARCHAR(40))"
        )
        step = 1000
        for start in range(1, table_rows + 1, step):
            values = ", ".join(
                f"({i}, 'customer {i}', {i % 997}.25, 'note {i % 13}')"
                for i in range(start, min(start + step, table_rows + 1))
            )
            await conn.exec_driver_sql(f"INSERT INTO {table} VALUES {values}")


async def measure(
    db: SqlDatabase, book: UndoBook, store: UndoStore, table: str, rows: int, repeat: int
) -> Figures:
    analysis = analyze_sql(f"UPDATE {table} SET amount = amount + 1 WHERE id <= {rows}", db.dialect)
    plain: list[float] = []
    undo: list[float] = []
    kept = 0
    for i in range(repeat * 2 + 2):
        with_undo = i % 2 == 1  # alternate; the first two runs warm up and are not counted
        keeper = book.keeper(f"B{i:05d}", db.dialect) if with_undo else None
        started = time.perf_counter()
        await db.modify(analysis, keeper=keeper)
        took = (time.perf_counter() - started) * 1000
        if i < 2:
            continue
        (undo if with_undo else plain).append(took)
        if with_undo:
            snapshot = await store.get(f"B{i:05d}", now=time.time())
            kept = snapshot.rows if snapshot is not None else 0
    return Figures(rows, statistics.median(plain), statistics.median(undo), kept)


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
        db = SqlDatabase(url, timeout_seconds=120)
        store: UndoStore = (
            await SqliteUndoStore.open(Path(tmp) / "confirmations.db")
            if args.store == "sqlite"
            else MemoryUndoStore()
        )
        confirmations = MemoryConfirmationStore()
        book = UndoBook(
            store=store,
            confirmations=confirmations,
            audit=AuditLog(store=confirmations, clock=time.time),
            max_rows=max(args.rows),
        )
        table = "bench_undo"
        try:
            await prepare(db, table, args.table_rows)
            print(f"{db.backend}, undo store {args.store}, {args.repeat} runs each, medians")
            print(f"{'rows':>6}  {'without':>10}  {'with undo':>10}  {'cost':>9}  kept")
            for n in args.rows:
                f = await measure(db, book, store, table, n, args.repeat)
                print(
                    f"{f.rows:>6}  {f.plain_ms:>8.2f}ms  {f.undo_ms:>8.2f}ms  "
                    f"{f.undo_ms - f.plain_ms:>+7.2f}ms  {f.kept_rows}"
                )
        finally:
            async with db.engine.begin() as conn:
                await conn.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")
            await store.close()
            await db.close()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url", default=None, help="SQLAlchemy async URL (default: a temp SQLite)")
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument(
        "--rows", type=lambda s: [int(x) for x in s.split(",")], default=[1, 100, 10_000]
    )
    p.add_argument("--table-rows", type=int, default=20_000)
    p.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    return p.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
