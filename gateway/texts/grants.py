"""What chat users read about grants (gateway/confirm/grants.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.confirm.model import Grant

GRANT_BUTTON = "30 分钟内同类操作免确认 / skip asking for 30 min"
GRANT_MINUTES_BUTTON = 30


def _until(at: float, now: float) -> str:
    """When a grant ends, in the server's local time: the time alone when that is today,
    with the date on another day (a 7-day grant read "until 01:36", issue 26), and with
    the zone when its offset then is not the one now (a daylight-saving change between)."""
    end, today = time.localtime(at), time.localtime(now)
    shown = "%H:%M" if end[:3] == today[:3] else "%Y-%m-%d %H:%M"
    if end.tm_gmtoff != today.tm_gmtoff:
        shown += " %Z"
    return time.strftime(shown, end)


def grant_used(tool: str, grant: Grant, *, now: float) -> str:
    until = _until(grant.expires_at, now)
    return (
        f"✅ 已按 {grant.granted_by} 的授权（至 {until}）直接执行 {tool}，"
        f"未再询问 / ran {tool} without asking: {grant.granted_by}'s grant until {until}"
    )


def _covers(grant: Grant) -> str:
    """What calls of its tool a grant covers: `` (DELETE orders)`` for SQL."""
    if not grant.covers:
        return ""
    parts = [
        ", ".join(map(str, v)) if isinstance(v, list | tuple) else str(v)
        for v in grant.covers.values()
    ]
    return f" ({' '.join(p for p in parts if p)})"


def grant_given(grant: Grant) -> str:
    until = _until(grant.expires_at, grant.created_at)
    if grant.scope == "session" and (grant.single_use or grant.args_key is not None):
        return _shaped_given(grant, until)
    if grant.scope == "session":
        return (
            f"🔓 {grant.granted_by} 授权：{until} 前 "
            f"{grant.requester} 在本会话的 {grant.tool}{_covers(grant)} 调用免确认"
            f"（critical 除外）/ {grant.granted_by} granted: "
            f"{grant.requester}'s {grant.tool}{_covers(grant)} calls here run without asking "
            f"until {until} (never critical ones)"
        )
    return (
        f"🔓 {grant.granted_by} 授权：{until} 前完全相同的 {grant.tool} "
        f"调用免确认 / {grant.granted_by} granted: this exact {grant.tool} call runs without "
        f"asking until {until}"
    )


def _shaped_given(grant: Grant, until: str) -> str:
    """A session grant an approver shaped: pinned to the exact arguments, or single use."""
    what_zh = "参数完全相同的 " if grant.args_key is not None else ""
    what_en = " with exactly these arguments" if grant.args_key is not None else ""
    how_zh = "下一次" if grant.single_use else ""
    how_en = "the next" if grant.single_use else ""
    if grant.single_use:
        return (
            f"🔓 {grant.granted_by} 授权：{until} 前 {grant.requester} 在本会话{how_zh}"
            f"{what_zh}{grant.tool}{_covers(grant)} 调用免确认（仅一次）/ "
            f"{grant.granted_by} granted: {how_en} {grant.tool}{_covers(grant)} call"
            f"{what_en} by {grant.requester} here runs without asking (once, until {until})"
        )
    return (
        f"🔓 {grant.granted_by} 授权：{until} 前 {grant.requester} 在本会话"
        f"{what_zh}{grant.tool}{_covers(grant)} 调用免确认 / {grant.granted_by} granted: "
        f"{grant.requester}'s {grant.tool}{_covers(grant)} calls{what_en} here run without "
        f"asking until {until}"
    )


GRANT_NOT_CRITICAL = "critical 操作每次都要确认 / critical calls are always asked for, one by one"
GRANT_NOT_FOUR_EYES = "四眼操作每次都要第二人确认 / four-eyes calls need a second person each time"
GRANT_NOT_HELD = (
    "此调用每次都要确认，授权不会覆盖它 / this call is asked for every time: no grant covers it"
)


def grant_length(scope: str, most: int, *, least: int = 1) -> str:
    return f"授权时长须为 {least} 到 {most} 分钟 / a {scope} grant lasts {least} to {most} minutes"


def grant_refused(why: str) -> str:
    """An approval whose grant was refused; ``why`` is a sentence in both languages, so it
    follows the whole line instead of sitting inside each half."""
    return f"已批准这一次，但未授予免确认 / approved this once, no grant: {why}"


def grant_revoked(grant: Grant) -> str:
    return (
        f"🔒 {grant.revoked_by} 撤销了 {grant.granted_by} 给 {grant.tool} 的免确认授权 / "
        f"{grant.revoked_by} revoked {grant.granted_by}'s grant for {grant.tool}: "
        "calls are asked for again"
    )
