"""What a SQL change would do, row by row (issue 24): the preview a person approves, and the
same reading again at run time to check that what runs is what was approved.

The shape it produces is ``details["effects"]``, one entry per statement of the call
(docs/model.md, "Preview"); ``table_key`` is also what the undo snapshot keys rows by.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.exc import NoSuchTableError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlglot import exp

from gateway import texts
from gateway.tools.sql_analysis import SqlStatement


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


# -- the preview's rows --------------------------------------------------------------------------

# At most this many rows are shown; every key is kept (for the drift check) up to KEYS_UP_TO.
SHOWN_ROWS = 5
KEYS_UP_TO = 100
# A row shows its key and, beside it, columns up to this many in all (UPDATE: the key and
# every column it sets; INSERT: the columns it fills, key first).
SHOWN_COLUMNS = 4
# Longer values are cut to this many characters, the last one "…".
VALUE_CHARS = 40

Effect = dict[str, Any]
Read = Callable[[AsyncConnection, str], Awaitable[CursorResult[Any]]]


def key_value(value: Any) -> str:
    """A key column's value as a string, never cut: keys are compared and restored by."""
    if isinstance(value, bytes | bytearray | memoryview):
        return "0x" + bytes(value).hex()
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return str(value)


def shown_value(value: Any) -> str | None:
    """A value as the preview shows it: a short string (JSON-stable across backends), cut
    to VALUE_CHARS; None for SQL NULL."""
    if value is None:
        return None
    text = key_value(value)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def empty_effect(index: int, kind: str, table: str | None) -> Effect:
    """An entry of ``details["effects"]`` with nothing read yet."""
    return {
        "statement": index,
        "kind": kind,
        "table": table,
        "key": None,
        "total": None,
        "columns": [],
        "rows": [],
        "keys": None,
        "dropped_columns": [],
        "not_previewed": None,
    }


def not_previewed(index: int, statement: SqlStatement, why: str) -> Effect:
    """The entry of a statement whose rows the preview cannot show: it says why, and the call
    is held all the same."""
    effect = empty_effect(index, statement.kind, statement.tables[0] if statement.tables else None)
    effect["not_previewed"] = why
    return effect


