"""The in-memory store: the default for tests and for ``gateway chat``.

Operations never await between read and write, so each is atomic on the event loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Any

from gateway.confirm.model import (
    AuditEvent,
    CallEdit,
    Confirmation,
    ExecState,
    Instance,
    Status,
    Vote,
    VoteOutcome,
    vote_on,
)
from gateway.storage.confirmations import (
    ConfirmationExistsError,
    Confirmations,
    ConfirmationStore,
    FeedEntry,
    LocalFeed,
    PendingLimits,
    check_edit,
    decision_allowed,
    may_claim,
    pending_limit,
)


class MemoryConfirmationStore(ConfirmationStore):
    """Records in a dict; settled ones are forgotten beyond ``keep_finished``."""

    def __init__(self, *, keep_finished: int = 10_000) -> None:
        self._items: dict[str, Confirmation] = {}
        self._order: dict[str, int] = {}  # id -> creation sequence, for stable cursors
        self._seq = 0
        self._pending_by_session: dict[str, dict[str, None]] = {}
        # How many are pending, for the pending caps of every create: kept, not summed.
        self._pending = 0
        self._finished_order: deque[str] = deque()
        self._keep_finished = keep_finished
        self._feed = LocalFeed()
        self._instances: dict[str, Instance] = {}
        self._events: dict[str, list[AuditEvent]] = {}

    async def create(
        self,
        confirmation: Confirmation,
        *,
        events: Sequence[AuditEvent] = (),
        limits: PendingLimits | None = None,
    ) -> None:
        if confirmation.id in self._items:
            raise ConfirmationExistsError(confirmation.id)
        if confirmation.status is Status.PENDING:
            in_session = len(self._pending_by_session.get(confirmation.session_key, ()))
            refused = pending_limit(limits, in_session=in_session, total=self._pending)
            if refused is not None:
                raise refused
        self._items[confirmation.id] = confirmation
        self._add_events(events)
        self._seq += 1
        self._order[confirmation.id] = self._seq
        if confirmation.status is Status.PENDING:
            self._pending_by_session.setdefault(confirmation.session_key, {})[confirmation.id] = (
                None
            )
            self._pending += 1
            self._feed.announce(confirmation.id, "requested")

    async def get(self, confirmation_id: str) -> Confirmation | None:
        return self._items.get(confirmation_id)

    async def list_pending(self, session_key: str) -> Confirmations:
        ids = self._pending_by_session.get(session_key)
        if not ids:
            return []
        return [self._items[i] for i in ids]

    async def finish(
        self,
        confirmation_id: str,
        status: Status,
        *,
        by: str | None,
        via: str | None,
        reason: str | None,
        now: float,
        feedback: bool = False,
        edit: CallEdit | None = None,
        events: Sequence[AuditEvent] = (),
    ) -> tuple[Confirmation | None, bool]:
        check_edit(status, edit)
        current = self._items.get(confirmation_id)
        if current is None:
            return None, False
        if not decision_allowed(current, status, now):
            return current, False
        done = current if edit is None else current.edited(edit)
        done = done.finished(status, by=by, at=now, via=via, reason=reason, feedback=feedback)
        if status is not Status.APPROVED:
            done = done.skipped(now)
        self._items[confirmation_id] = done
        session = self._pending_by_session.get(current.session_key)
        if session is not None and confirmation_id in session:
            del session[confirmation_id]
            self._pending -= 1
            if not session:
                del self._pending_by_session[current.session_key]
        self._finished_order.append(confirmation_id)
        self._add_events(events)
        if len(self._finished_order) > self._keep_finished:
            self._forget(self._finished_order.popleft())
        self._feed.announce(confirmation_id, "resolved")
        return done, True

    async def vote(
        self,
        confirmation_id: str,
        vote: Vote,
        *,
        events: Sequence[AuditEvent] = (),
        approved_events: Sequence[AuditEvent] = (),
    ) -> tuple[Confirmation | None, VoteOutcome]:
        current = self._items.get(confirmation_id)
        if current is None:
            return None, VoteOutcome.NOT_FOUND
        done, outcome = vote_on(current, vote)
        if done is None:
            return current, outcome
        if outcome is VoteOutcome.COUNTED:
            self._items[confirmation_id] = done
            self._add_events(events)
            self._feed.announce(confirmation_id, "voted")
            return done, outcome
        # The last vote: the same end as finish(approved), votes and all.
        self._items[confirmation_id] = replace(current, votes=done.votes)
        final, _ = await self.finish(
            confirmation_id,
            Status.APPROVED,
            by=vote.actor,
            via=vote.via,
            reason=None,
            now=vote.at,
            events=(*events, *approved_events),
        )
        return final, outcome

    def _forget(self, confirmation_id: str) -> None:
        self._items.pop(confirmation_id, None)
        self._order.pop(confirmation_id, None)
        self._events.pop(confirmation_id, None)

    async def set_prompt_ref(self, confirmation_id: str, key: str, value: str) -> None:
        current = self._items.get(confirmation_id)
        if current is not None:
            refs = {**current.prompt_refs, key: value}
            self._items[confirmation_id] = replace(current, prompt_refs=refs)

    def lifecycle_feed(self) -> AbstractAsyncContextManager[AsyncIterator[FeedEntry]]:
        return self._feed.feed()

    async def swap_detail(
        self,
        confirmation_id: str,
        key: str,
        *,
        expected: Mapping[str, Any] | None,
        value: Mapping[str, Any],
        events: Sequence[AuditEvent] = (),
    ) -> tuple[Confirmation | None, bool]:
        current = self._items.get(confirmation_id)
        if current is None:
            return None, False
        if current.details.get(key) != (None if expected is None else dict(expected)):
            return current, False
        done = replace(current, details={**current.details, key: dict(value)})
        self._items[confirmation_id] = done
        self._add_events(events)
        return done, True

    # ------------------------------------------------------------ the execution ledger

    async def claim(
        self, confirmation_id: str, *, instance: str, now: float, lease: float
    ) -> Confirmation | None:
        current = self._items.get(confirmation_id)
        if current is None or not may_claim(current, now):
            return None
        execution = replace(
            current.execution,
            state=ExecState.CLAIMED,
            claimed_by=instance,
            lease_until=now + lease,
            attempts=current.execution.attempts + 1,
            started_at=None,
        )
        claimed = replace(current, execution=execution)
        self._items[confirmation_id] = claimed
        return claimed

    async def start_execution(
        self, confirmation_id: str, *, instance: str, now: float
    ) -> Confirmation | None:
        current = self._items.get(confirmation_id)
        if current is None:
            return None
        ex = current.execution
        if ex.state is not ExecState.CLAIMED or ex.claimed_by != instance:
            return None
        running = replace(current, execution=replace(ex, state=ExecState.RUNNING, started_at=now))
        self._items[confirmation_id] = running
        return running

    async def finish_execution(
        self,
        confirmation_id: str,
        *,
        instance: str,
        state: ExecState,
        result: str | None,
        now: float,
        events: Sequence[AuditEvent] = (),
    ) -> Confirmation | None:
        current = self._items.get(confirmation_id)
        if current is None:
            return None
        ex = current.execution
        if not ex.state.in_flight or ex.claimed_by != instance:
            return None
        done = replace(
            current,
            execution=replace(ex, state=state, finished_at=now, result=result),
        )
        self._items[confirmation_id] = done
        self._add_events(events)
        self._feed.announce(confirmation_id, "executed")
        return done

    async def adopt(
        self, confirmation_id: str, *, from_owner: str | None, to_owner: str
    ) -> Confirmation | None:
        current = self._items.get(confirmation_id)
        if current is None or current.owner != from_owner:
            return None
        adopted = replace(current, owner=to_owner)
        self._items[confirmation_id] = adopted
        return adopted

    async def list_unsettled(self, *, instance: str) -> Confirmations:
        found = [
            c
            for c in self._items.values()
            if (c.owner == instance and _unsettled(c))
            or (c.execution.claimed_by == instance and c.execution.state.in_flight)
        ]
        return sorted(found, key=lambda c: self._order[c.id])

    async def list_approved_waiting(self) -> Confirmations:
        found = [
            c
            for c in self._items.values()
            if c.status is Status.APPROVED and c.execution.state is ExecState.WAITING
        ]
        return sorted(found, key=lambda c: self._order[c.id])

    # ------------------------------------------------------------ instances

    async def heartbeat(self, instance: Instance, *, lease: float) -> None:
        self._instances[instance.id] = instance
        for cid, c in self._items.items():
            ex = c.execution
            if ex.claimed_by == instance.id and ex.state.in_flight:
                until = instance.seen_at + lease
                self._items[cid] = replace(c, execution=replace(ex, lease_until=until))

    async def list_instances(self) -> list[Instance]:
        return sorted(self._instances.values(), key=lambda i: i.started_at)

    async def forget_instance(self, instance_id: str) -> None:
        self._instances.pop(instance_id, None)

    # ------------------------------------------------------------ audit trail

    async def add_event(self, event: AuditEvent) -> None:
        if event.confirmation_id in self._items:
            self._add_events((event,))

    def _add_events(self, events: Sequence[AuditEvent]) -> None:
        for event in events:
            self._events.setdefault(event.confirmation_id, []).append(event)

    async def events(self, confirmation_id: str) -> list[AuditEvent]:
        return list(self._events.get(confirmation_id, ()))

    async def add_event_once(self, event: AuditEvent) -> bool:
        current = self._items.get(event.confirmation_id)
        if current is None or current.status is not Status.PENDING:
            return False
        if any(e.kind == event.kind for e in self._events.get(event.confirmation_id, ())):
            return False
        self._add_events((event,))
        return True

    async def purge(self, *, before: float) -> int:
        old = [
            c.id
            for c in self._items.values()
            if not _unsettled(c)
            and not c.execution.state.in_flight
            and (c.decided_at or c.created_at) < before
        ]
        for cid in old:
            self._forget(cid)
        if old:
            gone = set(old)
            self._finished_order = deque(i for i in self._finished_order if i not in gone)
        return len(old)

    # ------------------------------------------------------------ listing and counting

    async def page(
        self,
        *,
        status: Status | None = None,
        session_key: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[Confirmations, str | None]:
        after = int(cursor) if cursor else None
        items: Iterable[Confirmation] = self._items.values()
        if status is not None:
            items = (c for c in items if c.status is status)
        if session_key is not None:
            items = (c for c in items if c.session_key == session_key)
        if after is not None:
            items = (c for c in items if self._order[c.id] < after)
        ordered = sorted(items, key=lambda c: self._order[c.id], reverse=True)
        page = ordered[:limit]
        more = len(ordered) > limit
        return page, (str(self._order[page[-1].id]) if more and page else None)

    async def count(self, status: Status) -> int:
        if status is Status.PENDING:
            return self._pending
        return sum(1 for c in self._items.values() if c.status is status)


def _unsettled(c: Confirmation) -> bool:
    if c.status is Status.PENDING:
        return True
    return c.status is Status.APPROVED and not c.execution.state.is_final
