"""What the confirmation service tells its listeners (metrics, the admin feed, web chat,
the channels' cards).

Listeners hear of every change made in this process, and, with a shared store (Redis), of
the changes made by the other replicas (``remote``), read from the lifecycle feed by
replicas.py. A remote event is already counted, told to its chat and sent to the platform
by the replica that made the change: listeners that count or send use local events only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

import structlog

from gateway.confirm.model import Confirmation

log = structlog.get_logger(__name__)


# requested, resolved (a status end), executed (an execution end: succeeded, failed,
# interrupted; the record's ``execution`` says which), voted (an approval of a call that
# takes votes was counted; the record is still pending, with the vote on it)
EventKind = Literal["requested", "resolved", "executed", "voted"]


@dataclass(frozen=True, slots=True)
class ConfirmationEvent:
    kind: EventKind
    confirmation: Confirmation
    # Made by another replica (the record as this process read it after the change).
    remote: bool = False


Listener = Callable[[ConfirmationEvent], Awaitable[None] | None]


class Listeners:
    """Listeners called in turn on every event; one that fails does not stop the others."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` on every event. Returns an unsubscribe."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    async def emit(self, kind: EventKind, record: Confirmation, *, remote: bool = False) -> None:
        if not self._listeners:  # none in bench/confirm_roundtrip.py: no event to build
            return
        event = ConfirmationEvent(kind, record, remote)
        for listener in tuple(self._listeners):
            try:
                result = listener(event)
                if result is not None:
                    await result
            except Exception:  # one failing listener (metrics, SSE) must not stop the others
                log.exception("confirm.listener_failed", confirmation_id=event.confirmation.id)
