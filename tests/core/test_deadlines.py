"""Deadlines (gateway/confirm/deadlines.py): each pending confirmation expires on time.

What a person would notice if that went wrong: a short-timeout confirmation asked after a
long one expiring late, a decided call expiring after all, or a call left pending by a
crashed process never expiring.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.bus import OutboundKind
from gateway.confirm.deadlines import Deadlines
from gateway.confirm.model import Confirmation, Status, ToolCall
from gateway.runtime import BackgroundTasks
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from tests.core.harness import Harness
from tests.support import ShiftedClock, pass_deadline, pass_time


async def test_shorter_deadline_asked_later_expires_first_and_on_time() -> None:
    h = Harness(timeout=30.0)
    long_task, long_conf = await h.ask(chat="c1", timeout=30.0)
    short_task, short_conf = await h.ask(chat="c2", timeout=0.2)
    final = await asyncio.wait_for(short_task, 5.0)  # long before the 30 s one
    assert final.status is Status.EXPIRED
    assert final.decided_via == "timeout"
    # The long one is untouched and still decidable.
    assert not long_task.done()
    assert (await h.service.get(long_conf.id)).status is Status.PENDING  # type: ignore[union-attr]
    await h.reply("确认", chat="c1")
    assert (await long_task).status is Status.APPROVED


async def test_deadlines_fire_in_order_whatever_order_they_were_asked() -> None:
    clock = ShiftedClock()
    h = Harness(clock=clock)  # long timeouts: asking them is no race on a loaded machine
    asked = []
    for i, left in enumerate((0.6, 0.2, 0.4)):
        task, conf = await h.ask(chat=f"c{i}", timeout=300 + left)
        asked.append((left, task, conf))
    # 300 s go by at once: each has `left` seconds to go, counted from the same instant.
    await pass_time(h.service, clock, 300, [conf.id for _, _, conf in asked])
    order: list[float] = []

    async def track(left: float, task: asyncio.Task[object]) -> None:
        await task
        order.append(left)

    await asyncio.wait_for(asyncio.gather(*(track(t, task) for t, task, _ in asked)), 5.0)
    assert order == [0.2, 0.4, 0.6]
    assert all(task.result().status is Status.EXPIRED for _, task, _ in asked)


async def test_decided_calls_never_expire() -> None:
    clock = ShiftedClock()
    h = Harness(clock=clock)  # the default timeout: a reply never races its deadline
    for i in range(300):
        task, _ = await h.ask(chat=f"d{i}")
        await h.reply("确认", chat=f"d{i}")
        assert (await task).status is Status.APPROVED
    assert len(h.service.deadlines) == 0  # each decision disarmed its deadline
    h.drain()
    # Asked after every decided one; when its deadline passes, so have all of theirs.
    task, conf = await h.ask(chat="late")
    await pass_deadline(h.service, clock, conf.id)
    final = await asyncio.wait_for(task, 5.0)
    assert final.status is Status.EXPIRED
    await h.service.shutdown()  # and every expiry it had started has finished
    approved = await h.service.list(status=Status.APPROVED, limit=1000)
    assert len(approved) == 300
    expired = [m for m in h.drain() if m.kind is OutboundKind.CONFIRMATION_UPDATE]
    assert [m.confirmation.id for m in expired if m.confirmation] == [conf.id]


# 50: the disarmed entries stay in the heap until its top; 300: arming the later one
# rebuilds the heap without them (deadlines.py keeps a mostly disarmed heap small).
@pytest.mark.parametrize("disarmed", [50, 300])
async def test_disarmed_deadlines_never_fire_and_do_not_hold_up_a_later_one(
    disarmed: int,
) -> None:
    """Disarmed deadlines are skipped, and the next armed one still fires. Arming and
    disarming run in one step, so no timer can fire in between."""
    fired: list[str] = []
    done = asyncio.Event()

    async def on_deadline(confirmation_id: str) -> None:
        fired.append(confirmation_id)
        done.set()

    deadlines = Deadlines(on_deadline=on_deadline, clock=time.time, tasks=BackgroundTasks("test"))
    now = time.time()
    for i in range(disarmed):
        deadlines.arm(f"D{i}", now + 0.05)
    for i in range(disarmed):
        deadlines.disarm(f"D{i}")
    deadlines.arm("LATE", now + 0.1)
    await asyncio.wait_for(done.wait(), 5.0)  # timers fire in order: the others came first
    assert fired == ["LATE"]
    assert len(deadlines) == 0


async def test_recover_rearms_deadlines_of_stored_pending_calls() -> None:
    # What a crashed process left behind: a pending record with no service holding it.
    store = MemoryConfirmationStore()
    now = time.time()
    left = Confirmation(
        id="K7Q2",
        session_key="test:c1",
        channel="test",
        chat_id="c1",
        requester="alice",
        is_group=False,
        tool_call=ToolCall("sql_modify", {"sql": "DELETE FROM t"}, "call1"),
        summary="DELETE t",
        created_at=now,
        expires_at=now + 0.3,
    )
    await store.create(left)
    h = Harness(timeout=30.0, store=store)  # the restarted process
    await h.service.recover()
    update = await h.next_out(OutboundKind.CONFIRMATION_UPDATE)  # the chat is told
    assert update.confirmation is not None and update.confirmation.id == left.id
    final = await store.get(left.id)
    assert final is not None
    assert final.status is Status.EXPIRED
    assert final.decided_via == "timeout"
    await h.service.shutdown()
