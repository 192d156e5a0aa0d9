"""What one web chat client may hold and send: open connections, and messages a minute.

Posting: a token bucket per sender name, and one per client address. Names are typed by
the user, not authenticated: the name's bucket keeps one person (or a runaway script) from
flooding a room, the address's keeps one client that rotates names from it (1,500 held
calls in 46 s, issue 22). The history's byte bounds (rooms.py) are what bound memory.

Connections: open WebSockets and waiting long polls, counted over all and per client
address (``OpenConnections``); each holds a file descriptor as long as it stays open.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from cachetools import TTLCache


class SlowDown(Exception):
    """The sender is over the limit; ``retry_after`` whole seconds until the next message."""

    def __init__(self, retry_after: int, *, limit: int) -> None:
        super().__init__(f"too many messages: retry after {retry_after} s")
        self.retry_after = retry_after
        self.limit = limit  # messages a minute: the name's or the address's


class SenderRateLimit:
    """At most ``per_minute`` messages per sender name and ``per_address_minute`` per client
    address a minute, with bursts up to that many."""

    def __init__(
        self,
        *,
        per_minute: int,
        per_address_minute: int = 0,
        clock: Callable[[], float] = time.monotonic,
        senders: int = 10_000,
    ) -> None:
        self.per_minute = per_minute
        self.per_address_minute = per_address_minute
        self._clock = clock
        # (tokens, when) per ("name" | "address", key). Idle for a minute, a bucket is full
        # again: forgotten.
        self._buckets: TTLCache[tuple[str, str], tuple[float, float]] = TTLCache(
            maxsize=senders, ttl=60.0, timer=clock
        )

    def take(self, sender: str, *, address: str | None = None) -> None:
        """Count one message from ``sender`` (at ``address``), or raise SlowDown, the limit it
        met in ``limit``; nothing is counted then."""
        now = self._clock()
        taken: list[tuple[tuple[str, str], float]] = []
        limits = [(("name", sender), self.per_minute)]
        if address is not None:
            limits.append((("address", address), self.per_address_minute))
        for key, per_minute in limits:
            if per_minute <= 0:
                continue
            rate = per_minute / 60.0  # tokens per second
            tokens, then = self._buckets.get(key, (float(per_minute), now))
            tokens = min(float(per_minute), tokens + (now - then) * rate)
            if tokens < 1.0:
                raise SlowDown(max(1, math.ceil((1.0 - tokens) / rate)), limit=per_minute)
            taken.append((key, tokens - 1.0))
        for key, left in taken:
            self._buckets[key] = (left, now)


class OverLimit(Exception):
    """A new connection past a cap: refused with ``status`` (429 per address, 503 over all),
    naming the ``setting`` that sets the cap."""

    def __init__(self, *, status: int, setting: str, limit: int) -> None:
        super().__init__(f"{setting} ({limit}) reached")
        self.status = status
        self.setting = setting
        self.limit = limit


class OpenConnections:
    """How many connections of one kind are open, over all and per client address.

    ``hold(address)`` counts one for as long as its block runs, or raises OverLimit.
    """

    def __init__(self, *, kind: str, total: int, per_address: int) -> None:
        self.kind = kind  # the settings' word: "sockets" or "long_polls"
        self.total = total
        self.per_address = per_address
        self.open = 0
        self._by_address: Counter[str] = Counter()

    @contextmanager
    def hold(self, address: str) -> Iterator[None]:
        if self._by_address[address] >= self.per_address:
            setting = f"channels.webchat.max_{self.kind}_per_address"
            raise OverLimit(status=429, setting=setting, limit=self.per_address)
        if self.open >= self.total:
            raise OverLimit(
                status=503, setting=f"channels.webchat.max_{self.kind}", limit=self.total
            )
        self.open += 1
        self._by_address[address] += 1
        try:
            yield
        finally:
            self.open -= 1
            self._by_address[address] -= 1
            if not self._by_address[address]:
                del self._by_address[address]
