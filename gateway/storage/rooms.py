"""Web chat rooms: each room's history, stored and bounded (issue 23).

The web chat is a platform of its own, so its rooms are kept like the model's conversations:
on SQLite a restart finds them again, on Redis every replica reads the same rooms, and a
line one replica posts reaches the pages open on the others.

Every handle keeps what is stored in its process's memory as well (``KeptRooms``), and
pages and long polls read from there, never from the backend: an entry is written once and
never read back (a first version read each room back after writing it and cost 45 % more CPU
per web chat message, bench/ingest.py). The copy is what is stored because both apply the
same bounds to the same entries in the same order: the process is the only writer (memory,
SQLite: one owner per data dir), or it follows the one feed every replica writes (Redis).
``listen`` tells of every entry kept, in order, whichever handle appended it.

History is bounded as the web chat always was, oldest entries dropped first: by count and by
bytes per room, and by bytes over all rooms (the oldest entry of any room first: a client
could otherwise fill the process by writing long messages into many rooms); past
``max_rooms`` the least recently written room goes. A byte is the UTF-8 size of the entry's
text plus a fixed allowance for the entry itself.

Sequence numbers count the entries of all rooms, 1, 2, 3, …, with no gaps: a long poll or a
page reads on after any of them, and on SQLite and Redis they go on after a restart.
"""

from __future__ import annotations

import itertools
import json
from abc import ABC, abstractmethod
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from gateway.confirm.model import Confirmation

EntryKind = Literal["text", "confirmation", "confirmation_update"]

# What an entry costs beyond its text: the object, its fields, a confirmation's record.
ENTRY_OVERHEAD_BYTES = 512


# Not frozen: frozen's __init__ sets each field through object.__setattr__, and two entries
# are made for every web chat message (bench/ingest.py). Final fields keep it immutable
# for mypy, as Confirmation's.
@dataclass(slots=True, kw_only=True)
class RoomEntry:
    """One line of a room's history: a person's message or something the gateway said."""

    room: Final[str]
    kind: Final[EntryKind]
    text: Final[str]
    at: Final[float]
    user: Final[str | None] = None  # None: the gateway wrote it
    message_id: Final[str | None] = None
    confirmation: Final[Confirmation | None] = None
    seq: Final[int] = 0  # given by the store; 0 until then

    @property
    def size(self) -> int:
        """Bytes counted against the bounds."""
        # surrogatepass: the size of any str, even one the edge should have refused.
        return len(self.text.encode("utf-8", "surrogatepass")) + ENTRY_OVERHEAD_BYTES

    def numbered(self, seq: int) -> RoomEntry:
        """This entry with its number (every field spelled out: dataclasses.replace walks
        them at run time, on every web chat line)."""
        return RoomEntry(
            room=self.room,
            kind=self.kind,
            text=self.text,
            at=self.at,
            user=self.user,
            message_id=self.message_id,
            confirmation=self.confirmation,
            seq=seq,
        )

    def dump(self) -> str:
        """The entry's fields as a backend stores them beside its room and number: a JSON
        array, ASCII (a lone surrogate the edge let through is escaped, so any store takes
        it)."""
        c = None if self.confirmation is None else self.confirmation.to_dict()
        return json.dumps([self.kind, self.text, self.at, self.user, self.message_id, c])

    @classmethod
    def load(cls, room: str, seq: int, dumped: str | bytes) -> RoomEntry:
        kind, text, at, user, message_id, c = json.loads(dumped)
        return cls(
            room=room,
            kind=kind,
            text=text,
            at=float(at),
            user=user,
            message_id=message_id,
            confirmation=None if c is None else Confirmation.from_dict(c),
            seq=seq,
        )

    def to_dict(self) -> dict[str, Any]:
        """What a page or a script reads (the room is in the address they asked)."""
        return {
            "seq": self.seq,
            "kind": self.kind,
            "text": self.text,
            "confirmation": self.confirmation.to_dict() if self.confirmation else None,
            "at": self.at,
            "user": self.user,
            "message_id": self.message_id,
        }


