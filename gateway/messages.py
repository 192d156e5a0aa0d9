"""What travels on the bus: a message from a chat, a message for one, and how a publish ended.

Plain values, importing nothing of the gateway but the confirmation record's type: the bus
(gateway/bus.py, which re-exports them), the inbox that stores inbound messages
(gateway/storage/inbox.py) and every channel use them.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.confirm.model import Confirmation

_EMPTY: Mapping[str, Any] = MappingProxyType({})


class SenderIdentity(StrEnum):
    """How far a sender's id can be believed; web chat sets it in ``metadata["identity"]``.

    Platforms authenticate their users; a web chat name is typed unless a login proxy
    vouches for it (gateway.http.identity).
    """

    VERIFIED = "verified"  # named by a trusted login proxy
    LOCAL = "local"  # typed, on this machine (loopback, not forwarded)
    SELF_DECLARED = "self-declared"  # typed, from elsewhere: its decisions do not count


@dataclass(frozen=True, slots=True, kw_only=True)
class InboundMessage:
    """A message from a person, as a channel adapter built it."""

    channel: str
    chat_id: str
    sender_id: str
    text: str
    message_id: str | None = None
    is_group: bool = False
    sender_name: str | None = None
    reply_to: str | None = None
    session_key: str = ""
    from_bot: bool = False
    metadata: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    received_at: float = field(default_factory=time.time)
    # Not a person's message: the id of an ended call whose waiting turn goes on from here
    # (gateway/agent/loop.py). Stored in the inbox like one, so that when the process taking
    # it dies before the turn said anything, a replica or the next start goes on instead.
    resumes: str | None = None

    def __post_init__(self) -> None:
        if not self.session_key:
            # The adapter owns the session key; channel:chat is the default.
            object.__setattr__(self, "session_key", f"{self.channel}:{self.chat_id}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, for the inbox. ``metadata`` is stored as given: channels put only
        strings, numbers and booleans there."""
        return {
            "channel": self.channel,
            "chat_id": self.chat_id,
            "sender_id": self.sender_id,
            "text": self.text,
            "message_id": self.message_id,
            "is_group": self.is_group,
            "sender_name": self.sender_name,
            "reply_to": self.reply_to,
            "session_key": self.session_key,
            "from_bot": self.from_bot,
            "metadata": dict(self.metadata),
            "received_at": self.received_at,
            "resumes": self.resumes,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InboundMessage:
        return cls(
            channel=str(data["channel"]),
            chat_id=str(data["chat_id"]),
            sender_id=str(data["sender_id"]),
            text=str(data["text"]),
            message_id=data.get("message_id"),
            is_group=bool(data.get("is_group", False)),
            sender_name=data.get("sender_name"),
            reply_to=data.get("reply_to"),
            session_key=str(data.get("session_key") or ""),
            from_bot=bool(data.get("from_bot", False)),
            metadata=MappingProxyType(dict(data.get("metadata") or {})),
            received_at=float(data.get("received_at") or time.time()),
            resumes=data.get("resumes"),
        )


class OutboundKind(StrEnum):
    TEXT = "text"
    CONFIRMATION = "confirmation"
    CONFIRMATION_UPDATE = "confirmation_update"
    # A call undecided for [confirmation] escalate_after_seconds: ``text`` tells the chat it
    # was asked; a platform channel also sends the prompt to its approvers' direct chats and
    # its escalation_chat (gateway/confirm/nudges.py). Others show ``text`` alone.
    ESCALATION = "escalation"


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboundMessage:
    """A message for a chat. ``text`` is always a full rendering, whatever the kind.

    ``copies_only`` (a CONFIRMATION_UPDATE): bring every copy of the prompt to the record's
    state, and post nothing new in the chat it was asked in, which hears it otherwise (an
    ended call's result is said by its turn).
    """

    channel: str
    chat_id: str
    text: str
    kind: OutboundKind = OutboundKind.TEXT
    confirmation: Confirmation | None = None
    session_key: str = ""
    reply_to: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    copies_only: bool = False
    # User ids to @-mention (a reminder): each platform channel writes its own mention
    # markup; ``text`` reads whole without it.
    mentions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.session_key:
            object.__setattr__(self, "session_key", f"{self.channel}:{self.chat_id}")


class PublishResult(StrEnum):
    QUEUED = "queued"  # on the inbound queue for the agent
    INTERCEPTED = "intercepted"  # handled by the confirmation service (decided, or told why not)
    DUPLICATE = "duplicate"  # same channel + message id seen recently: dropped
