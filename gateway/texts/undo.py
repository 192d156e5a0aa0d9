"""What people read about undoing a SQL change (issue 24, item 3; docs/undo.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

FIELD_UNDO = "撤销 Undo"
UNDO_BUTTON = "撤销 Undo"

# Why a statement cannot be undone (the card says so before anyone approves).
NOT_UNDOABLE_KIND = "{kind} 不可撤销 / {kind} cannot be undone"
NOT_UNDOABLE_FORM = (
    "这种写法无法撤销（多表、CTE 或 upsert）/ this form cannot be undone "
    "(several tables, a CTE, or an upsert)"
)
NOT_UNDOABLE_KEY_SET = (
    "修改了表 {table} 的键列，无法撤销 / changes a key column of {table}, so it cannot be undone"
)
NOT_UNDOABLE_NO_KEY = (
    "表 {table} 没有主键或唯一键，无法撤销 / table {table} has no primary or unique key, "
    "so it cannot be undone"
)
NOT_UNDOABLE_TOO_MANY = (
    "影响超过 {limit} 行，不保留撤销数据（[tools.sql] undo_max_rows）/ changes more than "
    "{limit} rows, too many to keep for undo ([tools.sql] undo_max_rows)"
)
NOT_UNDOABLE_UNMATCHED = (
    "改动的行无法按键对应，无法撤销 / the changed rows could not be matched by key, "
    "so it cannot be undone"
)
NOT_UNDOABLE_NO_RETURNING = (
    "此数据库无法读回新增的行（需要 INSERT ... RETURNING），无法撤销 / this database cannot "
    "return the rows an INSERT adds (INSERT ... RETURNING), so it cannot be undone"
)
NOT_UNDOABLE_UNKNOWN = "无法读取表 {table} 的键 / the key of table {table} could not be read"


def undoable_line(days: float) -> str:
    """The card's line for a change that can be undone after it runs."""
    return f"可撤销（保留 {days:g} 天）/ can be undone for {days:g} days after it runs"


def not_undoable_line(why: str) -> str:
    return f"不可撤销：{why} / cannot be undone"


def undo_hint(confirmation_id: str) -> str:
    """The result's offer: how to undo the change that just ran."""
    return f"↩️ 回复 撤销 {confirmation_id} 可撤销此改动 / reply undo {confirmation_id} to undo it"


def kept_nothing(why: str) -> str:
    """A change that ran but kept nothing to undo with (over the cap, no key found)."""
    return f"此改动不可撤销：{why} / this change cannot be undone: {why}"


def undo_summary(original: str, tables: Sequence[str], rows: int) -> str:
    """The summary of a sql_undo call's prompt."""
    return (
        f"撤销 {original}：恢复 {', '.join(tables)} 的 {rows} 行 / "
        f"undo {original}: restore {rows} row{'s' if rows != 1 else ''} of {', '.join(tables)}"
    )


def undo_statement(original: str, what: Sequence[str]) -> str:
    """What the undo does, statement by statement (the card's statement field)."""
    return f"撤销 undo {original}: " + "; ".join(what)


def undo_step(kind: str, table: str, rows: int) -> str:
    """One step of an undo: the inverse of one kept statement."""
    verb = {"DELETE": "INSERT", "UPDATE": "UPDATE", "INSERT": "DELETE"}[kind]
    return f"{verb} {table} {rows}"


def nothing_to_undo(cid: str) -> str:
    return (
        f"{cid} 没有可撤销的数据（不可撤销、未执行成功或已过保留期）/ nothing kept to undo "
        f"{cid} (not undoable, did not run, or past undo_days)"
    )


def already_undone(cid: str, by: str) -> str:
    return f"{cid} 已被 {by} 撤销（每个改动只能撤销一次）/ {cid} was undone by {by} (once only)"


def not_an_undoable_tool(cid: str, tool: str) -> str:
    return (
        f"{cid} 是 {tool} 调用，只能撤销 sql_modify 的改动 / {cid} is a {tool} call; "
        "only sql_modify changes can be undone"
    )


def undo_changed_since(keys: Sequence[str]) -> str:
    """The undo refused: rows changed after the change it would undo."""
    shown = ", ".join(keys[:10]) + (f" … (+{len(keys) - 10})" if len(keys) > 10 else "")
    return (
        f"撤销被拒绝：这些行在改动后又被修改过（键 {shown}），未做任何恢复 / undo refused: "
        f"these rows changed since (keys {shown}); nothing was restored"
    )


def undo_done(cid: str, rows: int) -> str:
    return (
        f"已撤销 {cid}：恢复 {rows} 行 / undid {cid}: {rows} row{'s' if rows != 1 else ''} restored"
    )


UNDO_ASK_NOT_ALLOWED = (
    "只有原发起人或审批人可以撤销 / only the requester or an approver of the change may undo it"
)
UNDO_ALWAYS_HELD = "撤销也需要确认 / an undo is always approved by a person"


def undo_line(details: Mapping[str, Any]) -> str | None:
    """The card's undo line from a preview's details (``details["undo"]``), if it has one:
    said before anyone approves."""
    undo = details.get("undo")
    if not isinstance(undo, Mapping):
        return None
    if undo.get("undoable"):
        return undoable_line(float(undo.get("days") or 0))
    return not_undoable_line(str(undo.get("why") or ""))


def undo_offer(confirmation_id: str, result: str | None) -> str | None:
    """The text an Undo button sends for a change whose result offers it, else None: the
    same words a person types (``撤销 K7Q2``), read by the same parser."""
    if result and undo_hint(confirmation_id) in result:
        return f"撤销 {confirmation_id}"
    return None


UNDO_ASKED_TOAST = "已请求撤销，请在聊天中批准 / undo asked: approve it in the chat"
UNDO_NOT_OFFERED = "此改动不可撤销 / this change cannot be undone"
