"""Cluster-wide live views, at the service level (issue 13, item 5).

Two confirmation services (replicas A and B) on one real Redis under a key prefix of their
own. What one replica does — asks, decides, runs, interrupts — reaches the other's
listeners (the SSE feed, the web chat) as a remote event, at once and once; its own
listeners hear it once, as a local event; the metrics count it only where it happened.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.confirm.model import ExecState, Status
from gateway.confirm.service import ConfirmationEvent, ConfirmationService
from gateway.metrics import Metrics
from gateway.storage.redis.confirmations import RedisConfirmationStore
from gateway.tools.base import ToolRegistry
from gateway.tools.executor import Executor, Say
from tests.core.harness import Harness
from tests.core.test_executor import CountingTool
from tests.services import REDIS_URL, redis_prefix

pytestmark = pytest.mark.services

# No test here waits for a deadline: a wake that did would take this long.
DEADLINE = 120.0


class Heard:
    """Every event a service tells its listeners, in order."""

    def __init__(self, service: ConfirmationService) -> None:
        self._events: asyncio.Queue[ConfirmationEvent] = asyncio.Queue()
        service.subscribe(self._events.put_nowait)

    async def next(self) -> tuple[str, str, bool, ConfirmationEvent]:
        async with asyncio.timeout(10):
            e = await self._events.get()
        return e.kind, e.confirmation.id, e.remote, e


@pytest.fixture
async def replicas() -> AsyncIterator[tuple[Harness, Harness]]:
    async with redis_prefix() as prefix:
        store_a = await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix)
        store_b = await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix)
        a, b = Harness(store=store_a, timeout=DEADLINE), Harness(store=store_b, timeout=DEADLINE)
        await a.service.recover()
        await b.service.recover()
        try:
            yield a, b
        finally:
            for h in (a, b):
                await h.service.shutdown()
            await store_a.close()
            await store_b.close()


def _count(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_each_replica_hears_every_change_once_and_counts_only_its_own(
    replicas: tuple[Harness, Harness],
) -> None:
    a, b = replicas
    heard_a, heard_b = Heard(a.service), Heard(b.service)
    metrics_a, metrics_b = Metrics(), Metrics()
    a.service.subscribe(metrics_a.on_confirmation)
    b.service.subscribe(metrics_b.on_confirmation)
    tool = CountingTool()
    executor = Executor(registry=ToolRegistry([tool]), confirmations=a.service)

    task, conf = await a.ask()
    assert (await heard_a.next())[:3] == ("requested", conf.id, False)
    assert (await heard_b.next())[:3] == ("requested", conf.id, True)

    await b.reply("确认")  # the reply reached replica B
    kind, cid, remote, event = await heard_a.next()
    assert (kind, cid, remote) == ("resolved", conf.id, True)
    assert event.confirmation.status is Status.APPROVED
    assert event.confirmation.decided_by == "alice"
    assert (await heard_b.next())[:3] == ("resolved", conf.id, False)
    final = await task  # woken by the feed, not the deadline
    assert final.status is Status.APPROVED

    _, say = _lines()
    ran = await executor.run(final, say=say)
    assert ran.status == "succeeded" and tool.runs == 1
    assert (await heard_a.next())[:3] == ("executed", conf.id, False)
    kind, cid, remote, event = await heard_b.next()
    assert (kind, cid, remote) == ("executed", conf.id, True)
    assert event.confirmation.execution.state is ExecState.SUCCEEDED
    assert event.confirmation.execution.result == "DELETE: 1 rows"

    # A marker: the next events each side hears are about it, so nothing above was told
    # twice (no echo of a replica's own change, no second copy of the other's).
    marker_task, marker = await a.ask()
    await a.service.cancel(marker.id, reason="test")
    assert (await marker_task).status is Status.CANCELLED
    assert [(await heard_a.next())[:3] for _ in range(2)] == [
        ("requested", marker.id, False),
        ("resolved", marker.id, False),
    ]
    assert [(await heard_b.next())[:3] for _ in range(2)] == [
        ("requested", marker.id, True),
        ("resolved", marker.id, True),
    ]

    # Counted where it happened: A asked both, B approved one, A cancelled the other.
    assert _count(metrics_a, "gateway_confirmations_requested_total", tool="sql_modify") == 2
    assert _count(metrics_b, "gateway_confirmations_requested_total", tool="sql_modify") == 0
    approved = {"outcome": "approved", "via": "text"}
    cancelled = {"outcome": "cancelled", "via": "system"}
    assert _count(metrics_a, "gateway_confirmations_resolved_total", **approved) == 0
    assert _count(metrics_b, "gateway_confirmations_resolved_total", **approved) == 1
    assert _count(metrics_a, "gateway_confirmations_resolved_total", **cancelled) == 1
    assert _count(metrics_b, "gateway_confirmations_resolved_total", **cancelled) == 0


async def test_an_interruption_by_another_replica_reaches_the_claimer(
    replicas: tuple[Harness, Harness],
) -> None:
    a, b = replicas
    task, conf = await a.ask()
    await a.reply("确认")
    final = await task
    me = a.service.instance.id
    assert await a.store.claim(final.id, instance=me, now=final.created_at, lease=30)
    heard_a = Heard(a.service)
    # As B's adoption does when A's heartbeat has lapsed while the call ran.
    assert await b.service.interrupt(conf.id, claimer=me) is not None
    kind, cid, remote, event = await heard_a.next()
    assert (kind, cid, remote) == ("executed", conf.id, True)
    assert event.confirmation.execution.state is ExecState.INTERRUPTED


def _lines() -> tuple[list[str], Say]:
    lines: list[str] = []

    async def say(text: str) -> None:
        lines.append(text)

    return lines, say


async def test_an_expiry_on_the_asking_replica_shows_on_the_other_when_it_happens(
    replicas: tuple[Harness, Harness],
) -> None:
    a, b = replicas
    heard_b = Heard(b.service)
    task, conf = await a.ask(timeout=0.5)
    assert (await heard_b.next())[:3] == ("requested", conf.id, True)
    assert (await task).status is Status.EXPIRED
    kind, cid, remote, event = await heard_b.next()
    assert (kind, cid, remote) == ("resolved", conf.id, True)
    assert event.confirmation.status is Status.EXPIRED


async def test_a_vote_counted_on_one_replica_reaches_the_other_once() -> None:
    """A call that takes two approvals: bob's vote reaches replica B; A's listeners (its
    admin feed's ``confirmation.voted``, its copies) hear it as a remote ``voted`` with the
    tally on the record, once; then carol's vote on B approves, heard once as ``resolved``."""
    async with redis_prefix() as prefix:
        stores = [await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix) for _ in "ab"]
        a, b = (Harness(store=s, timeout=DEADLINE, approvers=("bob", "carol")) for s in stores)
        try:
            for h in (a, b):
                await h.service.recover()
            heard_a, heard_b = Heard(a.service), Heard(b.service)
            task, conf = await a.ask(approvals=2, is_group=True)
            assert (await heard_a.next())[:3] == ("requested", conf.id, False)

            await b.reply("确认", sender="bob", is_group=True)
            kind, cid, remote, event = await heard_a.next()
            assert (kind, cid, remote) == ("voted", conf.id, True)
            assert event.confirmation.status is Status.PENDING
            assert [v.actor for v in event.confirmation.votes] == ["bob"]
            assert (await heard_b.next())[:3] == ("requested", conf.id, True)
            assert (await heard_b.next())[:3] == ("voted", conf.id, False)

            await b.reply("确认", sender="carol", is_group=True)
            kind, cid, remote, event = await heard_a.next()
            assert (kind, cid, remote) == ("resolved", conf.id, True)
            assert [v.actor for v in event.confirmation.votes] == ["bob", "carol"]
            assert (await task).status is Status.APPROVED
            # A marker: the next event A hears is about it, so neither vote came twice.
            marker_task, marker = await a.ask()
            assert (await heard_a.next())[:3] == ("requested", marker.id, False)
            await a.service.cancel(marker.id, reason="test")
            await marker_task
        finally:
            for h in (a, b):
                await h.service.shutdown()
            for s in stores:
                await s.close()
