"""Web chat rooms open in this process: their tabs and waiting long polls.

A room's history is the room store's (gateway/storage/rooms.py): kept in this process's
memory as stored, bounded there, shared by the replicas on Redis. A ``Room`` here reads it
and holds what belongs to this process: the open WebSockets, the long polls waiting for a
new entry, and the entries still to be sent to the tabs.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway.bus import SenderIdentity
from gateway.storage.rooms import KeptRooms, RoomEntry


@dataclass(eq=False, slots=True)
class Socket:
    """One open browser tab: who it is and where frames go."""

    ws: web.WebSocketResponse
    user: str
    identity: SenderIdentity = SenderIdentity.LOCAL
    address: str = ""  # the client's (gateway.http.identity.client_address)
    seen: int = 0  # the number of the newest entry this tab was sent


@dataclass(eq=False, slots=True)
class Room:
    """A session that people share by URL, as this process serves it."""

    name: str
    kept: KeptRooms
    sockets: set[Socket] = field(default_factory=set)
    waiters: int = 0
    # Entries for the tabs, sent one after another by one task at a time (``sending``).
    outbox: deque[RoomEntry] = field(default_factory=deque)
    sending: bool = False
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def last_seq(self) -> int:
        return self.kept.last_seq_of(self.name)

    @property
    def idle(self) -> bool:
        return not self.sockets and not self.waiters and not self.sending

    def after(self, seq: int) -> list[RoomEntry]:
        return self.kept.after(self.name, seq)

    def wake(self) -> None:
        """Wake every long poll of this room (new entry, or shutdown)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_after(self, seq: int, timeout: float) -> list[RoomEntry]:
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
    """Rooms by name, least recently used first; idle rooms beyond the limit are dropped
    (their history stays in the store)."""

    def __init__(self, kept: KeptRooms, *, max_rooms: int) -> None:
        self._rooms: OrderedDict[str, Room] = OrderedDict()
        self._kept = kept
        self._max = max_rooms

    def get(self, name: str) -> Room:
        room = self._rooms.get(name)
        if room is not None:
            self._rooms.move_to_end(name)
            return room
        room = Room(name=name, kept=self._kept)
        self._rooms[name] = room
        self._evict(keep=name)
        return room

    def find(self, name: str) -> Room | None:
        """The room of that name when it is open here (without touching the LRU order)."""
        return self._rooms.get(name)

    def _evict(self, *, keep: str) -> None:
        # Rooms with open sockets or waiting polls stay: their people would lose the thread.
        excess = len(self._rooms) - self._max
        if excess <= 0:
            return
        # Least recently used first, and only as many as go: 100,000 rooms over
        # max_sessions read every room each time (bench/startup.py --pending).
        idle = (n for n, r in self._rooms.items() if r.idle and n != keep)
        for name in list(itertools.islice(idle, excess)):
            del self._rooms[name]

    def __iter__(self) -> Any:
        return iter(list(self._rooms.values()))

    def __len__(self) -> int:
        return len(self._rooms)
