"""What people read about a call that needs several approvers (a rule's ``approvals = N``).

Imported by itself (``from gateway.texts import votes``) and by ``texts.confirm``, whose
detail lines carry the tally, so every card and prompt on every channel shows it.
"""

from __future__ import annotations

from gateway.confirm.model import Confirmation

FIELD_VOTES = "审批 Approvals"
FIELD_NEEDED = "多人审批 Approvers"


def _names(c: Confirmation) -> str:
    return ", ".join(v.actor for v in c.votes)


def tally(c: Confirmation) -> str:
    """``1/2 已批准：alice / approved 1 of 2: alice``: how many of the approvals are in."""
    n, of = len(c.votes), c.approvals
    if not c.votes:
        return f"{n}/{of} 已批准 / approved {n} of {of}"
    return f"{n}/{of} 已批准：{_names(c)} / approved {n} of {of}: {_names(c)}"


def needed(c: Confirmation) -> str:
    """Under the prompt: how many people must approve, and that the requester is not one."""
    return (
        f"需要 {c.approvals} 位审批人分别批准（发起人不计），任何一人取消即取消 / "
        f"{c.approvals} approvers must each approve (not the requester); "
        "any one rejection cancels it"
    )


def vote_counted(c: Confirmation) -> str:
    """Posted to the chat (and on every copy) when a vote is in and more are needed."""
    left = max(0, c.approvals - len(c.votes))
    return f"🗳️ [{c.id}] {tally(c)} · 还需 {left} 人 / {left} more needed"


def already_voted(c: Confirmation) -> str:
    """To a person who approves again: their vote stands, the call waits for others."""
    return (
        f"[{c.id}] 您已批准过，等待其他审批人（{len(c.votes)}/{c.approvals}）/ "
        f"you already approved {c.id}; waiting for other approvers "
        f"({len(c.votes)} of {c.approvals})"
    )


def approved_by(c: Confirmation) -> str:
    """Who approved: every voter, in order, or the one person who decided."""
    return _names(c) if c.votes else (c.decided_by or "-")


NO_EDIT_WITH_VOTES = (
    "需要多位审批人的调用不能改参数后批准，请取消后重新发起 / a call that needs several "
    "approvers cannot be approved with edited arguments; reject it and ask again"
)
