"""Keep settled confirmations and their audit trail for ``confirmation.retention_days``.

A task in the running gateway purges once an hour (``store.purge``): records settled
before the cutoff go, with their events. Pending and in-flight records never do.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from gateway.runtime import BackgroundTasks
from gateway.storage.confirmations import ConfirmationStore
from gateway.storage.undo import UndoStore

log = structlog.get_logger(__name__)

DAY = 24 * 3600.0
PURGE_EVERY_SECONDS = 3600.0


class Retention:
    """The hourly purge. ``clock`` and ``wait`` are injectable: tests drive time."""

    def __init__(
        self,
        *,
        store: ConfirmationStore,
        keep_days: float,
        every: float = PURGE_EVERY_SECONDS,
        clock: Callable[[], float] = time.time,
        wait: Callable[[float], Awaitable[None]] = asyncio.sleep,
        undo: UndoStore | None = None,
    ) -> None:
        self.store = store
        # Undo snapshots (gateway/storage/undo.py): each expires [tools.sql] undo_days
        # after its change; the same sweep drops them.
        self.undo = undo
        self.keep_seconds = keep_days * DAY
        self.every = every
        self.clock = clock
        self.wait = wait
        self._tasks = BackgroundTasks("retention")

    async def purge_once(self) -> int:
        """Drop what was settled more than the retention ago; how many records went."""
        before = self.clock() - self.keep_seconds
        gone = await self.store.purge(before=before)
        if gone:
            log.info("confirm.purged", records=gone, before=before)
        if self.undo is not None:
            snapshots = await self.undo.purge(before=self.clock())
            if snapshots:
                log.info("undo.purged", snapshots=snapshots)
        return gone

    def start(self) -> None:
        self._tasks.spawn(self._run(), name="confirm.retention")

    async def stop(self) -> None:
        await self._tasks.cancel()

    async def _run(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        while True:
            try:
                await self.purge_once()
            except Exception as exc:
                # A store outage (Redis down, a locked file) must not end the hourly
                # task: the next hour tries again.
                log.warning("confirm.purge_failed", error=f"{type(exc).__name__}: {exc}")
            if task.cancelling():
                # redis-py 8 finishes a command it was cancelled in and returns normally:
                # without this the stop waited here for the next hour.
                raise asyncio.CancelledError
            await self.wait(self.every)