@dataclass(frozen=True, slots=True, kw_only=True)
class EffectReader:
    """Reads what statements would change, on a connection the caller opened: read-only for
    the preview (SqlDatabase.read_only), the write transaction itself for the drift check.

    ``read`` runs one statement with the database's timeout and error sentences
    (SqlDatabase._read). Only SELECTs are sent; the statement itself never is.
    """

    conn: AsyncConnection
    read: Read
    dialect: str
    estimate_rows_above: int

    async def effects(self, statement: SqlStatement, index: int) -> list[Effect]:
        """The statement's entries: one, or one per table it drops or truncates."""
        try:
            return await self._effects(statement, index)
        except _Unreadable:
            return [not_previewed(index, statement, texts.effect_not_previewed(statement.kind))]

    async def _effects(self, statement: SqlStatement, index: int) -> list[Effect]:
        e = statement.target if statement.target is not None else statement.expression
        if isinstance(e, exp.Delete):
            return [await self._delete(statement, e, index)]
        if isinstance(e, exp.Update):
            return [await self._update(statement, e, index)]
        if isinstance(e, exp.Insert):
            return [await self._insert(statement, e, index)]
        if isinstance(e, exp.Drop) and str(e.args.get("kind") or "").upper() == "TABLE":
            tables = [t for t in e.args.get("tables") or [e.this] if isinstance(t, exp.Table)]
            return [await self._whole_table(statement, t, index, drops=True) for t in tables]
        if isinstance(e, exp.TruncateTable):
            tables = [t for t in e.expressions if isinstance(t, exp.Table)]
            return [await self._whole_table(statement, t, index, drops=False) for t in tables]
        if isinstance(e, exp.Alter) and isinstance(e.this, exp.Table):
            return [await self._alter(statement, e, index)]
        return [not_previewed(index, statement, texts.effect_not_previewed(statement.kind))]

    # -- by kind ----------------------------------------------------------------------------

    async def _delete(self, statement: SqlStatement, e: exp.Delete, index: int) -> Effect:
        table = self._single_table(e)
        if table is None:
            return not_previewed(index, statement, texts.effect_not_previewed(statement.kind))
        name = self._name(table)
        name, key, columns = await self._shape(name)
        effect = empty_effect(index, statement.kind, name)
        shown = _shown_columns(key, columns)
        effect.update(key=key, columns=shown)
        select = [_column(c) for c in shown]  # the key first
        found, total, keys_known = await self._matching(statement, e, table, select, key)
        width = len(key or [])
        for row in found[:SHOWN_ROWS]:
            values = dict(zip(shown, row, strict=True))
            effect["rows"].append(
                {
                    "key": [key_value(v) for v in row[:width]] if key else None,
                    "before": {c: shown_value(values[c]) for c in shown},
                }
            )
        effect["total"] = total
        effect["keys"] = _keys(found, width, total) if key and keys_known else None
        return effect

    async def _update(self, statement: SqlStatement, e: exp.Update, index: int) -> Effect:
        table = self._single_table(e)
        if table is None:
            return not_previewed(index, statement, texts.effect_not_previewed(statement.kind))
        name = self._name(table)
        name, key, _ = await self._shape(name)
        assignments = _assignments(e, self._catalog_name, sequential=self.dialect == "mysql")
        if assignments is None:
            return not_previewed(index, statement, texts.effect_not_previewed(statement.kind))
        set_columns = [c for c, _ in assignments]
        effect = empty_effect(index, statement.kind, name)
        effect.update(key=key, columns=[*(key or []), *set_columns])
        select: list[exp.Expr] = [_column(c) for c in key or []]
        for i, (column, value) in enumerate(assignments):
            select.append(exp.alias_(_column(column), f"gw_before_{i}"))
            select.append(exp.alias_(value, f"gw_after_{i}"))
        found, total, keys_known = await self._matching(statement, e, table, select, key)
        width = len(key or [])
        for row in found[:SHOWN_ROWS]:
            pairs = row[width:]
            effect["rows"].append(
                {
                    "key": [key_value(v) for v in row[:width]] if key else None,
                    "before": {c: shown_value(pairs[2 * i]) for i, c in enumerate(set_columns)},
                    "after": {c: shown_value(pairs[2 * i + 1]) for i, c in enumerate(set_columns)},
                }
            )
        effect["total"] = total
        effect["keys"] = _keys(found, width, total) if key and keys_known else None
        return effect

    async def _insert(self, statement: SqlStatement, e: exp.Insert, index: int) -> Effect:
        target = e.this
        named = (
            [self._catalog_name(i) for i in target.expressions]
            if isinstance(target, exp.Schema)
            else None
        )
        table = target.this if isinstance(target, exp.Schema) else target
        source = e.expression
        if not isinstance(table, exp.Table) or not isinstance(source, exp.Values | exp.Query):
            return not_previewed(index, statement, texts.effect_not_previewed(statement.kind))
        name = self._name(table)
        name, key, columns = await self._shape(name)
        if named is not None and self.dialect != "postgres":  # column names ignore case
            spelled = {c.lower(): c for c in columns}
            named = [spelled.get(c.lower(), c) for c in named]
        filled = named or columns
        effect = empty_effect(index, statement.kind, name)
        shown = _shown_columns(key if key and set(key) <= set(filled) else None, filled)
        positions = [filled.index(c) for c in shown]
        effect.update(key=key, columns=shown)
        if isinstance(source, exp.Values):
            tuples = [t for t in source.expressions if isinstance(t, exp.Tuple)]
            if len(tuples) != len(source.expressions):
                return not_previewed(index, statement, texts.effect_not_previewed("INSERT"))
            effect["total"] = len(tuples)
            rows = [
                exp.select(
                    *[
                        exp.alias_(t.expressions[p].copy(), f"gw_{n}")
                        for n, p in enumerate(positions)
                    ]
                )
                for t in tuples[:SHOWN_ROWS]
                if len(t.expressions) == len(filled)
            ]
            found: list[Sequence[Any]] = []
            for row_query in rows:  # a few rows: one small SELECT each keeps every dialect happy
                found += list((await self.read(self.conn, row_query.sql(self.dialect))).fetchall())
            key_at = [shown.index(c) for c in key] if key and set(key) <= set(shown) else None
        else:
            query = source.copy()
            with_ = e.args.get("with_") or e.args.get("with")
            inner = exp.select("*").from_(exp.alias_(query.subquery(), "gw_rows", table=True))
            if with_ is not None:
                inner.set("with_", with_.copy())
            rows_sql = inner.limit(KEYS_UP_TO + 1).sql(self.dialect)
            all_found = list((await self.read(self.conn, rows_sql)).fetchall())
            total = len(all_found)
            if total > KEYS_UP_TO:
                count = exp.select("COUNT(*)").from_(
                    exp.alias_(source.copy().subquery(), "gw_rows", table=True)
                )
                if with_ is not None:
                    count.set("with_", with_.copy())
                total = int((await self.read(self.conn, count.sql(self.dialect))).scalar_one())
            effect["total"] = total
            found = [[r[p] for p in positions] for r in all_found]
            key_at = [shown.index(c) for c in key] if key and set(key) <= set(shown) else None
            if key_at is not None and total <= KEYS_UP_TO:
                effect["keys"] = [[key_value(r[i]) for i in key_at] for r in found]
        for row in found[:SHOWN_ROWS]:
            effect["rows"].append(
                {
                    "key": [key_value(row[i]) for i in key_at] if key_at is not None else None,
                    "after": {c: shown_value(v) for c, v in zip(shown, row, strict=True)},
                }
            )
        return effect

    async def _whole_table(
        self, statement: SqlStatement, table: exp.Table, index: int, *, drops: bool
    ) -> Effect:
        name = self._name(table)
        name, key, columns = await self._shape(name)
        effect = empty_effect(index, statement.kind, name)
        total, estimated = await self.table_rows(table)
        effect.update(key=key, total=total, dropped_columns=columns if drops else [])
        if estimated:
            effect["estimated"] = True
        return effect

    async def _alter(self, statement: SqlStatement, e: exp.Alter, index: int) -> Effect:
        table = e.this
        assert isinstance(table, exp.Table)
        name = self._name(table)
        name, key, _ = await self._shape(name)
        dropped = [
            self._catalog_name(column)
            for action in e.args.get("actions") or []
            if isinstance(action, exp.Drop)
            and str(action.args.get("kind") or "").upper() == "COLUMN"
            for column in action.args.get("tables") or [action.this]
            if isinstance(column, exp.Expression)
        ]
        total, estimated = await self.table_rows(table)
        effect = empty_effect(index, statement.kind, name)
        effect.update(key=key, total=total, dropped_columns=dropped)
        if estimated:
            effect["estimated"] = True
        return effect

    # -- reading ----------------------------------------------------------------------------

    async def table_rows(self, table: exp.Table) -> tuple[int, bool]:
        """Rows in ``table``, and whether that is an estimate: COUNT(*), except on PostgreSQL
        for a table the planner estimates above ``estimate_rows_above`` rows (counting would
        read it all; docs/model.md)."""
        table = table.copy()
        table.set("alias", None)
        if self.dialect == "postgres":
            name = exp.Literal.string(table.sql(dialect=self.dialect)).sql(self.dialect)
            sql = f"SELECT reltuples FROM pg_class WHERE oid = to_regclass({name})"
            reltuples = (await self.read(self.conn, sql)).scalar_one_or_none()
            if reltuples is not None and reltuples > self.estimate_rows_above:
                return int(reltuples), True
        count = exp.select("COUNT(*)").from_(table).sql(dialect=self.dialect)
        return int((await self.read(self.conn, count)).scalar_one()), False

    async def _matching(
        self,
        statement: SqlStatement,
        e: exp.Update | exp.Delete,
        table: exp.Table,
        select: Sequence[exp.Expr],
        key: list[str] | None,
    ) -> tuple[list[Sequence[Any]], int, bool]:
        """The rows an UPDATE/DELETE would change (up to KEYS_UP_TO + 1, in key order, or in
        the statement's own ORDER BY when it has a LIMIT), how many in all, and whether the
        rows read are exactly the ones it changes (not so for a LIMIT without ORDER BY)."""
        where = e.args.get("where")
        limit_node = e.args.get("limit")
        limit: int | None = None
        if limit_node is not None:
            literal = limit_node.args.get("expression")
            if not (isinstance(literal, exp.Literal) and literal.is_int):
                raise _Unreadable
            limit = int(literal.this)
        order = e.args.get("order")
        query = exp.select(*[s.copy() for s in select]).from_(table.copy())
        if where is not None:
            query = query.where(where.this.copy())
        with_ = e.args.get("with_") or e.args.get("with") if e is statement.expression else None
        if with_ is not None:
            query.set("with_", with_.copy())
        if order is not None:
            query.set("order", order.copy())
        elif key:
            query = query.order_by(*[_column(c) for c in key])
        read_up_to = KEYS_UP_TO + 1 if limit is None else min(limit, KEYS_UP_TO + 1)
        found: list[Sequence[Any]] = list(
            (await self.read(self.conn, query.limit(read_up_to).sql(self.dialect))).fetchall()
        )
        exact = limit is None or order is not None
        if len(found) < read_up_to or (limit is not None and len(found) == limit):
            return found, len(found), exact
        count = exp.select("COUNT(*)").from_(table.copy())
        if where is not None:
            count = count.where(where.this.copy())
        if with_ is not None:
            count.set("with_", with_.copy())
        total = int((await self.read(self.conn, count.sql(self.dialect))).scalar_one())
        return found, total if limit is None else min(total, limit), exact

    async def _shape(self, table: str) -> tuple[str, list[str] | None, list[str]]:
        shape: tuple[str, list[str] | None, list[str]] = await self.conn.run_sync(_shape_of, table)
        return shape

    def _name(self, table: exp.Table) -> str:
        """The table's name as the catalog spells it: PostgreSQL folds unquoted names to
        lower case."""
        parts = [p for p in (table.args.get("db"), table.this) if isinstance(p, exp.Identifier)]
        return ".".join(self._catalog_name(p) for p in parts)

    def _catalog_name(self, node: exp.Expression) -> str:
        """An identifier (or a column's) as the catalog spells it: PostgreSQL folds unquoted
        names to lower case."""
        ident = node.this if isinstance(node, exp.Column) else node
        if isinstance(ident, exp.Identifier) and self.dialect == "postgres" and not ident.quoted:
            return ident.name.lower()
        return node.name

    @staticmethod
    def _single_table(e: exp.Update | exp.Delete) -> exp.Table | None:
        """The one table an UPDATE/DELETE changes; None for joins, USING, UPDATE ... FROM or
        MySQL's multi-table DELETE, whose rows a single-table SELECT would get wrong."""
        table = e.this
        if not isinstance(table, exp.Table) or any(
            e.args.get(key) for key in ("joins", "using", "from", "from_", "tables")
        ):
            return None
        return table


