"""What a SQL text does, read with sqlglot before anyone is asked about it.

Several statements, comments, CTEs and executable comments are classified; what cannot be
parsed is refused with the parser's message. What sqlglot keeps as an opaque command is
``opaque``: its tables and effect are unknown, so it is critical and matches every table
rule (docs/model.md, "What the gateway cannot read").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.simplify import simplify

from gateway import texts
from gateway.confirm.model import Risk

SQL_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgres", "mysql": "mysql", "mariadb": "mysql"}
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
    exp.Transaction: "BEGIN",
    exp.Commit: "COMMIT",
    exp.Rollback: "ROLLBACK",
}
# The gateway runs each call in a transaction of its own (read-only for sql_query, one
# all-or-nothing transaction for sql_modify); a COMMIT inside the text would end it early.
_TRANSACTION_KINDS = (exp.Transaction, exp.Commit, exp.Rollback)
_TRANSACTION_COMMANDS = {"END", "ABORT", "SAVEPOINT", "RELEASE", "START", "BEGIN", "COMMIT"}
# MySQL/MariaDB commit implicitly before and after these, so a batch holding one cannot be
# rolled back as a whole.
_MYSQL_IMPLICIT_COMMIT_KINDS = {"CREATE", "DROP", "ALTER", "TRUNCATE", "GRANT", "COMMAND"}

# Functions whose value changes between the preview and the run (the clock, randomness,
# sequences, session state): a statement whose rows depend on one may change other rows
# than the ones counted when it was approved (issue 22: "... OR unixepoch() > T" counted
# 1 row and deleted every row once T had passed). Risk, not an allow-list: what may be
# called at all is gateway/tools/sql_functions.py's business.
VOLATILE_FUNCTIONS = frozenset(
    {
        # the clock
        "now", "current_timestamp", "current_date", "current_time", "current_datetime",
        "localtime", "localtimestamp", "sysdate", "sysdatetime", "getdate", "getutcdate",
        "utc_timestamp", "utc_date", "utc_time", "curdate", "curtime", "clock_timestamp",
        "statement_timestamp", "transaction_timestamp", "timeofday",
        # randomness
        "random", "rand", "randn", "randomblob", "random_bytes", "gen_random_uuid",
        "gen_random_bytes", "uuid", "uuid_short", "uuid_generate_v1", "uuid_generate_v1mc",
        "uuid_generate_v4", "uuidv4", "uuidv7", "newid", "sys_guid", "setseed",
        # sequences and the last statement's effects
        "nextval", "currval", "lastval", "setval", "last_insert_id", "last_insert_rowid",
        "changes", "total_changes", "row_count", "found_rows",
        # session state (differs between pooled connections)
        "current_setting", "set_config", "pg_backend_pid", "connection_id", "txid_current",
        "pg_current_xact_id",
    }
)  # fmt: skip
# Clock functions only when called without a time value: date() is today, date(x) is not.
_CLOCK_WHEN_BARE = frozenset(
    {"date", "time", "datetime", "julianday", "unixepoch", "unix_timestamp"}
)
# Date strings SQLite and PostgreSQL read as the current time ('now'::timestamp,
# datetime('now'), PostgreSQL's 'today').
_CLOCK_WORDS = frozenset({"now", "today", "tomorrow", "yesterday"})


@dataclass(frozen=True, slots=True)
class SqlStatement:
    sql: str
    kind: str
    tables: tuple[str, ...]
    # False when there is no WHERE or only an always-true one ("WHERE 1 = 1").
    has_where: bool
    read_only: bool
    expression: exp.Expression = field(repr=False, compare=False)
    # The node that changes data: the statement itself, or the DELETE/UPDATE inside a
    # data-modifying CTE (PostgreSQL). Its rows are what count_affected counts.
    target: exp.Expression | None = field(default=None, repr=False, compare=False)
    # An UPDATE/DELETE anywhere in the statement has no effective WHERE.
    unbounded: bool = False
    # The parser could not fully read it (sqlglot kept it as an opaque command): its tables
    # and effect are unknown. Fail closed: critical, and held (SqlAnalysis.unreadable), so
    # never auto and matched by every table rule. (A function off the allow-list holds a
    # statement the same way, from gateway/tools/sql_functions.py, without making it opaque.)
    opaque: bool = False
    # The clock/random/session function the rows it changes depend on, if any.
    volatile: str | None = None


@dataclass(frozen=True, slots=True)
class SqlAnalysis:
    text: str
    statements: tuple[SqlStatement, ...] = ()
    error: str | None = None

    @property
    def source(self) -> str:
        """The text analyze_sql parsed: the statements' node positions index into it."""
        return self.text.strip()

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
    def unreadable(self) -> str | None:
        """Why the gateway cannot be sure what this text touches, if it cannot: the call is
        then held (ToolPreview.hold: never auto, matched by every table rule)."""
        opaque = [s.sql.split(None, 1)[0].upper() for s in self.statements if s.opaque]
        if opaque:
            return texts.opaque_statement(opaque[0])
        if len(self.statements) > 1:
            return texts.several_statements(len(self.statements))
        return None

    @property
    def risk(self) -> Risk:
        risk = Risk.LOW if self.read_only else Risk.MEDIUM
        for s in self.statements:
            if s.kind in ("DROP", "TRUNCATE") or s.unbounded or s.opaque or s.volatile:
                return Risk.CRITICAL
            if s.kind in (
                "ALTER",
                "GRANT",
                "COMMAND",
                "MERGE",
                "PRAGMA",
                "SET",
                "COPY",
                "ATTACH",
                "DETACH",
            ):
                risk = Risk.HIGH
        return risk

    @property
    def warning(self) -> str | None:
        for s in self.statements:
            if s.unbounded:
                return (
                    f"{s.kind} 没有有效的 WHERE，将影响整表 / "
                    f"{s.kind} without WHERE (or with an always-true one) affects every row"
                )
            if s.kind in ("DROP", "TRUNCATE"):
                return f"{s.kind} 不可撤销 / {s.kind} cannot be undone"
            if s.opaque:
                return texts.SQL_OPAQUE
            if s.volatile:
                return texts.sql_volatile(s.kind, s.volatile)
        return None

    @property
    def grant_scope(self) -> dict[str, list[str]]:
        """What a grant given on this text covers: the same statement kinds on the same
        tables, as written (``public.orders`` is not ``orders``); docs/grants.md."""
        tables = {q for s in self.statements for q in _qualified_tables(s.expression)}
        return {"kind": sorted({s.kind for s in self.statements}), "tables": sorted(tables)}


