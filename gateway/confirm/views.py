"""What channels show of a confirmation: its card's offers, and its copies in direct chats.

The core judges; a channel renders what it is handed. ``card_view`` says which buttons a
card offers its viewer (approve, reject, "approve and stop asking for N minutes") and, when
one is refused, why — worked out by the one rule of ``ConfirmationService.may_decide`` (or,
for a card that everyone sees alike, by what the call allows at all). Channels import this
module and the records (``model.py``), never what decides (tests/core/test_imports.py).

Approvers' direct chats: which calls are asked there too, and how each copy is kept.

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

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.confirm.again import link_of, offered, released
from gateway.confirm.model import Confirmation, Decision, Risk
from gateway.messages import InboundMessage
from gateway.texts import again as again_words
from gateway.texts.effects import PreviewTable, preview_tables
from gateway.texts.grants import GRANT_MINUTES_BUTTON
from gateway.texts.undo import undo_offer


@dataclass(frozen=True, slots=True)
class Offer:
    """One button of a card: whether the viewer may press it, and why not."""

    allowed: bool
    why: str = ""


@dataclass(frozen=True, slots=True)
class CardView:
    """What a card of ``confirmation`` offers its viewer."""

    confirmation: Confirmation
    approve: Offer
    reject: Offer
    grant: Offer  # "approve and stop asking" beside approve: never where a grant cannot apply
    grant_minutes: int = GRANT_MINUTES_BUTTON  # the button's length, on every channel
    # 重新发起 / Ask again on an ended card (gateway/confirm/again.py): only its requester.
    again: Offer = Offer(False)

    def can_decide(self) -> dict[str, dict[str, Any]]:
        """The offers as the web chat's frames carry them (``can_decide``)."""
        return {
            Decision.APPROVE.value: {"allowed": self.approve.allowed, "why": self.approve.why},
            Decision.REJECT.value: {"allowed": self.reject.allowed, "why": self.reject.why},
            "grant": {
                "allowed": self.grant.allowed,
                "scope": "session",
                "minutes": self.grant_minutes,
            },
            "again": self.again_offer(),
        }

    def again_offer(self) -> dict[str, Any]:
        """The Ask again button as frames carry it: ``offered`` (the card shows it) and
        whether this viewer may press it, and why not."""
        c = self.confirmation
        link = link_of(c)
        return {
            "offered": offered(c),
            "allowed": self.again.allowed,
            "why": self.again.why,
            # Once asked again: where it went (the first card says so instead of a button).
            "went": None
            if link is None or released(link)
            else again_words.again_outcome(c.id, link),
        }


def grant_offered(c: Confirmation) -> bool:
    """Whether a card or the admin page offers "approve and stop asking" for ``c``: never
    where a grant could not apply (``GrantBook.give`` refuses those anyway): a held call
    (``details["hold"]``, e.g. ``sql_undo``) is never covered by one."""
    return c.risk is not Risk.CRITICAL and not c.four_eyes and not c.details.get("hold")


def card_view(
    c: Confirmation, may: Callable[[Decision], tuple[bool, str]] | None = None
) -> CardView:
    """The card of ``c`` for a viewer whom ``may`` judges (None: a card everyone sees
    alike, whose clicks are judged when they come)."""
    approve, reject = (
        (Offer(True), Offer(True))
        if may is None
        else (
            Offer(*may(Decision.APPROVE)),
            Offer(*may(Decision.REJECT)),
        )
    )
    grant = Offer(approve.allowed and grant_offered(c))
    # A card everyone sees alike offers it to all; the press is judged when it comes.
    again = Offer(may is None and offered(c))
    return CardView(confirmation=c, approve=approve, reject=reject, grant=grant, again=again)


def effect_tables(c: Confirmation) -> tuple[PreviewTable, ...]:
    """The rows ``c`` would change, a table per statement (issue 24: the preview a person
    approves), for cards and pages that draw tables; text prompts carry the same tables as
    lines (``texts.detail_lines``). Empty for a call without a preview."""
    return tuple(preview_tables(c.details))


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


def undo_offered(c: Confirmation) -> str | None:
    """The text an Undo button on ``c``'s settled card says for its clicker (``撤销 K7Q2``),
    or None when the change kept nothing to undo (docs/undo.md)."""
    return undo_offer(c.id, c.execution.result)


def undo_click(c: Confirmation, clicker: str) -> InboundMessage | None:
    """An Undo button's click as the message its clicker would type in ``c``'s chat: it
    asks for the undo through the same path and the same checks (gateway/tools/sql_undo.py)
    as a typed ``撤销 K7Q2``. None when ``c`` offers no undo."""
    text = undo_offered(c)
    if text is None:
        return None
    return InboundMessage(
        channel=c.channel,
        chat_id=c.chat_id,
        sender_id=clicker,
        text=text,
        # Its own id: a second click (after a refused undo) is a new request, not a redelivery.
        message_id=f"undo-{c.id}-{uuid.uuid4().hex[:12]}",
        is_group=c.is_group,
        session_key=c.session_key,
        metadata={"via": "card"},
    )


# prompt_refs key that marks an escalated call (its value: when), set by gateway/confirm/nudges.py.
ESCALATED_REF = "escalated_at"


def escalated(c: Confirmation) -> bool:
    """Whether ``c`` was escalated: sent to the approvers after nobody decided in time."""
    return ESCALATED_REF in c.prompt_refs


# prompt_refs key of a copy in a channel's escalation chat: "<channel>_esc:<chat id>".
_ESC_MARK = "_esc:"


def escalation_ref(channel: str, chat_id: str) -> str:
    """The ``prompt_refs`` key of the copy sent to ``chat_id``, ``channel``'s escalation chat."""
    return f"{channel}{_ESC_MARK}{chat_id}"


def escalation_copies(refs: Mapping[str, str], channel: str) -> dict[str, str]:
    """Chat id -> ref value of every escalation-chat copy on ``channel``."""
    prefix = channel + _ESC_MARK
    return {k[len(prefix) :]: v for k, v in refs.items() if k.startswith(prefix)}


def escalation_recipients(c: Confirmation, approvers: Iterable[str]) -> list[str]:
    """Whose direct chat gets a copy of ``c`` when it is escalated: every one of the
    channel's approvers but the requester, whatever the call (not only four-eyes)."""
    return [a for a in dict.fromkeys(approvers) if a and a != c.requester]


def mentions_here(
    mentions: Iterable[str], c: Confirmation | None, approvers: Iterable[str]
) -> tuple[str, ...]:
    """Of a reminder's ``mentions``, the ids a channel can mention: the requester (asked on
    this channel) and the channel's own ``approvers`` (``[confirmation] approvers`` may
    name people of any platform, and a foreign id in a mention could fail the send)."""
    ours = set(approvers) | ({c.requester} if c is not None else set())
    return tuple(m for m in mentions if m in ours)


def reminder_mentions(c: Confirmation) -> tuple[str, ...]:
    """Whom a reminder of ``c`` @-mentions: the requester and, where the call needs an
    approver (four-eyes, critical), its approvers."""
    if not asks_approvers_directly(c):
        return (c.requester,)
    return tuple(dict.fromkeys((c.requester, *(a for a in c.approvers if a))))