class _Unreadable(Exception):
    """The statement has a shape the preview cannot read back as a SELECT (a LIMIT that is
    not a number)."""


def checkable(approved: Mapping[str, Any]) -> bool:
    """Whether an approved entry has numbers the run can be checked against: it was read, and
    its total is a count (a planner's estimate moves by itself)."""
    return (
        approved.get("total") is not None
        and not approved.get("not_previewed")
        and not approved.get("estimated")
    )


def drift(
    approved: Mapping[str, Any] | None, now: Mapping[str, Any] | None, tolerance: int
) -> dict[str, Any] | None:
    """How the effect read at run time compares with the approved one: the numbers, and
    ``changed`` when the total moved by more than ``tolerance`` rows or (when the preview kept
    the keys) more than ``tolerance`` keys are in one list and not the other. None when the
    approved entry has nothing to compare."""
    if approved is None or not checkable(approved):
        return None
    was_total = int(approved["total"])
    total = now.get("total") if now is not None else None
    check: dict[str, Any] = {
        "statement": approved.get("statement"),
        "kind": approved.get("kind"),
        "table": approved.get("table"),
        "approved": was_total,
        "now": total,
    }
    changed = total is None or abs(int(total) - was_total) > tolerance
    was_keys = approved.get("keys")
    if not changed and was_keys is not None:
        keys = now.get("keys") if now is not None else None
        if keys is None:
            changed = True  # more rows than keys kept: not the rows approved
        else:
            differ = {tuple(k) for k in was_keys} ^ {tuple(k) for k in keys}
            check["keys_differ"] = len(differ)
            changed = len(differ) > tolerance
    check["changed"] = changed
    return check


