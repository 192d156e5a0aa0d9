"""What a person reads about the effect of a SQL statement, beside its risk."""

from __future__ import annotations

__all__ = ["SQL_OPAQUE", "sql_every_row", "sql_uncounted", "sql_volatile"]


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
