"""The Inbox contract, run unchanged against every backend (invariant 9).

``inbox`` is parametrized with ``indirect=True``, as the confirmation store contract is: a
backend joins by adding a branch to the fixture. ``Backend.reopen()`` is what the next
gateway process sees on the same data (for memory: the same object, as nothing survives
a process there).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gateway.bus import InboundMessage
from gateway.inbox import Inbox, MemoryInbox
from gateway.sqlite_inbox import SqliteInbox

BACKENDS = ["memory", "sqlite"]
DURABLE_BACKENDS = ["sqlite"]
T0 = 1_763_000_000.123456


@dataclass
class Backend:
    name: str
    open: Callable[[], Awaitable[Inbox]]
    handles: list[Inbox] = field(default_factory=list)

    async def reopen(self) -> Inbox:
        handle = await self.open()
        self.handles.append(handle)
        return handle


@pytest.fixture
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    name = request.param
    if name == "memory":
        shared = MemoryInbox()

        async def open_memory() -> Inbox:
            return shared

        made = Backend(name, open_memory)
    elif name == "sqlite":

        async def open_sqlite() -> Inbox:
            return await SqliteInbox.open(tmp_path / "inbox.db")

        made = Backend(name, open_sqlite)
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


@each_backend
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


@each_backend
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
    first = await backend.reopen()
    await first.put(msg("m1"))
    await first.put(msg("m2"))
    await first.taken("feishu", "m1")
    await first.close()
    backend.handles.remove(first)
    after_restart = await backend.reopen()
    assert ids(await after_restart.untaken()) == ["m2"]
    assert await after_restart.put(msg("m1")) is False
    assert await after_restart.put(msg("m2")) is False
