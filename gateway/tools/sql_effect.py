"""What a SQL change would do, row by row (issue 24): the preview a person approves, and the
same reading again at run time to check that what runs is what was approved.

The shape it produces is ``details["effects"]``, one entry per statement of the call
(docs/model.md, "Preview"); ``table_key`` is also what the undo snapshot keys rows by.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import inspect
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection


def _split_name(table: str) -> tuple[str | None, str]:
    """``schema.table`` or ``table``, as the inspector takes it."""
    schema, _, name = table.rpartition(".")
    return (schema or None), name


def _key_of(conn: Connection, table: str) -> list[str] | None:
    schema, name = _split_name(table)
    inspector = inspect(conn)
    primary = inspector.get_pk_constraint(name, schema=schema).get("constrained_columns") or []
    if primary:
        return list(primary)
    not_null = {
        c["name"] for c in inspector.get_columns(name, schema=schema) if not c.get("nullable", True)
    }
    # A unique constraint, or a unique index (SQLite's CREATE UNIQUE INDEX is only that);
    # the one with fewest columns, and by name for the same answer on every call.
    candidates: list[Sequence[str]] = [
        u["column_names"] for u in inspector.get_unique_constraints(name, schema=schema)
    ]
    candidates += [
        [c for c in i["column_names"] if c is not None]
        for i in inspector.get_indexes(name, schema=schema)
        if i.get("unique") and None not in i["column_names"]  # not an expression index
    ]
    usable = [list(c) for c in candidates if c and all(col in not_null for col in c)]
    if not usable:
        return None
    return min(usable, key=lambda c: (len(c), c))


async def table_key(conn: AsyncConnection, table: str) -> list[str] | None:
    """The columns that name one row of ``table``: its primary key, else the shortest unique
    key whose columns are all NOT NULL (a NULL-able unique column can repeat NULL); None when
    it has neither. ``table`` may be ``schema.table``.

    The preview shows each row by this key and the drift check compares keys; the undo
    snapshot restores rows by it. A table without one shows rows but no keys.
    """
    key: list[str] | None = await conn.run_sync(_key_of, table)
    return key
