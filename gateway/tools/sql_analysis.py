"""What a SQL text does, read with sqlglot before anyone is asked about it.

Several statements, comments, CTEs and executable comments are classified; what cannot be
parsed is refused with the parser's message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.simplify import simplify

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
    def risk(self) -> Risk:
        risk = Risk.LOW if self.read_only else Risk.MEDIUM
        for s in self.statements:
            if s.kind in ("DROP", "TRUNCATE") or s.unbounded:
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
