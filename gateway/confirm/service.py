"""The confirmation lifecycle: request, decide (and who may decide), expire, cancel.

A turn that asks for a decision ends there: ``request`` stores the call with its
continuation (what the turn needs to go on) and posts the prompt; no process waits for a
person. A person's decision — a typed reply (intercept.py), a card click on any channel, the admin
API, page or CLI, an approval with edited arguments (gateway/tools/edits.py) — is one
``Answer`` taken by ``answer``, which alone judges who may decide.
Every way a confirmation can end, decided or not (the timeout, shutdown), goes through
``_finish``: the store's compare-and-set, then telling listeners, posting the update to
the chat, and handing the ended record to the one path that goes on from it (``settled``:
claim → run → record → continue the turn, gateway/agent/loop.py). The process that ended a
record goes on with it; adoption does when that process died first (adoption.py).

Around it: replies read from the bus (intercept.py), the expiry timers (deadlines.py), and
other replicas and restarts (replicas.py).

One module past 600 lines on purpose: it is the one class that judges who may decide and
ends records (votes included), and splitting it would put a second door beside ``answer``.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import structlog

from config.keywords import KeywordSet, KeywordStore
from config.settings import ConfirmationSettings
from gateway import texts
from gateway.bus import InboundMessage, MessageBus, OutboundKind, OutboundMessage
from gateway.confirm.again import FROM as ASKED_AGAIN_FROM
from gateway.confirm.again import AgainResult, AskAgain, offered
from gateway.confirm.deadlines import Deadlines
from gateway.confirm.events import ConfirmationEvent as ConfirmationEvent
from gateway.confirm.events import Listener as Listener
from gateway.confirm.events import Listeners
from gateway.confirm.grants import GrantBook, grant_sentence
from gateway.confirm.ids import canonical_id, new_confirmation_id
from gateway.confirm.intercept import ReplyIntercept
from gateway.confirm.ledger import AuditLog, new_instance
from gateway.confirm.model import (
    Answer,
    AuditEvent,
    CallEdit,
    Confirmation,
    Decision,
    ExecState,
    Instance,
    Risk,
    Status,
    ToolCall,
    Vote,
    VoteOutcome,
)
from gateway.confirm.model import DecideOutcome as DecideOutcome
from gateway.confirm.model import DecideResult as DecideResult
from gateway.confirm.nudges import Nudges
from gateway.confirm.replicas import Replicas, Settled
from gateway.confirm.replies import ReplyParser
from gateway.confirm.unsure import UnsureCreates
from gateway.confirm.views import CardView, Offer, card_view
from gateway.runtime import BackgroundTasks
from gateway.storage.confirmations import (
    Confirmations,
    ConfirmationStore,
    FeedKind,
    PendingLimits,
    create_with_free_id,
    once_store_answers,
)
from gateway.storage.grants import MemoryGrantStore
from gateway.texts import again as again_words
from gateway.texts import votes as vote_texts

log = structlog.get_logger(__name__)


def same_person(a: str, b: str) -> bool:
    """Whether two names are one person's, leniently (NFKC, case, spaces): used only to
    refuse, so ``Alice`` typed on the admin API cannot approve ``alice``'s call."""
    return _folded(a) == _folded(b)


def _folded(name: str) -> str:
    return "".join(unicodedata.normalize("NFKC", name).casefold().split())


def self_approval(c: Confirmation, actor: str, decision: Decision) -> bool:
    """The requester approving their own four-eyes call: refused on every path."""
    return c.four_eyes and decision is Decision.APPROVE and same_person(actor, c.requester)


def already_voted(c: Confirmation, actor: str, decision: Decision) -> bool:
    """An approval by someone whose vote is already on a call that takes votes."""
    return decision is Decision.APPROVE and c.takes_votes and c.voted(_folded(actor))


