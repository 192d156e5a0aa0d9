"""Replies from approvers' direct chats (gateway/confirm/intercept.py, direct.py).

A call asked in one chat may be decided by id from an approver's one-to-one chat on the
same platform, where a copy of its prompt went. Nobody else's direct chat decides, no
group does, and another platform's chat does not.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.bus import OutboundKind, PublishResult
from gateway.confirm.model import Risk, Status
from gateway.confirm.views import (
    asks_approvers_directly,
    direct_copies,
    direct_recipients,
    direct_recipients_told,
    dm_ref,
)
from tests.core.harness import Harness


async def test_an_approver_decides_by_id_from_their_direct_chat() -> None:
    h = Harness(approvers=("bob",))
    task, conf = await h.ask(chat="group", is_group=True, four_eyes=True)
    assert await h.reply(f"确认 {conf.id}", sender="bob", chat="dm-bob") is (
        PublishResult.INTERCEPTED
    )
    final = await task
    assert (final.status, final.decided_by) == (Status.APPROVED, "bob")
    update = await h.next_out(OutboundKind.CONFIRMATION_UPDATE)
    assert update.chat_id == "group"  # the channel updates every copy from there
    # A second answer there is told the call is settled.
    await h.reply(f"取消 {conf.id}", sender="bob", chat="dm-bob")
    told = await h.next_out(OutboundKind.TEXT)
    assert told.chat_id == "dm-bob"
    assert told.text == f"[{conf.id}] 已处理：已批准（bob）/ already approved by bob"


async def test_the_approvers_own_pending_call_does_not_hide_the_other() -> None:
    h = Harness(approvers=("bob",))
    task, conf = await h.ask(chat="group", is_group=True, four_eyes=True)
    _, own = await h.ask(chat="dm-bob", requester="bob")
    await h.reply(f"取消 {conf.id}", sender="bob", chat="dm-bob")
    assert (await task).status is Status.REJECTED
    record = await h.store.get(own.id)
    assert record is not None and record.status is Status.PENDING


async def test_nobody_else_and_no_group_decides_from_elsewhere() -> None:
    h = Harness(approvers=("bob",))
    task, conf = await h.ask(chat="group", is_group=True, four_eyes=True)
    # Someone who is no approver, in their own direct chat: the id means nothing there.
    await h.reply(f"确认 {conf.id}", sender="mallory", chat="dm-mallory")
    told = await h.next_out(OutboundKind.TEXT)
    assert told.chat_id == "dm-mallory" and "no pending confirmation" in told.text
    # An approver in another group: not a direct chat, so not a decision there either.
    await h.reply(f"确认 {conf.id}", sender="bob", chat="other-group", is_group=True)
    told = await h.next_out(OutboundKind.TEXT)
    assert told.chat_id == "other-group" and "no pending confirmation" in told.text
    record = await h.store.get(conf.id)
    assert record is not None and record.status is Status.PENDING
    assert not task.done()


async def test_who_gets_a_copy() -> None:
    h = Harness()
    _, conf = await h.ask(chat="group", is_group=True)
    assert not asks_approvers_directly(conf)
    assert direct_recipients(conf, ["bob"]) == []
    eyes = replace(conf, four_eyes=True)
    assert direct_recipients(eyes, ["bob", "alice", "bob", ""]) == ["bob"]  # not the requester
    assert asks_approvers_directly(replace(conf, risk=Risk.CRITICAL))
    refs = {"x_message_id": "om_1", dm_ref("x", "bob"): "om_2", dm_ref("y", "carol"): "t-3"}
    assert direct_copies(refs, "x") == {"bob": "om_2"}
    assert direct_recipients_told(replace(eyes, prompt_refs=refs)) == ["bob", "carol"]
