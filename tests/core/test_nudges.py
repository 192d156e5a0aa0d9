"""Reminders and escalation (gateway/confirm/nudges.py), on the real bus and service.

What a person notices: a call about to expire is announced once, with the time left, to
the people who can decide it; a call nobody decides reaches the approvers directly, once;
neither happens to a call already decided, nor twice because two replicas (or a restart)
both held its timer. The clock is injected: time passes when the test says.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.bus import OutboundKind
from gateway.confirm.model import Confirmation, Status
from gateway.confirm.nudges import ESCALATED, REMINDED
from gateway.confirm.service import ConfirmationService
from gateway.confirm.views import ESCALATED_REF, escalated, escalation_ref
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from tests.core.harness import Harness
from tests.support import ShiftedClock

NUDGES = {"remind_before_seconds": 60.0, "escalate_after_seconds": 120.0}


async def pass_seconds(
    service: ConfirmationService, clock: ShiftedClock, seconds: float, *ids: str
) -> None:
    """``seconds`` go by: the clock moves and the listed calls' timers are armed again
    from their stored times, as the loop timers would have them by then (a time that has
    passed fires at once)."""
    records = [await service.get(cid) for cid in ids]
    clock.offset += seconds
    for record in records:
        assert record is not None
        service.deadlines.arm(record.id, record.expires_at)
        service.nudges.arm(record)


async def kinds(h: Harness, cid: str) -> list[str]:
    return [e.kind for e in await h.store.events(cid)]


async def test_reminder_once_before_expiry_with_time_left_and_the_requester_mentioned() -> None:
    clock = ShiftedClock()
    h = Harness(clock=clock, settings={"remind_before_seconds": 60.0})
    _, c = await h.ask(chat="g1", is_group=True)
    h.drain()
    await pass_seconds(h.service, clock, 245, c.id)
    said = await h.next_out(OutboundKind.TEXT)
    assert said.chat_id == "g1" and said.confirmation is not None
    assert said.confirmation.id == c.id
    assert said.mentions == ("alice",)
    assert "⏰" in said.text and c.id in said.text
    assert "0:5" in said.text  # 55 s left, as m:ss
    assert "still waiting" in said.text and "仍在等待确认" in said.text
    # Its timer fires again (a second arming, a late tick): nothing more is said.
    assert not await h.service.nudges.remind(c.id)
    assert (await kinds(h, c.id)).count(REMINDED) == 1
    assert h.drain() == []
    # The call is still pending and decidable.
    await h.reply("确认", chat="g1", is_group=True)
    assert (await h.ended(c.id)).status is Status.APPROVED


async def test_a_four_eyes_reminder_mentions_the_approvers_too() -> None:
    clock = ShiftedClock()
    h = Harness(clock=clock, settings=NUDGES, approvers=("bob", "carol"))
    _, c = await h.ask(chat="g1", is_group=True, four_eyes=True)
    h.drain()
    await pass_seconds(h.service, clock, 245, c.id)
    said = await h.next_out(OutboundKind.TEXT)
    assert said.mentions == ("alice", "bob", "carol")


async def test_a_decided_call_is_neither_reminded_nor_escalated() -> None:
    clock = ShiftedClock()
    h = Harness(clock=clock, settings=NUDGES)
    _, c = await h.ask()
    assert c.id in h.service.nudges
    await h.reply("确认")
    assert (await h.ended(c.id)).status is Status.APPROVED
    assert c.id not in h.service.nudges  # the decision disarmed its nudges
    clock.offset += 250
    assert not await h.service.nudges.remind(c.id)
    assert not await h.service.nudges.escalate(c.id)
    assert REMINDED not in await kinds(h, c.id) and ESCALATED not in await kinds(h, c.id)


async def test_off_when_zero_or_when_the_timeout_is_shorter_than_the_lead() -> None:
    h = Harness(settings={"remind_before_seconds": 0.0})
    _, c = await h.ask()
    assert c.id not in h.service.nudges
    short = Harness(settings={"remind_before_seconds": 60.0})
    _, c2 = await short.ask(timeout=45.0)  # its prompt already says 45 s
    assert c2.id not in short.service.nudges


async def test_two_replicas_both_holding_the_timer_remind_once() -> None:
    clock = ShiftedClock()
    store = MemoryConfirmationStore()
    a = Harness(clock=clock, settings=NUDGES, store=store)
    b = Harness(clock=clock, settings=NUDGES, store=store)  # another process, same store
    _, c = await a.ask()
    a.drain()
    clock.offset += 245
    sent = await asyncio.gather(
        *(h.service.nudges.remind(c.id) for h in (a, b, a, b)),
    )
    assert sent.count(True) == 1
    reminders = [m for m in (*a.drain(), *b.drain()) if m.kind is OutboundKind.TEXT]
    assert len(reminders) == 1
    assert (await kinds(a, c.id)).count(REMINDED) == 1


async def test_escalation_once_marks_the_record_and_copies_decide() -> None:
    clock = ShiftedClock()
    h = Harness(clock=clock, settings=NUDGES, approvers=("bob",))
    _, c = await h.ask(chat="g1", is_group=True)
    h.drain()
    await pass_seconds(h.service, clock, 125, c.id)
    out = await h.next_out(OutboundKind.ESCALATION)
    assert out.chat_id == "g1" and out.confirmation is not None
    assert escalated(out.confirmation)  # the channel sends the copies from this record
    assert "⏫" in out.text and "escalated to the approvers" in out.text
    stored = await h.service.get(c.id)
    assert stored is not None and ESCALATED_REF in stored.prompt_refs
    assert not await h.service.nudges.escalate(c.id)
    assert (await kinds(h, c.id)).count(ESCALATED) == 1
    # The channel kept its copy in the escalation chat "esc": bob decides there by id.
    await h.service.set_prompt_ref(c.id, escalation_ref("test", "esc"), "m-1")
    await h.reply(f"确认 {c.id}", sender="bob", chat="esc", is_group=True)
    final = await h.ended(c.id)
    assert final.status is Status.APPROVED and final.decided_by == "bob"


async def test_a_group_without_a_copy_cannot_decide_by_id() -> None:
    h = Harness(approvers=("bob",))
    _, c = await h.ask(chat="g1", is_group=True)
    await h.reply(f"确认 {c.id}", sender="bob", chat="elsewhere", is_group=True)
    stored = await h.service.get(c.id)
    assert stored is not None and stored.status is Status.PENDING


async def test_adoption_after_a_restart_does_not_remind_again() -> None:
    clock = ShiftedClock()
    store = MemoryConfirmationStore()
    first = Harness(clock=clock, settings=NUDGES, store=store)
    _, c = await first.ask()
    clock.offset += 245
    assert await first.service.nudges.remind(c.id)
    first.service.deadlines.clear()  # the process is gone: its timers with it
    first.service.nudges.clear()
    second = Harness(clock=clock, settings=NUDGES, store=store)
    record = await second.service.get(c.id)
    assert isinstance(record, Confirmation)
    await second.service._replicas.adoption.adopt([record])
    assert c.id in second.service.nudges or c.id in second.service.deadlines
    await second.next_out(OutboundKind.CONFIRMATION)  # its prompt shown again
    assert not await second.service.nudges.remind(c.id)
    assert (await kinds(second, c.id)).count(REMINDED) == 1


@pytest.mark.services
async def test_two_replicas_on_redis_remind_and_escalate_once() -> None:
    """Two processes on one Redis (two store handles) whose timers for the call fire at
    once (an adoption racing the owner): one reminder, one escalation, one line each."""
    from gateway.storage.redis.confirmations import RedisConfirmationStore
    from tests.services import REDIS_URL, redis_prefix

    clock = ShiftedClock()
    async with redis_prefix() as prefix:
        stores = [await RedisConfirmationStore.from_url(REDIS_URL, prefix=prefix) for _ in "ab"]
        try:
            a, b = (Harness(clock=clock, settings=NUDGES, store=s) for s in stores)
            _, c = await a.ask()
            a.drain()
            clock.offset += 245  # past both the escalation and the reminder time
            sent = await asyncio.gather(
                *(h.service.nudges.remind(c.id) for h in (a, b, a, b)),
                *(h.service.nudges.escalate(c.id) for h in (b, a, b, a)),
            )
            assert sent[:4].count(True) == 1 and sent[4:].count(True) == 1
            out = [m.kind for m in (*a.drain(), *b.drain())]
            assert out.count(OutboundKind.TEXT) == 1 and out.count(OutboundKind.ESCALATION) == 1
            kinds = [e.kind for e in await stores[1].events(c.id)]
            assert kinds.count(REMINDED) == 1 and kinds.count(ESCALATED) == 1
        finally:
            for s in stores:
                await s.close()