def affects_every_row(affected: int, total: int, *, estimated: bool) -> bool:
    """Whether an UPDATE/DELETE counted to change ``affected`` rows changes every row of a
    table holding ``total`` (docs/model.md, "Risk from the effect"): all rows of a table of
    two rows or more; against PostgreSQL's planner estimate (big tables), 90% of it, as the
    estimate drifts by up to autovacuum's 10% between ANALYZE runs."""
    if estimated:
        return affected >= 0.9 * total
    return total >= 2 and affected >= total


def _kind_of(e: exp.Expression) -> str:
    for cls, name in _KIND_NAMES.items():
        if isinstance(e, cls):
            return name
    if isinstance(e, exp.Query):
        return "SELECT"
    if isinstance(e, exp.Command):
        return "COMMAND"
    return type(e).__name__.upper()


def _where_restricts(node: exp.Expression) -> bool:
    """True when the node has a WHERE that is not always true (``WHERE 1 = 1``, ``TRUE``)."""
    where = node.args.get("where")
    if where is None:
        return False
    try:
        condition = simplify(where.this.copy())
    except Exception:  # simplify is best effort: a WHERE it cannot fold still restricts
        return True
    if isinstance(condition, exp.Boolean):
        return not condition.this
    if isinstance(condition, exp.Literal) and not condition.is_string:
        return condition.this in ("0", "0.0")
    return True


def _executable_comment(text: str, dialect: str) -> str | None:
    """A MySQL ``/*! ... */`` comment: the server runs its inside, the parser skips it."""
    if dialect != "mysql":
        return None
    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(text)
    except SqlglotError:
        return None
    for token in tokens:
        for comment in token.comments:
            if comment.startswith(("!", "M!")):
                return (
                    "不接受可执行注释 /*! */：服务器会执行其中内容 / "
                    "/*! ... */ comments are refused: MySQL would run what they contain"
                )
    return None


def _transaction_control(e: exp.Expression) -> bool:
    if isinstance(e, _TRANSACTION_KINDS):
        return True
    if isinstance(e, exp.Command):
        return str(e.this).upper() in _TRANSACTION_COMMANDS
    # SET autocommit = 1 commits what came before it (MySQL).
    return isinstance(e, exp.Set) and "AUTOCOMMIT" in e.sql().upper()


def _function_name(node: exp.Expr) -> str | None:
    if isinstance(node, exp.Anonymous):
        return node.name.lower()
    if isinstance(node, exp.Func):
        return node.sql_name().lower()
    return None


