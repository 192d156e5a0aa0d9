"""The inbox: platform messages stored before the platform is told we have them.

Invariant 9 (docs in DESIGN.md): a platform message is acknowledged only after it is
stored, and a stored message is processed exactly once, also after a crash. The bus
``put``s every inbound message that has a platform id before ``publish_inbound`` returns
(so a channel that acks after that call acks a stored message), the agent loop marks it
``taken`` when its turn starts, and at start the gateway publishes what is still untaken.

A backend is small on purpose (a Redis one joins in issue 13): four operations on rows
keyed by (channel, message_id), each one atomic on its own, plus ``close``. Run
``tests/core/test_inbox_contract.py`` against a new backend by adding it to the fixture.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Annotations only: the bus imports this module.
    from config.settings import Settings
    from gateway.bus import InboundMessage

# Taken messages are kept this long, so that a platform's late redelivery (Feishu retries
# for up to ~7 h) is still recognised after a restart; then purged.
KEEP_TAKEN_SECONDS = 24 * 3600


class Inbox(abc.ABC):
    """Stored inbound messages, keyed by channel + platform message id.

    Every method is atomic by itself; none needs a transaction around it. Messages
    without a ``message_id`` are never given to an inbox (the bus skips them).
    """

    @abc.abstractmethod
    async def put(self, msg: InboundMessage) -> bool:
        """Store ``msg`` untaken; False (and nothing changed) when its key is already stored.

        Returns only once the message is durable as far as the backend goes: the caller
        acknowledges the platform next. False means a redelivery, taken or not.
        """

    @abc.abstractmethod
    async def taken(self, channel: str, message_id: str, *, at: float | None = None) -> None:
        """Mark the message taken (its turn started, or it was handled on the way in).

        Unknown keys and already-taken messages are left alone.
        """

    @abc.abstractmethod
    async def untaken(self) -> list[InboundMessage]:
        """Every stored message not yet taken, oldest first (the order they were put)."""

    @abc.abstractmethod
    async def purge(self, before: float) -> int:
        """Forget taken messages taken before ``before`` (epoch seconds); how many went.

        Untaken ones are never purged: they still wait to be processed.
        """

    async def close(self) -> None:
        """Release the backend's connection; the default has none."""
        return


@dataclass(slots=True)
class _Row:
    msg: InboundMessage
    taken_at: float | None = None


class MemoryInbox(Inbox):
    """An inbox in this process only: dedupes, but forgets everything when it exits.

    The reference for the contract, and the inbox with ``confirmation.store = "memory"``.
    """

    def __init__(self) -> None:
        # dicts keep insertion order: that is the "oldest first" of untaken().
        self._rows: dict[tuple[str, str], _Row] = {}

    async def put(self, msg: InboundMessage) -> bool:
        key = message_key(msg)
        if key in self._rows:
            return False
        self._rows[key] = _Row(msg)
        return True

    async def taken(self, channel: str, message_id: str, *, at: float | None = None) -> None:
        row = self._rows.get((channel, message_id))
        if row is not None and row.taken_at is None:
            row.taken_at = time.time() if at is None else at

    async def untaken(self) -> list[InboundMessage]:
        return [row.msg for row in self._rows.values() if row.taken_at is None]

    async def purge(self, before: float) -> int:
        old = [
            key
            for key, row in self._rows.items()
            if row.taken_at is not None and row.taken_at < before
        ]
        for key in old:
            del self._rows[key]
        return len(old)


def message_key(msg: InboundMessage) -> tuple[str, str]:
    """(channel, message_id): what makes a stored message the same message redelivered."""
    if not msg.message_id:
        raise ValueError("only messages with a platform message_id are stored")
    return (msg.channel, msg.message_id)


async def open_inbox(settings: Settings) -> Inbox:
    """The inbox that goes with the configured confirmation store.

    SQLite: ``inbox.db`` in the data dir. Memory: a memory inbox (nothing survives the
    process anyway). Redis: a memory inbox until the Redis inbox (issue 13); a SQLite one
    is no choice there, as replicas may share a data dir and one would replay another's
    messages at its start.
    """
    if settings.confirmation.store == "sqlite":
        from gateway.sqlite_inbox import SqliteInbox

        return await SqliteInbox.open(settings.data_dir / "inbox.db")
    return MemoryInbox()
