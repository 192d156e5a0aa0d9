"""An inbound message read against the pending confirmations of its session.

The bus hands every new message here first (DESIGN.md, the path of a message, step 2). A
reply that decides, or that the person must be told about, is handled here and does not
reach the agent; anything else goes on to the agent's queue. Never a guess: a bare
``确认`` decides only when exactly one pending confirmation is the sender's to decide.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway import texts
from gateway.bus import InboundMessage, OutboundMessage, SenderIdentity
from gateway.confirm.model import (
    Answer,
    AuditEvent,
    Confirmation,
    DecideOutcome,
    Decision,
    GrantAsk,
)
from gateway.confirm.replies import ParsedReply, ReplyIntent, parse_undo
from gateway.confirm.several import decide_named
from gateway.confirm.views import escalation_ref
from gateway.storage.confirmations import StoreUnavailableError

if TYPE_CHECKING:
    from gateway.confirm.lifecycle import Lifecycle

# Longer texts after every confirmation ended are conversation, not a late decision.
_LATE_REPLY_MAX = 64
# The command that lists what waits (gateway/agent/commands.py): never a reply.
_LIST_PENDING = "/pending"


def _asks_what_is_pending(text: str) -> bool:
    words = text.split(maxsplit=1)
    return bool(words) and words[0].lower() == _LIST_PENDING


class ReplyIntercept:
    """Reads messages for the confirmation service; counts unclear replies per confirmation."""

    def __init__(self, service: Lifecycle) -> None:
        self._service = service
        self._unclear: dict[str, int] = {}

    def forget(self, confirmation_id: str) -> None:
        """The confirmation ended: drop its count of unclear replies."""
        self._unclear.pop(confirmation_id, None)

    async def read(self, msg: InboundMessage) -> bool:
        """True when ``msg`` was handled here (decided, or the sender was told why not)."""
        try:
            return await self._read(msg)
        except StoreUnavailableError:
            # Fail closed (issue 13): without the store a reply cannot be told from a new
            # request, and a new request could not be held. Say so; nothing was decided.
            await self._reply_to(msg, texts.STORE_UNAVAILABLE_MESSAGE)
            return True

    async def _read(self, msg: InboundMessage) -> bool:
        pending = await self._service.store.list_pending(msg.session_key)
        if not pending:
            return await self._on_reply_to_finished(msg)
        parsed = self._service.parser.parse(msg.text)
        if msg.metadata.get("identity") == SenderIdentity.SELF_DECLARED:
            # A web chat name anyone could have typed, from beyond this machine.
            if parsed.intent is not ReplyIntent.NONE:
                await self._reply_to(msg, texts.WEBCHAT_UNVERIFIED_DECISION)
                return True
            return False  # ordinary chat: to the agent, never feedback that rejects a call
        if _asks_undo(parsed, msg):
            return False
        if parsed.names_several and parsed.intent is not ReplyIntent.NONE:
            await self._on_several(msg, parsed)
            return True
        decidable = [c for c in pending if self._may_decide_on(c, msg.sender_id)]
        if parsed.intent in (ReplyIntent.CONFIRM, ReplyIntent.CANCEL):
            await self._on_decision_reply(msg, parsed, pending, decidable)
            return True
        if parsed.intent is ReplyIntent.UNCLEAR:
            await self._on_unclear(msg, parsed, pending, decidable)
            return True
        return await self._on_other_message(msg, decidable)

    def _may_decide_on(self, c: Confirmation, sender: str) -> bool:
        approvers = self._service.settings.approvers
        return sender == c.requester or sender in c.approvers or sender in approvers

    async def _reply_to(self, msg: InboundMessage, text: str) -> None:
        await self._service.bus.publish_outbound(
            OutboundMessage(
                channel=msg.channel,
                chat_id=msg.chat_id,
                session_key=msg.session_key,
                text=text,
                metadata=msg.metadata,
            )
        )

    async def _on_reply_to_finished(self, msg: InboundMessage) -> bool:
        """`确认 K7Q2` after K7Q2 ended: say what became of it instead of feeding the agent.

        A bare "ok" with nothing pending is ordinary conversation and goes to the agent.
        """
        # Without a digit the text names no id (every id has one): no parse, the common
        # case (issue 14; the parse is part of bench/ingest.py µs per message).
        if len(msg.text) > _LATE_REPLY_MAX or not any(ch.isdigit() for ch in msg.text):
            return False
        parsed = self._service.parser.parse(msg.text)
        if parsed.intent not in (ReplyIntent.CONFIRM, ReplyIntent.CANCEL):
            return False
        if parsed.names_several:  # e.g. an approver's direct chat: 确认 K7Q2 M3XA
            await self._on_several(msg, parsed)
            return True
        if not parsed.confirmation_id:
            return False
        known = await self._service.store.get(parsed.confirmation_id)
        if known is not None and self._from_direct_chat(known, msg):
            await self._decide(msg, parsed, known)
        elif known is None or known.session_key != msg.session_key:
            await self._reply_to(msg, texts.unknown_id(parsed.confirmation_id))
        else:
            await self._reply_to(msg, texts.already_decided(known))
        return True

    async def _on_several(self, msg: InboundMessage, parsed: ParsedReply) -> None:
        """A reply naming several calls (several.py): each the sender may decide is decided;
        one answer lists what became of each."""
        if msg.metadata.get("identity") == SenderIdentity.SELF_DECLARED:
            await self._reply_to(msg, texts.WEBCHAT_UNVERIFIED_DECISION)
            return
        said = await decide_named(
            self._service,
            msg,
            parsed,
            reachable=lambda c: c.session_key == msg.session_key or self._from_direct_chat(c, msg),
            read_line=lambda c, how: self._read_line(c, msg, parsed, how),
        )
        await self._reply_to(msg, said)

    def _from_direct_chat(self, c: Confirmation, msg: InboundMessage) -> bool:
        """An approver answering by id from their one-to-one chat, or from the escalation
        chat, where a copy of the prompt went (gateway/confirm/views.py): the platform
        vouches for who they are.
        (A call already settled gets the usual "already approved by ..." answer.)"""
        return (
            (not msg.is_group or escalation_ref(msg.channel, msg.chat_id) in c.prompt_refs)
            and c.channel == msg.channel
            and c.session_key != msg.session_key
            and self._may_decide_on(c, msg.sender_id)
        )

    def _target(
        self, parsed: ParsedReply, pending: list[Confirmation], decidable: list[Confirmation]
    ) -> Confirmation | str:
        """The one confirmation a reply is about, or the sentence to answer instead."""
        if parsed.confirmation_id:
            for c in pending:
                if c.id == parsed.confirmation_id:
                    return c
            return texts.unknown_id(parsed.confirmation_id)
        if not decidable:
            return texts.ONLY_APPROVERS
        if len(decidable) > 1:
            return texts.which_one(decidable)
        return decidable[0]

    async def _on_decision_reply(
        self,
        msg: InboundMessage,
        parsed: ParsedReply,
        pending: list[Confirmation],
        decidable: list[Confirmation],
    ) -> None:
        target = self._target(parsed, pending, decidable)
        if isinstance(target, str):
            if parsed.confirmation_id:
                # An id that is not pending here: maybe decided already, or asked in another
                # chat and sent to this approver directly.
                known = await self._service.store.get(parsed.confirmation_id)
                if known is not None and self._from_direct_chat(known, msg):
                    await self._decide(msg, parsed, known)
                    return
                if known is not None and known.session_key == msg.session_key:
                    target = texts.already_decided(known)
            await self._reply_to(msg, target)
            return
        await self._decide(msg, parsed, target)

    async def _decide(self, msg: InboundMessage, parsed: ParsedReply, target: Confirmation) -> None:
        """A confirm or cancel reply about ``target``: audited, decided, and any grant given."""
        decision = Decision.APPROVE if parsed.intent is ReplyIntent.CONFIRM else Decision.REJECT
        allowed, _ = self._service.may_decide(target, msg.sender_id, decision)
        read = self._read_line(target, msg, parsed, "decision" if allowed else "not_allowed")
        grant = None if parsed.grant_minutes is None else GrantAsk("session", parsed.grant_minutes)
        result = await self._service.answer(
            Answer(
                confirmation_id=target.id,
                decision=decision,
                actor=msg.sender_id,
                via="text",
                reason=parsed.reason,
                grant=grant,
            ),
            record=target,
            before=(read,),
        )
        if result.outcome not in (DecideOutcome.DECIDED, DecideOutcome.VOTED):
            # A decision (or a counted vote) is announced by the update message; anything
            # else is told here.
            await self._reply_to(msg, result.message)

    def _read_line(
        self, target: Confirmation, msg: InboundMessage, parsed: ParsedReply, how: str
    ) -> AuditEvent:
        """The audit line of a reply read against ``target``: its intent and how it was taken."""
        return self._service.audit.event(
            target.id,
            "reply_read",
            actor=msg.sender_id,
            intent=parsed.intent.value,
            how=how,
            message_id=msg.message_id,
        )

    async def _audit_read(
        self, target: Confirmation, msg: InboundMessage, parsed: ParsedReply, how: str
    ) -> None:
        await self._service.audit.add_all((self._read_line(target, msg, parsed, how),))

    async def _on_unclear(
        self,
        msg: InboundMessage,
        parsed: ParsedReply,
        pending: list[Confirmation],
        decidable: list[Confirmation],
    ) -> None:
        target = self._target(parsed, pending, decidable)
        if isinstance(target, str):
            await self._reply_to(msg, target)
            return
        if not self._may_decide_on(target, msg.sender_id):
            await self._audit_read(target, msg, parsed, "not_allowed")
            await self._reply_to(msg, texts.ONLY_APPROVERS)
            return
        await self._audit_read(target, msg, parsed, "unclear")
        count = self._unclear.get(target.id, 0) + 1
        self._unclear[target.id] = count
        left = self._service.settings.max_unclear_replies - count
        if left <= 0:
            await self._reject(target, msg, reason=texts.TOO_MANY_UNCLEAR)
            return
        await self._reply_to(msg, texts.unclear(target, left))

    async def _on_other_message(self, msg: InboundMessage, decidable: list[Confirmation]) -> bool:
        """A message that is no reply at all, from someone who may decide: the configured policy."""
        if not decidable:
            # Other members' chat is not a decision: it goes to the agent as usual.
            return False
        if _asks_what_is_pending(msg.text):
            # "/pending" is how a person finds the ids to answer with (issue 25): it must
            # not reject, cancel or nag about the very calls it lists.
            return False
        policy = self._service.settings.on_other_message
        if policy == "keep_pending":
            await self._reply_to(msg, texts.still_pending(decidable[0]))
            return False
        consumed = True
        for c in decidable:
            if policy == "cancel":
                await self._service.cancel(
                    c.id, by=msg.sender_id, via="text", reason=texts.SUPERSEDED_REASON
                )
                consumed = False
                continue
            # reject_with_feedback: the message is the model's feedback, so the turn that
            # asked goes on and answers it. A call asked by a command (no model turn to go
            # on) leaves the message to the queue, as a new message.
            if not c.continues_a_model_turn:
                consumed = False
            await self._reject(c, msg, reason=msg.text, feedback=True)
        return consumed

    async def _reject(
        self, c: Confirmation, msg: InboundMessage, *, reason: str, feedback: bool = False
    ) -> None:
        """The sender's message rejects ``c`` (too many unclear replies, or feedback)."""
        await self._service.answer(
            Answer(
                confirmation_id=c.id,
                decision=Decision.REJECT,
                actor=msg.sender_id,
                via="text",
                reason=reason,
                feedback=feedback,
            ),
            record=c,
        )


def _asks_undo(parsed: ParsedReply, msg: InboundMessage) -> bool:
    """``撤销 K7Q2``: a request for a new (held) call, for the agent; never feedback that
    rejects what is pending, nor a decision (gateway/tools/sql_undo.py)."""
    return parsed.intent is ReplyIntent.NONE and parse_undo(msg.text) is not None
