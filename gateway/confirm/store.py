"""Where confirmations live: an abstract store and the in-memory backend.

The store holds the truth; futures that wake a waiting turn live in the service. Every
backend passes the same contract suite (tests/confirm/test_store_contract.py).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from typing import ClassVar

from gateway.confirm.model import Confirmation, Status

# An alias: inside the store classes `list` is also a method name.
Confirmations = list[Confirmation]


class ConfirmationExistsError(Exception):
    """The id is taken; the service draws another."""


class ConfirmationStore(ABC):
    """Async persistence of confirmations with an atomic, first-wins status change."""

    # True when several gateway processes share the records (Redis): a pending record
    # without a waiting turn here may still have one in another replica.
    shared: ClassVar[bool] = False

    @abstractmethod
    async def create(self, confirmation: Confirmation) -> None:
        """Store a new pending confirmation. Raises ConfirmationExistsError on a taken id."""

    @abstractmethod
    async def get(self, confirmation_id: str) -> Confirmation | None: ...

    @abstractmethod
    async def list_pending(self, session_key: str) -> Confirmations:
        """Pending confirmations of one session, oldest first."""

    @abstractmethod
    async def list(
        self,
        *,
        status: Status | None = None,
        session_key: str | None = None,
        limit: int = 200,
    ) -> Confirmations:
        """Newest first."""

    @abstractmethod
    async def finish(
        self,
        confirmation_id: str,
        status: Status,
        *,
        by: str | None,
        via: str | None,
        reason: str | None,
        now: float,
        feedback: bool = False,
    ) -> tuple[Confirmation | None, bool]:
        """Compare-and-set ``pending`` -> ``status``; first call wins.

        Approve/reject only succeed while ``now < expires_at``: a decision that arrives
        after the deadline never approves, even if the timer has not fired yet. Returns the
        record as it is after the call and whether this call changed it.
        """

    @abstractmethod
    async def set_prompt_ref(self, confirmation_id: str, key: str, value: str) -> None:
        """Remember where a prompt was sent (e.g. a card's message id) for later updates."""

    @abstractmethod
    async def list_all_pending(self) -> Confirmations:
        """Every pending confirmation (for shutdown and recovery after a restart)."""

    @abstractmethod
    def finished_feed(self) -> AbstractAsyncContextManager[AsyncIterator[str]]:
        """Ids of confirmations as ``finish`` changes them, from entering the context on.

        ``async with store.finished_feed() as ids: async for cid in ids: ...``. Every
        successful finish through this handle is announced once; with a ``shared`` store,
        also those made by every other replica. Refused finishes are not announced. A turn
        waits in the process that asked, so this is how another replica's decision wakes it.
        """

    async def close(self) -> None:  # noqa: B027 - optional hook, most backends need it
        """Release connections."""


class FinishedIds:
    """The feed of a store no other process writes to: its own finishes, to each subscriber."""

    def __init__(self) -> None:
        self._subscribers: set[asyncio.Queue[str]] = set()

    def announce(self, confirmation_id: str) -> None:
        for queue in self._subscribers:
            queue.put_nowait(confirmation_id)

    @asynccontextmanager
    async def feed(self) -> AsyncIterator[AsyncIterator[str]]:
        queue: asyncio.Queue[str] = asyncio.Queue()
        self._subscribers.add(queue)
        try:
            yield _drain(queue)
        finally:
            self._subscribers.discard(queue)


async def _drain(queue: asyncio.Queue[str]) -> AsyncIterator[str]:
    while True:
        yield await queue.get()


def _allowed(current: Confirmation, status: Status, now: float) -> bool:
    if current.status is not Status.PENDING:
        return False
    if status in (Status.APPROVED, Status.REJECTED):
        return now < current.expires_at
    return True


class MemoryConfirmationStore(ConfirmationStore):
    """In-process store: the default for tests and for ``gateway chat``.

    Operations never await between read and write, so each is atomic on the event loop.
    """

    def __init__(self, *, keep_finished: int = 10_000) -> None:
        self._items: dict[str, Confirmation] = {}
        self._pending_by_session: dict[str, dict[str, None]] = {}
        self._finished_order: deque[str] = deque()
        self._keep_finished = keep_finished
        self._finished = FinishedIds()

    async def create(self, confirmation: Confirmation) -> None:
        if confirmation.id in self._items:
            raise ConfirmationExistsError(confirmation.id)
        self._items[confirmation.id] = confirmation
        if confirmation.status is Status.PENDING:
            self._pending_by_session.setdefault(confirmation.session_key, {})[confirmation.id] = (
                None
            )

    async def get(self, confirmation_id: str) -> Confirmation | None:
        return self._items.get(confirmation_id)

    async def list_pending(self, session_key: str) -> Confirmations:
        ids = self._pending_by_session.get(session_key)
        if not ids:
            return []
        return [self._items[i] for i in ids]

    async def list(
        self,
        *,
        status: Status | None = None,
        session_key: str | None = None,
        limit: int = 200,
    ) -> Confirmations:
        items: Iterable[Confirmation] = self._items.values()
        if status is not None:
            items = (c for c in items if c.status is status)
        if session_key is not None:
            items = (c for c in items if c.session_key == session_key)
        return sorted(items, key=lambda c: c.created_at, reverse=True)[:limit]

    async def list_all_pending(self) -> Confirmations:
        return [self._items[i] for ids in self._pending_by_session.values() for i in ids]

    async def finish(
        self,
        confirmation_id: str,
        status: Status,
        *,
        by: str | None,
        via: str | None,
        reason: str | None,
        now: float,
        feedback: bool = False,
    ) -> tuple[Confirmation | None, bool]:
        current = self._items.get(confirmation_id)
        if current is None:
            return None, False
        if not _allowed(current, status, now):
            return current, False
        done = current.finished(status, by=by, at=now, via=via, reason=reason, feedback=feedback)
        self._items[confirmation_id] = done
        session = self._pending_by_session.get(current.session_key)
        if session is not None:
            session.pop(confirmation_id, None)
            if not session:
                del self._pending_by_session[current.session_key]
        self._finished_order.append(confirmation_id)
        if len(self._finished_order) > self._keep_finished:
            old = self._finished_order.popleft()
            self._items.pop(old, None)
        self._finished.announce(confirmation_id)
        return done, True

    async def set_prompt_ref(self, confirmation_id: str, key: str, value: str) -> None:
        current = self._items.get(confirmation_id)
        if current is not None:
            refs = {**current.prompt_refs, key: value}
            self._items[confirmation_id] = replace(current, prompt_refs=refs)

    def finished_feed(self) -> AbstractAsyncContextManager[AsyncIterator[str]]:
        return self._finished.feed()
