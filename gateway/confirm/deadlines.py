"""The one timer for expiries: a loop timer for the earliest deadline, over a heap of all."""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Coroutine
from typing import Any

from gateway.runtime import BackgroundTasks


class Deadlines:
    """Runs ``on_deadline(id)`` (as a background task) when an armed confirmation's time is up.

    Deadlines are wall-clock times from the record (``expires_at``), read against the
    service's ``clock``; the timer itself runs on the event loop's clock. One loop timer
    and a heap of ``(when, id)``, not a loop timer each: the loop keeps its timers in a heap
    it orders in Python, ~2.5 % of a round trip in bench/confirm_roundtrip.py at 200
    pending, more with more.
    """

    def __init__(
        self,
        *,
        on_deadline: Callable[[str], Coroutine[Any, Any, Any]],
        clock: Callable[[], float],
        tasks: BackgroundTasks,
    ) -> None:
        self._on_deadline = on_deadline
        self._clock = clock
        self._tasks = tasks
        self._due: dict[str, float] = {}  # armed id -> when, on the loop's clock
        self._heap: list[tuple[float, str]] = []  # also entries no longer armed: skipped
        self._timer: asyncio.TimerHandle | None = None

    def __contains__(self, confirmation_id: object) -> bool:
        return confirmation_id in self._due

    def __len__(self) -> int:
        return len(self._due)

    def arm(self, confirmation_id: str, expires_at: float) -> None:
        """Fire at ``expires_at`` (at once if it has passed); replaces an earlier arming."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, expires_at - self._clock())
        self._due[confirmation_id] = when
        heapq.heappush(self._heap, (when, confirmation_id))
        if len(self._heap) > 2 * len(self._due) + 64:  # mostly disarmed: keep it small
            self._heap = [(w, cid) for cid, w in self._due.items()]
            heapq.heapify(self._heap)
        if self._timer is None or when < self._timer.when():
            self._schedule(loop)

    def disarm(self, confirmation_id: str) -> None:
        self._due.pop(confirmation_id, None)

    def clear(self) -> None:
        self._due.clear()
        self._heap.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self, loop: asyncio.AbstractEventLoop) -> None:
        heap, due = self._heap, self._due
        while heap and due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # disarmed or armed again since
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(heap[0][0], self._fire) if heap else None

    def _fire(self) -> None:
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        heap, due = self._heap, self._due
        while heap and heap[0][0] <= now:
            when, cid = heapq.heappop(heap)
            if due.get(cid) == when:
                del due[cid]
                self._tasks.spawn(self._on_deadline(cid), name=f"expire-{cid}")
        self._schedule(loop)
