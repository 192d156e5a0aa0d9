"""Other replicas and earlier processes: follow the finished feed, recover after a restart.

A turn waits on a future in the process that asked. Two things can strand it or its call:

- With a shared store (Redis) a decision may land on another replica (the platform
  delivered the reply there). The store's finished feed tells this process, which wakes
  its turn.
- After a restart, calls are still pending in the store. Each gets its deadline armed
  again here. When no other process uses the store, none of them has a turn anywhere, so
  this process adopts them: an adopted call that is approved runs here, through the orphan
  handler.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import structlog

from gateway import texts
from gateway.confirm.model import Confirmation, Status
from gateway.runtime import BackgroundTasks

if TYPE_CHECKING:
    from gateway.confirm.service import ConfirmationService

log = structlog.get_logger(__name__)

OrphanHandler = Callable[[Confirmation], Coroutine[Any, Any, None]]

# A Redis client stuck in a read must not hold up shutdown.
_FOLLOWER_STOP_SECONDS = 2.0


class Replicas:
    """Recovery at start, the follower of the finished feed, and the adopted calls."""

    def __init__(self, service: ConfirmationService, *, tasks: BackgroundTasks) -> None:
        self._service = service
        self._tasks = tasks
        self.orphan_handler: OrphanHandler | None = None
        # Pending calls taken over from a previous process: no turn waits for them anywhere.
        self.adopted: set[str] = set()
        self._feed = contextlib.AsyncExitStack()
        self._follower: asyncio.Task[None] | None = None

    async def recover(self) -> None:
        """Expire what ran out while down, re-arm the rest; with a shared store, follow it."""
        service = self._service
        for c in await service.store.list_all_pending():
            if c.expires_at <= service.clock():
                await service.expire(c.id, reason=texts.RESTART_REASON)
            elif c.id not in service.deadlines:
                service.deadlines.arm(c.id, c.expires_at)
                if not service.store.shared:
                    self.adopted.add(c.id)
                log.info("confirm.recovered", confirmation_id=c.id)
        if service.store.shared and self._follower is None:
            # Subscribed before recover() returns: nothing finished from here on is missed.
            ids = await self._feed.enter_async_context(service.store.finished_feed())
            self._follower = self._tasks.spawn(self._follow(ids), name="follow-replicas")

    async def _follow(self, ids: AsyncIterator[str]) -> None:
        service = self._service
        async for confirmation_id in ids:
            service.deadlines.disarm(confirmation_id)
            if service.is_waiting(confirmation_id):
                record = await service.store.get(confirmation_id)
                if record is not None and record.status.is_terminal:
                    service.wake(record)

    def finished(self, final: Confirmation) -> None:
        """``final`` just ended here: an adopted call that was approved runs now."""
        if final.id not in self.adopted:
            return
        self.adopted.discard(final.id)
        if final.status is Status.APPROVED and self.orphan_handler is not None:
            self._tasks.spawn(self.orphan_handler(final), name=f"orphan-{final.id}")

    async def stop(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            await asyncio.wait([self._follower], timeout=_FOLLOWER_STOP_SECONDS)
            self._follower = None
        await self._feed.aclose()
