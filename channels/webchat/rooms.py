"""Web chat rooms: a bounded history per room, with sequence numbers for long polls.

History is bounded three ways, oldest entries dropped first: by count and by bytes per
room, and by bytes over all rooms (a client could otherwise fill the process by writing
long messages into many rooms). A byte is counted as the UTF-8 size of the entry's text
plus a fixed allowance for the entry itself.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web

from gateway.bus import SenderIdentity

if TYPE_CHECKING:
    from gateway.confirm.model import Confirmation

EntryKind = Literal["text", "confirmation", "confirmation_update"]

# What an entry costs beyond its text: the object, its fields, a confirmation's record.
ENTRY_OVERHEAD_BYTES = 512


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatEntry:
    """One line of a room's history: a person's message or something the gateway said."""

    seq: int
    kind: EntryKind
    text: str
    at: float
    user: str | None = None  # None: the gateway wrote it
    message_id: str | None = None
    confirmation: Confirmation | None = None
    size: int = 0  # bytes counted against the history bounds
    order: int = 0  # position among the entries of every room (oldest first)

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "kind": self.kind,
            "text": self.text,
            "confirmation": self.confirmation.to_dict() if self.confirmation else None,
            "at": self.at,
            "user": self.user,
            "message_id": self.message_id,
        }


@dataclass(eq=False, slots=True)
class Socket:
    """One open browser tab: who it is and where frames go."""

    ws: web.WebSocketResponse
    user: str
    identity: SenderIdentity = SenderIdentity.LOCAL
    address: str = ""  # the client's (gateway.http.identity.client_address)


@dataclass(eq=False, slots=True)
class Room:
    """A session that people share by URL. History is kept in memory, bounded."""

    name: str
    size: int
    max_bytes: int
    entries: deque[ChatEntry] = field(default_factory=deque)
    sockets: set[Socket] = field(default_factory=set)
    waiters: int = 0
    bytes: int = 0
    _seq: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def last_seq(self) -> int:
        return self._seq

    @property
    def idle(self) -> bool:
        return not self.sockets and not self.waiters

    def _add(self, entry: ChatEntry) -> int:
        """Append ``entry``; drop the oldest past the room's bounds. Returns bytes freed."""
        self.entries.append(entry)
        self.bytes += entry.size
        freed = 0
        while len(self.entries) > 1 and (
            len(self.entries) > self.size or self.bytes > self.max_bytes
        ):
            freed += self.drop_oldest()
        self.wake()
        return freed

    def drop_oldest(self) -> int:
        """Forget the oldest entry; its size in bytes (0 when the history is empty)."""
        if not self.entries:
            return 0
        gone = self.entries.popleft()
        self.bytes -= gone.size
        return gone.size

    def wake(self) -> None:
        """Wake every long poll of this room (new entry, or shutdown)."""
        self._changed.set()
        self._changed = asyncio.Event()

    def after(self, seq: int) -> list[ChatEntry]:
        if seq > self._seq:
            # A number from before a restart (history is in memory): send all there is.
            seq = 0
        # Sequence numbers run on without gaps and old entries leave from the front: the
        # entries after ``seq`` are the last ``last_seq - seq`` (or all that are left). A
        # poll usually asks for one or two; the history holds up to history_size.
        newer = min(self._seq - seq, len(self.entries))
        return list(itertools.islice(self.entries, len(self.entries) - newer, None))

    async def wait_after(self, seq: int, timeout: float) -> list[ChatEntry]:
        """Entries after ``seq``; when there are none yet, wait up to ``timeout`` for one."""
        found = self.after(seq)
        if found or timeout <= 0:
            return found
        changed = self._changed
        self.waiters += 1
        try:
            # asyncio.timeout, not wait_for: no task of its own for every long poll.
            async with asyncio.timeout(timeout):
                await changed.wait()
        except TimeoutError:
            return []
        finally:
            self.waiters -= 1
        return self.after(seq)


class Rooms:
    """Rooms by name, least recently used first; idle rooms beyond the limit are dropped.

    Entries are added here (``append``), so the bytes held by every room stay under
    ``total_bytes``: past it, the oldest entry of all rooms goes first.
    """

    def __init__(
        self, *, max_rooms: int, history_size: int, room_bytes: int, total_bytes: int
    ) -> None:
        self._rooms: OrderedDict[str, Room] = OrderedDict()
        self._max = max_rooms
        self._history_size = history_size
        self._room_bytes = room_bytes
        self._total_bytes = total_bytes
        self._order = itertools.count(1)
        self.bytes = 0

    def get(self, name: str) -> Room:
        room = self._rooms.get(name)
        if room is not None:
            self._rooms.move_to_end(name)
            return room
        room = Room(name=name, size=self._history_size, max_bytes=self._room_bytes)
        self._rooms[name] = room
        self._evict(keep=name)
        return room

    def append(
        self,
        room: Room,
        *,
        kind: EntryKind,
        text: str,
        at: float,
        user: str | None = None,
        message_id: str | None = None,
        confirmation: Confirmation | None = None,
    ) -> ChatEntry:
        """Add an entry to ``room``'s history and wake its long polls."""
        room._seq += 1
        entry = ChatEntry(
            seq=room._seq,
            kind=kind,
            text=text,
            at=at,
            user=user,
            message_id=message_id,
            confirmation=confirmation,
            # surrogatepass: the size of any str, even one the edge should have refused.
            size=len(text.encode("utf-8", "surrogatepass")) + ENTRY_OVERHEAD_BYTES,
            order=next(self._order),
        )
        change = entry.size - room._add(entry)
        if self._rooms.get(room.name) is not room:
            # Dropped as idle while its request was read: it no longer counts, and is
            # freed with the request.
            return entry
        self.bytes += change
        while self.bytes > self._total_bytes:
            holding = [r for r in self._rooms.values() if r.entries]
            if not holding:
                break
            oldest = min(holding, key=lambda r: r.entries[0].order)
            self.bytes -= oldest.drop_oldest()
        return entry

    def _evict(self, *, keep: str) -> None:
        # Rooms with open sockets or waiting polls stay: their people would lose the thread.
        excess = len(self._rooms) - self._max
        if excess <= 0:
            return
        # Least recently used first, and only as many as go: a prompt shown again after a
        # restart makes a room per chat, and 100,000 of them over max_sessions rooms read
        # every room each time (bench/startup.py --pending).
        idle = (n for n, r in self._rooms.items() if r.idle and n != keep)
        for name in list(itertools.islice(idle, excess)):
            self.bytes -= self._rooms.pop(name).bytes

    def __contains__(self, name: object) -> bool:
        """A room of that name is held here (without touching its place in the LRU order)."""
        return name in self._rooms

    def __iter__(self) -> Any:
        return iter(list(self._rooms.values()))

    def __len__(self) -> int:
        return len(self._rooms)
