"""Grants an approver shapes (docs/grants.md, "Shapes"), on memory, SQLite and Redis.

Pinned to the exact arguments, or single use, for 5 minutes to 8 hours. What a person
would notice if it broke: a single-use grant letting two calls run (two replicas asking at
once), a grant pinned to one row's arguments covering another row, or a shaped grant
given on a critical or four-eyes call.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.confirm.grants import SINGLE_USED, GrantBook, GrantRefusedError
from gateway.confirm.model import Grant, Risk, ToolCall
from gateway.confirm.views import card_view, grant_offered
from gateway.storage.grants import MemoryGrantStore
from tests.confirm.test_grants_contract import DELETE, Clock, Opener, ask, confirmation
from tests.confirm.test_grants_contract import opener as opener  # the fixture, every backend

OTHER_ROW = {"sql": "DELETE FROM orders WHERE id = 4"}


async def test_single_use_two_calls_at_once_on_several_handles_one_covered(
    opener: Opener,
) -> None:
    clock = Clock()
    books = [GrantBook(await opener(), clock=clock) for _ in range(3)]
    grant = await books[0].give(
        confirmation(), scope="session", minutes=60, by="bob", via="admin", single_use=True
    )
    assert grant.single_use
    covered = await asyncio.gather(
        *(ask(books[n % 3], call_id=f"call_{n}") for n in range(12)),
    )
    assert len([g for g in covered if g is not None]) == 1
    assert await ask(books[1]) is None  # used up
    stored = await books[2].get(grant.id)
    assert stored is not None and stored.revoked_by == SINGLE_USED and stored.single_use
    assert await books[2].live() == []
    kinds = [e.kind for e in await books[0].events(grant.id)]
    assert kinds.count("used") == 1


async def test_pinned_to_arguments_covers_only_those_arguments_here(opener: Opener) -> None:
    clock = Clock()
    book = GrantBook(await opener(), clock=clock)
    other = GrantBook(await opener(), clock=clock)
    grant = await book.give(
        confirmation(), scope="session", minutes=120, by="bob", via="admin", pin="args"
    )
    assert grant.args_key is not None and not grant.single_use
    assert await ask(other, args=OTHER_ROW) is None  # another row of the same table
    assert await ask(other, session_key="webchat:elsewhere") is None  # another session
    assert await ask(other, requester="carol") is None
    assert await ask(other, args=dict(DELETE)) is not None
    assert await ask(other, args=dict(DELETE)) is not None  # not single use: again
    clock.now += 120 * 60
    assert await ask(other, args=dict(DELETE)) is None


async def test_pinned_to_the_scope_single_use_covers_another_row_once(opener: Opener) -> None:
    book = GrantBook(await opener(), clock=Clock())
    await book.give(
        confirmation(), scope="session", minutes=5, by="bob", via="admin", single_use=True
    )
    assert await ask(book, args=OTHER_ROW) is not None
    assert await ask(book, args=OTHER_ROW) is None


async def test_shapes_last_5_minutes_to_8_hours_and_never_cover_what_grants_never_do(
    opener: Opener,
) -> None:
    book = GrantBook(await opener(), clock=Clock())
    for minutes in (4, 8 * 60 + 1):
        for shape in ({"pin": "args"}, {"single_use": True}):
            with pytest.raises(GrantRefusedError):
                await book.give(
                    confirmation(), scope="session", minutes=minutes, by="b", via="admin",
                    **shape,  # type: ignore[arg-type]
                )  # fmt: skip
    for c in (confirmation(risk=Risk.CRITICAL), confirmation(four_eyes=True)):
        with pytest.raises(GrantRefusedError):
            await book.give(c, scope="session", minutes=60, by="b", via="admin", pin="args")
    plain = confirmation(tool_call=ToolCall("refund", {"amount": 5}, "call_1"), details={})
    await book.give(plain, scope="session", minutes=60, by="b", via="admin", pin="args")
    assert await ask(book, tool="refund", args={"amount": 9}, scope=None) is None
    assert await ask(book, tool="refund", args={"amount": 5}, scope=None) is not None


async def test_a_single_use_grant_the_store_cannot_use_up_covers_nothing() -> None:
    """The store fails as the grant would be used up (Redis away): the call is asked."""

    class RevokeFails(MemoryGrantStore):
        async def revoke(self, grant_id: str, *, by: str, now: float) -> Grant | None:
            raise ConnectionError("store away")

    book = GrantBook(RevokeFails(), clock=Clock())
    await book.give(
        confirmation(), scope="session", minutes=60, by="bob", via="admin", single_use=True
    )
    assert await ask(book) is None


async def test_a_held_call_offers_no_grant_and_is_given_none(opener: Opener) -> None:
    """A held call (sql_undo, SQL calling a function off the allow-list) is asked every
    time: its card must not offer "approve and stop asking" — a grant on it would never be
    used (GrantBook.covering(held=True)), so the button would lie."""
    held = confirmation(details={"statement": DELETE["sql"], "hold": "always asked"})
    assert grant_offered(confirmation())
    assert not grant_offered(held)
    assert not card_view(held).grant.allowed
    book = GrantBook(await opener(), clock=Clock())
    with pytest.raises(GrantRefusedError, match="no grant covers it"):
        await book.give(held, scope="session", minutes=30, by="bob", via="card")
    assert await book.live() == []
