"""The undo port: the rows a SQL change touched, kept with its record so it can be undone.

``sql_modify`` keeps, in the transaction of the change, each changed row as it was before
and as the change left it (gateway/tools/sql_undo.py). That can be 10,000 rows: it lives
here, beside the record (same SQLite file, same Redis), never inside the record's details,
which every card, list and feed carries. Kept ``[tools.sql] undo_days``, then dropped by
the retention sweep (gateway/confirm/retention.py). An undo takes a snapshot once
(``claim``, first caller wins); a refused or failed undo gives it back (``release``).

SQLite (gateway/storage/sqlite/undo.py) and Redis (gateway/storage/redis/undo.py) pass the
same contract suite as the memory class below (tests/storage/test_undo_contract.py).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any

# A value as kept: JSON scalars as they are; a Decimal, date, time, bytes or UUID as a
# one-key object ({"$decimal": "120.50"}), so the undo binds the same type back
# (gateway/tools/sql_undo.py encodes and decodes).
KeptValue = Any


@dataclass(frozen=True, slots=True)
class KeptChange:
    """One statement's rows: whole rows before the change, and as the change left them.

    DELETE keeps ``before`` only, INSERT ``after`` only, UPDATE both (same order, by key).
    """

    statement: int  # index in the call's batch
    kind: str  # DELETE | UPDATE | INSERT
    table: str
    key: list[str]  # the key columns (primary, else unique) that find a row again
    columns: list[str]  # every column, the order of each row's values
    before: list[list[KeptValue]] = field(default_factory=list)
    after: list[list[KeptValue]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "statement": self.statement,
            "kind": self.kind,
            "table": self.table,
            "key": self.key,
            "columns": self.columns,
            "before": self.before,
            "after": self.after,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KeptChange:
        return cls(
            statement=int(d["statement"]),
            kind=str(d["kind"]),
            table=str(d["table"]),
            key=list(d["key"]),
            columns=list(d["columns"]),
            before=[list(r) for r in d.get("before", [])],
            after=[list(r) for r in d.get("after", [])],
        )

    @property
    def rows(self) -> int:
        """How many rows this statement changed."""
        return max(len(self.before), len(self.after))


@dataclass(frozen=True, slots=True)
class UndoSnapshot:
    """What a change kept for its undo, by the record's id."""

    confirmation_id: str
    taken_at: float
    expires_at: float
    changes: list[KeptChange]
    # The sql_undo call that took it (``claim``): an undo runs once per change.
    undone_by: str | None = None

    @property
    def rows(self) -> int:
        return sum(c.rows for c in self.changes)

    def body(self) -> str:
        """The snapshot as the durable backends store it (JSON, compact)."""
        return json.dumps(
            {
                "confirmation_id": self.confirmation_id,
                "taken_at": self.taken_at,
                "expires_at": self.expires_at,
                "changes": [c.to_dict() for c in self.changes],
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_body(cls, body: str | bytes, *, undone_by: str | None = None) -> UndoSnapshot:
        d = json.loads(body)
        return cls(
            confirmation_id=str(d["confirmation_id"]),
            taken_at=float(d["taken_at"]),
            expires_at=float(d["expires_at"]),
            changes=[KeptChange.from_dict(c) for c in d["changes"]],
            undone_by=undone_by,
        )


class UndoStore(ABC):
    """Where snapshots live. Contract: tests/storage/test_undo_contract.py."""

    @abstractmethod
    async def put(self, snapshot: UndoSnapshot) -> None:
        """Keep ``snapshot`` (one per record: a second put replaces the first)."""

    @abstractmethod
    async def get(self, confirmation_id: str, *, now: float) -> UndoSnapshot | None:
        """The record's snapshot, or None (never kept, expired, or dropped)."""

    @abstractmethod
    async def claim(self, confirmation_id: str, *, by: str, now: float) -> UndoSnapshot | None:
        """Take the snapshot for the undo ``by``: first caller wins; None when it is gone
        or another undo holds it."""

    @abstractmethod
    async def release(self, confirmation_id: str, *, by: str) -> None:
        """Give the snapshot back after undo ``by`` did not restore (refused, failed)."""

    @abstractmethod
    async def purge(self, *, before: float) -> int:
        """Drop snapshots that expire at or before ``before``; how many went."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class MemoryUndoStore(UndoStore):
    """In-process snapshots: tests and the terminal chat."""

    def __init__(self) -> None:
        self._kept: dict[str, UndoSnapshot] = {}

    async def put(self, snapshot: UndoSnapshot) -> None:
        self._kept[snapshot.confirmation_id] = snapshot

    async def get(self, confirmation_id: str, *, now: float) -> UndoSnapshot | None:
        kept = self._kept.get(confirmation_id)
        return kept if kept is not None and kept.expires_at > now else None

    async def claim(self, confirmation_id: str, *, by: str, now: float) -> UndoSnapshot | None:
        kept = await self.get(confirmation_id, now=now)
        if kept is None or kept.undone_by is not None:
            return None
        taken = replace(kept, undone_by=by)
        self._kept[confirmation_id] = taken
        return taken

    async def release(self, confirmation_id: str, *, by: str) -> None:
        kept = self._kept.get(confirmation_id)
        if kept is not None and kept.undone_by == by:
            self._kept[confirmation_id] = replace(kept, undone_by=None)

    async def purge(self, *, before: float) -> int:
        gone = [k for k, s in self._kept.items() if s.expires_at <= before]
        for k in gone:
            del self._kept[k]
        return len(gone)
