"""The web chat room store's contract, on every backend (memory, SQLite, Redis).

What a handle keeps (``kept``, what pages and long polls read) is checked against what the
next process or another replica reads from the backend (``rooms.restart``): the bounds must
drop the same entries in both, or pages on two replicas would read two histories.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from gateway.confirm.model import Confirmation, Risk, ToolCall
from gateway.storage.rooms import ENTRY_OVERHEAD_BYTES, RoomEntry, RoomStore
from tests.storage.conftest import BACKENDS, ROOM_BOUNDS, RoomsBackend

pytestmark = pytest.mark.parametrize("rooms", BACKENDS, indirect=True)

KIB = 1024


def line(room: str, text: str, *, user: str | None = "u") -> RoomEntry:
    return RoomEntry(room=room, kind="text", text=text, at=1.5, user=user, message_id="m1")


async def say(store: RoomStore, room: str, text: str) -> RoomEntry:
    return await store.append(line(room, text))


def texts(store: RoomStore, room: str) -> list[str]:
    return [e.text for e in store.kept.after(room, 0)]


def seqs(store: RoomStore, room: str) -> list[int]:
    return [e.seq for e in store.kept.after(room, 0)]


async def same_after_restart(rooms: RoomsBackend, store: RoomStore) -> RoomStore:
    """The next process (or another replica) reads what ``store`` keeps, entry for entry,
    and the backend holds no more than that: what the bounds dropped is gone from it too."""
    before = store.kept.entries()
    again = await rooms.restart(store)
    assert again.kept.entries() == before
    assert await rooms.held() == len(before)
    return again


def card() -> Confirmation:
    return Confirmation(
        id="K7Q2",
        session_key="webchat:ops",
        channel="webchat",
        chat_id="ops",
        requester="alice",
        is_group=True,
        tool_call=ToolCall(name="sql_modify", args={"sql": "DELETE ..."}, call_id="c1"),
        summary="DELETE FROM orders WHERE id = 3",
        created_at=10.0,
        expires_at=310.0,
        risk=Risk.HIGH,
    )


async def test_an_empty_store_has_no_rooms(rooms: RoomsBackend) -> None:
    store = await rooms.open()
    assert store.kept.after("lobby", 0) == []
    assert store.kept.last_seq_of("lobby") == 0
    assert len(store.kept) == 0


async def test_numbers_run_over_all_rooms_without_gaps(rooms: RoomsBackend) -> None:
    store = await rooms.open()
    said = [await say(store, room, text) for room, text in [("a", "1"), ("b", "2"), ("a", "3")]]
    assert [e.seq for e in said] == [1, 2, 3]
    assert seqs(store, "a") == [1, 3] and seqs(store, "b") == [2]
    assert store.kept.last_seq_of("a") == 3
    assert store.kept.after("a", 1) == [said[2]]


async def test_what_is_kept_reads_the_same_after_a_restart(rooms: RoomsBackend) -> None:
    store = await rooms.open()
    asked = card()
    await say(store, "ops", "你好 / hello")
    await store.append(line("ops", "pasted \udc80 by someone", user="bob"))
    prompt = "请确认 / confirm"
    await store.append(
        RoomEntry(room="ops", kind="confirmation", text=prompt, at=2.0, confirmation=asked)
    )
    again = await same_after_restart(rooms, store)
    entries = again.kept.after("ops", 0)
    assert [e.text for e in entries] == ["你好 / hello", "pasted \udc80 by someone", prompt]
    assert entries[1].user == "bob" and entries[0].message_id == "m1" and entries[0].at == 1.5
    assert entries[2].kind == "confirmation" and entries[2].user is None
    assert entries[2].confirmation == asked
    assert entries[2].to_dict()["confirmation"]["id"] == "K7Q2"


async def test_a_room_keeps_its_newest_entries_within_its_bytes(rooms: RoomsBackend) -> None:
    store = await rooms.open(replace(ROOM_BOUNDS, room_bytes=64 * KIB))
    for i in range(100):
        await say(store, "r", f"{i:03d}" + "测" * 1000)  # ~3.5 KiB each in UTF-8
    kept = [t[:3] for t in texts(store, "r")]
    assert kept == [f"{i:03d}" for i in range(100 - len(kept), 100)]
    assert 10 < len(kept) < 20
    assert store.kept.bytes <= 64 * KIB
    assert store.kept.last_seq_of("r") == 100
    await same_after_restart(rooms, store)


async def test_a_room_keeps_at_most_history_size_entries(rooms: RoomsBackend) -> None:
    store = await rooms.open(replace(ROOM_BOUNDS, history_size=10))
    for i in range(25):
        await say(store, "r", str(i))
    assert texts(store, "r") == [str(i) for i in range(15, 25)]
    await same_after_restart(rooms, store)


async def test_over_the_total_the_oldest_entry_of_any_room_goes_first(
    rooms: RoomsBackend,
) -> None:
    entry = 10 * KIB
    text = "x" * (entry - ENTRY_OVERHEAD_BYTES)
    store = await rooms.open(replace(ROOM_BOUNDS, total_bytes=10 * entry))
    for _ in range(6):
        await say(store, "a", text)
        await say(store, "b", text)
    # 12 entries written, room for 10: a's first and b's first went, nothing else.
    assert store.kept.bytes == 10 * entry
    assert seqs(store, "a") == [3, 5, 7, 9, 11]
    assert seqs(store, "b") == [4, 6, 8, 10, 12]
    for _ in range(5):
        await say(store, "c", text)
    # Five more: a3, b4, a5, b6, a7 went, in the order they were written.
    assert seqs(store, "a") == [9, 11]
    assert seqs(store, "b") == [8, 10, 12]
    assert len(seqs(store, "c")) == 5
    await same_after_restart(rooms, store)


async def test_past_max_rooms_the_least_recently_written_room_goes(rooms: RoomsBackend) -> None:
    store = await rooms.open(replace(ROOM_BOUNDS, max_rooms=2))
    await say(store, "a", "x" * 1000)
    await say(store, "b", "y" * 1000)
    await say(store, "a", "again")  # a written again: b is now the oldest
    await say(store, "c", "z" * 1000)
    assert texts(store, "b") == [] and store.kept.last_seq_of("b") == 0
    assert texts(store, "a") == ["x" * 1000, "again"]
    assert len(store.kept) == 2
    assert store.kept.bytes == sum(e.size for e in store.kept.entries())
    await same_after_restart(rooms, store)


async def test_a_poll_gets_what_came_after_its_number(rooms: RoomsBackend) -> None:
    store = await rooms.open(replace(ROOM_BOUNDS, history_size=10))
    for i in range(25):
        await say(store, "r", str(i))
    await say(store, "other", "elsewhere")  # 26: not this room's
    assert [e.seq for e in store.kept.after("r", 22)] == [23, 24, 25]
    assert store.kept.after("r", 25) == []
    assert store.kept.after("r", 26) == []  # nothing newer in this room yet
    assert [e.seq for e in store.kept.after("r", 3)] == list(range(16, 26))  # older ones went
    # A number past every one given out is from an earlier life: the whole room.
    assert [e.seq for e in store.kept.after("r", 99)] == list(range(16, 26))


async def test_numbers_go_on_after_a_restart_where_rooms_are_stored(
    rooms: RoomsBackend,
) -> None:
    store = await rooms.open(replace(ROOM_BOUNDS, max_rooms=1))
    await say(store, "a", "1")
    await say(store, "b", "2")  # a went: its number is not given again
    again = await rooms.restart(store)
    said = await say(again, "a", "3")
    assert said.seq == 3
    assert seqs(again, "a") == [3]


async def test_every_entry_kept_is_told_once_in_order(rooms: RoomsBackend) -> None:
    store = await rooms.open()
    told: list[tuple[str, int]] = []
    unsubscribe = store.listen(lambda e: told.append((e.room, e.seq)))
    await asyncio.gather(*(say(store, f"r{i % 3}", str(i)) for i in range(12)))
    assert told == sorted(told, key=lambda t: t[1]) and [s for _, s in told] == list(range(1, 13))
    unsubscribe()
    await say(store, "r0", "after")
    assert len(told) == 12
