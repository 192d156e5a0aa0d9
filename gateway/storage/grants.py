"""The grants port: where grants and their audit trail live; the memory backend beside it.

SQLite (gateway/storage/sqlite/grants.py) and Redis (gateway/storage/redis/grants.py) pass
the same contract suite (tests/confirm/test_grants_contract.py).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace

from gateway.confirm.model import Grant, GrantEvent


class GrantStore(ABC):
    """Where grants and their audit trail live. Contract: tests/confirm/test_grants_contract.py."""

    @abstractmethod
    async def add(self, grant: Grant) -> None: ...

    @abstractmethod
    async def get(self, grant_id: str) -> Grant | None: ...

    @abstractmethod
    async def live(self, now: float) -> list[Grant]:
        """Grants neither expired nor revoked, oldest first."""

    @abstractmethod
    async def revoke(self, grant_id: str, *, by: str, now: float) -> Grant | None:
        """Mark a live grant revoked (first call wins); the grant as it now is, or None."""

    @abstractmethod
    async def record(self, event: GrantEvent) -> None: ...

    @abstractmethod
    async def events(self, grant_id: str) -> list[GrantEvent]:
        """A grant's audit trail, oldest first."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class MemoryGrantStore(GrantStore):
    """In-process grants: tests and the terminal chat."""

    def __init__(self) -> None:
        self._grants: dict[str, Grant] = {}
        self._events: list[GrantEvent] = []

    async def add(self, grant: Grant) -> None:
        self._grants[grant.id] = grant

    async def get(self, grant_id: str) -> Grant | None:
        return self._grants.get(grant_id)

    async def live(self, now: float) -> list[Grant]:
        for gid in [g.id for g in self._grants.values() if now >= g.expires_at]:
            del self._grants[gid]  # expired ones only take room; their trail stays
        return sorted((g for g in self._grants.values() if g.live(now)), key=lambda g: g.created_at)

    async def revoke(self, grant_id: str, *, by: str, now: float) -> Grant | None:
        grant = self._grants.get(grant_id)
        if grant is None or not grant.live(now):
            return None
        done = replace(grant, revoked_by=by, revoked_at=now)
        self._grants[grant_id] = done
        return done

    async def record(self, event: GrantEvent) -> None:
        self._events.append(event)

    async def events(self, grant_id: str) -> list[GrantEvent]:
        return [e for e in self._events if e.grant_id == grant_id]
