"""Web chat rooms: a bounded history per room, with sequence numbers for long polls."""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web

if TYPE_CHECKING:
    from gateway.confirm.model import Confirmation

EntryKind = Literal["text", "confirmation", "confirmation_update"]


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


@dataclass(eq=False, slots=True)
class Room:
    """A session that people share by URL. History is kept in memory, bounded."""

    name: str
    size: int
    entries: deque[ChatEntry] = field(init=False)
    sockets: set[Socket] = field(default_factory=set)
    waiters: int = 0
    _seq: int = 0
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.entries = deque(maxlen=self.size)

    @property
    def last_seq(self) -> int:
        return self._seq

    @property
    def idle(self) -> bool:
        return not self.sockets and not self.waiters

    def append(
        self,
        *,
        kind: EntryKind,
        text: str,
        at: float,
        user: str | None = None,
        message_id: str | None = None,
        confirmation: Confirmation | None = None,
    ) -> ChatEntry:
        self._seq += 1
        entry = ChatEntry(
            seq=self._seq,
            kind=kind,
            text=text,
            at=at,
            user=user,
            message_id=message_id,
            confirmation=confirmation,
        )
        self.entries.append(entry)
        self.wake()
        return entry

    def wake(self) -> None:
        """Wake every long poll of this room (new entry, or shutdown)."""
        self._changed.set()
        self._changed = asyncio.Event()

    def after(self, seq: int) -> list[ChatEntry]:
        if seq > self._seq:
            # A number from before a restart (history is in memory): send all there is.
            seq = 0
        return [e for e in self.entries if e.seq > seq]

    async def wait_after(self, seq: int, timeout: float) -> list[ChatEntry]:
        """Entries after ``seq``; when there are none yet, wait up to ``timeout`` for one."""
        found = self.after(seq)
        if found or timeout <= 0:
            return found
        changed = self._changed
        self.waiters += 1
        try:
            await asyncio.wait_for(changed.wait(), timeout)
        except TimeoutError:
            return []
        finally:
            self.waiters -= 1
        return self.after(seq)


class Rooms:
    """Rooms by name, least recently used first; idle rooms beyond the limit are dropped."""

    def __init__(self, *, max_rooms: int, history_size: int) -> None:
        self._rooms: OrderedDict[str, Room] = OrderedDict()
        self._max = max_rooms
        self._history_size = history_size

    def get(self, name: str) -> Room:
        room = self._rooms.get(name)
        if room is not None:
            self._rooms.move_to_end(name)
            return room
        room = Room(name=name, size=self._history_size)
        self._rooms[name] = room
        self._evict(keep=name)
        return room

    def _evict(self, *, keep: str) -> None:
        # Rooms with open sockets or waiting polls stay: their people would lose the thread.
        excess = len(self._rooms) - self._max
        if excess <= 0:
            return
        idle = [n for n, r in self._rooms.items() if r.idle and n != keep]
        for name in idle[:excess]:
            del self._rooms[name]

    def __iter__(self) -> Any:
        return iter(list(self._rooms.values()))

    def __len__(self) -> int:
        return len(self._rooms)
