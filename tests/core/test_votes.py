"""Several approvers (a policy rule's ``approvals = N``), through the service's one entrance.

What the people in the chat notice: the requester's own approval is refused, each other
approval is counted and shown on every copy ("1/2 已批准：bob"), a second approval by the
same person is answered "you already approved", the N-th approves and the call goes on
once, any rejection settles it at once, and no grant is given on such a call.
"""

from __future__ import annotations

from gateway import texts
from gateway.bus import OutboundKind
from gateway.confirm.model import (
    Answer,
    CallEdit,
    DecideOutcome,
    Decision,
    GrantAsk,
    Risk,
    Status,
    ToolCall,
)
from gateway.texts import votes as vote_texts
from tests.core.harness import Harness

APPROVERS = ("bob", "carol", "dave")


async def test_two_approvers_by_reply_tally_then_approve() -> None:
    h = Harness(approvers=APPROVERS)
    task, conf = await h.ask(approvals=2, is_group=True)
    assert conf.four_eyes and conf.approvals == 2
    # The prompt says how many must approve and shows the empty tally.
    assert "0/2 已批准 / approved 0 of 2" in texts.prompt(conf, conf.created_at)
    assert vote_texts.needed(conf) in texts.prompt(conf, conf.created_at)

    # The requester never counts.
    await h.reply("确认", sender="alice", is_group=True)
    assert (await h.next_out(OutboundKind.TEXT)).text == texts.FOUR_EYES

    await h.reply("确认", sender="bob", is_group=True)
    update = await h.next_out(OutboundKind.CONFIRMATION_UPDATE)
    assert update.confirmation is not None
    assert update.confirmation.status is Status.PENDING
    assert "1/2 已批准：bob / approved 1 of 2: bob" in update.text
    # Every copy is redrawn from this record: its detail lines carry the tally.
    assert "审批 Approvals: 1/2 已批准：bob / approved 1 of 2: bob" in texts.detail_lines(
        update.confirmation
    )
    assert not task.done()

    # bob again: told so, nothing counted twice.
    await h.reply("确认", sender="bob", is_group=True)
    told = await h.next_out(OutboundKind.TEXT)
    assert told.text == vote_texts.already_voted(update.confirmation)
    assert len((await h.store.get(conf.id)).votes) == 1  # type: ignore[union-attr]

    await h.reply("好的", sender="carol", is_group=True)
    final = await task
    assert final.status is Status.APPROVED
    assert [v.actor for v in final.votes] == ["bob", "carol"]
    assert final.decided_by == "carol"
    done = await h.next_out(OutboundKind.CONFIRMATION_UPDATE)
    assert done.text == texts.outcome(final)
    assert "bob, carol" in done.text
    # The audit trail lists each vote, then the decision.
    trail = [(e.kind, e.actor) for e in await h.store.events(conf.id)]
    assert [t for t in trail if t[0] in ("voted", "decided")] == [
        ("voted", "bob"),
        ("voted", "carol"),
        ("decided", "carol"),
    ]


async def test_any_rejection_settles_at_once() -> None:
    h = Harness(approvers=APPROVERS)
    task, conf = await h.ask(approvals=3, is_group=True)
    first = await h.decide(conf.id, Decision.APPROVE, actor="bob", via="card")
    assert first.outcome is DecideOutcome.VOTED
    assert first.message == vote_texts.vote_counted(first.confirmation)  # type: ignore[arg-type]
    no = await h.decide(conf.id, Decision.REJECT, actor="carol", via="card", reason="太多行")
    assert no.outcome is DecideOutcome.DECIDED
    final = await task
    assert (final.status, final.decided_by, final.reason) == (Status.REJECTED, "carol", "太多行")
    assert [v.actor for v in final.votes] == ["bob"]
    late = await h.decide(conf.id, Decision.APPROVE, actor="dave", via="card")
    assert late.outcome is DecideOutcome.ALREADY_DECIDED


async def test_cards_tell_a_voter_they_voted_and_the_others_may_still_approve() -> None:
    h = Harness(approvers=APPROVERS)
    _, conf = await h.ask(approvals=2, is_group=True)
    voted = (await h.decide(conf.id, Decision.APPROVE, actor="bob", via="web")).confirmation
    assert voted is not None
    bob = h.service.card_view(voted, "bob")
    assert not bob.approve.allowed and bob.approve.why == vote_texts.already_voted(voted)
    assert bob.reject.allowed  # a voter may still change their mind to a veto
    carol = h.service.card_view(voted, "carol")
    assert carol.approve.allowed and not carol.grant.allowed  # never a grant here
    # The web chat card shows the tally as a field of its own.
    fields = {f["key"]: f["value"] for f in texts.web_card(voted)["fields"]}
    assert fields["votes"] == "1/2 已批准：bob / approved 1 of 2: bob"


async def test_the_admin_api_names_one_person_once() -> None:
    h = Harness(approvers=APPROVERS)
    task, conf = await h.ask(approvals=2)
    await h.decide(conf.id, Decision.APPROVE, actor="bob", via="text")
    # "BOB" typed on the admin API is bob: not a second vote.
    again = await h.decide(conf.id, Decision.APPROVE, actor="BOB", via="admin")
    assert again.outcome is DecideOutcome.ALREADY_DECIDED
    assert again.message == vote_texts.already_voted(again.confirmation)  # type: ignore[arg-type]
    assert not task.done()
    # Nor is the requester, whatever the token vouches for.
    own = await h.decide(conf.id, Decision.APPROVE, actor="Alice", via="admin")
    assert own.outcome is DecideOutcome.FORBIDDEN
    ok = await h.decide(conf.id, Decision.APPROVE, actor="ops-lead", via="admin")
    assert ok.outcome is DecideOutcome.DECIDED
    assert (await task).status is Status.APPROVED


async def test_no_grant_and_no_edit_on_a_call_that_needs_approvers() -> None:
    h = Harness(approvers=APPROVERS)
    task, conf = await h.ask(approvals=2)
    edit = CallEdit(
        tool_call=ToolCall(
            name="sql_modify", args={"sql": "DELETE FROM t WHERE id = 2"}, call_id="x"
        ),
        summary="DELETE t",
        details={},
        risk=Risk.MEDIUM,
        four_eyes=True,
    )
    edited = await h.service.answer(
        Answer(
            confirmation_id=conf.id, decision=Decision.APPROVE, actor="bob", via="web", edit=edit
        )
    )
    assert edited.outcome is DecideOutcome.FORBIDDEN
    assert edited.message == vote_texts.NO_EDIT_WITH_VOTES
    for who in ("bob", "carol"):
        result = await h.service.answer(
            Answer(
                confirmation_id=conf.id,
                decision=Decision.APPROVE,
                actor=who,
                via="text",
                grant=GrantAsk("session", 30),
            )
        )
        assert result.grant is None
    final = await task
    assert final.status is Status.APPROVED
    assert final.tool_call == conf.tool_call  # as asked, never the edit
    assert await h.service.grants.live() == []
