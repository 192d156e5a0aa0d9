"""The confirmation service: ask, wait, decide, and intercept replies.

Every way a confirmation can end — a typed reply, a card click, the admin API, the
timeout, shutdown — goes through ``_finish``, which does the store's compare-and-set,
wakes the waiting turn, tells listeners and posts the update to the chat.
"""

from __future__ import annotations

import asyncio
import heapq
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Literal

import structlog

from config.keywords import KeywordSet, KeywordStore
from config.settings import ConfirmationSettings
from gateway import texts
from gateway.bus import InboundMessage, MessageBus, OutboundKind, OutboundMessage
from gateway.confirm.model import (
    Confirmation,
    Decision,
    Risk,
    Status,
    ToolCall,
    canonical_id,
    new_confirmation_id,
)
from gateway.confirm.replies import ParsedReply, ReplyIntent, ReplyParser
from gateway.confirm.store import ConfirmationExistsError, Confirmations, ConfirmationStore

log = structlog.get_logger(__name__)

_NO_METADATA: Mapping[str, Any] = MappingProxyType({})


class DecideOutcome(StrEnum):
    DECIDED = "decided"
    ALREADY_DECIDED = "already_decided"
    NOT_FOUND = "not_found"
    FORBIDDEN = "forbidden"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class DecideResult:
    outcome: DecideOutcome
    confirmation: Confirmation | None
    message: str


@dataclass(frozen=True, slots=True)
class ConfirmationEvent:
    kind: Literal["requested", "resolved"]
    confirmation: Confirmation


