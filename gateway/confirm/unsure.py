"""Requests whose record may or may not have been stored: settled once the store answers.

A create that failed with the store unreachable or a timeout (Redis stalled past the
client's socket timeout, a connection dropped before the reply came) says nothing about the
record: a script already sent runs when a busy or cut-off server resumes. The request was
refused to its turn (the chat was told the call did not run), so a record written that way
would wait here with no prompt and no deadline, and an admin could still approve it. Each
such id is kept here and settled in the background, on the one retry policy of
gateway/runtime.py, as soon as the store answers:

- written: ``finish`` to ``cancelled``, the store's compare-and-set, with its audit line.
  Another replica or the admin API may decide it meanwhile; the compare-and-set lets one
  win; whoever ended it goes on with it (``ConfirmationService.go_on``). An approval
  found here, taken by a replica that may have died since, goes on here too: the claim
  lets one run it.
- not there: a cancelled record is stored under its id, so that the create, if it still
  lands (its bytes may wait in the server's buffer behind ours), finds the id taken and
  writes nothing.

Until then no decision taken in this process approves it: ``decide`` settles it first.
On stop the ids still unsure are logged and left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from gateway import texts
from gateway.confirm.model import AuditEvent, Confirmation, ExecState, Status
from gateway.runtime import BackgroundTasks
from gateway.storage.confirmations import (
    ConfirmationExistsError,
    StoreUnavailableError,
    once_store_answers,
)

if TYPE_CHECKING:
    from gateway.confirm.lifecycle import Lifecycle

log = structlog.get_logger(__name__)

# Errors after which a create may have been stored or not. A cancelled create too: its
# script may already be on the wire.
_UNSURE = (StoreUnavailableError, TimeoutError, asyncio.CancelledError)


@dataclass(frozen=True, slots=True)
class _Unsure:
    record: Confirmation  # as the failed create sent it
    events: tuple[AuditEvent, ...]


class UnsureCreates:
    """Ids of refused requests that may be stored, until each is settled as cancelled."""

    def __init__(
        self,
        service: Lifecycle,
        *,
        settled: Callable[[Confirmation], None],
        announce: Callable[[Confirmation], Awaitable[None]],
    ) -> None:
        self._service = service
        self._settled = settled  # the service's go_on
        self._announce = announce  # listeners' "resolved"
        self._held: dict[str, _Unsure] = {}
        self._tasks = BackgroundTasks("confirm-unsure")
        self._stopped = False

    def __contains__(self, confirmation_id: object) -> bool:
        return confirmation_id in self._held

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._held))

    def create_failed(
        self, record: Confirmation, events: Sequence[AuditEvent], exc: BaseException
    ) -> None:
        """A create of ``record`` raised ``exc``: remember it when it may still be stored."""
        if not isinstance(exc, _UNSURE):
            return
        log.warning("confirm.create_unsure", confirmation_id=record.id, error=type(exc).__name__)
        if self._stopped:
            log.warning("confirm.unsure_left", ids=[record.id])
            return
        self._held[record.id] = _Unsure(record, tuple(events))
        self._tasks.spawn(self._settle_when_up(record.id), name=f"unsure-{record.id}")

    async def _settle_when_up(self, confirmation_id: str) -> None:
        await once_store_answers(lambda: self.settle(confirmation_id))

    async def settle(self, confirmation_id: str) -> Confirmation | None:
        """End ``confirmation_id`` as cancelled if it is still unsure; the record as it now
        is (None: not unsure and not stored). Raises StoreUnavailableError while the store
        does not answer."""
        service = self._service
        held = self._held.get(confirmation_id)
        if held is None:
            return await service.store.get(confirmation_id)
        reason = texts.UNSURE_CREATE_REASON
        stored = True
        while True:
            # A refused request's requester was told the call did not run: no second word.
            final = await service.cancel(
                confirmation_id, reason=reason, tell_chat=False, turn_went_on=True
            )
            if final is not None:
                break
            final = await self._store_cancelled(held, reason)
            if final is not None:
                stored = False
                break
        self._held.pop(confirmation_id, None)
        log.info(
            "confirm.unsure_settled",
            confirmation_id=confirmation_id,
            status=final.status.value,
            was_stored=stored,
        )
        if final.status is Status.APPROVED and final.execution.state is ExecState.WAITING:
            self._settled(final)  # approved elsewhere before the cancel: it runs once
        return final

    async def _store_cancelled(self, held: _Unsure, reason: str) -> Confirmation | None:
        """Store the record as cancelled in the place of a create that never landed; None
        when the create landed meanwhile."""
        service = self._service
        now = service.clock()
        final = held.record.finished(
            Status.CANCELLED, by=None, at=now, via="system", reason=reason
        ).skipped(now)
        events = service.audit.decision_events(
            final.id, Status.CANCELLED, by=None, via="system", at=now, edit=None
        )
        try:
            await service.store.create(final, events=(*held.events, *events))
        except ConfirmationExistsError:
            return None
        await self._announce(final)
        return final

    async def stop(self) -> None:
        """Give up: name the ids still unsure in one line, end their settling."""
        self._stopped = True
        if self._held:
            log.warning("confirm.unsure_left", ids=list(self.ids))
        await self._tasks.cancel()
