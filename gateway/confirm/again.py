"""Ask again: a new confirmation for the same call, evaluated as when it was first asked.

Two things ask a call again (issue 25 item 4, issue 24 item 2):

- its requester, after it expired or a shutdown cancelled it: the 重新发起 / Ask again button
  on every card, or the reply ``重新发起 K7Q2`` / ``retry K7Q2`` (``read``);
- the run itself, when the tool found that the data changed since the approval
  (``EffectChangedError``, gateway/tools/runner.settle): the approver saw another effect,
  so the call is asked again with a fresh preview (``after_drift``).

Both are this one mechanism. The first record is linked once, by the store's
compare-and-set (``details["asked_again"]``: the new id, who, how, what it came to; an
``asked_again`` audit event), so two presses, on one replica or two, make one new question;
a second ask is told where the first went. A link a process left ``asking`` when it died
(between the link and the new question, or before the link said what it came to) is
mended by the next ask once it is plainly given up: pointed at the question if one was
made, else released so the ask is made again. The new record carries
``details["asked_again_from"]`` and an ``asked_again_from`` event. Between the two, the call
is evaluated again — the tool's preview and the policy, the way the model's call was — by
the tools layer (``ToolRunner.ask_again``, handed in with ``use``): this package judges who
may ask and keeps the link, and imports nothing of gateway/tools (the dependency runs the
other way). If the policy now denies the call, sets it to manual, or lets it run, that is
what happens, and the chat is told.

Where the answer goes: the turn that asked the first time went on when the call expired
(the model heard "expired, did not run"). A requester's new question therefore parks no
turn: its record has no continuation, like a command's, so its end tells the chat the
result, and the model agent appends the call and its result to the conversation, so the
model knows on the next message (gateway/agent/model_agent.py, ``asked_again``). A drifted
call's turn never went on: the new record takes over its continuation, and the turn goes
on once the new question ends.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from config.keywords import reply_form
from gateway import texts
from gateway.bus import (
    InboundMessage,
    MessageBus,
    OutboundKind,
    OutboundMessage,
    SenderIdentity,
)
from gateway.confirm.ids import ID_ALPHABET, canonical_id, new_call_id, new_confirmation_id
from gateway.confirm.ledger import AuditLog
from gateway.confirm.model import Confirmation, Status, ToolCall
from gateway.storage.confirmations import ConfirmationStore, StoreUnavailableError
from gateway.texts import again as words

log = structlog.get_logger(__name__)

# details key of the first record: where asking it again went (once).
LINK = "asked_again"
# details key of the new record: the id it was asked again from.
FROM = "asked_again_from"

Outcome = Literal["asked", "asking", "ran", "denied", "manual", "failed", "cancelled"]

# A link still ``asking`` this long after it was written was cut short: the process that
# wrote it died before the new question was made or before the link said so. The next ask
# finishes it (``_mend``). Far longer than an ask takes (a preview is bounded by the SQL
# tool's statement timeout), so a live ask is never taken for a dead one.
ASKING_GIVEN_UP_SECONDS = 300.0

# "重新发起 K7Q2", "retry K7Q2", "ask again K7Q2" (重试, 再问一次), with 请 / please before.
_REPLY = re.compile(
    r"^(?:请\s*|please\s+)?(?:重新发起|重试|再问一次|retry|ask again)\s*([0-9a-z]{4,6})$"
)
_ID_CHARS = frozenset(ID_ALPHABET)


def again_reply_id(text: str) -> str | None:
    """The id a ``重新发起 K7Q2`` / ``retry K7Q2`` reply names, or None for any other text."""
    # Every id has a digit: most messages are passed over here, before any parse (the
    # bus reads each message here first: bench/ingest.py µs per message).
    if len(text) > 40 or not any(ch.isdigit() for ch in text):
        return None
    found = _REPLY.match(reply_form(text))
    if found is None or not any(ch.isdigit() for ch in found.group(1)):
        return None
    cid = canonical_id(found.group(1))
    # An id has a letter too (gateway/confirm/ids.py): "retry 1234" names no call.
    if all(ch in _ID_CHARS for ch in cid) and any(ch.isalpha() for ch in cid):
        return cid
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class AgainRequest:
    """What the tools layer evaluates again: the call, under the id the link reserved."""

    first: Confirmation
    call: ToolCall
    new_id: str
    continuation: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Reasked:
    """What evaluating a call again came to; ``confirmation``: the new question (asked)."""

    outcome: Outcome
    confirmation: Confirmation | None = None
    output: str = ""  # the result of a call the policy now let run


Reasker = Callable[[AgainRequest], Awaitable[Reasked]]


@dataclass(frozen=True, slots=True)
class AgainResult:
    """The answer to one ask: ``done`` when this ask made the link; ``message`` for the
    person who asked (the new prompt itself is posted by the request)."""

    done: bool
    message: str
    reasked: Reasked | None = None


def offered(c: Confirmation) -> bool:
    """Whether ``c`` offers 重新发起 / Ask again: it expired, or a shutdown cancelled it, and it
    was not asked again yet."""
    link = link_of(c)
    if link is not None and not released(link):
        return False
    if c.status is Status.EXPIRED:
        return True
    return c.status is Status.CANCELLED and c.reason == texts.SHUTDOWN_REASON


def asked_again(c: Confirmation) -> bool:
    """A call its requester asked again after the turn that asked it had gone on (no turn
    waits for it; a drifted call's new question carries its waiting turn instead)."""
    return c.continuation is None and FROM in c.details


def link_of(c: Confirmation) -> Mapping[str, Any] | None:
    found = c.details.get(LINK)
    return found if isinstance(found, Mapping) else None


def released(link: Mapping[str, Any]) -> bool:
    """An ask that came to nothing (refused by the pending caps, a store or a preview that
    failed: no new question, no run): it does not use up the record's one ask."""
    return link.get("outcome") == "failed" and not link.get("id")


class AskAgain:
    """Links an ended call to its new question, once, and hands the call to the tools layer
    to be evaluated again."""

    def __init__(
        self,
        *,
        store: ConfirmationStore,
        bus: MessageBus,
        audit: AuditLog,
        clock: Callable[[], float],
        same_person: Callable[[str, str], bool],
    ) -> None:
        self.store = store
        self._same_person = same_person
        self.bus = bus
        self.audit = audit
        self.clock = clock
        self._reasker: Reasker | None = None

    def use(self, reasker: Reasker) -> None:
        """Who evaluates a call again (the runner: the tool's preview, the policy, a grant)."""
        self._reasker = reasker

    def may_ask(self, c: Confirmation, actor: str) -> tuple[bool, str]:
        """Only the requester asks their call again (the policy is theirs to meet again)."""
        if self._same_person(actor, c.requester):
            return True, ""
        return False, words.AGAIN_ONLY_REQUESTER.format(requester=c.requester)

    async def ask(self, confirmation_id: str, *, actor: str, via: str) -> AgainResult:
        """The requester's 重新发起 (a reply or a button): checks, links once, asks again."""
        cid = canonical_id(confirmation_id)
        first = await self.store.get(cid)
        if first is None:
            return AgainResult(False, texts.unknown_id(cid))
        link = link_of(first)
        if link is not None and link.get("outcome") == "asking":
            first = await self._mend(first, link)
            link = link_of(first)
        if link is not None and not released(link):
            return AgainResult(False, words.again_already(first, link))
        if first.status is Status.PENDING:
            return AgainResult(False, words.AGAIN_NOT_ENDED.format(id=first.id))
        if not offered(first):
            return AgainResult(False, words.AGAIN_NOT_OFFERED.format(id=first.id))
        allowed, why = self.may_ask(first, actor)
        if not allowed:
            log.info("confirm.again_refused", confirmation_id=first.id, actor=actor, via=via)
            return AgainResult(False, why)
        # The turn that asked went on when the call ended: no turn waits for the new one
        # (no continuation); its end is told and kept in the conversation (module doc).
        call = ToolCall(name=first.tool_call.name, args=first.tool_call.args, call_id=new_call_id())
        return await self._again(first, call, None, actor=actor, via=via, over=link)

    async def after_drift(self, record: Confirmation, error: str) -> AgainResult:
        """The run of ``record`` found the data changed since its approval: ask again, with a
        fresh preview; the new question takes over the waiting turn (its continuation)."""
        return await self._again(
            record,
            record.tool_call,
            record.continuation,
            actor="gateway",
            via="drift",
            error=error,
        )

    async def _again(
        self,
        first: Confirmation,
        call: ToolCall,
        continuation: Mapping[str, Any] | None,
        *,
        actor: str,
        via: str,
        error: str | None = None,
        over: Mapping[str, Any] | None = None,
    ) -> AgainResult:
        """Link ``first`` (compare-and-set from ``over``: None, or a released link), have
        the call evaluated again, and write what it came to."""
        if self._reasker is None:
            log.warning("confirm.again_nobody", confirmation_id=first.id)
            return AgainResult(False, words.AGAIN_NOBODY)
        now = self.clock()
        new_id = new_confirmation_id()
        reserved = {"id": new_id, "by": actor, "via": via, "at": now, "outcome": "asking"}
        line = self.audit.event(first.id, LINK, actor=actor, at=now, id=new_id, via=via)
        if error is not None:
            reserved["error"] = error
        linked, changed = await self.store.swap_detail(
            first.id, LINK, expected=over, value=reserved, events=(line,)
        )
        if not changed:
            found = link_of(linked) if linked is not None else None
            if linked is None or found is None:
                return AgainResult(False, texts.unknown_id(first.id))
            return AgainResult(False, words.again_already(linked, found))
        log.info("confirm.asked_again", confirmation_id=first.id, new_id=new_id, via=via)
        request = AgainRequest(first=first, call=call, new_id=new_id, continuation=continuation)
        try:
            reasked = await self._reasker(request)
        except Exception:  # a preview or a store that failed: said and linked, never a crash
            log.exception("confirm.again_failed", confirmation_id=first.id, new_id=new_id)
            reasked = Reasked("failed")
        made = reasked.confirmation.id if reasked.confirmation is not None else None
        final = {**reserved, "outcome": reasked.outcome, "id": made}
        ended = self.audit.event(
            first.id, "asked_again_outcome", actor=actor, outcome=reasked.outcome, id=made
        )
        try:
            settled, _ = await self.store.swap_detail(
                first.id, LINK, expected=reserved, value=final, events=(ended,)
            )
        except StoreUnavailableError:
            # The new question stands; the first record keeps saying "being asked again".
            log.warning("confirm.again_link_not_written", confirmation_id=first.id)
            settled = None
        if settled is not None:
            await self._update_cards(settled)
        return AgainResult(True, words.again_outcome(first.id, final), reasked)

    async def _mend(self, first: Confirmation, link: Mapping[str, Any]) -> Confirmation:
        """A link left ``asking`` by a process that died (``ASKING_GIVEN_UP_SECONDS``): if
        the new question was made, the link now says so; if not, the ask is released and
        may be made again. Compare-and-set from the link found, so one replica mends it."""
        if self.clock() - float(link.get("at") or 0.0) < ASKING_GIVEN_UP_SECONDS:
            return first  # still being asked, for all anyone knows: said so
        made = await self.store.get(str(link.get("id") or ""))
        outcome = "asked" if made is not None else "failed"
        value = {**link, "outcome": outcome, "id": made.id if made is not None else None}
        line = self.audit.event(
            first.id, "asked_again_outcome", actor="gateway", outcome=outcome, id=value["id"]
        )
        mended, changed = await self.store.swap_detail(
            first.id, LINK, expected=link, value=value, events=(line,)
        )
        if mended is None:
            return first
        if changed:
            log.warning("confirm.again_mended", confirmation_id=first.id, outcome=outcome)
            await self._update_cards(mended)
        return mended

    async def _update_cards(self, first: Confirmation) -> None:
        """The first call's cards lose their button and say where it went."""
        await self.bus.publish_outbound(
            OutboundMessage(
                channel=first.channel,
                chat_id=first.chat_id,
                session_key=first.session_key,
                kind=OutboundKind.CONFIRMATION_UPDATE,
                text=texts.outcome(first),
                confirmation=first,
                copies_only=True,
            )
        )

    async def read(self, msg: InboundMessage) -> bool:
        """A ``重新发起 K7Q2`` / ``retry K7Q2`` reply: True when it was one (handled here)."""
        cid = again_reply_id(msg.text)
        if cid is None:
            return False
        try:
            message = await self._read(msg, cid)
        except StoreUnavailableError:
            message = texts.STORE_UNAVAILABLE_MESSAGE
        if message:
            await self.bus.publish_outbound(
                OutboundMessage(
                    channel=msg.channel,
                    chat_id=msg.chat_id,
                    session_key=msg.session_key,
                    text=message,
                    metadata=msg.metadata,
                )
            )
        return True

    async def _read(self, msg: InboundMessage, cid: str) -> str:
        if msg.metadata.get("identity") == SenderIdentity.SELF_DECLARED:
            return texts.WEBCHAT_UNVERIFIED_DECISION  # a name anyone could have typed
        first = await self.store.get(cid)
        if first is None or first.session_key != msg.session_key:
            return texts.unknown_id(cid)  # only this chat's calls
        result = await self.ask(cid, actor=msg.sender_id, via="text")
        if result.done and result.reasked is not None and result.reasked.outcome == "asked":
            return ""  # the new prompt is the answer
        return result.message
