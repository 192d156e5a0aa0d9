"""Votes of a call that needs several approvers (``approvals = N``), on every backend.

Each vote is a compare-and-set on the store: one per person, only while pending and before
the deadline; the N-th approves in the same step. Races run on two handles (two replicas
on Redis, two connections to one SQLite file): two last votes at once approve once, and a
rejection racing the last vote settles the record one way, once.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.confirm.model import (
    AuditEvent,
    Confirmation,
    ExecState,
    Status,
    Vote,
    VoteOutcome,
)
from gateway.storage.confirmations import ConfirmationStore, FeedEntry
from tests.confirm.conftest import BACKENDS, Backend
from tests.confirm.records import T0, TIMEOUT, make


def vote(actor: str, at: float = T0 + 1, via: str = "text") -> Vote:
    return Vote(actor=actor, person=actor.casefold(), at=at, via=via)


def line(cid: str, kind: str, actor: str) -> AuditEvent:
    return AuditEvent(confirmation_id=cid, at=T0 + 1, kind=kind, actor=actor)


def needs(cid: str, approvals: int) -> Confirmation:
    return make(cid, approvals=approvals, four_eyes=True, approvers=("bob", "carol", "dave"))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
class TestVoteContract:
    async def test_votes_count_until_the_last_one_approves(self, backend: Backend) -> None:
        store, other = await backend.open(), await backend.open()
        await store.create(needs("VT01", 2))
        first, outcome = await store.vote(
            "VT01", vote("bob"), events=(line("VT01", "voted", "bob"),)
        )
        assert outcome is VoteOutcome.COUNTED
        assert first is not None and first.status is Status.PENDING
        assert [v.actor for v in first.votes] == ["bob"]
        # Another replica (or process) reads the vote; the call is still pending.
        assert await other.get("VT01") == first
        assert [c.id for c in await store.list_pending("console:alice")] == ["VT01"]

        done, outcome = await other.vote(
            "VT01",
            vote("carol", at=T0 + 2, via="card"),
            events=(line("VT01", "voted", "carol"),),
            approved_events=(line("VT01", "decided", "carol"),),
        )
        assert outcome is VoteOutcome.APPROVED
        assert done is not None and done.status is Status.APPROVED
        assert (done.decided_by, done.decided_at, done.decided_via) == ("carol", T0 + 2, "card")
        assert [(v.actor, v.at, v.via) for v in done.votes] == [
            ("bob", T0 + 1, "text"),
            ("carol", T0 + 2, "card"),
        ]
        assert done.execution.state is ExecState.WAITING
        assert await store.get("VT01") == done
        assert await store.list_pending("console:alice") == []
        assert [c.id for c in await store.list_approved_waiting()] == ["VT01"]
        # The trail lists each vote, then the decision.
        trail = [(e.kind, e.actor) for e in await store.events("VT01")]
        assert trail == [("voted", "bob"), ("voted", "carol"), ("decided", "carol")]
        # ... and the approved call is claimed like any other.
        claimed = await store.claim("VT01", instance="i1", now=T0 + 3, lease=15)
        assert claimed is not None and claimed.votes == done.votes

    async def test_one_vote_per_person(self, store: ConfirmationStore) -> None:
        await store.create(needs("VT02", 2))
        await store.vote("VT02", vote("bob"))
        again, outcome = await store.vote(
            "VT02", vote("BOB", at=T0 + 5), events=(line("VT02", "voted", "BOB"),)
        )
        assert outcome is VoteOutcome.ALREADY_VOTED
        assert again is not None and again.status is Status.PENDING
        assert [v.actor for v in again.votes] == ["bob"]
        assert [e.actor for e in await store.events("VT02")] == []  # nothing written

    async def test_votes_end_with_the_deadline_and_the_record(
        self, store: ConfirmationStore
    ) -> None:
        await store.create(needs("VT03", 2))
        late, outcome = await store.vote("VT03", vote("bob", at=T0 + TIMEOUT))
        assert outcome is VoteOutcome.REFUSED
        assert late is not None and late.votes == ()
        await store.create(needs("VT04", 2))
        await store.finish("VT04", Status.REJECTED, by="carol", via="text", reason="no", now=T0)
        settled, outcome = await store.vote("VT04", vote("bob"))
        assert outcome is VoteOutcome.REFUSED
        assert settled is not None and settled.status is Status.REJECTED
        assert settled.votes == ()
        assert await store.vote("NONE", vote("bob")) == (None, VoteOutcome.NOT_FOUND)

    async def test_a_rejection_keeps_the_votes_before_it(self, store: ConfirmationStore) -> None:
        await store.create(needs("VT05", 3))
        await store.vote("VT05", vote("bob"))
        done, changed = await store.finish(
            "VT05", Status.REJECTED, by="carol", via="card", reason="不行", now=T0 + 2
        )
        assert changed and done is not None
        assert (done.status, done.decided_by, done.reason) == (Status.REJECTED, "carol", "不行")
        assert [v.actor for v in done.votes] == ["bob"]
        assert done.execution.state is ExecState.SKIPPED

    async def test_two_last_votes_at_once_approve_once(self, backend: Backend) -> None:
        replicas = [await backend.open(), await backend.open()]
        rounds = 10
        for r in range(rounds):
            await replicas[0].create(needs(f"TL{r:02d}", 2))
            await replicas[0].vote(f"TL{r:02d}", vote("bob"))
        voters = ["carol", "dave", "erin", "frank"]
        calls = [
            replicas[i % 2].vote(f"TL{r:02d}", vote(who, at=T0 + 2 + i / 100))
            for r in range(rounds)
            for i, who in enumerate(voters)
        ]
        results = await asyncio.gather(*calls)
        for r in range(rounds):
            mine = results[r * len(voters) : (r + 1) * len(voters)]
            outcomes = [outcome for _, outcome in mine]
            assert outcomes.count(VoteOutcome.APPROVED) == 1, outcomes
            assert outcomes.count(VoteOutcome.REFUSED) == len(voters) - 1
            final = await replicas[1].get(f"TL{r:02d}")
            assert final is not None and final.status is Status.APPROVED
            winner = voters[outcomes.index(VoteOutcome.APPROVED)]
            assert [v.actor for v in final.votes] == ["bob", winner]
            assert final.decided_by == winner
            # Losers see the winner's record, not their own vote.
            assert all(record == final for record, _ in mine)

    async def test_a_rejection_racing_the_last_vote_settles_once(self, backend: Backend) -> None:
        replicas = [await backend.open(), await backend.open()]
        rounds = 12
        for r in range(rounds):
            await replicas[0].create(needs(f"RR{r:02d}", 2))
            await replicas[0].vote(f"RR{r:02d}", vote("bob"))
        calls = []
        for r in range(rounds):
            cid = f"RR{r:02d}"
            # Alternate which goes first and on which handle: both orders get their turn.
            approve = replicas[r % 2].vote(cid, vote("carol", at=T0 + 2))
            reject = replicas[(r + 1) % 2].finish(
                cid, Status.REJECTED, by="dave", via="card", reason="no", now=T0 + 2
            )
            calls += [approve, reject] if r % 2 else [reject, approve]
        results = await asyncio.gather(*calls)
        seen = set()
        for r in range(rounds):
            pair = results[2 * r : 2 * r + 2]
            vote_result = next(x for x in pair if isinstance(x[1], VoteOutcome))
            finish_result = next(x for x in pair if isinstance(x[1], bool))
            approved = vote_result[1] is VoteOutcome.APPROVED
            rejected = finish_result[1]
            assert approved != rejected, (vote_result, finish_result)
            final = await replicas[1].get(f"RR{r:02d}")
            assert final is not None
            assert final.status is (Status.APPROVED if approved else Status.REJECTED)
            assert final.decided_by == ("carol" if approved else "dave")
            expected_votes = ["bob", "carol"] if approved else ["bob"]
            assert [v.actor for v in final.votes] == expected_votes
            seen.add(final.status)
        assert seen  # at least one way; usually both across the rounds

    async def test_each_counted_vote_then_the_approval_is_announced(self, backend: Backend) -> None:
        """Another replica's admin feed and cards hear of a vote short of the count
        (``voted``) as of the last one (``resolved``); a refused second vote is no change."""
        watching = await backend.open()
        voting = await backend.open() if watching.shared else watching
        await watching.create(needs("AN01", 2))
        local = voting is watching
        async with watching.lifecycle_feed() as feed:
            await voting.vote("AN01", vote("bob"))
            await voting.vote("AN01", vote("bob", at=T0 + 2))  # already voted
            await voting.vote("AN01", vote("carol", at=T0 + 3))
            got = [await asyncio.wait_for(anext(feed), timeout=5) for _ in range(2)]
            assert got == [FeedEntry("AN01", "voted", local), FeedEntry("AN01", "resolved", local)]