class ConfirmationService:
    """Holds tool calls until an authorised person decides, or the timeout cancels them."""

    def __init__(
        self,
        *,
        store: ConfirmationStore,
        bus: MessageBus,
        settings: ConfirmationSettings,
        keywords: KeywordStore | KeywordSet,
        clock: Callable[[], float] = time.time,
        grants: GrantBook | None = None,
        instance: Instance | None = None,
    ) -> None:
        self.store = store
        self.bus = bus
        self.audit = AuditLog(store=store, clock=clock)
        # Replies such as "确认 30分钟" give grants here (intercept.py); the runner reads them.
        self.grants = grants or GrantBook(MemoryGrantStore(), clock=clock)
        self.settings = settings
        self.clock = clock
        # This process in the store: owner of what it asks, claimer of what it runs.
        self.instance = instance or new_instance(clock)
        if isinstance(keywords, KeywordStore):
            self._parser = ReplyParser(keywords.words)
            keywords.on_change(self._on_keywords)
        else:
            self._parser = ReplyParser(keywords)
        self._tasks = BackgroundTasks("confirmations")
        self._listeners = Listeners()
        self.subscribe = self._listeners.subscribe  # (listener) -> unsubscribe
        self._closing = False
        self._settled: Settled | None = None
        # Calls held at once (issue 22: one client held 1,500): counted by the store's create.
        self._pending_limits = PendingLimits(
            per_session=settings.max_pending_per_session, total=settings.max_pending
        )
        # Expiries on their own tasks: a deadline that meets a store outage is retried
        # until the store answers (not lost), and a stop cancels what still retries.
        self._expiring = BackgroundTasks("confirm-deadlines")
        self.deadlines = Deadlines(
            on_deadline=self._expire_on_time, clock=clock, tasks=self._expiring
        )
        # Reminders and escalations, beside each deadline (nudges.py).
        self.nudges = Nudges(self, tasks=self._expiring)
        self._replies = ReplyIntercept(self)
        self._replicas = Replicas(self, tasks=self._tasks)
        # Refused requests whose record may be stored all the same (a stalled store).
        self.unsure = UnsureCreates(
            self,
            settled=self.go_on,
            announce=lambda final: self._listeners.emit("resolved", final),
        )
        # Asking an ended call again (again.py): the runner hands it the evaluation (use).
        self.again = AskAgain(
            store=store, bus=bus, audit=self.audit, clock=clock, same_person=same_person
        )
        bus.set_interceptor(self.intercept)

    # ------------------------------------------------------------------ plumbing

    @property
    def parser(self) -> ReplyParser:
        return self._parser

    def _on_keywords(self, words: KeywordSet) -> None:
        self._parser = ReplyParser(words)

    def on_settled(self, handler: Settled) -> None:
        """Who goes on from an ended record (claim → run → record → continue the turn):
        called, without awaiting, for every record this process ended, and for approved
        calls adoption or unsure.py found unclaimed."""
        self._settled = handler

    def go_on(self, final: Confirmation) -> None:
        """Hand an ended record to the one path that goes on from it."""
        if self._settled is None:
            log.warning("confirm.nobody_goes_on", confirmation_id=final.id)
            return
        self._settled(final)

    async def intercept(self, msg: InboundMessage) -> bool:
        """The bus's interceptor: True when ``msg`` was a reply handled here."""
        if await self.again.read(msg):  # 重新发起 K7Q2 / retry K7Q2, whatever is pending
            return True
        return await self._replies.read(msg)

    @property
    def lease(self) -> float:
        return self.settings.lease_seconds

    async def announce_execution(self, final: Confirmation) -> None:
        """Tell listeners (admin feed) how an approved call ended."""
        await self._listeners.emit("executed", final)

    async def announce_remote(self, kind: FeedKind, record: Confirmation) -> None:
        """Tell listeners of a change another replica made (its lifecycle feed entry)."""
        await self._listeners.emit(kind, record, remote=True)

    # ------------------------------------------------------------------ deciding

    def may_decide(self, c: Confirmation, actor: str, decision: Decision) -> tuple[bool, str]:
        """Requester and approvers may decide; with four-eyes the requester may only reject;
        where approvals are votes, each person approves once."""
        if self_approval(c, actor, decision):
            return False, texts.FOUR_EYES
        if c.votes and already_voted(c, actor, decision):
            return False, vote_texts.already_voted(c)
        if actor == c.requester:
            return True, ""
        if actor in c.approvers or actor in self.settings.approvers:
            return True, ""
        return False, texts.ONLY_APPROVERS

    def card_view(
        self, c: Confirmation, viewer: str | None = None, *, verified: bool = True
    ) -> CardView:
        """What a card of ``c`` offers ``viewer`` (None: a card everyone sees alike).
        ``verified=False``: a name anyone could have typed, which decides nothing."""
        if viewer is None:
            return card_view(c)
        if not verified:
            view = card_view(c, lambda _: (False, texts.WEBCHAT_UNVERIFIED_DECISION))
            return replace(view, again=Offer(False, texts.WEBCHAT_UNVERIFIED_DECISION))
        view = card_view(c, lambda d: self.may_decide(c, viewer, d))
        if offered(c):
            view = replace(view, again=Offer(*self.again.may_ask(c, viewer)))
        return view

    async def ask_again(self, confirmation_id: str, *, actor: str, via: str) -> AgainResult:
        """The requester's 重新发起 / Ask again (a card button on any channel): a new
        confirmation for the same call, evaluated again (again.py)."""
        return await self.again.ask(confirmation_id, actor=actor, via=via)

    async def answer(
        self,
        a: Answer,
        *,
        record: Confirmation | None = None,
        before: Sequence[AuditEvent] = (),
    ) -> DecideResult:
        """The one entrance for a person's decision, from every channel, card and API.

        Judges who may decide (``via="admin"``: the token vouches for an operator, and
        four-eyes still holds on the person named), settles it by the store's
        compare-and-set, and gives the grant an approval asked for. ``record``: the record
        just read (the reply intercept has it); ``before``: audit events that led here (the
        reply read), written with the decision, or on their own when it decides nothing.
        """
        cid = canonical_id(a.confirmation_id)
        current = record if record is not None else await self.store.get(cid)
        if current is None:
            await self.audit.add_all(before)
            return DecideResult(DecideOutcome.NOT_FOUND, None, texts.unknown_id(cid))
        result = await self._decide(current, a, before)
        if (
            a.grant is not None
            and result.outcome is DecideOutcome.DECIDED
            and result.confirmation is not None
            and result.confirmation.status is Status.APPROVED
        ):
            grant, said = await grant_sentence(
                self.grants,
                result.confirmation,
                scope=a.grant.scope,
                minutes=a.grant.minutes,
                by=a.actor,
                via=a.via,
                pin=a.grant.pin,
                single_use=a.grant.single_use,
            )
            await self.say_to_chat(result.confirmation, said)
            result = replace(result, grant=grant)
        return result

    async def _decide(
        self, current: Confirmation, a: Answer, before: Sequence[AuditEvent]
    ) -> DecideResult:
        if current.status.is_terminal:
            await self.audit.add_all(before)
            return DecideResult(
                DecideOutcome.ALREADY_DECIDED, current, texts.already_decided(current)
            )
        if current.id in self.unsure:
            # Its request was refused to its turn (unsure.py): nobody here approves it;
            # settling it first cancels it, or finds what another replica decided.
            settled = await self.unsure.settle(current.id)
            await self.audit.add_all(before)
            assert settled is not None
            return DecideResult(
                DecideOutcome.ALREADY_DECIDED, settled, texts.already_decided(settled)
            )
        if current.votes and already_voted(current, a.actor, a.decision):
            await self.audit.add_all(before)
            return DecideResult(
                DecideOutcome.ALREADY_DECIDED, current, vote_texts.already_voted(current)
            )
        if a.via == "admin":
            # The token vouches for an operator, not for a second person: four-eyes holds,
            # judged on the person the admin API named (gateway/http/server.person_behind).
            allowed, why = not self_approval(current, a.actor, a.decision), texts.FOUR_EYES
        else:
            allowed, why = self.may_decide(current, a.actor, a.decision)
        if not allowed:
            log.info(
                "confirm.decision_refused",
                confirmation_id=current.id,
                session=current.session_key,
                actor=a.actor,
                via=a.via,
            )
            await self.audit.add_all(before)
            return DecideResult(DecideOutcome.FORBIDDEN, current, why)
        if current.takes_votes and a.decision is Decision.APPROVE:
            if a.edit is not None:  # the others would approve a call they never saw
                await self.audit.add_all(before)
                return DecideResult(DecideOutcome.FORBIDDEN, current, vote_texts.NO_EDIT_WITH_VOTES)
            return await self._vote(current, a, before)
        final, said = await self._finish(
            current.id,
            a.decision.status,
            by=a.actor,
            via=a.via,
            reason=a.reason,
            feedback=a.feedback,
            edit=a.edit,
            before=before,
        )
        assert final is not None
        if said is not None:
            return DecideResult(DecideOutcome.DECIDED, final, said)
        if final.status is Status.PENDING:
            # Past its deadline but the timer has not fired yet: expire it now.
            expired = await self.expire(current.id)
            assert expired is not None
            final = expired
        if final.status is Status.EXPIRED:
            return DecideResult(DecideOutcome.EXPIRED, final, texts.already_decided(final))
        return DecideResult(DecideOutcome.ALREADY_DECIDED, final, texts.already_decided(final))

    async def _vote(
        self, current: Confirmation, a: Answer, before: Sequence[AuditEvent]
    ) -> DecideResult:
        """An approval of a call that takes votes: written by the store's compare-and-set;
        the last one needed approves it (and ends it as ``_finish`` would), any other is
        shown on every copy of the prompt."""
        now = self.clock()
        vote = Vote(actor=a.actor, person=_folded(a.actor), at=now, via=a.via)
        # The record, not this line, says how many are in: a vote racing this one may
        # land first, and the line is written in the same step as the vote.
        voted = self.audit.event(
            current.id, "voted", actor=a.actor, at=now, via=a.via, approvals=current.approvals
        )
        decided = self.audit.decision_events(
            current.id, Status.APPROVED, by=a.actor, via=a.via, at=now, edit=None
        )
        final, outcome = await self.store.vote(
            current.id, vote, events=(*before, voted), approved_events=decided
        )
        if final is None:
            await self.audit.add_all(before)
            return DecideResult(DecideOutcome.NOT_FOUND, None, texts.unknown_id(current.id))
        if outcome is VoteOutcome.APPROVED:
            said = await self._ended(final, by=a.actor, via=a.via)
            return DecideResult(DecideOutcome.DECIDED, final, said)
        if outcome is VoteOutcome.COUNTED:
            log.info(
                "confirm.voted",
                confirmation_id=final.id,
                actor=a.actor,
                via=a.via,
                votes=len(final.votes),
                approvals=final.approvals,
            )
            said = vote_texts.vote_counted(final)
            # Every copy (cards, direct copies) shows the tally; the chat reads who voted.
            await self.bus.publish_outbound(
                OutboundMessage(
                    channel=final.channel,
                    chat_id=final.chat_id,
                    session_key=final.session_key,
                    kind=OutboundKind.CONFIRMATION_UPDATE,
                    text=said,
                    confirmation=final,
                )
            )
            await self._listeners.emit("voted", final)
            return DecideResult(DecideOutcome.VOTED, final, said)
        await self.audit.add_all(before)
        if outcome is VoteOutcome.ALREADY_VOTED:
            return DecideResult(
                DecideOutcome.ALREADY_DECIDED, final, vote_texts.already_voted(final)
            )
        # REFUSED: settled meanwhile, or past its deadline (then expire it now).
        if final.status is Status.PENDING:
            final = await self.expire(final.id) or final
        if final.status is Status.EXPIRED:
            return DecideResult(DecideOutcome.EXPIRED, final, texts.already_decided(final))
        self._ended_elsewhere(final)
        return DecideResult(DecideOutcome.ALREADY_DECIDED, final, texts.already_decided(final))

    # ------------------------------------------------------------------ asking

    async def request(
        self,
        *,
        session_key: str,
        channel: str,
        chat_id: str,
        requester: str,
        is_group: bool,
        tool_call: ToolCall,
        summary: str,
        details: Mapping[str, Any] | None = None,
        risk: Risk = Risk.MEDIUM,
        approvers: Sequence[str] = (),
        four_eyes: bool = False,
        approvals: int = 0,
        timeout: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotent: bool = False,
        continuation: Mapping[str, Any] | None = None,
        confirmation_id: str | None = None,
        asked_again_from: str | None = None,
    ) -> Confirmation:
        """Store a pending confirmation and post its prompt; the record as stored.

        ``confirmation_id``: the id to use (another is drawn only if it is taken);
        ``asked_again_from``: the call this one asks again (again.py), linked in its
        details and its audit trail.

        Nothing waits for it here: whatever ends it hands it to ``settled``, which goes on
        with ``continuation``. A timeout ends it as ``expired``; a failure to post the
        prompt as ``cancelled`` (returned) — never as ``approved``. Raises
        PendingLimitReached, storing nothing, when the session or the gateway already holds
        as many calls as it may (``[confirmation] max_pending_per_session`` / ``max_pending``:
        the store counts them in the create's own step, on every replica).
        """
        now = self.clock()
        timeout = self.settings.timeout_seconds if timeout is None else timeout
        cid = confirmation_id or new_confirmation_id()
        details = dict(details or {})
        first_lines = [
            self.audit.event(
                cid,
                "requested",
                actor=requester,
                at=now,
                tool=tool_call.name,
                **_preview_shown(details),
            )
        ]
        if asked_again_from is not None:
            details[ASKED_AGAIN_FROM] = asked_again_from
            link = self.audit.event(
                cid, ASKED_AGAIN_FROM, actor=requester, at=now, id=asked_again_from
            )
            first_lines.append(link)
        conf = await create_with_free_id(
            self.store,
            Confirmation(
                id=cid,
                session_key=session_key,
                channel=channel,
                chat_id=chat_id,
                requester=requester,
                is_group=is_group,
                tool_call=tool_call,
                summary=summary,
                created_at=now,
                expires_at=now + timeout,
                details=details,
                risk=risk,
                approvers=tuple(dict.fromkeys((*self.settings.approvers, *approvers))),
                four_eyes=four_eyes or approvals >= 1,
                approvals=approvals,
                owner=self.instance.id,
                idempotent=idempotent,
                continuation=continuation,
            ),
            events=first_lines,
            limits=self._pending_limits,
            on_error=self.unsure.create_failed,
        )
        self.deadlines.arm(conf.id, conf.expires_at)
        self.nudges.arm(conf)
        log.info(
            "confirm.requested",
            confirmation_id=conf.id,
            tool=tool_call.name,
            risk=risk.value,
            timeout=round(timeout, 3),
        )
        try:
            if self._closing:
                # Told to the asking turn by the record returned: nothing else goes on.
                final = await self.cancel(conf.id, reason=texts.SHUTDOWN_REASON, turn_went_on=True)
                return final or conf
            await self.bus.publish_outbound(
                OutboundMessage(
                    channel=channel,
                    chat_id=chat_id,
                    session_key=session_key,
                    kind=OutboundKind.CONFIRMATION,
                    text=texts.prompt(conf, now),
                    confirmation=conf,
                    metadata=metadata or {},
                )
            )
            await self.audit.add(conf.id, "prompt_sent", channel=channel, chat_id=chat_id)
            await self._listeners.emit("requested", conf)
            return conf
        except Exception as exc:  # any failure ends as cancelled, never approved
            log.exception("confirm.request_failed", confirmation_id=conf.id)
            # Raises StoreUnavailableError when the store is down: its deadline ends it.
            final = await self.cancel(
                conf.id,
                reason=texts.ERROR_REASON.format(error=type(exc).__name__),
                turn_went_on=True,
            )
            return final or conf

    async def _expire_on_time(self, confirmation_id: str) -> None:
        await once_store_answers(lambda: self.expire(confirmation_id))

    async def expire(
        self, confirmation_id: str, *, reason: str = texts.TIMEOUT_REASON
    ) -> Confirmation | None:
        """End a pending confirmation whose time is up; the record as it now is."""
        final, _ = await self._finish(
            confirmation_id, Status.EXPIRED, by=None, via="timeout", reason=reason
        )
        return final

    async def cancel(
        self,
        confirmation_id: str,
        *,
        reason: str,
        by: str | None = None,
        via: str = "system",
        tell_chat: bool = True,
        turn_went_on: bool = False,
    ) -> Confirmation | None:
        """End a pending confirmation without a decision (shutdown, superseded, an error).
        ``tell_chat=False``: no update to the chat (it was never shown a prompt);
        ``turn_went_on``: its turn was told the request failed and went on, so nothing goes
        on from this end (unsure.py)."""
        final, _ = await self._finish(
            confirmation_id,
            Status.CANCELLED,
            by=by,
            via=via,
            reason=reason,
            tell_chat=tell_chat,
            go_on=not turn_went_on,
        )
        return final

    async def _finish(
        self,
        confirmation_id: str,
        status: Status,
        *,
        by: str | None,
        via: str,
        reason: str | None,
        feedback: bool = False,
        edit: CallEdit | None = None,
        before: Sequence[AuditEvent] = (),
        tell_chat: bool = True,
        go_on: bool = True,
    ) -> tuple[Confirmation | None, str | None]:
        """End a pending confirmation: the record as it now is, and what its chat was told
        (None when this call changed nothing)."""
        now = self.clock()
        events = self.audit.decision_events(
            confirmation_id, status, by=by, via=via, at=now, edit=edit
        )
        final, changed = await self.store.finish(
            confirmation_id,
            status,
            by=by,
            via=via,
            reason=reason,
            now=now,
            feedback=feedback,
            edit=edit,
            events=(*before, *events),
        )
        if final is None or not changed:
            await self.audit.add_all(before)
            if final is not None and final.status.is_terminal:
                self._ended_elsewhere(final)
            return final, None
        said = await self._ended(final, by=by, via=via, tell_chat=tell_chat, go_on=go_on)
        return final, said

    def _ended_elsewhere(self, final: Confirmation) -> None:
        """Another path (or another replica sharing the store) finished ``final`` first,
        and goes on with it: here its deadline, its nudges and its adoption end."""
        self.deadlines.disarm(final.id)
        self.nudges.disarm(final.id)
        self._replicas.finished(final)

    async def _ended(
        self,
        final: Confirmation,
        *,
        by: str | None,
        via: str,
        tell_chat: bool = True,
        go_on: bool = True,
    ) -> str:
        """What follows the store's end of a pending record, whatever ended it (a decision,
        the last vote, the timeout, a cancel): its deadline and reply count go, the chat
        and every copy are told, it goes on, listeners hear; the sentence told."""
        log.info(
            "confirm.resolved",
            confirmation_id=final.id,
            session=final.session_key,
            status=final.status.value,
            actor=by,
            via=via,
        )
        self.deadlines.disarm(final.id)
        self.nudges.disarm(final.id)
        self._replies.forget(final.id)
        said = texts.outcome(final)
        if offered(final):  # expired, or cancelled by a shutdown: how to ask it again
            said = f"{said}\n{again_words.AGAIN_HINT.format(id=final.id)}"
        if tell_chat:
            await self.bus.publish_outbound(
                OutboundMessage(
                    channel=final.channel,
                    chat_id=final.chat_id,
                    session_key=final.session_key,
                    kind=OutboundKind.CONFIRMATION_UPDATE,
                    text=said,
                    confirmation=final,
                )
            )
        # Before the listeners hear it: a member's next message waits for what goes on.
        if go_on:
            self.go_on(final)
        await self._listeners.emit("resolved", final)
        self._replicas.finished(final)
        return said

    async def interrupt(self, confirmation_id: str, *, claimer: str) -> Confirmation | None:
        """Mark an in-flight call of ``claimer`` interrupted and tell its chat and the admin
        feed: the one way an interrupted call ends, for the executor and for adoption.

        The record says ``interrupted``, the chat where it was asked is told in both
        languages, the admin feed gets an ``executed`` event, the audit log an
        ``interrupted`` line. None when the record was not in flight under ``claimer``
        (settled or re-claimed meanwhile): then nothing is told, whoever settled it tells.
        """
        now = self.clock()
        line = self.audit.event(
            confirmation_id, "interrupted", actor=self.instance.id, at=now, claimer=claimer
        )
        final = await self.store.finish_execution(
            confirmation_id,
            instance=claimer,
            state=ExecState.INTERRUPTED,
            result=texts.INTERRUPTED_RESULT,
            now=now,
            events=(line,),
        )
        if final is None:
            return None
        log.warning("confirm.interrupted", confirmation_id=confirmation_id, claimer=claimer)
        await self.say_to_chat(final, texts.interrupted(final))
        await self.announce_execution(final)
        return final

    async def say_to_chat(self, c: Confirmation, text: str) -> None:
        """Post ``text`` to the chat where ``c`` was asked."""
        await self.bus.publish_outbound(
            OutboundMessage(
                channel=c.channel, chat_id=c.chat_id, session_key=c.session_key, text=text
            )
        )

    # ------------------------------------------------------------------ queries

    async def get(self, confirmation_id: str) -> Confirmation | None:
        return await self.store.get(canonical_id(confirmation_id))

    async def list(
        self, *, status: Status | None = None, session_key: str | None = None, limit: int = 200
    ) -> Confirmations:
        return await self.store.list(status=status, session_key=session_key, limit=limit)

    async def list_pending(self, session_key: str) -> Confirmations:
        return await self.store.list_pending(session_key)

    async def set_prompt_ref(self, confirmation_id: str, key: str, value: str) -> None:
        await self.store.set_prompt_ref(confirmation_id, key, value)

    # ------------------------------------------------------------------ start and stop

    async def recover(self, *, background: bool = False) -> None:
        """At start: heartbeat, and take over what dead processes left (replicas.py);
        ``background``: that runs on after this returns, until ``recovered()``."""
        await self._replicas.recover(background=background)

    async def recovered(self) -> None:
        await self._replicas.recovered.wait()

    async def adopt_dead(self) -> None:
        """One adoption scan now (it also runs every few seconds after ``recover``)."""
        await self._replicas.adopt_dead()

    async def stop_asking(self) -> None:
        """First step of a stop: pending calls this process answers for are cancelled
        (chats told), new requests are cancelled at once, adoption stops. Heartbeats go on
        while running calls finish."""
        self._closing = True
        await self._replicas.stop_asking()
        self.deadlines.clear()
        self.nudges.clear()
        await self._expiring.cancel()

    async def close(self) -> None:
        """Last step of a stop: what still runs here is interrupted (chats told), the
        heartbeat stops and the instance leaves the store."""
        await self.unsure.stop()  # the ids still in doubt are logged and left
        await self._tasks.drain()
        await self._replicas.close()

    async def shutdown(self) -> None:
        """Stop: cancel pending calls, interrupt what still runs, leave (chats are told)."""
        await self.stop_asking()
        await self.close()


def _preview_shown(details: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the approver is shown of a call's effect (issue 24: the SQL preview's rows), kept
    in the audit trail's ``requested`` line: the record's details can be edited later."""
    effects = (details or {}).get("effects")
    return {"effects": effects} if effects is not None else {}
