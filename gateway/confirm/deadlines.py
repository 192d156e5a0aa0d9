"""The one timer mechanism for expiries: a loop timer per armed confirmation."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from gateway.runtime import BackgroundTasks


class Deadlines:
    """Runs ``on_deadline(id)`` (as a background task) when an armed confirmation's time is up.

    Deadlines are wall-clock times from the record (``expires_at``), read against the
    service's ``clock``; the timer itself runs on the event loop's clock.
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
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def __contains__(self, confirmation_id: object) -> bool:
        return confirmation_id in self._timers

    def __len__(self) -> int:
        return len(self._timers)

    def arm(self, confirmation_id: str, expires_at: float) -> None:
        """Fire at ``expires_at`` (at once if it has passed); replaces an earlier arming."""
        self.disarm(confirmation_id)
        loop = asyncio.get_running_loop()
        delay = max(0.0, expires_at - self._clock())
        self._timers[confirmation_id] = loop.call_later(delay, self._fire, confirmation_id)

    def disarm(self, confirmation_id: str) -> None:
        timer = self._timers.pop(confirmation_id, None)
        if timer is not None:
            timer.cancel()

    def clear(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def _fire(self, confirmation_id: str) -> None:
        del self._timers[confirmation_id]
        self._tasks.spawn(self._on_deadline(confirmation_id), name=f"expire-{confirmation_id}")
