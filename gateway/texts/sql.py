"""What the SQL tools tell a person about statements they did not run (docs/sql-safety.md)."""

from __future__ import annotations

from collections.abc import Sequence


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
