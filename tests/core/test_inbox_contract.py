"""The Inbox contract, run unchanged against every backend (invariant 9).

``inbox`` is parametrized with ``indirect=True``, as the confirmation store contract is: a
backend joins by adding a branch to the fixture. ``Backend.reopen(owner)`` is what another
gateway process (the next run, or another replica) sees on the same data, under its own
instance id (for memory: the same rows, as nothing survives a process there).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.bus import InboundMessage
from gateway.storage.inbox import Inbox, MemoryInbox
from gateway.storage.sqlite.inbox import SqliteInbox
from tests.services import REDIS_URL, redis_prefix

BACKENDS = ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.services)]
DURABLE_BACKENDS = ["sqlite", pytest.param("redis", marks=pytest.mark.services)]
# Redis forgets taken ids by key TTL, not by purge(): see tests/core/test_redis_inbox.py.
PURGING_BACKENDS = ["memory", "sqlite"]
T0 = 1_763_000_000.123456


@dataclass
class Backend:
    name: str
    open: Callable[[str], Awaitable[Inbox]]
    handles: list[Inbox] = field(default_factory=list)

    async def reopen(self, owner: str = "first") -> Inbox:
        handle = await self.open(owner)
        self.handles.append(handle)
        return handle


@pytest.fixture
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    name = request.param
    async with AsyncExitStack() as stack:
        if name == "memory":
            shared = MemoryInbox()

            async def open_memory(owner: str) -> Inbox:
                return shared.share(owner=owner)

            made = Backend(name, open_memory)
        elif name == "sqlite":

            async def open_sqlite(owner: str) -> Inbox:
                return await SqliteInbox.open(tmp_path / "inbox.db", owner=owner)

            made = Backend(name, open_sqlite)
        elif name == "redis":
            from redis.asyncio import Redis

            from gateway.storage.redis.inbox import RedisInbox

            prefix = await stack.enter_async_context(redis_prefix())
            client = Redis.from_url(REDIS_URL)
            stack.push_async_callback(client.aclose)

            async def open_redis(owner: str) -> Inbox:
                # Claimable at once: the contract is about who gets what, not about time.
                return await RedisInbox.open(
                    client, prefix=prefix, owner=owner, claim_idle_seconds=0
                )

            made = Backend(name, open_redis)
        else:
            raise AssertionError(f"unknown backend {name}")
        try:
            yield made
        finally:
            for handle in made.handles:
                await handle.close()


@pytest.fixture
async def inbox(backend: Backend) -> Inbox:
    return await backend.reopen()


def msg(message_id: str | None = "m1", *, channel: str = "feishu", **kw: object) -> InboundMessage:
    fields: dict[str, object] = {
        "channel": channel,
        "chat_id": "oc_1",
        "sender_id": "ou_alice",
        "text": "你好 hello",
        "message_id": message_id,
        "received_at": T0,
    }
    fields.update(kw)
    return InboundMessage(**fields)  # type: ignore[arg-type]


def ids(messages: list[InboundMessage]) -> list[str | None]:
    return [m.message_id for m in messages]


each_backend = pytest.mark.parametrize("backend", BACKENDS, indirect=True)


@each_backend
async def test_put_stores_once_per_channel_and_message_id(inbox: Inbox) -> None:
    assert await inbox.put(msg("m1")) is True
    assert await inbox.put(msg("m1", text="redelivered")) is False
    # Ids are the platform's: the same id on another channel is another message.
    assert await inbox.put(msg("m1", channel="dingtalk")) is True
    stored = await inbox.untaken()
    assert [(m.channel, m.message_id, m.text) for m in stored] == [
        ("feishu", "m1", "你好 hello"),
        ("dingtalk", "m1", "你好 hello"),
    ]


@each_backend
async def test_untaken_is_oldest_first_and_leaves_out_taken(inbox: Inbox) -> None:
    for i in (3, 1, 2, 5, 4):
        await inbox.put(msg(f"m{i}"))
    await inbox.taken("feishu", "m2")
    await inbox.taken("feishu", "m5")
    assert ids(await inbox.untaken()) == ["m3", "m1", "m4"]


@each_backend
async def test_a_taken_message_is_still_a_duplicate(inbox: Inbox) -> None:
    await inbox.put(msg("m1"))
    await inbox.taken("feishu", "m1")
    assert await inbox.put(msg("m1")) is False
    assert await inbox.untaken() == []


each_purging_backend = pytest.mark.parametrize("backend", PURGING_BACKENDS, indirect=True)


@each_purging_backend
async def test_taken_of_an_unknown_or_taken_message_changes_nothing(inbox: Inbox) -> None:
    await inbox.taken("feishu", "never-stored")
    await inbox.put(msg("m1"))
    await inbox.taken("feishu", "m1", at=T0)
    await inbox.taken("feishu", "m1", at=T0 + 10_000)  # the first time counts for purge
    assert await inbox.purge(T0 + 1) == 1
    assert await inbox.put(msg("never-stored")) is True


@each_backend
async def test_a_message_round_trips_whole(inbox: Inbox) -> None:
    original = msg(
        "m1",
        chat_id="cid==",
        sender_name="爱丽丝",
        is_group=True,
        reply_to="m0",
        session_key="feishu:cid==:ou_alice",
        metadata={"chat_type": "group", "expires": 1_763_000_999, "flag": True},
        text="确认 K7Q2\n第二行 🚀",
    )
    await inbox.put(original)
    assert await inbox.untaken() == [original]


@each_purging_backend
async def test_purge_forgets_only_messages_taken_before(inbox: Inbox) -> None:
    for i in range(1, 5):
        await inbox.put(msg(f"m{i}"))
    await inbox.taken("feishu", "m1", at=T0)
    await inbox.taken("feishu", "m2", at=T0 + 100)
    await inbox.taken("feishu", "m3", at=T0 + 200)
    assert await inbox.purge(T0 + 150) == 2
    # Purged: a redelivery now is stored as new. Kept: still a duplicate.
    assert await inbox.put(msg("m1")) is True
    assert await inbox.put(msg("m3")) is False
    # Untaken ones are never purged, however old.
    assert await inbox.purge(T0 + 10**9) == 1
    assert ids(await inbox.untaken()) == ["m4", "m1"]


@each_backend
async def test_a_message_without_a_platform_id_is_refused(inbox: Inbox) -> None:
    with pytest.raises(ValueError, match="message_id"):
        await inbox.put(msg(None))


@pytest.mark.parametrize("backend", DURABLE_BACKENDS, indirect=True)
async def test_the_next_process_sees_what_this_one_stored(backend: Backend) -> None:
    first = await backend.reopen("first")
    await first.put(msg("m1"))
    await first.put(msg("m2"))
    await first.taken("feishu", "m1")
    await first.close()
    backend.handles.remove(first)
    after_restart = await backend.reopen("second")
    assert ids(await after_restart.untaken()) == ["m2"]
    assert await after_restart.put(msg("m1")) is False
    assert await after_restart.put(msg("m2")) is False
    assert ids(await after_restart.adopt(alive=())) == ["m2"]


@each_backend
async def test_only_dead_owners_messages_are_adopted(backend: Backend) -> None:
    a, b, c = [await backend.reopen(owner) for owner in ("A", "B", "C")]
    await a.put(msg("m1"))
    await b.put(msg("m2"))
    await a.put(msg("m3"))
    await c.put(msg("m4"))
    # A is dead, B alive; C's own messages are never its to adopt.
    assert ids(await c.adopt(alive={"B"})) == ["m1", "m3"]
    # Adopted, they are C's: nothing of A's is left, and C lives.
    assert await c.adopt(alive={"B"}) == []
    assert await b.adopt(alive={"C"}) == []
    assert ids(await a.adopt(alive={"B", "C"})) == []
    # Adopting is not taking: all four still wait to be processed.
    assert ids(await c.untaken()) == ["m1", "m2", "m3", "m4"]


@each_backend
async def test_taken_messages_are_never_adopted_and_the_adopter_takes(backend: Backend) -> None:
    a, b = await backend.reopen("A"), await backend.reopen("B")
    for i in range(1, 4):
        await a.put(msg(f"m{i}"))
    await a.taken("feishu", "m2")
    assert ids(await b.adopt(alive=())) == ["m1", "m3"]
    await b.taken("feishu", "m1")
    await b.taken("feishu", "m3")
    assert await b.untaken() == []
    assert await a.put(msg("m3")) is False  # still a duplicate, whoever took it


@each_backend
async def test_a_message_goes_to_one_adopter_however_many_adopt_at_once(
    backend: Backend,
) -> None:
    dead = await backend.reopen("dead")
    for i in range(60):
        await dead.put(msg(f"m{i:02d}"))
    adopters = [await backend.reopen(f"live-{n}") for n in range(3)]
    everyone = {f"live-{n}" for n in range(3)}
    got = await asyncio.gather(*(a.adopt(alive=everyone - {a.owner}) for a in adopters))
    taken = [m for batch in got for m in ids(batch)]
    assert sorted(taken) == [f"m{i:02d}" for i in range(60)]  # each once, none lost
    for batch in got:
        assert ids(batch) == sorted(ids(batch))  # oldest first within each
