"""Adoption (gateway/confirm/replicas.py): what a dead process left is finished by a live one.

An injected clock plays the time; the dead process is only its heartbeat and its records
in the store (what kill -9 leaves). Real bus, service and executor; memory and SQLite.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from gateway import texts
from gateway.bus import OutboundKind
from gateway.confirm.model import Confirmation, ExecState, Instance, Status
from gateway.storage.confirmations import ConfirmationStore
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from gateway.storage.sqlite.confirmations import SqliteConfirmationStore
from gateway.tools.base import ToolRegistry
from gateway.tools.executor import Executor
from tests.confirm.records import make
from tests.core.harness import Harness
from tests.core.test_executor import CountingTool

LEASE = 15.0
T0 = 1_800_000_000.0
DEAD = Instance(id="dead-1-aaaaaa", pid=1, host="dead", started_at=T0 - 60, seen_at=T0)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ConfirmationStore]:
    if request.param == "memory":
        yield MemoryConfirmationStore()
        return
    s = await SqliteConfirmationStore.open(tmp_path / "confirmations.db")
    yield s
    await s.close()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def _left_by_dead(store: ConfirmationStore, cid: str, state: str, **kw: object) -> None:
    """A record of the dead process: pending, approved (waiting) or running."""
    c = make(cid, session=f"test:{cid}", created_at=T0 - 10, owner=DEAD.id, **kw)
    c = replace(c, channel="test")
    await store.create(c)
    if state == "pending":
        return
    await store.finish(cid, Status.APPROVED, by="alice", via="text", reason=None, now=T0 - 5)
    if state == "approved":
        return
    assert await store.claim(cid, instance=DEAD.id, now=T0 - 4, lease=LEASE)
    assert await store.start_execution(cid, instance=DEAD.id, now=T0 - 4)


def _live(store: ConfirmationStore, clock: Clock, tool: CountingTool) -> Harness:
    h = Harness(store=store, clock=clock)
    executor = Executor(registry=ToolRegistry([tool]), confirmations=h.service)

    async def say(text: str) -> None:
        pass

    def go_on(c: Confirmation) -> None:  # the one path from an ended record: claim, run
        if c.status is Status.APPROVED:
            h.runs.append(asyncio.ensure_future(executor.run(c, say=say, report=True)))

    h.service.on_settled(go_on)
    return h


async def test_a_live_process_finishes_what_a_dead_one_left(store: ConfirmationStore) -> None:
    await store.heartbeat(DEAD, lease=LEASE)
    await _left_by_dead(store, "P1", "pending")
    await _left_by_dead(store, "A1", "approved")
    await _left_by_dead(store, "R1", "running")
    await _left_by_dead(store, "I1", "running", idempotent=True)
    clock = Clock(T0 + LEASE + 1)  # the dead heartbeat is older than the lease
    tool = CountingTool()
    h = _live(store, clock, tool)
    me = h.service.instance.id

    await h.service.recover()
    async with asyncio.timeout(5):
        while tool.runs < 2:  # A1 and I1 run here (spawned by the adoption)
            await asyncio.sleep(0.01)

    pending = await store.get("P1")
    assert pending is not None and pending.owner == me and pending.status is Status.PENDING
    assert "P1" in h.service.deadlines
    out = h.drain()
    reposted = [m for m in out if m.kind is OutboundKind.CONFIRMATION]
    assert [m.confirmation.id for m in reposted if m.confirmation] == ["P1"]
    assert reposted[0].text.startswith("🔁") and "Time left" in reposted[0].text

    ran = await store.get("A1")
    assert ran is not None and ran.owner == me
    assert ran.execution.state is ExecState.SUCCEEDED and ran.execution.claimed_by == me

    again = await store.get("I1")  # idempotent: claimed once more, run here
    assert again is not None and again.execution.state is ExecState.SUCCEEDED
    assert again.execution.attempts == 2 and again.execution.claimed_by == me

    cut = await store.get("R1")  # may or may not have taken effect: told, never re-run
    assert cut is not None and cut.execution.state is ExecState.INTERRUPTED
    told = [m for m in out if m.chat_id == "R1" and m.kind is OutboundKind.TEXT]
    assert [m.text for m in told] == [texts.interrupted(cut)]
    assert tool.runs == 2

    assert DEAD.id not in {i.id for i in await store.list_instances()}
    kinds = {cid: [e.kind for e in await store.events(cid)] for cid in ("P1", "A1", "R1")}
    assert kinds["P1"] == ["adopted", "prompt_reposted"]
    assert kinds["A1"] == ["adopted", "claimed", "started", "finished"]
    assert kinds["R1"] == ["interrupted"]

    # A second scan (they run every few seconds) changes nothing more.
    await h.service.adopt_dead()
    assert tool.runs == 2 and not [m for m in h.drain() if m.chat_id == "R1"]
    await h.service.shutdown()


async def test_a_live_owner_keeps_its_records(store: ConfirmationStore) -> None:
    await store.heartbeat(DEAD, lease=LEASE)
    await _left_by_dead(store, "P1", "pending")
    await _left_by_dead(store, "A1", "approved")
    await _left_by_dead(store, "R1", "running")
    tool = CountingTool()
    h = _live(store, Clock(T0 + LEASE / 2), tool)  # two missed beats: not dead yet
    await h.service.adopt_dead()
    assert (await store.get("P1")).owner == DEAD.id  # type: ignore[union-attr]
    running = await store.get("R1")
    assert running is not None and running.execution.state is ExecState.RUNNING
    assert tool.runs == 0 and h.drain() == []
    await h.service.shutdown()


async def test_an_idempotent_call_is_re_claimed_once_only(store: ConfirmationStore) -> None:
    await store.heartbeat(DEAD, lease=LEASE)
    await _left_by_dead(store, "I1", "running", idempotent=True)
    # Its second claimer died too, mid-run.
    second = Instance(id="dead-2-bbbbbb", pid=2, host="dead", started_at=T0, seen_at=T0)
    assert await store.claim("I1", instance=second.id, now=T0 + LEASE, lease=LEASE)
    await store.forget_instance(DEAD.id)
    await store.heartbeat(second, lease=LEASE)
    tool = CountingTool()
    h = _live(store, Clock(T0 + 3 * LEASE), tool)
    await h.service.adopt_dead()
    record = await store.get("I1")
    assert record is not None and record.execution.state is ExecState.INTERRUPTED
    assert tool.runs == 0
    await h.service.shutdown()


async def test_two_adopters_run_an_orphaned_call_once(store: ConfirmationStore) -> None:
    await store.heartbeat(DEAD, lease=LEASE)
    for cid in ("A1", "A2", "A3"):
        await _left_by_dead(store, cid, "approved")
    clock = Clock(T0 + LEASE + 1)
    tool = CountingTool()
    a, b = _live(store, clock, tool), _live(store, clock, tool)
    await asyncio.gather(a.service.adopt_dead(), b.service.adopt_dead())
    await asyncio.gather(*a.runs, *b.runs)  # what each adoption went on with
    await a.service.shutdown()
    await b.service.shutdown()
    assert tool.runs == 3
    for cid in ("A1", "A2", "A3"):
        record = await store.get(cid)
        assert record is not None and record.execution.state is ExecState.SUCCEEDED


async def test_an_approval_left_unclaimed_goes_on_here_a_lease_after_it(
    store: ConfirmationStore,
) -> None:
    """The process that took the decision goes on with it at once; when it died before its
    claim, a live one does, a lease after the decision, whoever asked (alive here)."""
    asker = Instance(id="asker-1-cccccc", pid=3, host="live", started_at=T0 - 60, seen_at=T0)
    await store.heartbeat(asker, lease=LEASE)
    c = replace(make("U1", session="test:U1", created_at=T0 - 10, owner=asker.id), channel="test")
    await store.create(c)
    await store.finish("U1", Status.APPROVED, by="alice", via="admin", reason=None, now=T0)
    clock = Clock(T0 + 1)
    tool = CountingTool()
    h = _live(store, clock, tool)
    await h.service.adopt_dead()
    assert h.runs == [] and tool.runs == 0  # its decider may still be claiming it
    clock.now = T0 + LEASE + 1
    await store.heartbeat(replace(asker, seen_at=clock.now), lease=LEASE)  # the asker lives
    await h.service.adopt_dead()
    await asyncio.gather(*h.runs)
    ran = await store.get("U1")
    assert ran is not None and ran.execution.state is ExecState.SUCCEEDED and tool.runs == 1
    await h.service.adopt_dead()  # claimed: never again
    await asyncio.gather(*h.runs)
    assert tool.runs == 1
    await h.service.shutdown()
