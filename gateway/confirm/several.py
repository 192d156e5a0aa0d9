"""A reply that names several calls: ``确认 K7Q2 M3XA``, ``取消 K7Q2 M3XA 原因…``.

Each named call the sender may decide is decided through the one entrance
(``ConfirmationService.answer``), as if it had been named alone; one answer then lists
what became of each: decided (or its vote counted), not yours, already decided, unknown.
No form decides a call it does not name, and an id from another chat is "unknown" unless
the sender may decide it from a direct chat (gateway/confirm/views.py), so a reply never
learns of calls it could not have been shown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.bus import InboundMessage
from gateway.confirm.model import Answer, AuditEvent, Confirmation, DecideOutcome, Decision
from gateway.confirm.replies import ParsedReply, ReplyIntent
from gateway.texts import several as several_texts

if TYPE_CHECKING:
    from gateway.confirm.lifecycle import Lifecycle

# How many calls one reply may name: each is a store read and a decision (DESIGN.md,
# invariant 13: everything a client can send is bounded). More is refused, none decided.
MAX_NAMED = 20

# Whether a record may be decided from the chat a reply came from: asked there, or a copy
# was sent to the sender's direct chat.
Reachable = Callable[[Confirmation], bool]
# The audit line of a reply read against a record, with how it was taken.
ReadLine = Callable[[Confirmation, str], AuditEvent]


async def decide_named(
    service: Lifecycle,
    msg: InboundMessage,
    parsed: ParsedReply,
    *,
    reachable: Reachable,
    read_line: ReadLine,
) -> str:
    """Decide each call ``parsed`` names that ``msg``'s sender may decide; the answer."""
    if parsed.intent not in (ReplyIntent.CONFIRM, ReplyIntent.CANCEL):
        return several_texts.unclear(parsed.confirmation_ids)
    if len(parsed.confirmation_ids) > MAX_NAMED:
        return several_texts.too_many(len(parsed.confirmation_ids), MAX_NAMED)
    decision = Decision.APPROVE if parsed.intent is ReplyIntent.CONFIRM else Decision.REJECT
    lines = []
    for cid in parsed.confirmation_ids:
        current = await service.store.get(cid)
        if current is None or not reachable(current):
            lines.append(several_texts.unknown(cid))
            continue
        if current.status.is_terminal:
            await service.audit.add_all((read_line(current, "late"),))
            lines.append(several_texts.already(current))
            continue
        allowed, why = service.may_decide(current, msg.sender_id, decision)
        if not allowed:
            await service.audit.add_all((read_line(current, "not_allowed"),))
            lines.append(several_texts.not_yours(cid, why))
            continue
        result = await service.answer(
            Answer(
                confirmation_id=cid,
                decision=decision,
                actor=msg.sender_id,
                via="text",
                reason=parsed.reason,
            ),
            record=current,
            before=(read_line(current, "decision"),),
        )
        lines.append(_line(cid, result.outcome, result.confirmation, result.message))
    return several_texts.answer(lines)


def _line(cid: str, outcome: DecideOutcome, c: Confirmation | None, message: str) -> str:
    if c is None or outcome is DecideOutcome.NOT_FOUND:
        return several_texts.unknown(cid)
    if outcome in (DecideOutcome.DECIDED, DecideOutcome.VOTED):
        return several_texts.decided(c)
    if outcome is DecideOutcome.FORBIDDEN:
        return several_texts.not_yours(cid, message)
    if outcome is DecideOutcome.ALREADY_DECIDED and c.status.is_terminal:
        return several_texts.already(c)
    return f"↩️ {message}"  # e.g. this person's vote was already in