def as_shown(confirmation: Confirmation) -> Confirmation:
    """A record as a room keeps it: without the waiting turn, which the confirmation store
    keeps (a model's conversation up to the call: large, and nothing a page shows)."""
    if confirmation.continuation is None:
        return confirmation
    return replace(confirmation, continuation=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class RoomBounds:
    """How much history is kept ([channels.webchat] history_size, history_bytes_per_room,
    history_bytes_total, max_sessions)."""

    history_size: int
    room_bytes: int
    total_bytes: int
    max_rooms: int


@dataclass(eq=False, slots=True)
class _History:
    entries: deque[RoomEntry] = field(default_factory=deque)
    bytes: int = 0


class KeptRooms:
    """The rooms' history as stored, in this process: what pages and long polls read."""

    def __init__(self, bounds: RoomBounds) -> None:
        self.bounds = bounds
        self._rooms: OrderedDict[str, _History] = OrderedDict()  # least recently written first
        self.bytes = 0
        self.last_seq = 0  # the newest number given out, over all rooms

    def __len__(self) -> int:
        return len(self._rooms)

    def last_seq_of(self, room: str) -> int:
        """The number of the room's newest entry (0: none kept)."""
        history = self._rooms.get(room)
        return history.entries[-1].seq if history is not None else 0

    def after(self, room: str, seq: int) -> list[RoomEntry]:
        """The room's entries after number ``seq``, oldest first.

        A number past every one given out is from before a restart of a store whose
        numbers started again (memory): all the room has is sent.
        """
        history = self._rooms.get(room)
        if history is None:
            return []
        if seq > self.last_seq:
            seq = 0
        # Counting back from the newest: a poll usually asks for one or two of up to
        # history_size entries (issue 14: it compared them all).
        newer = 0
        for entry in reversed(history.entries):
            if entry.seq <= seq:
                break
            newer += 1
        return list(itertools.islice(history.entries, len(history.entries) - newer, None))

    def add(self, entry: RoomEntry) -> list[RoomEntry]:
        """Keep ``entry`` (numbered); drop what goes past the bounds. Returns what went."""
        history = self._rooms.get(entry.room)
        if history is None:
            history = self._rooms[entry.room] = _History()
        else:
            self._rooms.move_to_end(entry.room)
        size = entry.size
        history.entries.append(entry)
        history.bytes += size
        self.bytes += size
        self.last_seq = entry.seq
        b = self.bounds
        dropped: list[RoomEntry] = []
        while len(history.entries) > 1 and (
            len(history.entries) > b.history_size or history.bytes > b.room_bytes
        ):
            dropped.append(self._drop_oldest(entry.room, history))
        while self.bytes > b.total_bytes and self._rooms:
            name, oldest = min(self._rooms.items(), key=lambda item: item[1].entries[0].seq)
            dropped.append(self._drop_oldest(name, oldest))
        while len(self._rooms) > b.max_rooms:
            _, gone = self._rooms.popitem(last=False)
            self.bytes -= gone.bytes
            dropped.extend(gone.entries)
        return dropped

    def _drop_oldest(self, name: str, history: _History) -> RoomEntry:
        gone = history.entries.popleft()
        history.bytes -= gone.size
        self.bytes -= gone.size
        if not history.entries:
            del self._rooms[name]
        return gone

    def restore(self, entries: Iterable[RoomEntry], last_seq: int) -> None:
        """Start again from what a backend holds (entries in any order), numbered to
        ``last_seq``. What it holds is within the bounds, so nothing is dropped unless they
        were made smaller since."""
        self._rooms.clear()
        self.bytes = self.last_seq = 0
        for entry in sorted(entries, key=lambda e: e.seq):
            self.add(entry)
        self.last_seq = max(self.last_seq, last_seq)

    def entries(self) -> list[RoomEntry]:
        """Every kept entry, oldest first (tests, a reload's comparison)."""
        return sorted((e for h in self._rooms.values() for e in h.entries), key=lambda e: e.seq)


Listener = Callable[[RoomEntry], None]


class RoomStore(ABC):
    """The web chat rooms of one deployment: append here, read ``kept``."""

    def __init__(self, bounds: RoomBounds) -> None:
        self.kept = KeptRooms(bounds)
        self._listeners: list[Listener] = []

    def listen(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every entry kept from now on, in order of their numbers,
        whichever handle (replica) appended it. Returns the unsubscribe."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _keep(self, entry: RoomEntry) -> list[RoomEntry]:
        """Keep a numbered entry and tell the listeners; what the bounds dropped."""
        dropped = self.kept.add(entry)
        self._tell(entry)
        return dropped

    def _tell(self, entry: RoomEntry) -> None:
        for listener in list(self._listeners):
            listener(entry)

    @abstractmethod
    async def append(self, entry: RoomEntry) -> RoomEntry:
        """Store ``entry`` in its room, numbered; returns it with its number.

        Once this returns, ``kept`` holds it (or held it: the bounds may have dropped it
        since) and the listeners were told (Redis: unless this replica's feed is seconds
        behind; it is told when the feed gets there).
        """

    async def close(self) -> None:
        """Write what is still to be written, release the backend (a shared client is left
        to its owner)."""
        return


class MemoryRoomStore(RoomStore):
    """In this process only: forgotten on restart, not seen by replicas; numbers start
    again at 1 (a page holding a higher one gets the whole room)."""

    async def append(self, entry: RoomEntry) -> RoomEntry:
        numbered = entry.numbered(self.kept.last_seq + 1)
        self._keep(numbered)
        return numbered
