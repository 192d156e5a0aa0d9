"""How fast one web chat sender may post: a token bucket per sender name.

Names are typed by the user, not authenticated, so this keeps one person (or a runaway
script) from flooding a room and the agent; it is not a defence against someone who
changes names. The history's byte bounds (rooms.py) are what bound memory.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from cachetools import TTLCache


class SlowDown(Exception):
    """The sender is over the limit; ``retry_after`` whole seconds until the next message."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many messages: retry after {retry_after} s")
        self.retry_after = retry_after


class SenderRateLimit:
    """At most ``per_minute`` messages per sender a minute, with bursts up to that many."""

    def __init__(
        self, *, per_minute: int, clock: Callable[[], float] = time.monotonic, senders: int = 10_000
    ) -> None:
        self.per_minute = per_minute
        self._rate = per_minute / 60.0  # tokens per second
        self._clock = clock
        # (tokens, when) per sender. Idle for a minute, a bucket is full again: forgotten.
        self._buckets: TTLCache[str, tuple[float, float]] = TTLCache(
            maxsize=senders, ttl=60.0, timer=clock
        )

    def take(self, sender: str) -> None:
        """Count one message from ``sender``, or raise SlowDown (nothing is counted then)."""
        if self.per_minute <= 0:
            return
        now = self._clock()
        tokens, then = self._buckets.get(sender, (float(self.per_minute), now))
        tokens = min(float(self.per_minute), tokens + (now - then) * self._rate)
        if tokens < 1.0:
            raise SlowDown(max(1, math.ceil((1.0 - tokens) / self._rate)))
        self._buckets[sender] = (tokens - 1.0, now)