Listener = Callable[[ConfirmationEvent], Awaitable[None] | None]
OrphanHandler = Callable[[Confirmation], Awaitable[None]]


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
    ) -> None:
        self.store = store
        self.bus = bus
        self.settings = settings
        self.clock = clock
        if isinstance(keywords, KeywordStore):
            self._parser = ReplyParser(keywords.words)
            keywords.on_change(self._on_keywords)
        else:
            self._parser = ReplyParser(keywords)
        self._waiters: dict[str, asyncio.Future[Confirmation]] = {}
        # Deadlines: id -> loop time of expiry for every armed confirmation, and a heap of
        # (loop time, id) behind ONE loop timer for the earliest. A per-confirmation
        # call_later cost 2.5 µs and ~250 B each (docs/performance.md). Entries of
        # confirmations that ended stay in the heap until they come up or it is compacted.
        self._deadline_of: dict[str, float] = {}
        self._deadline_heap: list[tuple[float, str]] = []
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._unclear: dict[str, int] = {}
        self._listeners: list[Listener] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._orphan_handler: OrphanHandler | None = None
        self._closing = False
        # Pending confirmations adopted from a previous process by recover().
        self._recovered: set[str] = set()
        self._follower: asyncio.Task[None] | None = None
        bus.set_interceptor(self.intercept)

    # ------------------------------------------------------------------ plumbing

    @property
    def parser(self) -> ReplyParser:
        return self._parser

    def _on_keywords(self, words: KeywordSet) -> None:
        self._parser = ReplyParser(words)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` on every requested/resolved event. Returns an unsubscribe."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def set_orphan_handler(self, handler: OrphanHandler) -> None:
        """Who runs an approved call whose waiting turn is gone (after a restart)."""
        self._orphan_handler = handler

    def _spawn(self, coro: Awaitable[Any], name: str) -> None:
        task: asyncio.Task[Any] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("confirm.task_failed", task=task.get_name(), exc_info=task.exception())

    async def _emit(self, event: ConfirmationEvent) -> None:
        for listener in tuple(self._listeners):
            try:
                result = listener(event)
                if result is not None:
                    await result
            except Exception:
                log.exception("confirm.listener_failed", confirmation_id=event.confirmation.id)

    async def _say(
        self,
        *,
        channel: str,
        chat_id: str,
        session_key: str,
        text: str,
        metadata: Mapping[str, Any],
    ) -> None:
        self.bus.post_outbound(
            OutboundMessage(
                channel=channel,
                chat_id=chat_id,
                session_key=session_key,
                text=text,
                metadata=metadata,
            )
        )

    async def _reply_to(self, msg: InboundMessage, text: str) -> None:
        await self._say(
            channel=msg.channel,
            chat_id=msg.chat_id,
            session_key=msg.session_key,
            text=text,
            metadata=msg.metadata,
        )

    # ------------------------------------------------------------------ asking

    def request(
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
        timeout: float | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Coroutine[Any, Any, Confirmation]:
        """Store a pending confirmation, post the prompt, and wait for its terminal record.

        ``await service.request(...)``. Never returns a pending record. A timeout ends as
        ``expired``; cancellation of the waiting turn or any error ends as ``cancelled`` —
        never as ``approved``.

        Not itself a coroutine function: the arguments become the record here, and the
        coroutine that waits for the decision holds only that record (its frame is what a
        pending confirmation costs while a person decides, docs/performance.md).
        """
        now = self.clock()
        timeout = self.settings.timeout_seconds if timeout is None else timeout
        conf = Confirmation(
            id=new_confirmation_id(),
            session_key=session_key,
            channel=channel,
            chat_id=chat_id,
            requester=requester,
            is_group=is_group,
            tool_call=tool_call,
            summary=summary,
            created_at=now,
            expires_at=now + timeout,
            details=dict(details) if details else {},
            risk=risk,
            approvers=(
                tuple(dict.fromkeys((*self.settings.approvers, *approvers)))
                if approvers
                else tuple(self.settings.approvers)
            ),
            four_eyes=four_eyes,
        )
        return self._ask(conf, metadata)

    async def _ask(self, conf: Confirmation, metadata: Mapping[str, Any] | None) -> Confirmation:
        # Few locals and a shallow stack on purpose: this frame lives while a person decides.
        conf = await self._store_new(conf)
        fut: asyncio.Future[Confirmation] = asyncio.get_running_loop().create_future()
        self._waiters[conf.id] = fut
        self._arm_timer(conf)
        try:
            if self._closing:
                self._log_requested(conf)
                await self._end_unasked(conf, texts.SHUTDOWN_REASON)
            else:
                self._announce(conf, metadata)
                if self._listeners:
                    await self._emit(ConfirmationEvent("requested", conf))
            # Not shielded: a cancelled turn cancels this future, and the handler below
            # then records the confirmation as cancelled.
            return await fut
        except asyncio.CancelledError:
            # The turn was cancelled (shutdown, client gone): the call must not stay approvable.
            await asyncio.shield(self._end_unasked(conf, texts.SHUTDOWN_REASON))
            raise
        except Exception as exc:  # any failure ends as cancelled, never approved
            log.exception("confirm.request_failed", confirmation_id=conf.id)
            return await self._end_unasked(
                conf, texts.ERROR_REASON.format(error=type(exc).__name__)
            )
        finally:
            self._deadline_of.pop(conf.id, None)
            self._waiters.pop(conf.id, None)

    def _log_requested(self, conf: Confirmation) -> None:
        log.info(
            "confirm.requested",
            confirmation_id=conf.id,
            tool=conf.tool_call.name,
            risk=conf.risk.value,
            timeout=round(conf.expires_at - conf.created_at, 3),
        )

    def _announce(self, conf: Confirmation, metadata: Mapping[str, Any] | None) -> None:
        """Log the request and post its prompt."""
        self._log_requested(conf)
        self.bus.post_outbound(
            OutboundMessage(
                channel=conf.channel,
                chat_id=conf.chat_id,
                session_key=conf.session_key,
                kind=OutboundKind.CONFIRMATION,
                text=texts.prompt(conf, conf.created_at),
                confirmation=conf,
                metadata=metadata or _NO_METADATA,
            )
        )

    async def _end_unasked(self, conf: Confirmation, reason: str) -> Confirmation:
        """End ``conf`` as cancelled by the system; its terminal record."""
        final, _ = await self._finish(
            conf.id, Status.CANCELLED, by=None, via="system", reason=reason
        )
        assert final is not None
        return final

    async def _store_new(self, conf: Confirmation) -> Confirmation:
        """Store ``conf``, drawing another id while its id is taken."""
        length = len(conf.id)
        for attempt in range(30):
            if attempt:
                if attempt % 10 == 0:
                    length += 1  # crowded id space: longer ids
                conf = conf._replace(id=new_confirmation_id(length))
            try:
                await self.store.create(conf)
            except ConfirmationExistsError:
                continue
            return conf
        raise RuntimeError("could not draw a free confirmation id")

    def _arm_timer(self, conf: Confirmation) -> None:
        """Expire ``conf`` at its deadline unless it ends first (then disarmed)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, conf.expires_at - self.clock())
        self._deadline_of[conf.id] = when
        heap = self._deadline_heap
        heapq.heappush(heap, (when, conf.id))
        if len(heap) > 2 * len(self._deadline_of) + 64:
            # Mostly entries of confirmations that ended: rebuild from the armed ones.
            heap[:] = [(w, cid) for cid, w in self._deadline_of.items()]
            heapq.heapify(heap)
        timer = self._deadline_timer
        if timer is None or heap[0][0] < timer.when():
            if timer is not None:
                timer.cancel()
            self._deadline_timer = loop.call_at(heap[0][0], self._on_deadline)

    def _on_deadline(self) -> None:
        self._deadline_timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        heap = self._deadline_heap
        armed = self._deadline_of
        while heap and heap[0][0] <= now:
            when, confirmation_id = heapq.heappop(heap)
            if armed.get(confirmation_id) != when:
                continue  # ended already, or re-armed with another deadline
            del armed[confirmation_id]
            self._spawn(
                self._finish(
                    confirmation_id,
                    Status.EXPIRED,
                    by=None,
                    via="timeout",
                    reason=texts.TIMEOUT_REASON,
                ),
                name=f"expire-{confirmation_id}",
            )
        if heap:
            self._deadline_timer = loop.call_at(heap[0][0], self._on_deadline)

    # ------------------------------------------------------------------ deciding

    def may_decide(self, c: Confirmation, actor: str, decision: Decision) -> tuple[bool, str]:
        """Requester and approvers may decide; with four-eyes the requester may only reject."""
        is_approver = actor in c.approvers or actor in self.settings.approvers
        if actor == c.requester:
            if c.four_eyes and decision is Decision.APPROVE:
                return False, texts.FOUR_EYES
            return True, ""
        if is_approver:
            return True, ""
        return False, texts.ONLY_APPROVERS

    def _may_take_part(self, c: Confirmation, actor: str) -> bool:
        return actor == c.requester or actor in c.approvers or actor in self.settings.approvers

    async def decide(
        self,
        confirmation_id: str,
        decision: Decision,
        *,
        actor: str,
        via: str,
        reason: str | None = None,
        feedback: bool = False,
    ) -> DecideResult:
        """The one way a person decides. ``via="admin"`` is authorised by the admin token."""
        cid = canonical_id(confirmation_id)
        current = await self.store.get(cid)
        if current is None:
            return DecideResult(DecideOutcome.NOT_FOUND, None, texts.unknown_id(cid))
        return await self._decide(
            current, decision, actor=actor, via=via, reason=reason, feedback=feedback
        )

    async def _decide(
        self,
        current: Confirmation,
        decision: Decision,
        *,
        actor: str,
        via: str,
        reason: str | None,
        feedback: bool = False,
    ) -> DecideResult:
        """Decide ``current`` as read from the store; the compare-and-set settles races."""
        cid = current.id
        if current.status.is_terminal:
            return DecideResult(
                DecideOutcome.ALREADY_DECIDED, current, texts.already_decided(current)
            )
        if via != "admin":
            allowed, why = self.may_decide(current, actor, decision)
            if not allowed:
                log.info(
                    "confirm.decision_refused",
                    confirmation_id=cid,
                    session=current.session_key,
                    actor=actor,
                    via=via,
                )
                return DecideResult(DecideOutcome.FORBIDDEN, current, why)
        final, changed = await self._finish(
            cid, decision.status, by=actor, via=via, reason=reason, feedback=feedback
        )
        assert final is not None
        if changed:
            return DecideResult(DecideOutcome.DECIDED, final, texts.outcome(final))
        if final.status is Status.PENDING:
            # Past its deadline but the timer has not fired yet: expire it now.
            final, _ = await self._finish(
                cid, Status.EXPIRED, by=None, via="timeout", reason=texts.TIMEOUT_REASON
            )
            assert final is not None
        if final.status is Status.EXPIRED:
            return DecideResult(DecideOutcome.EXPIRED, final, texts.already_decided(final))
        return DecideResult(DecideOutcome.ALREADY_DECIDED, final, texts.already_decided(final))

    async def _finish(
        self,
        confirmation_id: str,
        status: Status,
        *,
        by: str | None,
        via: str,
        reason: str | None,
        feedback: bool = False,
    ) -> tuple[Confirmation | None, bool]:
        final, changed = await self.store.finish(
            confirmation_id,
            status,
            by=by,
            via=via,
            reason=reason,
            now=self.clock(),
            feedback=feedback,
        )
        if final is None:
            return None, False
        if not changed:
            if final.status.is_terminal:
                # Another path (or another replica sharing the store) finished it first:
                # the waiting turn here must learn the real outcome, not hang.
                self._wake(final)
            return final, False
        self._deadline_of.pop(confirmation_id, None)
        self._unclear.pop(confirmation_id, None)
        log.info(
            "confirm.resolved",
            confirmation_id=confirmation_id,
            session=final.session_key,
            status=status.value,
            actor=by,
            via=via,
        )
        fut = self._waiters.get(confirmation_id)
        self._wake(final)
        self.bus.post_outbound(
            OutboundMessage(
                channel=final.channel,
                chat_id=final.chat_id,
                session_key=final.session_key,
                kind=OutboundKind.CONFIRMATION_UPDATE,
                text=texts.outcome(final),
                confirmation=final,
            )
        )
        if self._listeners:
            await self._emit(ConfirmationEvent("resolved", final))
        if (
            fut is None
            and status is Status.APPROVED
            and self._orphan_handler is not None
            and confirmation_id in self._recovered
            and not self.store.shared
        ):
            # Its turn died with the previous process: the stored call is run as approved.
            # Never with a shared store: the replica that asked may still be waiting, and it
            # runs the call itself when it learns of the decision.
            self._spawn(self._orphan_handler(final), name=f"orphan-{confirmation_id}")
        self._recovered.discard(confirmation_id)
        return final, True

    def _wake(self, final: Confirmation) -> None:
        self._deadline_of.pop(final.id, None)
        fut = self._waiters.get(final.id)
        if fut is not None and not fut.done():
            fut.set_result(final)

    async def _follow_other_replicas(self) -> None:
        """With a shared store, wake local turns when another replica decides their call."""
        feed = getattr(self.store, "finished_feed", None)
        if feed is None:
            return
        async with feed() as ids:
            async for confirmation_id in ids:
                if confirmation_id in self._waiters:
                    record = await self.store.get(confirmation_id)
                    if record is not None and record.status.is_terminal:
                        self._wake(record)

    # ------------------------------------------------------------------ replies

    async def intercept(self, msg: InboundMessage) -> bool:
        """Called by the bus for every new message. True when it was handled here."""
        pending = await self.store.list_pending(msg.session_key)
        if not pending:
            return await self._on_reply_to_finished(msg)
        parsed = self._parser.parse(msg.text)
        sender = msg.sender_id
        takers = [c for c in pending if self._may_take_part(c, sender)]
        # Lines logged from here carry the session on the line itself (no context binding:
        # it cost two context copies per reply, docs/performance.md).
        intent = parsed.intent
        if intent is ReplyIntent.CONFIRM or intent is ReplyIntent.CANCEL:
            await self._on_decision_reply(msg, parsed, pending, takers)
            return True
        if intent is ReplyIntent.UNCLEAR:
            await self._on_unclear(msg, parsed, pending, takers)
            return True
        return await self._on_other_message(msg, takers)

    async def _on_reply_to_finished(self, msg: InboundMessage) -> bool:
        """`确认 K7Q2` after K7Q2 ended: say what became of it instead of feeding the agent.

        A bare "ok" with nothing pending is ordinary conversation and goes to the agent.
        """
        if len(msg.text) > 64:
            return False
        parsed = self._parser.parse(msg.text)
        if parsed.intent not in (ReplyIntent.CONFIRM, ReplyIntent.CANCEL):
            return False
        if not parsed.confirmation_id:
            return False
        known = await self.store.get(parsed.confirmation_id)
        if known is None or known.session_key != msg.session_key:
            await self._reply_to(msg, texts.unknown_id(parsed.confirmation_id))
        else:
            await self._reply_to(msg, texts.already_decided(known))
        return True

    def _target(
        self, parsed: ParsedReply, pending: list[Confirmation], takers: list[Confirmation]
    ) -> Confirmation | str:
        """The one confirmation a reply is about, or the sentence to answer instead."""
        if parsed.confirmation_id:
            for c in pending:
                if c.id == parsed.confirmation_id:
                    return c
            return texts.unknown_id(parsed.confirmation_id)
        if not takers:
            return texts.ONLY_APPROVERS
        if len(takers) > 1:
            return texts.which_one(takers)
        return takers[0]

    async def _on_decision_reply(
        self,
        msg: InboundMessage,
        parsed: ParsedReply,
        pending: list[Confirmation],
        takers: list[Confirmation],
    ) -> None:
        target = self._target(parsed, pending, takers)
        if isinstance(target, str):
            if parsed.confirmation_id:
                # An id that is not pending here: maybe decided already; say which.
                known = await self.store.get(parsed.confirmation_id)
                if known is not None and known.session_key == msg.session_key:
                    target = texts.already_decided(known)
            await self._reply_to(msg, target)
            return
        decision = Decision.APPROVE if parsed.intent is ReplyIntent.CONFIRM else Decision.REJECT
        result = await self._decide(
            target, decision, actor=msg.sender_id, via="text", reason=parsed.reason
        )
        if result.outcome is not DecideOutcome.DECIDED:
            # A decision is announced by the update message; anything else is told here.
            await self._reply_to(msg, result.message)

    async def _on_unclear(
        self,
        msg: InboundMessage,
        parsed: ParsedReply,
        pending: list[Confirmation],
        takers: list[Confirmation],
    ) -> None:
        target = self._target(parsed, pending, takers)
        if isinstance(target, str):
            await self._reply_to(msg, target)
            return
        if not self._may_take_part(target, msg.sender_id):
            await self._reply_to(msg, texts.ONLY_APPROVERS)
            return
        count = self._unclear.get(target.id, 0) + 1
        self._unclear[target.id] = count
        left = self.settings.max_unclear_replies - count
        if left <= 0:
            await self._finish(
                target.id,
                Status.REJECTED,
                by=msg.sender_id,
                via="text",
                reason=texts.TOO_MANY_UNCLEAR,
            )
            return
        await self._reply_to(msg, texts.unclear(target, left))

    async def _on_other_message(self, msg: InboundMessage, takers: list[Confirmation]) -> bool:
        if not takers:
            # Other members' chat is not a decision: it goes to the agent as usual.
            return False
        policy = self.settings.on_other_message
        if policy == "keep_pending":
            await self._reply_to(msg, texts.still_pending(takers[0]))
            return False
        consumed = True
        for c in takers:
            if policy == "cancel":
                await self._finish(
                    c.id,
                    Status.CANCELLED,
                    by=msg.sender_id,
                    via="text",
                    reason=texts.SUPERSEDED_REASON,
                )
                consumed = False
            else:
                # reject_with_feedback: the message is the model's feedback, so the waiting
                # turn answers it. Without a waiting turn (restart), it goes to the queue.
                await self._finish(
                    c.id,
                    Status.REJECTED,
                    by=msg.sender_id,
                    via="text",
                    reason=msg.text,
                    feedback=True,
                )
                if c.id not in self._waiters:
                    consumed = False
        return consumed

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

    # ------------------------------------------------------------------ lifecycle

    async def recover(self) -> None:
        """After a restart: expire what ran out while down; re-arm timers for the rest."""
        for c in await self.store.list_all_pending():
            if c.expires_at <= self.clock():
                await self._finish(
                    c.id, Status.EXPIRED, by=None, via="timeout", reason=texts.RESTART_REASON
                )
            elif c.id not in self._deadline_of:
                self._arm_timer(c)
                self._recovered.add(c.id)
                log.info("confirm.recovered", confirmation_id=c.id)
        if self.store.shared and self._follower is None:
            self._follower = asyncio.create_task(
                self._follow_other_replicas(), name="follow-replicas"
            )
            self._follower.add_done_callback(self._task_done)

    async def shutdown(self) -> None:
        """Cancel every pending confirmation (chats are told) and wake their turns."""
        self._closing = True
        # Only what this process holds: with a shared store (Redis) other replicas keep
        # theirs, and a crashed process's leftovers are for recover() on the next start.
        mine = set(self._waiters) | set(self._deadline_of)
        if self.store.shared:
            # Timers armed by recover() may guard other live replicas' calls: not ours.
            mine -= self._recovered - set(self._waiters)
        for c in await self.store.list_all_pending():
            if c.id not in mine:
                continue
            await self._finish(
                c.id, Status.CANCELLED, by=None, via="system", reason=texts.SHUTDOWN_REASON
            )
        self._deadline_of.clear()
        self._deadline_heap.clear()
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
            self._deadline_timer = None
        if self._follower is not None:
            self._follower.cancel()
            # Bounded: a Redis client stuck in a read must not hold up shutdown.
            await asyncio.wait([self._follower], timeout=2.0)
            self._follower = None
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:16]}"
