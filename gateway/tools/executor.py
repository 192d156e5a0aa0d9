"""The one place an approved call runs: claim, start, run, finish — in the store.

Whoever goes on from an approved call (gateway/tools/runner.settle) — the process that
took the decision, or one that adopted it after that process died — comes here. The
store's compare-and-set claim lets exactly one of them run it; the others leave it.
What the call came to is written to the record's execution ledger
(``succeeded`` | ``failed`` with the error text | ``interrupted``) and to its audit trail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import structlog
from pydantic import BaseModel

from gateway import texts
from gateway.confirm.ledger import summarize
from gateway.confirm.model import Confirmation, ExecState
from gateway.confirm.service import ConfirmationService
from gateway.runtime import BackgroundTasks
from gateway.stop_budget import INTERRUPT_RECORD_SECONDS
from gateway.storage.confirmations import StoreUnavailableError, once_store_answers
from gateway.tools.base import (
    ApprovedRun,
    EffectChangedError,
    ToolArgumentsError,
    ToolRegistry,
    failure,
)

log = structlog.get_logger(__name__)

Say = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Ran:
    """What became of an approved call handed to the executor."""

    # succeeded / failed: it ran here; lost: another process has (or had) the call, and
    # goes on with it there.
    status: Literal["succeeded", "failed", "lost"]
    output: str  # the tool's whole output or the error text ("" when lost)
    record: Confirmation  # the record as this process last saw it
    # It failed because the data changed since the approval (EffectChangedError, issue 24):
    # the runner asks it again (gateway/confirm/again.py).
    effect_changed: bool = False


@dataclass(slots=True)
class _Running:
    task: asyncio.Task[object] | None
    done: asyncio.Event


class Executor:
    """Runs approved calls under the store's claim; drains them on stop."""

    def __init__(self, *, registry: ToolRegistry, confirmations: ConfirmationService) -> None:
        self.registry = registry
        self.confirmations = confirmations
        self._running: dict[str, _Running] = {}
        self._later = BackgroundTasks("tool-ledger")  # ends the store did not take at once

    @property
    def running(self) -> int:
        """How many calls run here now."""
        return len(self._running)

    async def run(
        self,
        record: Confirmation,
        *,
        say: Say,
        args: BaseModel | None = None,
        report: bool = False,
    ) -> Ran:
        """Claim ``record``'s call and run it, once; ``report`` posts the result line.

        ``args`` are the parsed arguments when the caller has them (the turn); otherwise
        they are parsed from the stored call.
        """
        service = self.confirmations
        me = service.instance.id
        try:
            claimed = await service.store.claim(
                record.id, instance=me, now=service.clock(), lease=service.lease
            )
        except StoreUnavailableError:
            # Made or not (its reply may be lost), the call must not wait for a live process
            # that gave up on it: written failed, not run, once the store answers.
            self._write_later("failed", record.id, self._not_run(record, service.clock()))
            raise
        if claimed is None:
            now = await service.store.get(record.id) or record
            log.info(
                "tool.claim_lost", confirmation_id=record.id, claimed_by=now.execution.claimed_by
            )
            return Ran("lost", "", now)
        try:
            await service.audit.add(
                record.id, "claimed", actor=me, attempt=claimed.execution.attempts
            )
            call = claimed.tool_call
            tool = self.registry.get(call.name)
            try:
                if tool is None:
                    raise ToolArgumentsError(f"no tool named {call.name!r} any more")
                parsed = args if args is not None else tool.parse_args(call.args)
            except ToolArgumentsError as exc:
                return await self._finish(
                    claimed, ExecState.FAILED, str(exc), say=say, report=report
                )
            started = await service.store.start_execution(
                record.id, instance=me, now=service.clock()
            )
            if started is None:
                # Our claim was taken from us (this process looked dead to another one).
                now = await service.store.get(record.id) or claimed
                return Ran("lost", "", now)
            await service.audit.add(record.id, "started", actor=me)
        except StoreUnavailableError:
            # Claimed, not run: the turn tells its chat the store is down; the record says
            # "failed, not run" once the store answers (not claimed by a live process forever).
            self._write_later("failed", record.id, self._not_run(claimed, service.clock()))
            raise
        running = _Running(asyncio.current_task(), asyncio.Event())
        self._running[record.id] = running
        error: str | None = None  # the raw failure, for the audit trail only
        changed = False
        try:
            result = await tool.run_approved(parsed, self._approved(started))
        except asyncio.CancelledError:
            # Stopped mid-run (stop timeout, or the turn was cancelled): it may or may not
            # have taken effect, so it is reported interrupted, never retried by itself.
            try:
                await asyncio.shield(service.interrupt(record.id, claimer=me))
            except StoreUnavailableError:
                self._write_later(
                    "interrupted", record.id, lambda: service.interrupt(record.id, claimer=me)
                )
            raise
        except Exception as exc:  # a tool's failure is the call's outcome, told to the chat
            output, error = failure(exc)
            log.warning("tool.failed", tool=call.name, error=error)
            state, changed = ExecState.FAILED, isinstance(exc, EffectChangedError)
        else:
            log.info("tool.ran", tool=call.name, confirmation_id=record.id)
            state, output = ExecState.SUCCEEDED, str(result)
        finally:
            del self._running[record.id]
            running.done.set()
        ran = await self._finish(started, state, output, say=say, report=report, error=error)
        return replace(ran, effect_changed=True) if changed else ran

    def _approved(self, record: Confirmation) -> ApprovedRun:
        """What the record approved, for the tool to check its effect against; its notes go
        to the record's audit trail as this instance."""
        audit, me = self.confirmations.audit, self.confirmations.instance.id

        async def note(kind: str, detail: Mapping[str, Any]) -> None:
            await audit.add(record.id, kind, actor=me, **detail)

        return ApprovedRun(confirmation_id=record.id, details=record.details, note=note)

    async def refuse(self, record: Confirmation, reason: str, *, say: Say) -> Ran:
        """Settle an approved call as failed without running it (the policy now refuses
        it); the chat is told ``reason``. Claimed first, like a run, so it happens once."""
        service = self.confirmations
        claimed = await service.store.claim(
            record.id, instance=service.instance.id, now=service.clock(), lease=service.lease
        )
        if claimed is None:
            now = await service.store.get(record.id) or record
            return Ran("lost", "", now)
        await service.audit.add(record.id, "claimed", actor=service.instance.id)
        await say(reason)
        return await self._finish(claimed, ExecState.FAILED, reason, say=say, report=False)

    async def _finish(
        self,
        record: Confirmation,
        state: ExecState,
        output: str,
        *,
        say: Say,
        report: bool,
        error: str | None = None,
    ) -> Ran:
        now, result = self.confirmations.clock(), summarize(output)
        try:
            final = await self._end(record, state, result, now, error=error)
        except StoreUnavailableError:
            # It ran: the chat hears how it went now, the record once the store answers.
            self._write_later(
                "finished", record.id, lambda: self._end(record, state, result, now, error=error)
            )
            final = record
        if report:
            await say(result_line(record, state, output))
        status: Literal["succeeded", "failed"] = (
            "succeeded" if state is ExecState.SUCCEEDED else "failed"
        )
        return Ran(status, output, final)

    async def _end(
        self,
        record: Confirmation,
        state: ExecState,
        result: str,
        now: float,
        *,
        error: str | None = None,
    ) -> Confirmation:
        """Write how the call ended (at ``now``); the record as it now is. ``error`` is the
        raw failure behind ``result`` (a driver's text), kept in the audit trail only."""
        extra = {"error": summarize(error)} if error and error != result else {}
        service = self.confirmations
        final = await service.store.finish_execution(
            record.id,
            instance=service.instance.id,
            state=state,
            result=result,
            now=now,
            events=(
                service.audit.event(
                    record.id, "finished", at=now, state=state.value, result=result, **extra
                ),
            ),
        )
        if final is None:
            # Someone marked it interrupted while it ran (our heartbeat lapsed): it did run.
            log.warning("tool.ledger_lost", confirmation_id=record.id, state=state.value)
            return await service.store.get(record.id) or record
        await service.announce_execution(final)
        return final

    def _not_run(self, record: Confirmation, at: float) -> Callable[[], Awaitable[object]]:
        """Writes that the call was not run: claimed first, should the claim not be made."""
        service = self.confirmations

        async def write() -> Confirmation:
            me, now, lease = service.instance.id, service.clock(), service.lease
            await service.store.claim(record.id, instance=me, now=now, lease=lease)
            return await self._end(record, ExecState.FAILED, texts.NOT_RUN_STORE_RESULT, at)

        return write

    def _write_later(
        self, what: str, confirmation_id: str, write: Callable[[], Awaitable[object]]
    ) -> None:
        """A call's end the store did not take: written once it answers again (until then
        the record says the call runs, and this process's heartbeat keeps it so)."""
        log.warning("tool.ledger_deferred", confirmation_id=confirmation_id, end=what)

        async def retry() -> None:
            await once_store_answers(write)
            log.info("tool.ledger_written", confirmation_id=confirmation_id, end=what)

        self._later.spawn(retry(), name=f"tool-{what}-{confirmation_id}")

    async def stop(self, timeout: float) -> None:
        """Let running calls finish for up to ``timeout`` seconds; interrupt the rest.

        Calls that start meanwhile are waited for too, within the same time.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._running and loop.time() < deadline:
            waits = [asyncio.ensure_future(r.done.wait()) for r in self._running.values()]
            _, pending = await asyncio.wait(
                waits, timeout=deadline - loop.time(), return_when=asyncio.FIRST_COMPLETED
            )
            for w in pending:
                w.cancel()
        left = list(self._running.values())
        if left:
            log.warning("tool.stop_timeout", running=len(left), timeout=timeout)
            for r in left:
                if r.task is not None:
                    r.task.cancel()  # its run() marks it interrupted and tells the chat
            await asyncio.wait(
                [asyncio.ensure_future(r.done.wait()) for r in left],
                timeout=INTERRUPT_RECORD_SECONDS,
            )
        if len(self._later):
            # Still not written: the stop's interrupt (or the adoption of this instance by
            # another replica or the next start) reports those calls interrupted.
            log.warning("tool.ledger_left", count=len(self._later))
            await self._later.cancel()


def result_line(record: Confirmation, state: ExecState, output: str) -> str:
    """The chat's line for how a call it asked with a command ended."""
    name = record.tool_call.name
    if state is ExecState.SUCCEEDED:
        return texts.tool_result(name, output, record.id)
    return texts.tool_failed(name, output)
