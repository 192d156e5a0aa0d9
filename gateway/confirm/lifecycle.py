"""What the confirmation service's helpers may use of it: the lifecycle, as a protocol.

The service (service.py) builds its reply reader, adoption, replicas and doubts with
itself; each of them reaches the service only through this surface, typed here, so none of
them imports the service and no import runs back up (tests/core/test_imports.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from config.settings import ConfirmationSettings
    from gateway.bus import MessageBus
    from gateway.confirm.deadlines import Deadlines
    from gateway.confirm.ledger import AuditLog
    from gateway.confirm.model import (
        Answer,
        AuditEvent,
        Confirmation,
        DecideResult,
        Decision,
        Instance,
    )
    from gateway.confirm.replies import ReplyParser
    from gateway.storage.confirmations import ConfirmationStore, FeedKind


class NudgeTimers(Protocol):
    """The reminder and escalation timers (nudges.py), as adoption arms them."""

    def arm(self, c: Confirmation) -> None: ...


class Lifecycle(Protocol):
    """The confirmation service, as its helpers see it."""

    store: ConfirmationStore
    bus: MessageBus
    audit: AuditLog
    settings: ConfirmationSettings
    instance: Instance
    deadlines: Deadlines

    def clock(self) -> float: ...

    @property
    def nudges(self) -> NudgeTimers: ...

    @property
    def lease(self) -> float: ...

    @property
    def parser(self) -> ReplyParser: ...

    def may_decide(self, c: Confirmation, actor: str, decision: Decision) -> tuple[bool, str]: ...

    async def answer(
        self,
        a: Answer,
        *,
        record: Confirmation | None = None,
        before: Sequence[AuditEvent] = (),
    ) -> DecideResult: ...

    async def expire(self, confirmation_id: str, *, reason: str = ...) -> Confirmation | None: ...

    async def cancel(
        self,
        confirmation_id: str,
        *,
        reason: str,
        by: str | None = None,
        via: str = "system",
        tell_chat: bool = True,
        turn_went_on: bool = False,
    ) -> Confirmation | None: ...

    async def interrupt(self, confirmation_id: str, *, claimer: str) -> Confirmation | None: ...

    def go_on(self, final: Confirmation) -> None: ...

    async def announce_remote(self, kind: FeedKind, record: Confirmation) -> None: ...
