"""Where confirmations live: an abstract store and the in-memory backend.

The store holds the truth, the waiting turn included (a record's continuation): no process
waits for a decision. Every backend passes the same contract suite
(tests/confirm/test_store_contract.py).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, TypeVar

from gateway.confirm.ids import new_confirmation_id
from gateway.confirm.model import (
    AuditEvent,
    CallEdit,
    Confirmation,
    ExecState,
    Instance,
    Status,
    Vote,
    VoteOutcome,
)
from gateway.runtime import ServiceUnavailable, retrying

# An alias: inside the store classes `list` is also a method name.
Confirmations = list[Confirmation]

# requested: a pending record was created; resolved: its status ended (``finish``);
# executed: its approved call ended (``finish_execution``: succeeded, failed, interrupted);
# voted: an approval was counted and the record still waits for more (``vote``).
FeedKind = Literal["requested", "resolved", "executed", "voted"]


@dataclass(frozen=True, slots=True)
class FeedEntry:
    """One change of a record, as the lifecycle feed gives it out."""

    id: str
    kind: FeedKind
    # Written through this store handle, i.e. by this process, whose service already told
    # its own listeners; False: another replica made the change.
    local: bool


class ConfirmationExistsError(Exception):
    """The id is taken; the service draws another."""


@dataclass(frozen=True, slots=True)
class PendingLimits:
    """How many pending records a ``create`` may find before it is refused: in the new
    record's session, and over all (``[confirmation] max_pending_per_session`` /
    ``max_pending``)."""

    per_session: int
    total: int


class PendingLimitReached(Exception):
    """A create refused by ``PendingLimits``: nothing was written. ``setting`` names the cap."""

    def __init__(self, *, per_session: bool, limit: int) -> None:
        self.per_session = per_session
        self.limit = limit
        self.setting = f"confirmation.max_pending{'_per_session' if per_session else ''}"
        super().__init__(f"{self.setting} ({limit}) reached")


def pending_limit(
    limits: PendingLimits | None, *, in_session: int, total: int
) -> PendingLimitReached | None:
    """The refusal a create of a pending record meets, given what is pending (every backend;
    the Redis script repeats it in Lua)."""
    if limits is None:
        return None
    if in_session >= limits.per_session:
        return PendingLimitReached(per_session=True, limit=limits.per_session)
    if total >= limits.total:
        return PendingLimitReached(per_session=False, limit=limits.total)
    return None


class StoreUnavailableError(ServiceUnavailable):
    """The store's server cannot be reached, or every connection stayed busy past the pool
    timeout. The operation did not happen (each write is one atomic step): callers fail
    closed and say so."""


T = TypeVar("T")

# Work that must reach a store that does not answer: tried again after ~0.1 s, doubling up
# to 5 s apart, until it answers (or the caller is cancelled).
_RETRY_INITIAL = 0.1
_RETRY_MAX = 5.0


def _store_down(exc: BaseException) -> bool:
    return isinstance(exc, StoreUnavailableError | TimeoutError)


async def once_store_answers(write: Callable[[], Awaitable[T]]) -> T:
    """``await write()``, again and again while the store does not answer (the one retry
    policy of gateway/runtime.py)."""
    async for attempt in retrying(
        attempts=None, initial=_RETRY_INITIAL, maximum=_RETRY_MAX, retry_on=_store_down
    ):
        with attempt:
            return await write()
    raise AssertionError("unreachable: the retry policy re-raises the last error")


class ConfirmationStore(ABC):
    """Async persistence of confirmations with an atomic, first-wins status change."""

    # True when several gateway processes share the records (Redis): a record may be
    # asked, decided and run by different replicas.
    shared: ClassVar[bool] = False

    @abstractmethod
    async def create(
        self,
        confirmation: Confirmation,
        *,
        events: Sequence[AuditEvent] = (),
        limits: PendingLimits | None = None,
    ) -> None:
        """Store a new pending confirmation, and ``events`` (the first lines of its audit
        trail) in the same step. Raises ConfirmationExistsError on a taken id, and
        PendingLimitReached, writing nothing, when a pending record meets ``limits`` (the
        pending records counted in the same step: one client held 1,500 calls, issue 22).
        """

    @abstractmethod
    async def get(self, confirmation_id: str) -> Confirmation | None: ...

    @abstractmethod
    async def list_pending(self, session_key: str) -> Confirmations:
        """Pending confirmations of one session, oldest first."""

    @abstractmethod
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
        """Compare-and-set ``pending`` -> ``status``; first call wins.

        Approve/reject only succeed while ``now < expires_at``: a decision that arrives
        after the deadline never approves, even if the timer has not fired yet. Returns the
        record as it is after the call and whether this call changed it. ``edit`` (only
        with ``approved``) replaces the call in the same step (``Confirmation.edited``):
        a refused finish leaves the call as it was. ``events`` join the audit trail in the
        same step, only when this call changed the record.
        """

    @abstractmethod
    async def vote(
        self,
        confirmation_id: str,
        vote: Vote,
        *,
        events: Sequence[AuditEvent] = (),
        approved_events: Sequence[AuditEvent] = (),
    ) -> tuple[Confirmation | None, VoteOutcome]:
        """Compare-and-set: add ``vote`` (an approval) to a pending record that takes votes.

        The rule is ``model.vote_on``: only before ``expires_at``, one vote per
        ``vote.person``; the ``approvals``-th vote moves the record ``pending -> approved``
        (decided by that voter) in the same step, exactly as ``finish`` would. Of two last
        votes at once one approves and the other finds it settled (``REFUSED``); a
        rejection (``finish``) racing the last vote settles it one way, once. ``events``
        join the audit trail when the vote is written, ``approved_events`` too when it
        approves. Returns the record as it is after the call and what became of the vote.
        """

    @abstractmethod
    async def set_prompt_ref(self, confirmation_id: str, key: str, value: str) -> None:
        """Remember where a prompt was sent (e.g. a card's message id) for later updates."""

    @abstractmethod
    def lifecycle_feed(self) -> AbstractAsyncContextManager[AsyncIterator[FeedEntry]]:
        """Changes of records as they happen, from entering the context on.

        ``async with store.lifecycle_feed() as entries: async for e in entries: ...``.
        Every successful ``create`` of a pending record (``requested``), ``finish``
        (``resolved``) and ``finish_execution`` (``executed``) through this handle is given
        out once, in order, with ``local`` set; with a ``shared`` store also those of every
        other replica, with ``local`` unset. Refused changes are not given out. A turn waits
        in the process that asked, so this is how another replica's decision wakes it, and
        how each replica's live views (SSE, web chat) learn what the others did.
        """

    @abstractmethod
    async def swap_detail(
        self,
        confirmation_id: str,
        key: str,
        *,
        expected: Mapping[str, Any] | None,
        value: Mapping[str, Any],
        events: Sequence[AuditEvent] = (),
    ) -> tuple[Confirmation | None, bool]:
        """Compare-and-set ``details[key]``: ``expected`` (None: absent) -> ``value``.

        The one write of a record's details after its create: a link that may be made once
        (gateway/confirm/again.py: "asked again as M3XA"). Of any number of callers on any
        number of handles exactly one wins. ``events`` join the audit trail in the same
        step, only when this call changed the record. Returns the record as it is after the
        call (None: unknown) and whether this call changed it.
        """

    # ------------------------------------------------------------ the execution ledger

    @abstractmethod
    async def claim(
        self, confirmation_id: str, *, instance: str, now: float, lease: float
    ) -> Confirmation | None:
        """Compare-and-set "approved and unclaimed -> claimed by ``instance``".

        Unclaimed means ``execution.state == waiting``; or, for an ``idempotent`` record
        claimed exactly once whose ``lease_until`` has passed while still in flight (its
        claimer died), one more claim. Sets ``claimed_by``, ``lease_until = now + lease``
        and counts ``attempts``. Returns the claimed record, or None when this call lost
        (another process has it, it is not approved, or it is settled). Of any number of
        concurrent claimers on any number of handles exactly one wins.
        """

    @abstractmethod
    async def start_execution(
        self, confirmation_id: str, *, instance: str, now: float
    ) -> Confirmation | None:
        """``claimed`` by ``instance`` -> ``running`` with ``started_at``; None otherwise."""

    @abstractmethod
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
        """``claimed`` or ``running`` by ``instance`` -> ``state`` (succeeded, failed or
        interrupted) with ``finished_at`` and ``result``, and ``events`` to the audit trail,
        in one step. None when the record is not in flight under that instance (someone
        else settled or re-claimed it); then no event is written.
        """

    @abstractmethod
    async def adopt(
        self, confirmation_id: str, *, from_owner: str | None, to_owner: str
    ) -> Confirmation | None:
        """Compare-and-set ``owner`` ``from_owner`` -> ``to_owner``; None when it moved."""

    async def adopt_many(self, records: Sequence[Confirmation], *, to_owner: str) -> Confirmations:
        """``adopt`` of each record from the owner it was read with; the records that moved,
        as they are now, in the given order.

        A dead process may leave 100,000 pending calls: a backend with transactions moves
        a batch in one (SQLite: one commit, not one per record).
        """
        moved: Confirmations = []
        for c in records:
            adopted = await self.adopt(c.id, from_owner=c.owner, to_owner=to_owner)
            if adopted is not None:
                moved.append(adopted)
        return moved

    @abstractmethod
    async def list_unsettled(self, *, instance: str) -> Confirmations:
        """What ``instance`` answers for and is not settled, oldest first.

        Records it owns that are pending or approved with an execution not yet final, and
        records it has claimed that are still in flight. Indexed: the cost follows the
        instance's own records, not the whole backlog.
        """

    @abstractmethod
    async def list_approved_waiting(self) -> Confirmations:
        """Approved records nobody has claimed yet, oldest first (few: claims follow fast)."""

    # ------------------------------------------------------------ instances

    @abstractmethod
    async def heartbeat(self, instance: Instance, *, lease: float) -> None:
        """Record that ``instance`` lives (``seen_at``) and extend the lease of its claims
        still in flight to ``seen_at + lease``."""

    @abstractmethod
    async def list_instances(self) -> list[Instance]: ...

    @abstractmethod
    async def forget_instance(self, instance_id: str) -> None:
        """Drop an instance's heartbeat (clean stop, or adopted after death)."""

    # ------------------------------------------------------------ audit trail

    @abstractmethod
    async def add_event(self, event: AuditEvent) -> None: ...

    async def add_events(self, events: Sequence[AuditEvent]) -> None:
        """``add_event`` of each, in order; in one transaction where the backend has them
        (the lines of a batch of adopted calls)."""
        for event in events:
            await self.add_event(event)

    @abstractmethod
    async def events(self, confirmation_id: str) -> list[AuditEvent]:
        """The audit trail of one confirmation, oldest first."""

    @abstractmethod
    async def add_event_once(self, event: AuditEvent) -> bool:
        """Append ``event`` to the trail of a *pending* record that has no event of its
        ``kind`` yet, in one step: True when this call wrote it.

        The compare-and-set that makes a nudge (a reminder, an escalation) happen once for
        every replica and restart: of any number of concurrent callers on any number of
        handles exactly one wins, and none once the record has ended.
        """

    @abstractmethod
    async def purge(self, *, before: float) -> int:
        """Drop settled records decided before ``before`` and their events; how many."""

    # ------------------------------------------------------------ listing and counting

    @abstractmethod
    async def page(
        self,
        *,
        status: Status | None = None,
        session_key: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[Confirmations, str | None]:
        """Newest first, ``limit`` at a time: the page and the cursor of the next (None at
        the end). The cursor is opaque to callers and stable under inserts."""

    async def list(
        self,
        *,
        status: Status | None = None,
        session_key: str | None = None,
        limit: int = 200,
    ) -> Confirmations:
        """Newest first: the first page."""
        items, _ = await self.page(status=status, session_key=session_key, limit=limit)
        return items

    @abstractmethod
    async def count(self, status: Status) -> int:
        """How many records have ``status``: one indexed query, never a full load."""

    async def unavailable(self) -> str | None:
        """Why the store cannot serve right now (for /readyz), or None when it can."""
        return None

    async def durability_warnings(self) -> tuple[str, ...]:
        """Server settings that could lose records (logged once at start)."""
        return ()

    async def close(self) -> None:  # noqa: B027 - optional hook, most backends need it
        """Release connections."""


class LocalFeed:
    """The feed of a store no other process writes to: its own changes, to each subscriber."""

    def __init__(self) -> None:
        self._subscribers: set[asyncio.Queue[FeedEntry]] = set()

    def announce(self, confirmation_id: str, kind: FeedKind) -> None:
        if not self._subscribers:  # the usual case: only a shared store's feed is followed
            return
        entry = FeedEntry(confirmation_id, kind, local=True)
        for queue in self._subscribers:
            queue.put_nowait(entry)

    @asynccontextmanager
    async def feed(self) -> AsyncIterator[AsyncIterator[FeedEntry]]:
        queue: asyncio.Queue[FeedEntry] = asyncio.Queue()
        self._subscribers.add(queue)
        try:
            yield _drain(queue)
        finally:
            self._subscribers.discard(queue)


async def _drain(queue: asyncio.Queue[FeedEntry]) -> AsyncIterator[FeedEntry]:
    while True:
        yield await queue.get()


def decision_allowed(current: Confirmation, status: Status, now: float) -> bool:
    """The rule of ``finish``: only a pending record changes; a person's decision only
    before ``expires_at``."""
    if current.status is not Status.PENDING:
        return False
    if status in (Status.APPROVED, Status.REJECTED):
        return now < current.expires_at
    return True


def check_edit(status: Status, edit: CallEdit | None) -> None:
    """An edit comes only with an approval (every backend's ``finish`` checks it first)."""
    if edit is not None and status is not Status.APPROVED:
        raise ValueError("finish(): an edit of the call comes only with approved")


def may_claim(current: Confirmation, now: float) -> bool:
    """The rule of ``claim``, for every backend (the Redis script repeats it in Lua)."""
    if current.status is not Status.APPROVED:
        return False
    ex = current.execution
    if ex.state is ExecState.WAITING:
        return True
    # An idempotent call whose one claimer died (lease ran out while in flight): once more.
    return (
        current.idempotent
        and ex.state.in_flight
        and ex.attempts == 1
        and ex.lease_until is not None
        and ex.lease_until <= now
    )


async def create_with_free_id(
    store: ConfirmationStore,
    conf: Confirmation,
    *,
    events: Sequence[AuditEvent] = (),
    limits: PendingLimits | None = None,
    on_error: Callable[[Confirmation, Sequence[AuditEvent], BaseException], None] | None = None,
) -> Confirmation:
    """Store ``conf`` with ``events``, drawing another id while its id is taken; the record
    as stored. ``on_error`` hears of a create that raised anything else, with the record
    and events it sent (it may have been stored all the same: gateway/confirm/unsure.py)."""
    length = len(conf.id)
    for attempt in range(30):
        if attempt:
            if attempt % 10 == 0:
                length += 1  # crowded id space: longer ids
            conf = replace(conf, id=new_confirmation_id(length))
            events = [replace(e, confirmation_id=conf.id) for e in events]
        try:
            await store.create(conf, events=events, limits=limits)
        except ConfirmationExistsError:
            continue
        except PendingLimitReached:
            raise  # refused, certainly not written: nothing to settle
        except BaseException as exc:
            if on_error is not None:
                on_error(conf, events, exc)
            raise
        return conf
    raise RuntimeError("could not draw a free confirmation id")
