"""The confirmation record and its vocabulary."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_tuple_new = tuple.__new__


class Status(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self is not Status.PENDING


class Decision(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"

    @property
    def status(self) -> Status:
        return Status.APPROVED if self is Decision.APPROVE else Status.REJECTED


class Risk(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the agent wants to make: the thing a person approves, exactly."""

    name: str
    args: Mapping[str, Any]
    call_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "args": dict(self.args), "call_id": self.call_id}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(name=str(data["name"]), args=dict(data["args"]), call_id=str(data["call_id"]))


# Crockford base32 without I, L, O, U: nothing to misread on a phone screen.
ID_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_ID_DIGITS = frozenset("0123456789")
_ID_LETTERS = frozenset("ABCDEFGHJKMNPQRSTVWXYZ")
_ID_BYTE_TO_SYMBOL = bytes(ord(ID_ALPHABET[b & 31]) for b in range(256))
# Characters people type for the ones Crockford leaves out.
_CROCKFORD_ALIASES = str.maketrans({"O": "0", "I": "1", "L": "1"})


class _RandomPool:
    """Bytes from ``os.urandom``, read 4 KiB at a time and each handed out once.

    One ``getrandom`` system call per id was 3 % of a confirmation round trip here
    (docs/performance.md). A child process after ``fork`` starts with an empty pool, so
    parent and child never hand out the same bytes.
    """

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._pool = b""
        self._pos = 0
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._pool = b""
        self._pos = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            if self._pos + n > len(self._pool):
                self._pool = os.urandom(max(n, self._size))
                self._pos = 0
            chunk = self._pool[self._pos : self._pos + n]
            self._pos += n
            return chunk


_random_bytes = _RandomPool().take


def new_confirmation_id(length: int = 4) -> str:
    """A short random id with at least one digit and one letter.

    The digit keeps ids apart from English words ("deny", "stop") in a reply; the letter
    keeps them apart from numbers ("前10条").
    """
    while True:
        # Random bytes mapped byte -> symbol in C: 32 symbols is exactly 5 bits and 256 is
        # a multiple of 32, so the mapping is unbiased.
        candidate = _random_bytes(length).translate(_ID_BYTE_TO_SYMBOL).decode("ascii")
        if not _ID_DIGITS.isdisjoint(candidate) and not _ID_LETTERS.isdisjoint(candidate):
            return candidate


def canonical_id(text: str) -> str:
    """Upper-case and map O->0, I/L->1, as Crockford decoding does."""
    return text.strip().upper().translate(_CROCKFORD_ALIASES)


class Confirmation(NamedTuple):
    """A held tool call and what became of it.

    Immutable: stores replace whole records. A named tuple rather than a frozen dataclass
    because a record is built and finished on every round trip, and a frozen dataclass
    pays one ``object.__setattr__`` per field for that (5 µs against 0.5 µs here,
    docs/performance.md). Build it with keywords; ``_replace`` gives a changed copy.
    """

    id: str
    session_key: str
    channel: str
    chat_id: str
    requester: str
    is_group: bool
    tool_call: ToolCall
    summary: str
    created_at: float
    expires_at: float
    details: Mapping[str, Any] = _EMPTY
    risk: Risk = Risk.MEDIUM
    approvers: tuple[str, ...] = ()
    four_eyes: bool = False
    status: Status = Status.PENDING
    decided_by: str | None = None
    decided_at: float | None = None
    decided_via: str | None = None
    reason: str | None = None
    feedback: bool = False
    prompt_refs: Mapping[str, str] = _EMPTY

    def seconds_left(self, now: float) -> float:
        return max(0.0, self.expires_at - now)

    def finished(
        self,
        status: Status,
        *,
        by: str | None,
        at: float,
        via: str | None,
        reason: str | None,
        feedback: bool = False,
    ) -> Confirmation:
        """This record with its decision: status, by, at, via, reason, feedback."""
        return _tuple_new(
            Confirmation,
            (*self[:_STATUS], status, by, at, via, reason, feedback, *self[_STATUS + 6 :]),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_key": self.session_key,
            "channel": self.channel,
            "chat_id": self.chat_id,
            "requester": self.requester,
            "is_group": self.is_group,
            "tool_call": self.tool_call.to_dict(),
            "summary": self.summary,
            "details": dict(self.details),
            "risk": self.risk.value,
            "approvers": list(self.approvers),
            "four_eyes": self.four_eyes,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "status": self.status.value,
            "decided_by": self.decided_by,
            "decided_at": self.decided_at,
            "decided_via": self.decided_via,
            "reason": self.reason,
            "feedback": self.feedback,
            "prompt_refs": dict(self.prompt_refs),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Confirmation:
        return cls(
            id=str(data["id"]),
            session_key=str(data["session_key"]),
            channel=str(data["channel"]),
            chat_id=str(data["chat_id"]),
            requester=str(data["requester"]),
            is_group=bool(data["is_group"]),
            tool_call=ToolCall.from_dict(data["tool_call"]),
            summary=str(data["summary"]),
            details=dict(data.get("details") or {}),
            risk=Risk(data.get("risk", "medium")),
            approvers=tuple(data.get("approvers") or ()),
            four_eyes=bool(data.get("four_eyes", False)),
            created_at=float(data["created_at"]),
            expires_at=float(data["expires_at"]),
            status=Status(data.get("status", "pending")),
            decided_by=data.get("decided_by"),
            decided_at=data.get("decided_at"),
            decided_via=data.get("decided_via"),
            reason=data.get("reason"),
            feedback=bool(data.get("feedback", False)),
            prompt_refs=dict(data.get("prompt_refs") or {}),
        )


# finished() rebuilds the tuple around these six fields, in this order.
_STATUS = Confirmation._fields.index("status")
assert Confirmation._fields[_STATUS : _STATUS + 6] == (
    "status",
    "decided_by",
    "decided_at",
    "decided_via",
    "reason",
    "feedback",
)
