"""What a person reads of a change's preview rows (issue 24; ``details["effects"]``, made by
gateway/tools/sql_effect.py): a caption per statement, its rows as a small table, and notes.

``preview_table`` is the one place these words and cells are made; the card view
(gateway/confirm/views.effect_tables) hands its tables to the web chat and the admin page,
and ``effect_lines`` writes the same tables as text for prompts, Feishu and DingTalk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FIELD_PREVIEW = "预览 Preview"
# What a cell of SQL NULL shows.
NULL = "NULL"
# Between a value before and after an UPDATE.
ARROW = " → "

_CAPTIONS = {
    "DELETE": ("将删除 {rows} 行", "deletes {rows} row{s}"),
    "UPDATE": ("将修改 {rows} 行", "changes {rows} row{s}"),
    "INSERT": ("将新增 {rows} 行", "adds {rows} row{s}"),
    "DROP": ("表中 {rows} 行及所有列将被删除", "the table's {rows} row{s} and all its columns go"),
    "TRUNCATE": ("将清空 {rows} 行", "empties {rows} row{s}"),
    "ALTER": ("表中有 {rows} 行", "the table has {rows} row{s}"),
}


@dataclass(frozen=True, slots=True)
class PreviewTable:
    """One statement's preview, as every card draws it."""

    caption: str  # "DELETE orders：将删除 3 行 / deletes 3 rows"
    columns: tuple[str, ...]  # the header; empty when there are no rows to show
    rows: tuple[tuple[str, ...], ...]  # cells, strings; UPDATE: "before → after"
    notes: tuple[str, ...]  # "first 5 of 125 shown", the columns that go, why not previewed


def _rows_word(total: Any, estimated: bool) -> tuple[str, str, str]:
    """(Chinese count, English count, plural s) of a total that may be unknown."""
    if total is None:
        return "未知", "an unknown number of", "s"
    about_zh, about_en = ("约 ", "about ") if estimated else ("", "")
    return f"{about_zh}{total}", f"{about_en}{total}", "" if total == 1 else "s"


def _cell(value: Any) -> str:
    return NULL if value is None else str(value)


def preview_table(effect: Mapping[str, Any]) -> PreviewTable:
    """The table a card shows for one entry of ``details["effects"]``."""
    kind, table = str(effect.get("kind") or ""), effect.get("table") or ""
    head = f"{kind} {table}".strip()
    notes: list[str] = []
    if effect.get("not_previewed"):
        return PreviewTable(head, (), (), (str(effect["not_previewed"]),))
    zh_count, en_count, s = _rows_word(effect.get("total"), bool(effect.get("estimated")))
    zh, en = _CAPTIONS.get(kind, ("影响 {rows} 行", "affects {rows} row{s}"))
    caption = f"{head}：{zh.format(rows=zh_count)} / {en.format(rows=en_count, s=s)}"
    columns = [str(c) for c in effect.get("columns") or []]
    rows = []
    for row in effect.get("rows") or []:
        before, after = row.get("before"), row.get("after")
        if before is not None and after is not None:  # UPDATE: the key, then before → after
            key = [str(k) for k in row.get("key") or []]
            changed = [f"{_cell(before.get(c))}{ARROW}{_cell(after.get(c))}" for c in before]
            rows.append((*key, *changed))
        else:
            values = before if before is not None else after or {}
            rows.append(tuple(_cell(values.get(c)) for c in columns))
    total = effect.get("total")
    if rows and isinstance(total, int) and total > len(rows):
        notes.append(f"仅显示前 {len(rows)} 行，共 {total} 行 / first {len(rows)} of {total} shown")
    dropped = [str(c) for c in effect.get("dropped_columns") or []]
    if dropped and kind != "DROP":
        names = ", ".join(dropped)
        notes.append(f"将删除的列 / columns that go: {names}")
    return PreviewTable(caption, tuple(columns) if rows else (), tuple(rows), tuple(notes))


def preview_tables(details: Mapping[str, Any]) -> list[PreviewTable]:
    """Every statement's table of a call's details; none for a call without a preview."""
    effects = details.get("effects")
    if not isinstance(effects, Sequence):
        return []
    return [preview_table(e) for e in effects if isinstance(e, Mapping)]


def effect_lines(details: Mapping[str, Any]) -> list[str]:
    """The preview as text lines: ``预览 Preview``, then per statement its caption, its rows
    as ``a | b | c`` under a header, and its notes."""
    tables = preview_tables(details)
    if not tables:
        return []
    lines = [f"{FIELD_PREVIEW}:"]
    for t in tables:
        lines.append(t.caption)
        if t.rows:
            lines.append("  " + " | ".join(t.columns))
            lines += ["  " + " | ".join(row) for row in t.rows]
        lines += [f"  {note}" for note in t.notes]
    return lines
