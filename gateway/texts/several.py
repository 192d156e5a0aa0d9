"""What a person reads after deciding several calls by name (``确认 K7Q2 M3XA``), and the
``/pending`` listing that gives them the ids.

Imported by itself (``from gateway.texts import several``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from gateway.confirm.model import Confirmation, Status
from gateway.texts import votes
from gateway.texts.confirm import NO_PENDING, already_decided

HEADER = "已处理 {count} 项 / {count} named:"


def decided(c: Confirmation) -> str:
    """A call this reply settled (or, where approvals are votes, whose vote it counted)."""
    if c.status is Status.PENDING:
        return f"🗳️ {c.id} {votes.tally(c)}"
    if c.status is Status.APPROVED:
        return f"✅ {c.id} 已批准 / approved — {c.summary}"
    return f"❌ {c.id} 已取消 / rejected — {c.summary}"


def not_yours(cid: str, why: str) -> str:
    return f"⛔ {cid} 无权操作 / not yours: {why}"


def already(c: Confirmation) -> str:
    return f"↩️ {already_decided(c)}"


def unknown(cid: str) -> str:
    return f"❓ {cid} 没有这个待确认操作 / no such pending call"


def answer(lines: Sequence[str]) -> str:
    """The one answer to a reply that named several calls: a line for each, in its order."""
    return "\n".join([HEADER.format(count=len(lines)), *(f"  {line}" for line in lines)])


def unclear(ids: Sequence[str]) -> str:
    """A reply that names several calls but is no clean decision: nothing was decided."""
    named = " ".join(ids)
    return (
        f"没听懂，未处理任何操作。请回复 确认 {named} 或 取消 {named}（可附原因）/ "
        f"unclear, nothing decided: reply confirm {named} or cancel {named} "
        "(a reason may follow)"
    )


def too_many(count: int, limit: int) -> str:
    return (
        f"一次最多处理 {limit} 项（这次 {count} 项），未处理任何操作 / at most {limit} calls "
        f"at once ({count} named): nothing decided"
    )


def _left(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60}:{s % 60:02d}"


def pending_list(pending: Sequence[Confirmation], now: float) -> str:
    """``/pending``: each waiting call's id, summary, who asked, time left (and, where it
    needs several approvers, the tally), then how to decide several at once."""
    if not pending:
        return NO_PENDING
    lines = [f"待确认 Pending ({len(pending)}):"]
    for c in pending:
        tally = f" · {votes.tally(c)}" if c.takes_votes else ""
        at = time.strftime("%H:%M:%S", time.localtime(c.expires_at))
        lines.append(
            f"  [{c.id}] {c.summary} · {c.requester} · 剩余 {_left(c.seconds_left(now))} "
            f"left（{at} 过期 expires）{tally}"
        )
    if len(pending) > 1:
        ids = " ".join(c.id for c in pending)
        lines.append(
            f"一次处理多个：回复 确认 {ids} 或 取消 {ids} / "
            f"to decide several at once reply confirm {ids} or cancel {ids}"
        )
    return "\n".join(lines)
