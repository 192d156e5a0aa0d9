"""Conversations: each session's (or group member's) exchange with the model, stored.

The model agent reads a session's history through ``ConversationStore`` before a turn and
appends the turn's exchange when it ends. On SQLite or Redis a restart, or another
replica, continues the conversation; in memory it lasts as long as the process.

Every backend keeps at most ``max_messages`` per session (``trim_history``: cut at a user
message) and at most ``max_sessions`` sessions, the least recently written dropped first.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from cachetools import LRUCache

Message = dict[str, Any]
"""One chat-completions message (role, content, tool_calls, tool_call_id...), as JSON."""


def trim_history(messages: list[Message], limit: int) -> list[Message]:
    """The newest ``limit`` messages, starting at a user message.

    Cutting at a user message keeps every tool result next to the assistant message that
    asked for it; OpenAI-compatible APIs refuse a tool message without its call.
    """
    if len(messages) <= limit:
        return messages
    cut = messages[-limit:]
    for i, m in enumerate(cut):
        if m.get("role") == "user":
            return cut[i:]
    return []


class ConversationStore(ABC):
    """The conversations of one deployment, keyed by session (or session and member)."""

    def __init__(self, *, max_messages: int, max_sessions: int) -> None:
        self.max_messages = max_messages
        self.max_sessions = max_sessions

    @abstractmethod
    async def load(self, key: str) -> list[Message]:
        """The kept conversation of ``key`` (oldest first), empty when there is none."""

    @abstractmethod
    async def append(self, key: str, added: Sequence[Message]) -> None:
        """Add one turn's exchange after what is kept now, trimmed to ``max_messages``.

        Atomic per key: turns of several group members that end at once each stay whole.
        """

    @abstractmethod
    async def forget(self, key: str) -> None:
        """Drop the conversation of ``key``."""

    async def close(self) -> None:
        """Release the backend's connection (a shared client is left to its owner)."""
        return


class MemoryConversationStore(ConversationStore):
    """In this process only: forgotten on restart, not seen by replicas."""

    def __init__(self, *, max_messages: int, max_sessions: int) -> None:
        super().__init__(max_messages=max_messages, max_sessions=max_sessions)
        self._kept: LRUCache[str, list[Message]] = LRUCache(maxsize=max_sessions)

    async def load(self, key: str) -> list[Message]:
        return list(self._kept.get(key, []))

    async def append(self, key: str, added: Sequence[Message]) -> None:
        self._kept[key] = trim_history([*self._kept.get(key, []), *added], self.max_messages)

    async def forget(self, key: str) -> None:
        self._kept.pop(key, None)
