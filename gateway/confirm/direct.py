"""Approvers' direct chats: which calls are asked there too, and how each copy is kept.

When the requester may not decide alone — a four-eyes call, or a ``critical`` one — the
prompt also goes to each approver's one-to-one chat with the bot (issue 15, item 4), so
it does not sit unseen in a busy group. Every copy of a prompt has its platform reference
on the record, one ``prompt_refs`` entry per chat, so whichever process settles the call
(a reply, a click, the admin API, the timeout, another replica, after a restart) can bring
every copy to its final state.

The channel owns the ids: a Feishu copy goes to an open_id, a DingTalk copy to a staff id,
taken from that channel's ``approvers`` setting (``[confirmation] approvers`` may name
people of any platform, so it decides but is not written to).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gateway.confirm.model import Confirmation, Risk

# prompt_refs key of an approver's copy: "<channel>_dm:<user id>".
_DM_MARK = "_dm:"
# A ref value for a copy sent as text (nothing to patch; an update is a new message).
TEXT_COPY = "text"


def asks_approvers_directly(c: Confirmation) -> bool:
    """True when the requester may not settle the call alone: four-eyes, or critical."""
    return c.four_eyes or c.risk is Risk.CRITICAL


def direct_recipients(c: Confirmation, approvers: Iterable[str]) -> list[str]:
    """Whose direct chat gets a copy of ``c``: the channel's approvers but the requester."""
    if not asks_approvers_directly(c):
        return []
    return [a for a in dict.fromkeys(approvers) if a and a != c.requester]


def dm_ref(channel: str, user_id: str) -> str:
    """The ``prompt_refs`` key of the copy in ``user_id``'s direct chat on ``channel``."""
    return f"{channel}{_DM_MARK}{user_id}"


def direct_copies(refs: Mapping[str, str], channel: str) -> dict[str, str]:
    """User id -> ref value of every direct-chat copy on ``channel``."""
    prefix = channel + _DM_MARK
    return {k[len(prefix) :]: v for k, v in refs.items() if k.startswith(prefix)}


def direct_recipients_told(c: Confirmation) -> list[str]:
    """Everyone (any channel) whose direct chat holds a copy of ``c``, for the admin page."""
    return [k.split(_DM_MARK, 1)[1] for k in c.prompt_refs if _DM_MARK in k]
