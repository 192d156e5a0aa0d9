"""The service's side of the execution ledger: this process's identity, what the ledger
keeps of a tool's output, and the audit log (every step of a confirmation, as lines).

Running a call is the executor's job (gateway/tools/executor.py); adopting the calls of
dead processes is replicas.py's; both end an interrupted call by the service's
``interrupt``.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from gateway.confirm.model import AuditEvent, CallEdit, Instance, Status

if TYPE_CHECKING:
    from gateway.storage.confirmations import ConfirmationStore

log = structlog.get_logger(__name__)

# What the execution ledger keeps of a tool's output: enough to read in a listing.
RESULT_CHARS = 500


def new_instance(clock: Callable[[], float]) -> Instance:
    """This process, under an id that is new on every start: ``<host>-<pid>-<random>``.

    A restarted process must not look like the one that died: the random part keeps a
    reused pid (containers start at pid 1) from inheriting a dead process's claims.
    """
    host = socket.gethostname() or "localhost"
    pid = os.getpid()
    now = clock()
    return Instance(
        id=f"{host}-{pid}-{secrets.token_hex(3)}", pid=pid, host=host, started_at=now, seen_at=now
    )


def summarize(output: str) -> str:
    """The part of a tool's output the ledger keeps."""
    if len(output) <= RESULT_CHARS:
        return output
    return output[:RESULT_CHARS] + f"… (+{len(output) - RESULT_CHARS})"


class AuditLog:
    """A confirmation's audit lines: made at the log's clock, written to the store (with a
    change of the record, or on their own by ``add``)."""

    def __init__(self, *, store: ConfirmationStore, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock

    def event(
        self,
        confirmation_id: str,
        kind: str,
        *,
        actor: str | None = None,
        at: float | None = None,
        **detail: Any,
    ) -> AuditEvent:
        """One line of a confirmation's audit log, at ``at`` (now by default)."""
        when = self._clock() if at is None else at
        return AuditEvent(
            confirmation_id=confirmation_id, at=when, kind=kind, actor=actor, detail=detail
        )

    def decision_events(
        self,
        confirmation_id: str,
        status: Status,
        *,
        by: str | None,
        via: str,
        at: float,
        edit: CallEdit | None,
    ) -> tuple[AuditEvent, ...]:
        """What a decision adds to the log: ``edited`` (an approval with new arguments: the
        call before and after), then ``decided``."""
        decided = self.event(
            confirmation_id, "decided", actor=by, at=at, via=via, status=status.value
        )
        if edit is None:
            return (decided,)
        note = edit.details.get("edited")
        note = note if isinstance(note, Mapping) else {}
        edited = self.event(
            confirmation_id,
            "edited",
            actor=by,
            at=at,
            before=dict(note.get("args_before") or {}),
            after=dict(edit.tool_call.args),
            risk_before=note.get("risk_before"),
            risk_after=edit.risk.value,
        )
        return (edited, decided)

    async def add(
        self, confirmation_id: str, kind: str, *, actor: str | None = None, **detail: Any
    ) -> None:
        """Append one line to a confirmation's audit log, on its own."""
        await self.add_all((self.event(confirmation_id, kind, actor=actor, **detail),))

    async def add_all(self, events: Sequence[AuditEvent]) -> None:
        """Append lines on their own, not with a change of the record (one transaction
        where the store has them)."""
        if not events:
            return
        try:
            await self._store.add_events(events)
        except Exception:  # the log is a record of what happened; it must not stop it happening
            log.exception("confirm.audit_failed", count=len(events), kind=events[0].kind)
