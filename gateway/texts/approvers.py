"""What an approver reads in a direct chat: the copy of a prompt that waits for them.

Four-eyes and critical calls are also sent to each approver's one-to-one chat with the bot
(gateway/confirm/views.py). There a bare 确认 could be about anything the approver was
sent, so the copy asks for the id.
"""

from __future__ import annotations

from gateway.confirm.model import Confirmation, Risk
from gateway.confirm.views import escalated
from gateway.texts import confirmation_title, detail_lines, time_left


def _why(c: Confirmation) -> tuple[str, str]:
    if c.four_eyes:
        return "四眼：发起人不能自己批准", "four-eyes: the requester may not approve it"
    if c.risk is Risk.CRITICAL:
        return "严重风险", "critical risk"
    if escalated(c):
        return "无人及时决定，已升级", "escalated: nobody decided in time"
    return "需要审批人", "needs an approver"


def direct_intro(c: Confirmation) -> str:
    """The first line under the title: who asks, where, and why it waits for this reader."""
    zh, en = _why(c)
    return (
        f"📨 {c.requester} 在 {c.session_key} 请求，等待您审批（{zh}）/ "
        f"{c.requester} asks in {c.session_key}; waiting for your decision ({en})"
    )


def direct_reply_hint(c: Confirmation) -> str:
    """How to answer from the direct chat: with the id (a bare 确认 could mean anything)."""
    return (
        f"回复 确认 {c.id} / 取消 {c.id}（可附原因）/ "
        f"reply confirm {c.id} / cancel {c.id} (a reason may follow)"
    )


def direct_prompt(c: Confirmation, now: float) -> str:
    """The copy as text, where a card cannot be sent."""
    lines = [confirmation_title(c), direct_intro(c), c.summary, *detail_lines(c)]
    lines.append(time_left(c, now))
    lines.append(direct_reply_hint(c))
    return "\n".join(lines)
