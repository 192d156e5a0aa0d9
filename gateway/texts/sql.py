"""What the SQL tools tell a person about a statement: what it would do (its effect, beside
its risk), and why it did not run by itself (docs/model.md, docs/sql-safety.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.texts.confirm import rows


def _names(functions: Sequence[str]) -> str:
    return ", ".join(functions)


def functions_not_allowed(functions: Sequence[str]) -> str:
    """Why a query that would have run by itself waits for a person."""
    names = _names(functions)
    return (
        f"调用了不在允许列表中的函数 {names}，需要确认 / "
        f"calls {names}, which is not on the function allow-list, so a person must approve it"
    )


def not_previewed(functions: Sequence[str]) -> str:
    """Why a held statement shows no row count."""
    names = _names(functions)
    return (
        f"无法预览：调用了不在允许列表中的函数 {names}，批准前不执行 / "
        f"cannot preview: calls {names}, which is not on the allow-list; nothing runs "
        "before approval"
    )


def statement_timed_out(seconds: float) -> str:
    """A read (query or preview count) the database stopped at the statement timeout."""
    return (
        f"查询超过 {seconds:g} 秒，已被数据库中止（[tools.sql] statement_timeout_seconds）/ "
        f"the statement ran longer than {seconds:g} s and the database stopped it "
        "([tools.sql] statement_timeout_seconds)"
    )


def opaque_statement(keyword: str) -> str:
    """Why a statement the parser kept as an opaque command waits for a person."""
    return (
        f"网关无法完整读取 {keyword} 语句，需要确认 / the gateway cannot fully read this "
        f"{keyword} statement, so a person must approve it"
    )


def several_statements(count: int) -> str:
    """Why a text of several statements waits for a person."""
    return (
        f"一次 {count} 条语句，需要确认 / {count} statements at once, so a person must approve them"
    )


def statement_done(kind: str, count: int | None) -> str:
    """What one statement of a change did: its row count, or (None: DDL, or a count the
    driver did not give) that it ran; it read "DROP: ? 行 / ? rows" (issue 26)."""
    return f"{kind}: {rows(count) if count is not None else '已执行 / done'}"


_DATABASE_FAILURES = {
    "missing": ("表或列不存在", "a table or column it names does not exist"),
    "syntax": ("语句有语法错误", "the statement has a syntax error"),
    "read_only": ("只读查询不能修改数据", "a read-only query cannot change data"),
    "constraint": (
        "违反了约束（唯一、外键或非空）",
        "it breaks a constraint (unique, foreign key or not null)",
    ),
    "value": ("有值不合法（类型、长度或范围）", "a value is not valid (type, length or range)"),
    "unavailable": (
        "数据库不可用或繁忙（连接、锁或磁盘）",
        "the database is unavailable or busy (connection, lock or disk)",
    ),
    "refused": ("数据库拒绝了该语句", "the database refused the statement"),
}


def database_failed(kind: str) -> str:
    """A statement the database did not run, by kind of failure (gateway/tools/sql.py);
    the driver's own text goes to the log and a confirmed call's audit trail only."""
    zh, en = _DATABASE_FAILURES.get(kind, _DATABASE_FAILURES["refused"])
    return (
        f"数据库未执行：{zh}（详情见网关日志）/ "
        f"the database did not run it: {en} (details in the gateway's log)"
    )


def sql_every_row(kind: str, table: str, rows: int, *, estimated: bool) -> str:
    about = "约 " if estimated else ""
    approx = "about " if estimated else ""
    return (
        f"{kind} 将影响表 {table} 的全部 {about}{rows} 行 / "
        f"{kind} changes every row of {table} ({approx}{rows} rows)"
    )


def sql_uncounted(kind: str) -> str:
    return (
        f"无法预先统计 {kind} 影响的行数，按整表对待 / the rows {kind} changes could not be "
        "counted beforehand, so it counts as every row"
    )


SQL_OPAQUE = (
    "网关无法完整解析此语句，无法判断其影响 / the gateway cannot fully read this "
    "statement, so its effect is unknown"
)


def sql_volatile(kind: str, source: str) -> str:
    return (
        f"{kind} 影响哪些行取决于 {source}（时钟/随机数/会话状态），执行时可能与预览不同 / "
        f"which rows {kind} changes depends on {source} (clock, randomness or session "
        "state): it may change other rows than the preview counted"
    )


# -- the preview's rows and the drift check (issue 24; gateway/tools/sql_effect.py) -------------


def effect_not_previewed(kind: str) -> str:
    """Why a held statement shows no rows: the preview cannot read it back as a query."""
    return (
        f"无法预览此 {kind} 语句将改变的行，批准前不执行 / cannot show the rows this {kind} "
        "statement changes; nothing runs before approval"
    )


EFFECT_AFTER_EARLIER = (
    "无法预览：同一批中前面的语句先改动了此表，批准前不执行 / cannot preview: an earlier "
    "statement of the same batch changes this table first; nothing runs before approval"
)


def effect_read_refused(why: str) -> str:
    """A preview the database stopped or refused (a timeout, a write in the read-only
    transaction): ``why`` is that sentence."""
    return f"无法预览 / cannot preview — {why}"


EFFECT_READ_FAILED = (
    "无法预览：读取将改变的行时数据库报错，批准前不执行 / cannot preview: the database refused "
    "to read the rows it changes; nothing runs before approval"
)


def effect_changed(changes: Sequence[Mapping[str, Any]]) -> str:
    """Why an approved statement did not run: its rows are not the ones approved (the drift
    check's findings, gateway/tools/sql_effect.drift); the new numbers beside the old."""
    zh, en = [], []
    for c in changes:
        what, was, now, differ = f"{c.get('kind')} {c.get('table')}", c["approved"], c["now"], ""
        zh_now = f"现在 {now} 行" if now is not None else "现在无法统计"
        en_now = f"{now} now" if now is not None else "cannot be counted now"
        zh_differ = f"，{c['keys_differ']} 行不同" if c.get("keys_differ") else ""
        differ = f", {c['keys_differ']} rows differ" if c.get("keys_differ") else ""
        zh.append(f"{what}：批准时 {was} 行，{zh_now}{zh_differ}")
        en.append(f"{what}: {was} rows approved, {en_now}{differ}")
    return (
        f"{EFFECT_CHANGED_ZH}（{'；'.join(zh)}），未执行 / "
        f"{EFFECT_CHANGED_EN} ({'; '.join(en)}); nothing ran"
    )


# The sentence a record whose rows changed after approval fails with (and "again" matches).
EFFECT_CHANGED_ZH = "数据在批准后已变化"
EFFECT_CHANGED_EN = "the data changed since approval"