def _shape_of(conn: Connection, table: str) -> tuple[str, list[str] | None, list[str]]:
    """The table's name as the catalog has it, its key and its columns. SQLite's names
    ignore case (``DELETE FROM ORDERS`` on a table ``orders``), its catalog's do not."""
    try:
        return table, _key_of(conn, table), _columns_of(conn, table)
    except NoSuchTableError:
        schema, name = _split_name(table)
        same = [t for t in inspect(conn).get_table_names(schema) if t.lower() == name.lower()]
        if conn.dialect.name != "sqlite" or len(same) != 1:
            raise
        table = f"{schema}.{same[0]}" if schema else same[0]
        return table, _key_of(conn, table), _columns_of(conn, table)


def _columns_of(conn: Connection, table: str) -> list[str]:
    schema, name = _split_name(table)
    return [c["name"] for c in inspect(conn).get_columns(name, schema=schema)]


def _shown_columns(key: list[str] | None, columns: Sequence[str]) -> list[str]:
    """The key, then the table's first other columns, SHOWN_COLUMNS in all (at least one
    besides the key)."""
    others = [c for c in columns if c not in (key or [])]
    return [*(key or []), *others[: max(1, SHOWN_COLUMNS - len(key or []))]]


def _column(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def _keys(found: Sequence[Sequence[Any]], width: int, total: int) -> list[list[str]] | None:
    """Every affected key, when there are at most KEYS_UP_TO of them."""
    if total > KEYS_UP_TO:
        return None
    return [[key_value(v) for v in row[:width]] for row in found]


def _assignments(
    e: exp.Update, name: Callable[[exp.Expression], str], *, sequential: bool
) -> list[tuple[str, exp.Expression]] | None:
    """An UPDATE's SET as (column, new value) pairs, each value an expression of the row as
    it is now. MySQL/MariaDB assign left to right (``SET a = a + 1, b = a`` gives b the new
    a), so there a later value reads the earlier ones' expressions instead of the column."""
    pairs: list[tuple[str, exp.Expression]] = []
    for eq in e.expressions:
        if not isinstance(eq, exp.EQ) or not isinstance(eq.this, exp.Column):
            return None
        value = eq.expression.copy()
        if sequential and pairs:
            earlier = {c.lower(): v for c, v in pairs}  # MySQL's column names ignore case

            def swap(node: exp.Expression, earlier: dict[str, exp.Expression] = earlier) -> Any:
                if isinstance(node, exp.Column) and node.name.lower() in earlier:
                    return exp.paren(earlier[node.name.lower()].copy())
                return node

            value = value.transform(swap)
        pairs.append((name(eq.this), value))
    return pairs
