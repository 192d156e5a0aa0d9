"""What a chat reads when a call waits too long: the reminder before it expires, and the
line that says it was escalated to the approvers (gateway/confirm/nudges.py).

Imported by itself (``from gateway.texts import nudges``), as ``approvers`` is: it builds on
the prompt's pieces in ``gateway.texts``.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.confirm.model import Confirmation
from gateway.texts import reply_hint, time_left


def reminder(c: Confirmation, now: float) -> str:
    """Once, shortly before ``c`` expires: it still waits, how long is left, how to answer.

    The people to decide are @-mentioned by the channel (``OutboundMessage.mentions``)."""
    return "\n".join(
        (
            f"⏰ 提醒 Reminder [{c.id}] {c.tool_call.name}: {c.summary}",
            f"仍在等待确认 / still waiting for a decision · {time_left(c, now)}",
            reply_hint(c),
        )
    )


def mention_line(names: Iterable[str]) -> str:
    """``@alice @bob``: mentions where the platform has no mention markup (web chat)."""
    return " ".join(f"@{n}" for n in names)


def escalated(c: Confirmation, after_seconds: float) -> str:
    """In the chat that asked: nobody decided for a while, so the call was escalated (a
    platform channel sends it to its approvers' direct chats and its escalation chat; the
    web chat has neither, so this line and the admin page's mark are all it does)."""
    minutes = max(1, round(after_seconds / 60))
    return (
        f"⏫ [{c.id}] {minutes} 分钟无人决定，已升级给审批人 / "
        f"nobody decided [{c.id}] in {minutes} min: escalated to the approvers"
    )
