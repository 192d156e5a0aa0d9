"""The executor (gateway/tools/executor.py): one claim, one run, every end on the record.

Real bus, real confirmation service, the store backends of the ledger contract suite
(tests/confirm/conftest.py), and a tool that counts its runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from gateway import texts
from gateway.bus import OutboundKind
from gateway.confirm.model import Confirmation, ExecState, Status
from gateway.confirm.service import ConfirmationEvent
from gateway.storage.confirmations import ConfirmationStore
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from gateway.storage.sqlite.confirmations import SqliteConfirmationStore
from gateway.tools.base import Tool, ToolRegistry
from gateway.tools.executor import Executor
from tests.core.harness import Harness


class _Args(BaseModel):
    sql: str


class CountingTool(Tool):
    """Stands in for sql_modify: counts runs; can be made to fail or to hang."""

    name: ClassVar[str] = "sql_modify"
    description: ClassVar[str] = "test"
    params: ClassVar[type[BaseModel]] = _Args
    default_level = "confirm"

    def __init__(self) -> None:
        self.runs = 0
        self.fail: Exception | None = None
        self.started = asyncio.Event()
        self.release: asyncio.Event | None = None

    async def run(self, args: BaseModel) -> Any:
        self.runs += 1
        self.started.set()
        if self.release is not None:
            await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return "DELETE: 1 rows"


def _said() -> tuple[list[str], Any]:
    lines: list[str] = []

    async def say(text: str) -> None:
        lines.append(text)

    return lines, say


async def _approved(h: Harness) -> Confirmation:
    task, _ = await h.ask()
    await h.reply("确认")
    final = await task
    assert final.status is Status.APPROVED
    return final


@pytest.fixture(params=["memory", "sqlite"])
async def ledger_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ConfirmationStore]:
    """One store both "processes" of a test share (a shared SQLite file, or one dict)."""
    if request.param == "memory":
        yield MemoryConfirmationStore()
        return
    store = await SqliteConfirmationStore.open(tmp_path / "confirmations.db")
    yield store
    await store.close()


@pytest.fixture
def tool() -> CountingTool:
    return CountingTool()


async def test_an_approved_call_runs_once_and_the_record_says_how_it_ended(
    ledger_store: ConfirmationStore, tool: CountingTool
) -> None:
    h = Harness(store=ledger_store)
    executor = Executor(registry=ToolRegistry([tool]), confirmations=h.service)
    final = await _approved(h)
    lines, say = _said()
    ran = await executor.run(final, say=say, report=True)
    assert ran.status == "succeeded" and ran.output == "DELETE: 1 rows"
    assert lines == [texts.tool_result("sql_modify", "DELETE: 1 rows", final.id)]
    record = await ledger_store.get(final.id)
    assert record is not None and record.owner == h.service.instance.id
    ex = record.execution
    assert ex.state is ExecState.SUCCEEDED and ex.claimed_by == h.service.instance.id
    assert ex.started_at is not None and ex.finished_at is not None
    assert ex.result == "DELETE: 1 rows" and ex.attempts == 1
    # Run again by anyone: the claim is lost, nothing runs.
    again = await executor.run(record, say=say)
    assert again.status == "lost" and tool.runs == 1
    kinds = [e.kind for e in await ledger_store.events(final.id)]
    assert kinds == [
        "requested",
        "prompt_sent",
        "reply_read",
        "decided",
        "claimed",
        "started",
        "finished",
    ]
    read = (await ledger_store.events(final.id))[2]
    assert read.detail["intent"] == "confirm" and read.detail["how"] == "decision"
    await h.service.shutdown()


async def test_two_processes_racing_for_one_call_run_it_once(
    ledger_store: ConfirmationStore, tool: CountingTool
) -> None:
    a, b = Harness(store=ledger_store), Harness(store=ledger_store)
    assert a.service.instance.id != b.service.instance.id
    registry = ToolRegistry([tool])
    final = await _approved(a)
    _, say = _said()
    runs = await asyncio.gather(
        *(
            Executor(registry=registry, confirmations=h.service).run(final, say=say)
            for h in (a, b, a, b)
        )
    )
    assert sorted(r.status for r in runs) == ["lost", "lost", "lost", "succeeded"]
    assert tool.runs == 1
    await a.service.shutdown()


async def test_a_failing_tool_is_recorded_failed_with_its_error(
    ledger_store: ConfirmationStore, tool: CountingTool
) -> None:
    h = Harness(store=ledger_store)
    executor = Executor(registry=ToolRegistry([tool]), confirmations=h.service)
    tool.fail = RuntimeError("no such table: t")
    final = await _approved(h)
    lines, say = _said()
    ran = await executor.run(final, say=say, report=True)
    assert ran.status == "failed"
    record = await ledger_store.get(final.id)
    assert record is not None and record.execution.state is ExecState.FAILED
    assert record.execution.result == "RuntimeError: no such table: t"
    assert lines == [texts.tool_failed("sql_modify", "RuntimeError: no such table: t")]
    await h.service.shutdown()


async def test_stop_timeout_interrupts_a_running_call_and_tells_chat_and_feed(
    ledger_store: ConfirmationStore, tool: CountingTool
) -> None:
    h = Harness(store=ledger_store)
    executor = Executor(registry=ToolRegistry([tool]), confirmations=h.service)
    events: list[ConfirmationEvent] = []
    h.service.subscribe(events.append)
    tool.release = asyncio.Event()  # never set: the call runs past the stop timeout
    final = await _approved(h)
    h.drain()
    _, say = _said()
    run = asyncio.create_task(executor.run(final, say=say))
    await tool.started.wait()
    assert executor.running == 1
    await executor.stop(timeout=0.05)
    with pytest.raises(asyncio.CancelledError):
        await run
    record = await ledger_store.get(final.id)
    assert record is not None and record.execution.state is ExecState.INTERRUPTED
    told = await h.next_out(OutboundKind.TEXT)
    assert told.text == texts.interrupted(record) and told.chat_id == "c1"
    assert "已中断：可能已生效也可能未生效，如需重试请重新发起" in told.text
    executed = [e for e in events if e.kind == "executed"]
    assert [e.confirmation.execution.state for e in executed] == [ExecState.INTERRUPTED]
    assert "interrupted" in [e.kind for e in await ledger_store.events(final.id)]
    assert tool.runs == 1
    await h.service.shutdown()


async def test_stop_waits_for_a_call_that_ends_in_time(
    ledger_store: ConfirmationStore, tool: CountingTool
) -> None:
    h = Harness(store=ledger_store)
    executor = Executor(registry=ToolRegistry([tool]), confirmations=h.service)
    tool.release = asyncio.Event()
    final = await _approved(h)
    _, say = _said()
    run = asyncio.create_task(executor.run(final, say=say))
    await tool.started.wait()
    stopping = asyncio.create_task(executor.stop(timeout=30))
    tool.release.set()
    await stopping
    assert (await run).status == "succeeded"
    record = await ledger_store.get(final.id)
    assert record is not None and record.execution.state is ExecState.SUCCEEDED
    await h.service.shutdown()