def _sets_values(node: exp.Expr) -> bool:
    """An UPDATE's SET item or an INSERT's VALUES: what it writes, not which rows."""
    parent = node.parent
    return (isinstance(parent, exp.Update) and node.arg_key == "expressions") or (
        isinstance(parent, exp.Insert) and isinstance(node, exp.Values)
    )


def _volatile(e: exp.Expression) -> str | None:
    """The first clock, random or session-dependent value among what picks the rows
    (WHERE, joins, subqueries, an INSERT's SELECT); values written are left out, since
    ``SET updated_at = now()`` changes the same rows whenever it runs."""
    for node in e.walk(prune=_sets_values):
        name = _function_name(node)
        if name in VOLATILE_FUNCTIONS:
            return f"{name}()"
        if name in _CLOCK_WHEN_BARE and not any(
            v for k, v in node.args.items() if k != "this" or not isinstance(v, str)
        ):
            return f"{name}()"
        if isinstance(node, exp.Parameter | exp.SessionParameter):
            return node.sql()  # MySQL @x / @@x: set per connection
        if (
            isinstance(node, exp.Literal)
            and node.is_string
            and node.this.strip().lower() in _CLOCK_WORDS
        ):
            return f"'{node.this}'"
    return None


def _qualified_tables(e: exp.Expression) -> tuple[str, ...]:
    ctes = {c.alias_or_name for c in e.find_all(exp.CTE)}
    return tuple(
        ".".join(part.name for part in t.parts)
        for t in e.find_all(exp.Table)
        if t.name and t.name not in ctes
    )


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
    for e in expressions:
        # sqlglot reads any words as an expression ("SAVEPOINT a" is a column with an alias);
        # such text is no statement we could classify, so it is refused like a parse error.
        if isinstance(e, exp.Condition | exp.Alias):
            shown = e.sql(dialect=dialect)
            return SqlAnalysis(text, error=f"不是 SQL 语句 / not a SQL statement: {shown}")
    hidden = _executable_comment(stripped, dialect)
    if hidden:
        return SqlAnalysis(text, error=hidden)
    if any(_transaction_control(e) for e in expressions if isinstance(e, exp.Expression)):
        return SqlAnalysis(
            text,
            error="不接受事务控制语句（BEGIN/COMMIT/ROLLBACK），网关自行管理事务 / "
            "transaction control (BEGIN/COMMIT/ROLLBACK) is refused: the gateway runs each "
            "call in its own transaction",
        )
    statements = []
    single = len(expressions) == 1
    for e in expressions:
        assert isinstance(e, exp.Expression)
        # A data-changing node anywhere (e.g. a CTE with DELETE ... RETURNING) is not read-only.
        changes = [n for n in e.walk() if isinstance(n, _MODIFY_KINDS)]
        target = changes[0] if changes else e
        # Locking reads and SELECT ... INTO change state too: they are not for sql_query.
        read_only = (
            isinstance(e, exp.Query)
            and not changes
            and e.find(exp.Lock) is None
            and e.find(exp.Into) is None
        )
        kind = _kind_of(target)
        if kind == "SELECT" and e.find(exp.Into) is not None:
            kind = "SELECT INTO"
        unbounded = any(
            isinstance(n, exp.Update | exp.Delete) and not _where_restricts(n) for n in changes
        )
        statements.append(
            SqlStatement(
                # What the person approves is what runs: the original text for one statement,
                # sqlglot's rendering of each statement when there are several.
                sql=stripped.rstrip(";").strip() if single else e.sql(dialect=dialect),
                kind=kind,
                tables=_tables(e),
                has_where=_where_restricts(target),
                read_only=read_only,
                expression=e,
                target=target,
                unbounded=unbounded,
                opaque=e.find(exp.Command) is not None,
                volatile=_volatile(e),
            )
        )
    return SqlAnalysis(text, statements=tuple(statements))


def batch_problem(analysis: SqlAnalysis, dialect: str) -> str | None:
    """Why a batch cannot run all-or-nothing on this database, if it cannot."""
    if (
        dialect == "mysql"
        and len(analysis.statements) > 1
        and any(s.kind in _MYSQL_IMPLICIT_COMMIT_KINDS for s in analysis.statements)
    ):
        return (
            "MySQL/MariaDB 会隐式提交 DDL，含 DDL 的多条语句无法整体回滚：请逐条发送 / "
            "MySQL/MariaDB commit DDL implicitly, so a batch with DDL cannot be "
            "all-or-nothing: send DDL statements one at a time"
        )
    return None
