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
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from gateway import texts
from gateway.bus import OutboundMessage
from gateway.confirm.model import AuditEvent, Confirmation, ExecState, Instance

if TYPE_CHECKING:
    from gateway.confirm.service import ConfirmationService

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


async def audit(
    service: ConfirmationService,
    confirmation_id: str,
    kind: str,
    *,
    actor: str | None = None,
    **detail: Any,
) -> None:
    """Append one line to a confirmation's audit trail."""
    event = AuditEvent(
        confirmation_id=confirmation_id, at=service.clock(), kind=kind, actor=actor, detail=detail
    )
    try:
        await service.store.add_event(event)
    except Exception:  # the trail is a record of what happened; it must not stop it happening
        log.exception("confirm.audit_failed", confirmation_id=confirmation_id, kind=kind)


async def audit_many(service: ConfirmationService, events: Sequence[AuditEvent]) -> None:
    """Append several lines at once (one transaction where the store has them)."""
    if not events:
        return
    try:
        await service.store.add_events(events)
    except Exception:  # as in audit(): the trail must not stop what it records
        log.exception("confirm.audit_failed", count=len(events), kind=events[0].kind)


async def audit_edit(service: ConfirmationService, c: Confirmation, *, by: str | None) -> None:
    """The ``edited`` line of an approval with new arguments: the call before and after."""
    note = c.edit_note or {}
    await audit(
        service,
        c.id,
        "edited",
        actor=by,
        before=dict(note.get("args_before") or {}),
        after=dict(c.tool_call.args),
        risk_before=note.get("risk_before"),
        risk_after=c.risk.value,
    )


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
    final = await service.store.finish_execution(
        confirmation_id,
        instance=claimer,
        state=ExecState.INTERRUPTED,
        result=texts.INTERRUPTED_RESULT,
        now=service.clock(),
    )
    if final is None:
        return None
    log.warning("confirm.interrupted", confirmation_id=confirmation_id, claimer=claimer)
    await audit(service, confirmation_id, "interrupted", actor=service.instance.id, claimer=claimer)
    await say_to_chat(service, final, texts.interrupted(final))
    await service.announce_execution(final)
    return final
