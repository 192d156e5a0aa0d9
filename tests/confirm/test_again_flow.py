"""Ask again (issue 25 item 4), end to end through the composed gateway: the real bus, the
command agent, the SQL tools and policy, the confirmation service and its store.

An expired call offers 重新发起 / Ask again to its requester; ``重新发起 K7Q2`` asks the same
call again as a new confirmation (preview and policy evaluated again), linked to the first
both ways; approving the new one runs it and the chat reads the result.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from config.policy_settings import PolicySettings
from config.settings import Settings
from gateway.app import Gateway, build
from gateway.bus import InboundMessage, OutboundKind
from gateway.confirm.again import ASKING_GIVEN_UP_SECONDS, FROM, LINK
from gateway.confirm.model import Confirmation, ExecState, Status, ToolCall
from gateway.tools.policy import Policy
from tests.services import REDIS_URL, redis_prefix
from tests.support import RecordingChannel, ShiftedClock, pass_deadline, wait_record


@dataclass
class Chat:
    gw: Gateway
    channel: RecordingChannel
    clock: ShiftedClock
    n: int = 0

    async def say(self, text: str, *, user: str = "alice", chat: str = "c1") -> None:
        self.n += 1
        await self.gw.bus.publish_inbound(
            InboundMessage(
                channel="rec", chat_id=chat, sender_id=user, text=text, message_id=f"m{self.n}"
            )
        )

    async def expired_call(self, sql: str = "DELETE FROM orders WHERE id = 3") -> Confirmation:
        """A call asked with ``/sql`` whose deadline passed with no decision."""
        await self.say(f"/sql {sql}")
        prompt = await self.channel.next(OutboundKind.CONFIRMATION)
        assert prompt.confirmation is not None
        await pass_deadline(self.gw.confirmations, self.clock, prompt.confirmation.id)
        update = await self.channel.next(OutboundKind.CONFIRMATION_UPDATE)
        assert update.confirmation is not None
        assert update.confirmation.status is Status.EXPIRED
        # The chat line says how to ask it again, where no button can.
        cid = update.confirmation.id
        assert f"重新发起 {cid}" in update.text and f"retry {cid}" in update.text
        return update.confirmation


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.services)])
async def chat(
    request: pytest.FixtureRequest, make_settings: Callable[..., Settings]
) -> AsyncIterator[Chat]:
    async with AsyncExitStack() as stack:
        store: dict[str, Any] = {"store": request.param}
        if request.param == "redis":
            prefix = await stack.enter_async_context(redis_prefix())
            store.update(redis_url=REDIS_URL, redis_prefix=prefix)
        settings = make_settings(confirmation=store)
        clock = ShiftedClock()
        gw = await build(settings, serve_http=False, clock=clock)
        rec = RecordingChannel()
        gw.channels.add(rec)
        async with gw:
            yield Chat(gw, rec, clock)


def rows(settings: Settings, where: str) -> int:
    with sqlite3.connect(settings.data_dir / "demo.db") as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM orders WHERE {where}").fetchone()[0])


async def test_an_expired_call_asked_again_by_reply_runs_once_approved(chat: Chat) -> None:
    first = await chat.expired_call()
    assert rows(chat.gw.settings, "id = 3") == 1
    await chat.say(f"重新发起 {first.id}")
    prompt = await chat.channel.next(OutboundKind.CONFIRMATION)
    new = prompt.confirmation
    assert new is not None and new.id != first.id
    assert new.status is Status.PENDING
    # The same call, with its preview worked out again.
    assert new.tool_call.name == first.tool_call.name
    assert new.tool_call.args == first.tool_call.args
    assert new.details["rows_affected"] == 1 and new.details["policy_rule"]
    assert new.details[FROM] == first.id
    assert new.id in prompt.text and "DELETE FROM orders WHERE id = 3" in prompt.text
    assert f"重新发起自 Asked again from: {first.id}" in prompt.text
    # The first card loses its button and says where the call went.
    moved = await chat.channel.next(OutboundKind.CONFIRMATION_UPDATE)
    assert moved.confirmation is not None and moved.confirmation.id == first.id
    link = moved.confirmation.details[LINK]
    assert link["id"] == new.id and link["by"] == "alice" and link["outcome"] == "asked"
    view = chat.gw.confirmations.card_view(moved.confirmation, "alice")
    assert view.can_decide()["again"]["offered"] is False
    # Linked both ways in the audit trail.
    first_trail = [
        (e.kind, e.detail.get("id")) for e in await chat.gw.confirmations.store.events(first.id)
    ]
    assert ("asked_again", new.id) in first_trail
    new_trail = [
        (e.kind, e.detail.get("id")) for e in await chat.gw.confirmations.store.events(new.id)
    ]
    assert ("asked_again_from", first.id) in new_trail
    # Approved: it runs, once, and the chat reads the result.
    await chat.say("确认")
    await chat.channel.next(contains="DELETE: 1 行 / 1 row")
    assert rows(chat.gw.settings, "id = 3") == 0
    done = await wait_record(
        chat.gw, new.id, lambda c: c.execution.state is ExecState.SUCCEEDED, what="succeeded"
    )
    assert done.decided_by == "alice"
    stays = await chat.gw.confirmations.get(first.id)
    assert stays is not None and stays.status is Status.EXPIRED
    assert stays.execution.state is ExecState.SKIPPED


async def test_a_second_ask_says_where_the_first_went(chat: Chat) -> None:
    first = await chat.expired_call()
    await chat.say(f"retry {first.id}")
    new = (await chat.channel.next(OutboundKind.CONFIRMATION)).confirmation
    assert new is not None
    chat.channel.skip_sent()
    await chat.say(f"retry {first.id.lower()}")
    told = await chat.channel.next(OutboundKind.TEXT)
    assert first.id in told.text and new.id in told.text
    assert "已经重新发起过" in told.text and "asked again already" in told.text
    # Nothing else was asked: the new call is the only one pending.
    pending = await chat.gw.confirmations.list(status=Status.PENDING)
    assert [c.id for c in pending] == [new.id]


async def test_only_the_requester_may_ask_again(chat: Chat) -> None:
    first = await chat.expired_call()
    chat.channel.skip_sent()
    await chat.say(f"重新发起 {first.id}", user="bob")
    told = await chat.channel.next(OutboundKind.TEXT)
    assert "仅发起人 alice 可以重新发起" in told.text and "only alice" in told.text
    assert await chat.gw.confirmations.list(status=Status.PENDING) == []
    kept = await chat.gw.confirmations.get(first.id)
    assert kept is not None and LINK not in kept.details
    # bob's card shows the button, and why it is not his to press.
    offer = chat.gw.confirmations.card_view(kept, "bob").can_decide()["again"]
    assert offer["offered"] is True and offer["allowed"] is False and "alice" in offer["why"]
    mine = chat.gw.confirmations.card_view(kept, "alice").can_decide()["again"]
    assert mine == {"offered": True, "allowed": True, "why": "", "went": None}


async def test_a_rejected_or_pending_call_is_not_asked_again(chat: Chat) -> None:
    await chat.say("/sql DELETE FROM orders WHERE id = 4")
    pending = (await chat.channel.next(OutboundKind.CONFIRMATION)).confirmation
    assert pending is not None
    await chat.say(f"retry {pending.id}")
    told = await chat.channel.next(OutboundKind.TEXT)
    assert "仍在等待决定" in told.text and "still waiting" in told.text
    await chat.say("取消")
    await chat.channel.next(OutboundKind.CONFIRMATION_UPDATE)
    await chat.say(f"retry {pending.id}")
    told = await chat.channel.next(OutboundKind.TEXT, contains=pending.id)
    assert "cancelled by a shutdown can be asked again" in told.text
    assert rows(chat.gw.settings, "id = 4") == 1


@pytest.mark.parametrize(
    ("level", "said"),
    [("deny", "the policy now denies this call"), ("manual", "the policy now sets it to manual")],
)
async def test_a_call_the_policy_now_refuses_is_not_asked(
    chat: Chat, level: str, said: str
) -> None:
    """The policy is evaluated again: an operator who set sql_modify to deny (or manual)
    since the call expired is obeyed, and the chat is told why nothing was asked."""
    first = await chat.expired_call("DELETE FROM orders WHERE id = 5")
    chat.gw.runner.policy = Policy(PolicySettings(levels={"sql_modify": level}))  # type: ignore[dict-item]
    chat.channel.skip_sent()
    await chat.say(f"重新发起 {first.id}")
    where = await chat.channel.next(OutboundKind.TEXT, contains=said)
    assert first.id in where.text
    assert await chat.gw.confirmations.list(status=Status.PENDING) == []
    linked = await chat.gw.confirmations.get(first.id)
    assert linked is not None and linked.details[LINK]["outcome"] == level.replace("deny", "denied")
    assert rows(chat.gw.settings, "id = 5") == 1


async def test_a_call_the_policy_now_lets_run_runs_when_asked_again(chat: Chat) -> None:
    first = await chat.expired_call("DELETE FROM orders WHERE id = 6")
    chat.gw.runner.policy = Policy(PolicySettings(levels={"sql_modify": "auto"}))
    chat.channel.skip_sent()
    await chat.say(f"重新发起 {first.id}")
    await chat.channel.next(OutboundKind.TEXT, contains="DELETE: 1 行 / 1 row")
    where = await chat.channel.next(OutboundKind.TEXT, contains=first.id)
    assert "it ran" in where.text
    assert rows(chat.gw.settings, "id = 6") == 0
    assert await chat.gw.confirmations.list(status=Status.PENDING) == []


@pytest.mark.services
async def test_two_replicas_pressed_at_once_ask_again_once(
    make_settings: Callable[..., Settings],
) -> None:
    """The link is the store's compare-and-set: the requester's presses on two replicas
    sharing Redis at the same moment make one new question; the other is told where it
    went."""
    async with redis_prefix() as prefix:
        store = {"store": "redis", "redis_url": REDIS_URL, "redis_prefix": prefix}
        clock = ShiftedClock()
        one = await build(make_settings(confirmation=store), serve_http=False, clock=clock)
        two = await build(make_settings(confirmation=store), serve_http=False, clock=clock)
        rec = RecordingChannel()
        one.channels.add(rec)
        two.channels.add(RecordingChannel())
        async with one, two:
            first = await Chat(one, rec, clock).expired_call()
            results = await asyncio.gather(
                one.confirmations.ask_again(first.id, actor="alice", via="card"),
                two.confirmations.ask_again(first.id, actor="alice", via="card"),
            )
            assert sorted(r.done for r in results) == [False, True]
            pending = await one.confirmations.list(status=Status.PENDING)
            assert len(pending) == 1 and pending[0].details[FROM] == first.id
            told = next(r for r in results if not r.done).message
            assert "asked again already" in told and pending[0].id in told


async def test_a_drifted_call_without_a_turn_is_asked_again_and_reported(
    make_settings: Callable[..., Settings],
) -> None:
    """A call no model turn waits for (a command's): the drifted run is reported failed with
    the new numbers, the new question asks with a fresh preview, and once approved its
    result line is posted."""
    from tests.confirm import again_tools

    again_tools.STATE.update(rows=3, runs=0, drift_runs=1)
    settings = make_settings(tools={"plugins": ["tests.confirm.again_tools"]})
    gw = await build(settings, serve_http=False)
    rec = RecordingChannel()
    gw.channels.add(rec)
    try:
        async with gw:
            turn = gw.loop.turn_for(
                InboundMessage(channel="rec", chat_id="c1", sender_id="alice", text="")
            )
            call = ToolCall(name="archive_orders", args={"status": 1}, call_id="c-1")
            asked = await gw.runner.invoke(call, turn)
            assert asked.status == "waiting" and asked.confirmation is not None
            first = asked.confirmation
            again_tools.STATE["rows"] = 7
            chat = Chat(gw, rec, ShiftedClock())
            await chat.say("确认")
            await rec.next(OutboundKind.TEXT, contains="7 rows now")  # the run's failure
            told = await rec.next(OutboundKind.TEXT, contains=first.id)
            assert "asking again with the new data" in told.text
            prompt = await rec.next(OutboundKind.CONFIRMATION)
            new = prompt.confirmation
            assert new is not None and new.details[FROM] == first.id
            assert "archive 7 rows" in new.summary and new.continuation is None
            await chat.say("确认")
            await rec.next(OutboundKind.TEXT, contains="archived 7 rows")
            assert again_tools.STATE["runs"] == 2
    finally:
        again_tools.STATE.update(rows=3, runs=0, drift_runs=1)


async def test_an_ask_refused_by_the_pending_cap_can_be_made_again_later(
    make_settings: Callable[..., Settings],
) -> None:
    """Nothing asked (the chat already holds as many calls as it may): the chat is told why,
    and the record's one ask is not used up; once the chat has room, it is asked again."""
    settings = make_settings(confirmation={"store": "memory", "max_pending_per_session": 1})
    clock = ShiftedClock()
    gw = await build(settings, serve_http=False, clock=clock)
    rec = RecordingChannel()
    gw.channels.add(rec)
    async with gw:
        chat = Chat(gw, rec, clock)
        first = await chat.expired_call()
        await chat.say("/sql DELETE FROM orders WHERE id = 4")
        holding = (await rec.next(OutboundKind.CONFIRMATION)).confirmation
        assert holding is not None
        await chat.say(f"retry {first.id}")
        await rec.next(OutboundKind.TEXT, contains="this chat already has 1 calls waiting")
        told = await rec.next(OutboundKind.TEXT, contains=first.id)
        assert "you can ask again later" in told.text
        kept = await gw.confirmations.get(first.id)
        assert kept is not None and kept.details[LINK]["outcome"] == "failed"
        offer = gw.confirmations.card_view(kept, "alice").can_decide()["again"]
        assert offer == {"offered": True, "allowed": True, "why": "", "went": None}
        await chat.say(f"取消 {holding.id}")
        await rec.next(OutboundKind.CONFIRMATION_UPDATE)
        await chat.say(f"retry {first.id}")
        new = (await rec.next(OutboundKind.CONFIRMATION)).confirmation
        assert new is not None and new.details[FROM] == first.id
        linked = await gw.confirmations.get(first.id)
        assert linked is not None and linked.details[LINK]["id"] == new.id


async def _leave_asking(chat: Chat, first: Confirmation, new_id: str, *, age: float) -> None:
    """The link as a process leaves it when killed after writing it and before writing
    what the ask came to: ``asking``, ``age`` seconds ago."""
    current = await chat.gw.confirmations.get(first.id)
    assert current is not None
    asking = {"id": new_id, "by": "alice", "via": "text", "at": chat.clock() - age}
    _, changed = await chat.gw.confirmations.store.swap_detail(
        first.id, LINK, expected=current.details.get(LINK), value={**asking, "outcome": "asking"}
    )
    assert changed


async def test_an_ask_cut_short_by_a_dead_process_is_made_again(chat: Chat) -> None:
    """Killed between the link and the new question: no question exists. While that could
    still be a live ask, a retry is told it is being asked; once it is plainly given up,
    the retry asks the call again, and the link points at the new question."""
    first = await chat.expired_call()
    await _leave_asking(chat, first, "ZZ99", age=10)
    chat.channel.skip_sent()
    await chat.say(f"retry {first.id}")
    told = await chat.channel.next(OutboundKind.TEXT)
    assert "being asked again as ZZ99" in told.text
    assert await chat.gw.confirmations.list(status=Status.PENDING) == []

    await _leave_asking(chat, first, "ZZ99", age=ASKING_GIVEN_UP_SECONDS + 1)
    await chat.say(f"retry {first.id}")
    new = (await chat.channel.next(OutboundKind.CONFIRMATION)).confirmation
    assert new is not None and new.details[FROM] == first.id
    linked = await chat.gw.confirmations.get(first.id)
    assert linked is not None
    assert (linked.details[LINK]["id"], linked.details[LINK]["outcome"]) == (new.id, "asked")
    events = [e.kind for e in await chat.gw.confirmations.store.events(first.id)]
    assert events.count("asked_again_outcome") == 2  # the mend, then the new ask's end


async def test_an_ask_whose_last_word_was_lost_points_at_its_question(chat: Chat) -> None:
    """Killed after the new question was made, before the link said so: the next retry
    finds the question, mends the link to it and says where it went; nothing is asked twice."""
    first = await chat.expired_call()
    await chat.say(f"retry {first.id}")
    new = (await chat.channel.next(OutboundKind.CONFIRMATION)).confirmation
    assert new is not None
    await _leave_asking(chat, first, new.id, age=ASKING_GIVEN_UP_SECONDS + 1)
    chat.channel.skip_sent()
    await chat.say(f"retry {first.id}")
    told = await chat.channel.next(OutboundKind.TEXT, contains="asked again already")
    assert f"asked again as {new.id}" in told.text
    linked = await chat.gw.confirmations.get(first.id)
    assert linked is not None and linked.details[LINK]["outcome"] == "asked"
    pending = await chat.gw.confirmations.list(status=Status.PENDING)
    assert [c.id for c in pending] == [new.id]
