"""Failed accepts of the listening socket, logged as one line a minute with a count.

Out of file descriptors, asyncio's accept loop (selector_events ``_accept_connection``)
reports every failed ``accept()`` through the loop's exception handler with a traceback,
and on Python before the fix of CPython gh-151615 it goes on trying the rest of its
backlog after the first failure, scheduling a retry for each: ~19 MB of "Too many open
files" in 30 s (issue 22). The retries it scheduled still fire after the server closed
its socket and fail again ("Invalid file descriptor: -1"). Both are this one condition:
counted here, logged at most once per ``interval``; anything else goes to the handler
that was there before.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable
from typing import Any

from gateway.logs import RateLimitedLine

Handler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]

# What asyncio's accept loop treats as "out of system resource" (it backs off on these).
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ADVICE = (
    "the process is out of file descriptors: raise LimitNOFILE (systemd) or ulimits nofile "
    "(compose), or lower channels.webchat.max_sockets / max_long_polls (docs/deploy.md)"
)


class AcceptErrorLog:
    """A loop exception handler for the accept loop's failures; the rest pass through."""

    def __init__(self, *, interval: float) -> None:
        self.line = RateLimitedLine("http.accept_failed", interval=interval, level="error")
        self._previous: Handler | None = None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Handle this loop's accept failures, for the loop's life: retries it scheduled
        before the server stopped fire after the stop."""
        current = loop.get_exception_handler()
        if isinstance(getattr(current, "__self__", None), AcceptErrorLog):
            return  # a server started before on this loop already counts them
        self._previous = current
        loop.set_exception_handler(self.handle)

    def handle(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if (
            isinstance(exc, OSError)
            and exc.errno in RESOURCE_ERRNOS
            and "accept" in str(context.get("message", ""))
        ):
            self.line.hit(error=exc.strerror, advice=ADVICE)
        elif isinstance(exc, ValueError) and "_start_serving" in repr(context.get("handle")):
            # A retry of the accept loop after its socket was closed (see above).
            self.line.hit(error="retry after the listening socket closed", advice=ADVICE)
        elif self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)
