"""Other processes, alive or dead: heartbeats, adoption, and the lifecycle feed.

No process waits for a decision: the store holds the waiting turn, and the process that
ends a record goes on with it. So that no call is stranded when a process dies:

- Every process heartbeats (``lease/3`` seconds). One whose heartbeat is older than the
  lease is dead, and a live process adopts what it answered for (adoption.py). This runs
  at start, in the background while the gateway already serves, and every few seconds.
- Messages a dead replica acknowledged to the platform and never took up (its inbox
  messages, in the shared store) are adopted at the same scan and processed here.
- With a shared store (Redis) a decision may land on another replica, which goes on with
  it. The store's lifecycle feed tells this process, which disarms the deadline it held;
  and every change another replica made (a request, a decision, an execution's end) is
  told to this process's listeners as a remote event, so its live views (SSE, web chat)
  show it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import TYPE_CHECKING

import structlog

from gateway import texts
from gateway.confirm.adoption import Adoption
from gateway.confirm.adoption import Settled as Settled
from gateway.confirm.model import Confirmation, Status
from gateway.runtime import BackgroundTasks
from gateway.storage.confirmations import FeedEntry, StoreUnavailableError

if TYPE_CHECKING:
    from gateway.confirm.lifecycle import Lifecycle

log = structlog.get_logger(__name__)

# A Redis client stuck in a read must not hold up shutdown.
_FOLLOWER_STOP_SECONDS = 2.0


class Replicas:
    """Heartbeats, adoption of dead processes' records, the follower of the lifecycle feed."""

    def __init__(self, service: Lifecycle, *, tasks: BackgroundTasks) -> None:
        self._service = service
        self.adoption = Adoption(service, tasks=tasks)
        self._loops = BackgroundTasks("replicas")  # heartbeat, scan, follower
        self._scanning: asyncio.Task[None] | None = None
        self._follower: asyncio.Task[None] | None = None
        self._feed = contextlib.AsyncExitStack()
        # Set when the first adoption scan (the one at start) has ended, however it ended.
        self.recovered = asyncio.Event()
        # When the store stalls (CLIENT PAUSE, a slow failover), every replica's heartbeat
        # is held up alike: nobody is judged dead while this one's own beat is stuck, nor
        # until the others have had the time to land a fresh beat after it.
        self._beat_issued: float | None = None
        self._unsure_until = -math.inf

    @property
    def me(self) -> str:
        return self._service.instance.id

    # ------------------------------------------------------------------ start

    async def recover(self, *, background: bool = False) -> None:
        """At start: heartbeat, adopt what dead processes left, then keep doing both.

        ``background``: return once the heartbeat is stored and adopt in a task (a dead
        process may have left 100,000 calls: the gateway serves meanwhile). Otherwise the
        first scan is done when this returns; its reposted prompts must have room on the
        outbound queue then (bus.outbound_room), so something must be sending.
        """
        service = self._service
        await self.beat()
        if not background:
            await self._first_scan()
        if not self._loops:
            self._loops.spawn(self._beat_loop(), name="heartbeat")
            scan = self._scan_loop(first=background)
            self._scanning = self._loops.spawn(scan, name="adopt-dead")
        if service.store.shared and self._follower is None:
            # Subscribed before recover() returns: nothing finished from here on is missed.
            entries = await self._feed.enter_async_context(service.store.lifecycle_feed())
            self._follower = self._loops.spawn(self._follow(entries), name="follow-replicas")

    async def _first_scan(self) -> None:
        started = time.perf_counter()
        try:
            await self.adopt_dead(startup=True)
        finally:
            self.recovered.set()
        log.info(
            "confirm.startup_scan_done",
            adopted=len(self.adoption.adopted),
            seconds=round(time.perf_counter() - started, 3),
        )

    async def beat(self) -> None:
        service = self._service
        issued = self._beat_issued = service.clock()
        try:
            await service.store.heartbeat(
                replace(service.instance, seen_at=issued), lease=service.lease
            )
        except BaseException:
            self._unsure_until = math.inf  # until a beat lands again
            raise
        finally:
            self._beat_issued = None
        landed = service.clock()
        if landed - issued > service.lease / 3 or self._unsure_until == math.inf:
            # The others' beats, held up as well, carry an old time: give them two beats.
            self._unsure_until = landed + 2 * service.lease / 3
            log.warning("confirm.store_stalled", seconds=round(landed - issued, 3))

    def _may_judge(self) -> bool:
        """False while the store stalls or just stalled: a late beat is not a death then."""
        now = self._service.clock()
        stuck = self._beat_issued is not None and now - self._beat_issued > self._service.lease / 3
        return not stuck and now >= self._unsure_until

    async def _beat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._service.lease / 3)
            try:
                await self.beat()
            except Exception:  # the store is down: keep beating, the next one may land
                log.exception("confirm.heartbeat_failed")

    async def _scan_loop(self, *, first: bool) -> None:
        if first:
            try:
                await self._first_scan()
            except Exception:  # the store is down: the next scan adopts what this missed
                log.exception("confirm.adopt_failed")
        while True:
            await asyncio.sleep(self._service.lease / 3)
            try:
                await self.adopt_dead()
            except Exception:  # the store is down: try again at the next scan
                log.exception("confirm.adopt_failed")

    # ------------------------------------------------------------------ adoption

    async def adopt_dead(self, *, startup: bool = False) -> None:
        """Take over what dead instances answered for; forget those that left nothing.

        ``startup``: also pending records whose owner left no heartbeat at all (stored
        before instances existed, or by a process that is gone): no turn waits for them
        anywhere. Once, at start: it walks every pending record.
        """
        service = self._service
        now = service.clock()
        instances = await service.store.list_instances()
        judge = self._may_judge()
        if not judge and not startup:
            return
        known = {i.id for i in instances}
        dead = {
            i.id for i in instances if judge and i.id != self.me and not i.alive(now, service.lease)
        }
        await self.adoption.scan(dead, startup=startup)
        if service.store.shared and judge:
            # Their inbox messages too (a Redis stream): those they acknowledged to the
            # platform and never took up. An owner with no heartbeat at all is dead; one
            # that started since the listing above is safe: the inbox claims only what was
            # idle for a lease.
            await service.bus.adopt_inbox(alive=(known - dead) | {self.me})

    @property
    def adopted(self) -> set[str]:
        """Pending calls adopted here: no turn waits for them anywhere."""
        return self.adoption.adopted

    def finished(self, final: Confirmation) -> None:
        """``final`` ended: it is no longer an adopted call waiting here."""
        self.adoption.adopted.discard(final.id)

    # ------------------------------------------------------------------ other replicas

    async def _follow(self, entries: AsyncIterator[FeedEntry]) -> None:
        # Each entry's record is read off the path of the feed, in turn, by the announcer.
        views: asyncio.Queue[FeedEntry] = asyncio.Queue()
        announcer = self._loops.spawn(self._announce(views), name="announce-replicas")
        try:
            async for entry in entries:
                self._followed(entry, views)
        finally:
            announcer.cancel()

    async def _announce(self, views: asyncio.Queue[FeedEntry]) -> None:
        service = self._service
        while True:
            entry = await views.get()
            try:
                record = await service.store.get(entry.id)
            except Exception:  # a store blip costs a view update, not the announcer
                log.warning("confirm.follow_read_failed", confirmation_id=entry.id)
                continue
            if record is not None:
                await service.announce_remote(entry.kind, record)

    def _followed(self, entry: FeedEntry, views: asyncio.Queue[FeedEntry]) -> None:
        """A record ended elsewhere: its deadline here is disarmed (whoever ended it goes
        on with it); what another replica did is told to this process's listeners."""
        if entry.kind == "resolved":
            self._service.deadlines.disarm(entry.id)
            self.adoption.adopted.discard(entry.id)
        if not entry.local:  # made here: the service told the listeners then, once
            views.put_nowait(entry)

    # ------------------------------------------------------------------ stop

    async def stop_adopting(self) -> None:
        """Stop taking over others' work and following the feed; keep the heartbeat."""
        for task in (self._scanning, self._follower):
            if task is not None:
                task.cancel()
                await asyncio.wait([task], timeout=_FOLLOWER_STOP_SECONDS)
        self._scanning = self._follower = None
        await self._feed.aclose()

    async def stop_asking(self) -> None:
        """Stop adopting; cancel the pending calls this instance answers for (chats told).

        Only ours: with a shared store (Redis) other replicas keep theirs.
        """
        await self.stop_adopting()
        try:
            for c in await self._service.store.list_unsettled(instance=self.me):
                if c.status is Status.PENDING and c.owner == self.me:
                    await self._service.cancel(c.id, reason=texts.SHUTDOWN_REASON)
        except StoreUnavailableError as exc:
            _store_down(
                "cancel_pending",
                exc,
                "pending calls this process answered for could not be cancelled now: they "
                "stay pending, and another replica or the next start adopts them once this "
                "heartbeat is older than the lease, and tells their chats",
            )

    async def close(self) -> None:
        """Interrupt what is still in flight here, stop heartbeating and leave."""
        await self.stop_adopting()
        try:
            for c in await self._service.store.list_unsettled(instance=self.me):
                if c.execution.state.in_flight and c.execution.claimed_by == self.me:
                    await self._service.interrupt(c.id, claimer=self.me)
        except StoreUnavailableError as exc:
            _store_down(
                "interrupt_running",
                exc,
                "calls still running here, if any, could not be marked interrupted now: "
                "another replica or the next start does it once this heartbeat is older "
                "than the lease, and tells their chats",
            )
        await self._loops.cancel()
        try:
            await self._service.store.forget_instance(self.me)
        except StoreUnavailableError as exc:
            _store_down(
                "leave",
                exc,
                "this instance stays listed until its heartbeat is older than the lease; "
                "then the others judge it dead",
            )


def _store_down(step: str, exc: StoreUnavailableError, meaning: str) -> None:
    """One line for a step of the stop that needs the store while it is unreachable: the
    stop goes on, and nothing is approved or run (what the step would have ended stays in
    the store, owned by this instance, for adoption to finish)."""
    log.warning("confirm.stop_store_unavailable", step=step, error=str(exc), meaning=meaning)
