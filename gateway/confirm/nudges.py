"""Nudges: a call that waits too long is brought back to people's attention, once each.

- **Reminder** (``[confirmation] remind_before_seconds``, default 60, 0 off): that long
  before a pending call expires, its chat is told it still waits, with the time left,
  @-mentioning the requester and, where the call needs an approver (four-eyes, critical),
  its approvers (``OutboundMessage.mentions``; each platform writes its own mention).
- **Escalation** (``[confirmation] escalate_after_seconds``, default 0 off): a call still
  undecided that long after it was asked goes to every approver's direct chat and to the
  channel's ``escalation_chat``, as copies of the prompt that decide like any other (a
  click, or ``确认 K7Q2`` typed there); the chat that asked is told, the record carries the
  ``escalated`` mark (``views.ESCALATED_REF``) and its trail an ``escalated`` line.

The timers are two more ``Deadlines`` (deadlines.py), armed beside the expiry by the
process that owns the record: at ``request`` and at adoption (a restart, or a dead
replica's calls). Each nudge is written to the audit trail by the store's
``add_event_once`` before anything is sent — a compare-and-set on a pending record, so a
nudge happens once over every replica and restart, and never after the call ended. A timer
left armed after its call ended elsewhere (another replica decided it) finds it ended and
does nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from gateway.bus import OutboundKind, OutboundMessage
from gateway.confirm.deadlines import Deadlines
from gateway.confirm.model import Confirmation, Status
from gateway.confirm.views import ESCALATED_REF, reminder_mentions
from gateway.runtime import BackgroundTasks
from gateway.storage.confirmations import once_store_answers
from gateway.texts import nudges as nudge_texts

if TYPE_CHECKING:
    from gateway.confirm.lifecycle import Lifecycle

log = structlog.get_logger(__name__)

REMINDED = "reminded"  # audit kinds, each written once per call
ESCALATED = "escalated"


class Nudges:
    """The reminder and escalation timers of the pending calls this process owns."""

    def __init__(self, service: Lifecycle, *, tasks: BackgroundTasks) -> None:
        self._service = service
        self._reminders = Deadlines(
            on_deadline=self._remind_on_time, clock=service.clock, tasks=tasks
        )
        self._escalations = Deadlines(
            on_deadline=self._escalate_on_time, clock=service.clock, tasks=tasks
        )

    def reminder_at(self, c: Confirmation) -> float | None:
        """When ``c`` is reminded of; None when never (off, or the call's whole timeout is
        no longer than the lead: its prompt says the time left already)."""
        before = self._service.settings.remind_before_seconds
        at = c.expires_at - before
        return at if before > 0 and at > c.created_at else None

    def escalation_at(self, c: Confirmation) -> float | None:
        """When ``c`` is escalated; None when never (off, or it expires first)."""
        after = self._service.settings.escalate_after_seconds
        at = c.created_at + after
        return at if after > 0 and at < c.expires_at else None

    def arm(self, c: Confirmation) -> None:
        """Arm the nudges of pending ``c`` (at once for a time that has passed)."""
        remind, escalate = self.reminder_at(c), self.escalation_at(c)
        if remind is not None:
            self._reminders.arm(c.id, remind)
        if escalate is not None:
            self._escalations.arm(c.id, escalate)

    def disarm(self, confirmation_id: str) -> None:
        self._reminders.disarm(confirmation_id)
        self._escalations.disarm(confirmation_id)

    def clear(self) -> None:
        self._reminders.clear()
        self._escalations.clear()

    def __contains__(self, confirmation_id: object) -> bool:
        return confirmation_id in self._reminders or confirmation_id in self._escalations

    async def _remind_on_time(self, confirmation_id: str) -> None:
        await once_store_answers(lambda: self.remind(confirmation_id))

    async def _escalate_on_time(self, confirmation_id: str) -> None:
        await once_store_answers(lambda: self.escalate(confirmation_id))

    async def _still_waiting(self, confirmation_id: str) -> Confirmation | None:
        c = await self._service.store.get(confirmation_id)
        if c is None or c.status is not Status.PENDING or c.expires_at <= self._service.clock():
            return None
        return c

    async def remind(self, confirmation_id: str) -> bool:
        """Tell the chat the call still waits, once over every replica; True when sent here."""
        service = self._service
        c = await self._still_waiting(confirmation_id)
        if c is None:
            return False
        now = service.clock()
        mentions = reminder_mentions(c)
        line = service.audit.event(
            c.id,
            REMINDED,
            actor=service.instance.id,
            at=now,
            seconds_left=round(c.seconds_left(now)),
            mentions=list(mentions),
        )
        if not await service.store.add_event_once(line):
            return False  # reminded already (another replica, before a restart), or ended
        log.info("confirm.reminded", confirmation_id=c.id, seconds_left=round(c.seconds_left(now)))
        await service.bus.publish_outbound(
            OutboundMessage(
                channel=c.channel,
                chat_id=c.chat_id,
                session_key=c.session_key,
                text=nudge_texts.reminder(c, now),
                confirmation=c,
                mentions=mentions,
            )
        )
        return True

    async def escalate(self, confirmation_id: str) -> bool:
        """Send the prompt to the approvers and the escalation chat, once over every
        replica; True when sent here."""
        service = self._service
        c = await self._still_waiting(confirmation_id)
        if c is None:
            return False
        now = service.clock()
        after = service.settings.escalate_after_seconds
        line = service.audit.event(c.id, ESCALATED, actor=service.instance.id, at=now, after=after)
        if not await service.store.add_event_once(line):
            return False
        # The mark the admin page and the copies' cards read, on the record itself.
        await service.store.set_prompt_ref(c.id, ESCALATED_REF, repr(now))
        c = replace(c, prompt_refs={**c.prompt_refs, ESCALATED_REF: repr(now)})
        log.info("confirm.escalated", confirmation_id=c.id, after=after)
        await service.bus.publish_outbound(
            OutboundMessage(
                channel=c.channel,
                chat_id=c.chat_id,
                session_key=c.session_key,
                kind=OutboundKind.ESCALATION,
                text=nudge_texts.escalated(c, after),
                confirmation=c,
            )
        )
        return True
