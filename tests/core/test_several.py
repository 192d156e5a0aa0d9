"""Several calls at once, by name: ``确认 K7Q2 M3XA`` / ``取消 K7Q2 M3XA 原因…``.

Each named call the sender may decide is decided; one answer lists each outcome (decided,
not yours, already decided, unknown); a call not named is never touched.
"""

from __future__ import annotations

from gateway import texts
from gateway.bus import OutboundKind, PublishResult
from gateway.confirm.model import Decision, Status
from gateway.confirm.several import MAX_NAMED
from gateway.texts import several as several_texts
from gateway.texts import votes as vote_texts
from tests.core.harness import Harness


async def test_confirm_names_two_of_three_and_decides_exactly_those() -> None:
    h = Harness()
    t1, c1 = await h.ask()
    t2, c2 = await h.ask()
    t3, c3 = await h.ask()
    await h.reply(f"确认 {c1.id} {c3.id.lower()}，谢谢")
    answer = await h.next_out(OutboundKind.TEXT)
    final1, final3 = await t1, await t3
    assert final1.status is Status.APPROVED and final3.status is Status.APPROVED
    assert answer.text == several_texts.answer(
        [several_texts.decided(final1), several_texts.decided(final3)]
    )
    assert f"✅ {c1.id} 已批准 / approved" in answer.text
    # The call not named still waits.
    assert not t2.done()
    assert (await h.store.get(c2.id)).status is Status.PENDING  # type: ignore[union-attr]


async def test_cancel_with_a_reason_lists_each_outcome() -> None:
    h = Harness()
    t1, c1 = await h.ask(chat="g", is_group=True)
    t2, c2 = await h.ask(chat="g", is_group=True, requester="carol")
    t3, c3 = await h.ask(chat="g", is_group=True)
    await h.decide(c3.id, Decision.APPROVE, actor="alice", via="card")
    await h.reply(
        f"取消 {c1.id} {c2.id} {c3.id} ZZ99，表不对", sender="alice", chat="g", is_group=True
    )
    answer = (await h.next_out(OutboundKind.TEXT)).text
    final1 = await t1
    assert (final1.status, final1.reason) == (Status.REJECTED, "表不对")
    lines = answer.splitlines()
    assert lines[0] == several_texts.HEADER.format(count=4)
    assert lines[1].strip() == several_texts.decided(final1)
    # carol's call is not alice's to decide: said, and it still waits.
    assert lines[2].strip() == several_texts.not_yours(c2.id, texts.ONLY_APPROVERS)
    assert not t2.done()
    # Settled before: said how.
    assert lines[3].strip() == several_texts.already(await t3)
    assert lines[4].strip() == several_texts.unknown("ZZ99")


async def test_an_unclear_reply_naming_several_decides_nothing() -> None:
    h = Harness()
    t1, c1 = await h.ask()
    t2, c2 = await h.ask()
    await h.reply(f"确认 {c1.id} {c2.id} 吗")
    told = await h.next_out(OutboundKind.TEXT)
    assert told.text == several_texts.unclear((c1.id, c2.id))
    assert not t1.done() and not t2.done()


async def test_a_call_that_takes_votes_counts_one_vote() -> None:
    h = Harness(approvers=("bob", "carol"))
    t1, c1 = await h.ask(chat="g", is_group=True, approvals=2)
    t2, c2 = await h.ask(chat="g", is_group=True, four_eyes=True)
    await h.reply(f"ok {c1.id} {c2.id}", sender="bob", chat="g", is_group=True)
    answer = await h.next_out(OutboundKind.TEXT)
    assert (await t2).status is Status.APPROVED
    voted = await h.store.get(c1.id)
    assert voted is not None and voted.status is Status.PENDING
    assert f"🗳️ {c1.id} {vote_texts.tally(voted)}" in answer.text
    assert not t1.done()


async def test_from_an_approvers_direct_chat_and_never_another_chats_ids() -> None:
    h = Harness(approvers=("boss",))
    t1, c1 = await h.ask(chat="g", is_group=True, four_eyes=True)
    t2, c2 = await h.ask(chat="g", is_group=True, four_eyes=True)
    # A stranger's direct chat: the ids are not theirs to learn of.
    await h.reply(f"确认 {c1.id} {c2.id}", sender="mallory", chat="dm-mallory")
    stranger = await h.next_out(OutboundKind.TEXT)
    assert stranger.text == several_texts.answer(
        [several_texts.unknown(c1.id), several_texts.unknown(c2.id)]
    )
    assert not t1.done() and not t2.done()
    # The approver, in the direct chat a copy went to: both decided.
    await h.reply(f"确认 {c1.id} {c2.id}", sender="boss", chat="dm-boss")
    await h.next_out(OutboundKind.TEXT)
    assert (await t1).decided_by == "boss"
    assert (await t2).decided_by == "boss"


async def test_pending_lists_ids_summaries_time_left_and_how_to_decide_several() -> None:
    h = Harness(approvers=("bob", "carol"))
    _, c1 = await h.ask(approvals=2)
    _, c2 = await h.ask()
    listing = several_texts.pending_list(
        await h.service.list_pending("test:c1"), c1.created_at + 61
    )
    assert f"[{c1.id}] DELETE t · alice · 剩余 3:59 left" in listing
    assert "0/2 已批准 / approved 0 of 2" in listing
    assert f"[{c2.id}] DELETE t" in listing
    assert f"确认 {c1.id} {c2.id}" in listing
    assert several_texts.pending_list([], 0) == texts.NO_PENDING


async def test_asking_what_is_pending_leaves_the_calls_waiting() -> None:
    # Before issue 25 "/pending" was "another message" and rejected the calls it asks about.
    h = Harness()
    t1, _ = await h.ask()
    assert await h.reply("/pending") is PublishResult.QUEUED
    [queued] = h.drain_inbound()
    assert queued.text == "/pending"
    assert not t1.done()


async def test_naming_more_than_the_limit_decides_nothing() -> None:
    h = Harness()
    t1, c1 = await h.ask()
    others = [f"{n}A" + "B" * 2 for n in range(2, 2 + MAX_NAMED)]  # ids that are not there
    await h.reply(" ".join(["确认", c1.id, *others]))
    told = await h.next_out(OutboundKind.TEXT)
    assert told.text == several_texts.too_many(MAX_NAMED + 1, MAX_NAMED)
    assert not t1.done()
