"""Adoption: what a dead process answered for is finished by this one.

A process whose heartbeat is older than the lease is dead (replicas.py judges). What it
owned is taken over here: pending calls get their deadline armed and their prompt posted
again, and calls that were running are reported ``interrupted``, never re-run, unless the
tool is idempotent: then claimed once more. An approved call that nobody claimed a lease
after its decision (the process that decided it died first) goes on here, on the one path
every ended record takes (``ConfirmationService.go_on``: claim → run → record → continue).

A gateway killed with 100,000 pending calls leaves them all to the next one, which must
answer new messages at once (docs/performance.md, "Start-up with a backlog"). So pending
records are walked page by page, each page adopted in one store transaction with its audit
lines in another, and the prompts shown again wait for room on the outbound queue: the
scan runs in the background while the gateway serves.

A decision may land on a record while this runs. The store settles it: adoption is a
compare-and-set of the owner that returns the record as it is, so a record approved
before its adoption goes on here, and a decision after it goes on where it was taken. A
claim runs a call at most once whoever asks.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from gateway import texts
from gateway.bus import OutboundKind, OutboundMessage
from gateway.confirm.model import AuditEvent, Confirmation, ExecState, Status
from gateway.runtime import BackgroundTasks
from gateway.storage.confirmations import may_claim

if TYPE_CHECKING:
    from gateway.confirm.lifecycle import Lifecycle

log = structlog.get_logger(__name__)

# Goes on from an ended record: claim → run → record → continue (gateway/agent/loop.py).
# Called without awaiting: it schedules the work.
Settled = Callable[[Confirmation], None]

# Pending records read, adopted and audited at a time: one short store operation each, so
# the store serves new messages in between, and a bounded amount held in memory (a
# listing of 100,000 records took 18 s on the store's thread and 300 MB).
PAGE = 500


class Adoption:
    """Takes over the records of dead processes; goes on with approved calls left unclaimed."""

    def __init__(self, service: Lifecycle, *, tasks: BackgroundTasks) -> None:
        self._service = service
        self._tasks = tasks  # the service's: runs of adopted calls, drained at shutdown
        # Pending calls adopted here whose prompt is not shown again yet.
        self.adopted: set[str] = set()
        self._walked: set[str] = set()  # dead instances whose pending records were walked

    @property
    def me(self) -> str:
        return self._service.instance.id

    async def scan(self, dead: Collection[str], *, startup: bool) -> None:
        """Adopt what the ``dead`` instances left; at ``startup`` also pending records whose
        owner is not a listed instance (stored before instances existed, or left by one
        that is gone)."""
        service = self._service
        # Each dead instance's pending records are walked once: it makes no new ones.
        # (Another walk, every few seconds while one of its calls keeps it from being
        # forgotten, would read every pending record each time.)
        unwalked = {d for d in dead if d not in self._walked}
        if unwalked or startup:
            await self._adopt_pending_pages(unwalked, startup=startup)
            self._walked |= unwalked
        for instance_id in sorted(dead):
            # What is left after the walk: approved calls and those in flight.
            settled = True
            for c in await service.store.list_unsettled(instance=instance_id):
                settled &= await self.take(c)
            if settled:
                log.info("confirm.instance_dead", instance=instance_id)
                await service.store.forget_instance(instance_id)
                self._walked.discard(instance_id)
        lease, now = service.lease, service.clock()
        for c in await service.store.list_approved_waiting():
            # Approved and still unclaimed a lease after (or found at start): the process
            # that decided it, which goes on with it at once, died first. Should it still
            # be alive, the claim lets one of the two run it.
            if startup or (c.decided_at or 0.0) + lease <= now:
                service.go_on(c)

    async def _adopt_pending_pages(self, dead: Collection[str], *, startup: bool) -> None:
        store = self._service.store
        cursor: str | None = None
        while True:
            page, cursor = await store.page(status=Status.PENDING, limit=PAGE, cursor=cursor)
            # Read after the page: a replica that asked for one of these beat before it did.
            known = {i.id for i in await store.list_instances()} if startup else ()
            left = [
                c
                for c in page
                if c.owner != self.me
                and (c.owner in dead or (startup and c.owner not in known))
                and c.id not in self._service.deadlines
            ]
            if left:
                await self.adopt(left)
            if cursor is None:
                return

    async def take(self, c: Confirmation) -> bool:
        """Adopt, run or interrupt one record of a dead process; False to try again later."""
        service = self._service
        ex = c.execution
        if ex.state.in_flight and ex.claimed_by != self.me:
            if may_claim(c, service.clock()):
                service.go_on(c)  # idempotent, its one claimer died: claimed once more
                return True
            if c.idempotent and ex.attempts == 1:
                return False  # its lease runs a little longer than the heartbeat: wait
            await service.interrupt(c.id, claimer=ex.claimed_by or "")
            return True
        if c.owner != self.me and (
            c.status is Status.PENDING
            or (c.status is Status.APPROVED and ex.state is ExecState.WAITING)
        ):
            await self.adopt([c])
        return True

    async def adopt(self, records: Sequence[Confirmation]) -> None:
        """Adopt ``records`` (as read, pending or approved and unclaimed) in one batch."""
        service = self._service
        moved = await service.store.adopt_many(records, to_owner=self.me)
        # No await before this: a decision from here on finds them adopted (see above).
        pending = [c for c in moved if c.status is Status.PENDING]
        self.adopted.update(c.id for c in pending)
        if not moved:
            return  # other processes adopted them first
        was = {c.id: c.owner for c in records}
        log.info("confirm.adopted", count=len(moved), first=moved[0].id)
        await service.audit.add_all(
            [self._event(c.id, "adopted", from_owner=was.get(c.id)) for c in moved],
        )
        for c in moved:
            if c.status is Status.APPROVED and c.execution.state is ExecState.WAITING:
                service.go_on(c)  # approved before it was adopted
        reposted = [c.id for c in pending if await self._adopt_pending(c)]
        await service.audit.add_all([self._event(cid, "prompt_reposted") for cid in reposted])

    async def _adopt_pending(self, c: Confirmation) -> bool:
        """Arm its deadline and post its prompt again; False when it ended meanwhile."""
        service = self._service
        if c.expires_at <= service.clock():
            await service.expire(c.id, reason=texts.RESTART_REASON)
            return False
        # Shown again after what is being sent: a backlog must not hold up new answers.
        await service.bus.outbound_room()
        if c.id not in self.adopted:
            return False  # decided while it waited: its update went out instead
        service.deadlines.arm(c.id, c.expires_at)
        service.nudges.arm(c)  # sent once whoever owned it: the store says if it was
        # The person may not know the call still waits: show its prompt again, once.
        await service.bus.publish_outbound(
            OutboundMessage(
                channel=c.channel,
                chat_id=c.chat_id,
                session_key=c.session_key,
                kind=OutboundKind.CONFIRMATION,
                text=texts.prompt_reposted(c, service.clock()),
                confirmation=c,
            )
        )
        return True

    def _event(self, confirmation_id: str, kind: str, **detail: Any) -> AuditEvent:
        return self._service.audit.event(confirmation_id, kind, actor=self.me, **detail)
