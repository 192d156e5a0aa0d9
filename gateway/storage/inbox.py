"""The inbox: platform messages stored before the platform is told we have them.

Invariant 9 (docs in DESIGN.md): a platform message is acknowledged only after it is
stored, and a stored message is processed exactly once, also after a crash. The bus
``put``s every inbound message that has a platform id before ``publish_inbound`` returns
(so a channel that acks after that call acks a stored message), the agent loop marks it
``taken`` before its turn's first effect (a line said, a tool call) or when the turn ends,
and what a dead process stored and never took is ``adopt``ed by a live one and published
there.

Every stored message has an owner: the process (instance id) that put it, or adopted it
since. Only a dead owner's messages are adopted, so a live replica's queued or thinking
turn is never processed twice. Which owners are alive is the caller's to say: with an
inbox of one process's own (SQLite, memory) every other owner is a past run; with a
shared one (Redis) it is the heartbeats of gateway/confirm/replicas.py.

A backend is small on purpose: five operations keyed by (channel, message_id), each
atomic on its own, plus ``close``. Run ``tests/core/test_inbox_contract.py`` against a new
backend by adding it to the fixture.
"""

from __future__ import annotations

import abc
import json
import os
import secrets
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import ClassVar

from gateway.messages import InboundMessage

# Taken messages are kept this long, so that a platform's late redelivery (Feishu retries
# for up to ~7 h) is still recognised after a restart; then purged.
KEEP_TAKEN_SECONDS = 24 * 3600


class Inbox(abc.ABC):
    """Stored inbound messages, keyed by channel + platform message id, each with an owner.

    Every method is atomic by itself; none needs a transaction around it. Messages
    without a ``message_id`` are never given to an inbox (the bus skips them).
    """

    # True when other live processes put into the same inbox (Redis replicas): the bus
    # then adopts dead owners' messages every few seconds, not only at start.
    shared: ClassVar[bool] = False

    def __init__(self, *, owner: str | None = None) -> None:
        # The instance id of this process (gateway/confirm/ledger.py new_instance).
        self.owner = owner or fresh_owner()

    @abc.abstractmethod
    async def put(self, msg: InboundMessage) -> bool:
        """Store ``msg`` untaken, owned here; False (nothing changed) when its key is stored.

        Returns only once the message is durable as far as the backend goes: the caller
        acknowledges the platform next. False means a redelivery, taken or not.
        """

    @abc.abstractmethod
    async def taken(self, channel: str, message_id: str, *, at: float | None = None) -> None:
        """Mark the message taken: it is not adopted or replayed any more.

        Unknown keys and already-taken messages are left alone.
        """

    @abc.abstractmethod
    async def adopt(self, alive: Collection[str]) -> list[InboundMessage]:
        """Take over the untaken messages of every owner not in ``alive`` (nor this one).

        They are owned here from now on and returned oldest first. However many processes
        adopt at once, each message goes to one of them. A backend may leave a message
        for a later call (Redis: until it has been idle for the lease).
        """

    @abc.abstractmethod
    async def untaken(self) -> list[InboundMessage]:
        """Every stored message not yet taken, whoever owns it, oldest first."""

    @abc.abstractmethod
    async def purge(self, before: float) -> int:
        """Forget taken messages taken before ``before`` (epoch seconds); how many went.

        Untaken ones are never purged: they still wait to be processed. A backend that
        forgets by itself (Redis key TTLs) returns 0.
        """

    async def close(self) -> None:
        """Release the backend's connection; the default has none."""
        return


@dataclass(slots=True)
class _Row:
    msg: InboundMessage
    owner: str
    taken_at: float | None = None


class MemoryInbox(Inbox):
    """An inbox in this process only: dedupes, but forgets everything when it exits.

    The reference for the contract, and the inbox with ``confirmation.store = "memory"``.
    ``share()`` gives another handle on the same rows under another owner (tests).
    """

    def __init__(self, *, owner: str | None = None) -> None:
        super().__init__(owner=owner)
        # dicts keep insertion order: that is the "oldest first" of untaken().
        self._rows: dict[tuple[str, str], _Row] = {}

    def share(self, *, owner: str) -> MemoryInbox:
        other = MemoryInbox(owner=owner)
        other._rows = self._rows
        return other

    async def put(self, msg: InboundMessage) -> bool:
        key = message_key(msg)
        if key in self._rows:
            return False
        self._rows[key] = _Row(msg, self.owner)
        return True

    async def taken(self, channel: str, message_id: str, *, at: float | None = None) -> None:
        row = self._rows.get((channel, message_id))
        if row is not None and row.taken_at is None:
            row.taken_at = time.time() if at is None else at

    async def adopt(self, alive: Collection[str]) -> list[InboundMessage]:
        adopted = []
        for row in self._rows.values():
            if row.taken_at is None and row.owner != self.owner and row.owner not in alive:
                row.owner = self.owner
                adopted.append(row.msg)
        return adopted

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


def dump_message(msg: InboundMessage) -> str:
    """``msg`` as the JSON text a backend stores."""
    return json.dumps(msg.to_dict(), ensure_ascii=False, separators=(",", ":"))


def load_message(body: str | bytes) -> InboundMessage:
    return InboundMessage.from_dict(json.loads(body))


def fresh_owner() -> str:
    """An owner for an inbox opened without an instance id (tools, tests): never alive."""
    return f"inbox-{os.getpid()}-{secrets.token_hex(3)}"
