"""The grant store contract, on memory, SQLite and Redis; and what GrantBook never covers.

Two handles on the same data (two replicas, two processes on one file) see the same
grants, and of two revokes one wins. Time is an injected clock, never a sleep.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.confirm.grants import GrantBook, GrantRefusedError
from gateway.confirm.model import Confirmation, Grant, Risk, ToolCall
from gateway.storage.grants import GrantStore, MemoryGrantStore
from gateway.storage.redis.grants import RedisGrantStore
from gateway.storage.sqlite.grants import SqliteGrantStore
from tests.confirm.conftest import REDIS_URL, redis_client

Opener = Callable[[], Awaitable[GrantStore]]
DELETE = {"sql": "DELETE FROM orders WHERE id = 3"}
ORDERS_DELETES = {"kind": ["DELETE"], "tables": ["orders"]}  # sql_modify's grant_scope


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.services)])
async def opener(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    handles: list[GrantStore] = []
    kind = request.param
    if kind == "memory":
        shared = MemoryGrantStore()

        async def same() -> GrantStore:
            return shared

        yield same
        return
    admin = await redis_client() if kind == "redis" else None
    prefix = f"gateway-test:{uuid.uuid4().hex}"

    async def open_one() -> GrantStore:
        store: GrantStore
        if kind == "sqlite":
            store = await SqliteGrantStore.open(tmp_path / "confirmations.db")
        else:
            store = await RedisGrantStore.from_url(REDIS_URL, prefix=prefix)
        handles.append(store)
        return store

    try:
        yield open_one
    finally:
        for handle in handles:
            await handle.close()
        if admin is not None:
            keys = [k async for k in admin.scan_iter(match=f"{prefix}:*")]
            if keys:
                await admin.delete(*keys)
            await admin.aclose()


class Clock:
    def __init__(self) -> None:
        self.now = 1_763_900_000.25

    def __call__(self) -> float:
        return self.now


def confirmation(**overrides: Any) -> Confirmation:
    fields: dict[str, Any] = {
        "id": "K7Q2",
        "session_key": "webchat:ops",
        "channel": "webchat",
        "chat_id": "ops",
        "requester": "alice",
        "is_group": True,
        "tool_call": ToolCall("sql_modify", DELETE, "call_1"),
        "summary": "DELETE orders",
        "details": {"statement": DELETE["sql"], "grant_scope": ORDERS_DELETES},
        "created_at": 1.0,
        "expires_at": 2.0,
        "risk": Risk.MEDIUM,
    }
    return Confirmation(**{**fields, **overrides})


def ask(book: GrantBook, **overrides: Any) -> Awaitable[Any]:
    call: dict[str, Any] = {
        "tool": "sql_modify",
        "args": DELETE,
        "scope": ORDERS_DELETES,
        "session_key": "webchat:ops",
        "requester": "alice",
        "risk": Risk.MEDIUM,
        "four_eyes": False,
        "call_id": "call_2",
    }
    return book.covering(**{**call, **overrides})


async def test_a_grant_is_seen_by_another_handle_and_expires(opener: Opener) -> None:
    clock = Clock()
    book = GrantBook(await opener(), clock=clock)
    other = GrantBook(await opener(), clock=clock)
    grant = await book.give(confirmation(), scope="session", minutes=30, by="bob", via="text")
    assert await other.get(grant.id) == grant
    assert [g.id for g in await other.live()] == [grant.id]
    assert await ask(other) == grant
    clock.now += 30 * 60
    assert await other.live() == []
    assert await ask(other) is None
    kinds = [e.kind for e in await book.events(grant.id)]
    assert kinds == ["given", "used"]


async def test_of_two_revokes_one_wins_and_a_revoked_grant_covers_nothing(
    opener: Opener,
) -> None:
    clock = Clock()
    book = GrantBook(await opener(), clock=clock)
    other = GrantBook(await opener(), clock=clock)
    grant = await book.give(confirmation(), scope="call", minutes=60, by="bob", via="admin")
    first = await book.revoke(grant.id, by="carol")
    second = await other.revoke(grant.id, by="dave")
    assert first is not None and first.revoked_by == "carol" and first.revoked_at == clock.now
    assert second is None
    assert await ask(other) is None
    assert await other.live() == []
    stored = await other.get(grant.id)
    assert stored is not None and stored.revoked_by == "carol"
    assert [e.kind for e in await other.events(grant.id)] == ["given", "revoked"]
    assert await book.revoke("gnothere", by="carol") is None


async def test_what_a_grant_never_covers(opener: Opener) -> None:
    book = GrantBook(await opener(), clock=Clock())
    for c in (confirmation(risk=Risk.CRITICAL), confirmation(four_eyes=True)):
        with pytest.raises(GrantRefusedError):
            await book.give(c, scope="session", minutes=30, by="bob", via="text")
    with pytest.raises(GrantRefusedError):
        await book.give(confirmation(), scope="session", minutes=24 * 60 + 1, by="b", via="t")

    await book.give(confirmation(), scope="session", minutes=30, by="bob", via="text")
    assert await ask(book, args={"sql": "DELETE FROM orders WHERE id > 4"}) is not None
    assert await ask(book, tool="sql_query") is None
    assert await ask(book, session_key="webchat:other") is None
    assert await ask(book, requester="mallory") is None
    assert await ask(book, risk=Risk.HIGH) is None
    assert await ask(book, risk=Risk.CRITICAL) is None
    assert await ask(book, four_eyes=True) is None


async def test_a_call_grant_covers_exactly_that_call_anywhere(opener: Opener) -> None:
    book = GrantBook(await opener(), clock=Clock())
    await book.give(confirmation(), scope="call", minutes=60, by="bob", via="admin")
    reordered = {"sql": DELETE["sql"]}
    assert await ask(book, args=reordered, session_key="feishu:x", requester="z") is not None
    assert await ask(book, args={"sql": "DELETE FROM orders WHERE id = 4"}) is None
    assert await ask(book, tool="other_tool") is None


async def test_a_session_grant_covers_only_the_scope_it_was_given_on(opener: Opener) -> None:
    """Issue 22: a grant given on ``DELETE FROM orders WHERE id = 3`` covers DELETEs on
    ``orders``, not every call of sql_modify; the scope is stored with the grant."""
    book = GrantBook(await opener(), clock=Clock())
    other = GrantBook(await opener(), clock=Clock())
    grant = await book.give(confirmation(), scope="session", minutes=30, by="bob", via="text")
    stored = await other.get(grant.id)
    assert stored is not None and stored.covers == ORDERS_DELETES
    assert [g.covers for g in await other.live()] == [ORDERS_DELETES]
    update = {"kind": ["UPDATE"], "tables": ["orders"]}
    assert await ask(other, scope=update) is None
    assert await ask(other, scope={"kind": ["DELETE"], "tables": ["customers"]}) is None
    assert await ask(other, scope={"kind": ["DELETE"], "tables": ["customers", "orders"]}) is None
    assert await ask(other, scope={"kind": ["DELETE"], "tables": ["public.orders"]}) is None
    assert await ask(other, scope=None) is None
    assert await ask(other) == stored

    # A tool whose preview gives no scope: a grant on it covers any of its arguments.
    plain = confirmation(tool_call=ToolCall("refund", {"amount": 5}, "call_1"), details={})
    given = await book.give(plain, scope="session", minutes=30, by="bob", via="text")
    assert given.covers is None
    assert await ask(other, tool="refund", args={"amount": 9}, scope=None) is not None


async def test_a_grant_stored_without_a_scope_covers_no_scoped_call(opener: Opener) -> None:
    """A grant written before grants had scopes reads back with none, and then covers no
    SQL call (docs/grants.md): upgrading never widens a live grant."""
    book = GrantBook(await opener(), clock=Clock())
    grant = await book.give(confirmation(), scope="session", minutes=30, by="bob", via="text")
    old = grant.to_dict()
    del old["covers"]
    legacy = Grant.from_dict({**old, "id": "gold0001"})
    assert legacy.covers is None
    store = await opener()
    await store.revoke(grant.id, by="upgrade", now=Clock().now)
    await store.add(legacy)
    assert [g.id for g in await book.live()] == ["gold0001"]
    assert await ask(book) is None
