"""The service's side of the execution ledger: this process's identity, the audit trail,
and how an interrupted call is told.

Running a call is the executor's job (gateway/tools/executor.py); adopting the calls of
dead processes is replicas.py's. Both end an interrupted call here, the one way: the
record says ``interrupted``, the chat where it was asked is told in both languages, the
admin feed gets an ``executed`` event, the audit trail an ``interrupted`` line.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from gateway import texts
from gateway.bus import OutboundMessage
from gateway.confirm.model import (
    AuditEvent,
    CallEdit,
    Confirmation,
    ExecState,
    Instance,
    Status,
)

if TYPE_CHECKING:
    from gateway.confirm.service import ConfirmationService
    from gateway.confirm.store import ConfirmationStore

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


def event(
    service: ConfirmationService,
    confirmation_id: str,
    kind: str,
    *,
    actor: str | None = None,
    at: float | None = None,
    **detail: Any,
) -> AuditEvent:
    """One line of a confirmation's audit trail, at ``at`` (now by default)."""
    when = service.clock() if at is None else at
    return AuditEvent(
        confirmation_id=confirmation_id, at=when, kind=kind, actor=actor, detail=detail
    )


def decision_lines(
    service: ConfirmationService,
    confirmation_id: str,
    status: Status,
    *,
    by: str | None,
    via: str,
    at: float,
    edit: CallEdit | None,
) -> tuple[AuditEvent, ...]:
    """What a decision adds to the trail: ``edited`` (an approval with new arguments: the
    call before and after), then ``decided``."""
    decided = event(
        service, confirmation_id, "decided", actor=by, at=at, via=via, status=status.value
    )
    if edit is None:
        return (decided,)
    note = edit.details.get("edited")
    note = note if isinstance(note, Mapping) else {}
    edited = event(
        service,
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


async def audit(
    service: ConfirmationService,
    confirmation_id: str,
    kind: str,
    *,
    actor: str | None = None,
    **detail: Any,
) -> None:
    """Append one line to a confirmation's audit trail, on its own."""
    await audit_many(service.store, (event(service, confirmation_id, kind, actor=actor, **detail),))


async def audit_many(store: ConfirmationStore, events: Sequence[AuditEvent]) -> None:
    """Append lines on their own, not with a change of the record (one transaction where
    the store has them)."""
    if not events:
        return
    try:
        await store.add_events(events)
    except Exception:  # the trail is a record of what happened; it must not stop it happening
        log.exception("confirm.audit_failed", count=len(events), kind=events[0].kind)


async def say_to_chat(service: ConfirmationService, c: Confirmation, text: str) -> None:
    """Post ``text`` to the chat where ``c`` was asked."""
    await service.bus.publish_outbound(
        OutboundMessage(channel=c.channel, chat_id=c.chat_id, session_key=c.session_key, text=text)
    )


async def interrupt(
    service: ConfirmationService, confirmation_id: str, *, claimer: str
) -> Confirmation | None:
    """Mark an in-flight call of ``claimer`` interrupted and tell its chat and the admin feed.

    None when the record was not in flight under ``claimer`` (settled or re-claimed
    meanwhile): then nothing is told, whoever settled it tells.
    """
    now = service.clock()
    line = event(
        service, confirmation_id, "interrupted", actor=service.instance.id, at=now, claimer=claimer
    )
    final = await service.store.finish_execution(
        confirmation_id,
        instance=claimer,
        state=ExecState.INTERRUPTED,
        result=texts.INTERRUPTED_RESULT,
        now=now,
        events=(line,),
    )
    if final is None:
        return None
    log.warning("confirm.interrupted", confirmation_id=confirmation_id, claimer=claimer)
    await say_to_chat(service, final, texts.interrupted(final))
    await service.announce_execution(final)
    return final
