"""Which platform messages reach the bus: one set of rules for Feishu and DingTalk alike.

A platform reads its event into an ``Arrival`` (who, where, when, was the bot mentioned)
and asks ``ReceiveRules.judge``. The rules, in order:

1. the bot's own messages are not for the bot;
2. a message older than ``max_message_age_seconds`` is skipped (a burst redelivered after
   an outage: answering hours-old messages confuses); 0 turns this off;
3. in a group with ``group_policy = "mention"``, only messages that @-mention the bot;
4. only senders on ``allow_from``: empty means nobody, ``"*"`` everyone, so a bot that
   answers the whole company is configured so on purpose. A refused person is told once
   a day (no message disappears silently, yet nobody is spammed) and logged once.

Redeliveries (delivery is at-least-once: a late ack, a reconnect burst, a retried webhook)
are not judged here: the bus drops them, one window for every channel
(``MessageBus.is_duplicate``). A channel that answers a message without publishing it (an
unsupported message type) asks the bus first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

import structlog
from cachetools import TTLCache

log = structlog.get_logger(__name__)

# A refused sender is told (and logged) again after this long.
REFUSAL_MEMORY_SECONDS = 24 * 3600


class Verdict(StrEnum):
    """What happens to a received message."""

    ACCEPT = "accept"
    FROM_BOT = "from_bot"
    TOO_OLD = "too_old"
    NOT_MENTIONED = "not_mentioned"
    # Not on allow_from, first time in a while: the channel tells the person why.
    REFUSED = "refused"
    # Not on allow_from, and already told: dropped.
    REFUSED_AGAIN = "refused_again"


@dataclass(frozen=True, slots=True, kw_only=True)
class Arrival:
    """What the rules read from one platform message."""

    message_id: str  # the platform's id (for the log lines); empty when it has none
    chat_id: str
    sender_id: str
    is_group: bool
    mentions_bot: bool
    from_bot: bool = False
    created_at: float | None = None  # epoch seconds; None: unknown, never too old


class ReceiveRules:
    """The receive settings of one platform channel, and the senders it has refused lately."""

    def __init__(
        self,
        *,
        channel: str,
        allow_from: Sequence[str],
        group_policy: Literal["mention", "open"],
        max_message_age_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.channel = channel
        self.allow_from = frozenset(allow_from)
        self.group_policy = group_policy
        self.max_message_age_seconds = max_message_age_seconds
        self._clock = clock
        self._refused: TTLCache[str, bool] = TTLCache(maxsize=10_000, ttl=REFUSAL_MEMORY_SECONDS)

    def allowed(self, sender_id: str) -> bool:
        return "*" in self.allow_from or sender_id in self.allow_from

    def judge(self, arrival: Arrival) -> Verdict:
        """The verdict on one message; each verdict but ACCEPT is logged here, once."""
        verdict = self._verdict(arrival)
        fields = {"message_id": arrival.message_id, "chat_id": arrival.chat_id}
        # Event names carry the channel ("feishu.sender_refused"): the docs name them.
        if verdict is Verdict.TOO_OLD:
            log.info(f"{self.channel}.too_old_skipped", **fields)
        elif verdict is Verdict.REFUSED:
            log.warning(
                f"{self.channel}.sender_refused",
                sender=arrival.sender_id,
                hint=f"add this id to channels.{self.channel}.allow_from (or '*')",
                **fields,
            )
        elif verdict is not Verdict.ACCEPT:
            log.debug(f"{self.channel}.skipped", verdict=verdict.value, **fields)
        return verdict

    def _verdict(self, arrival: Arrival) -> Verdict:
        if arrival.from_bot:
            return Verdict.FROM_BOT
        max_age = self.max_message_age_seconds
        created = arrival.created_at
        if max_age > 0 and created is not None and self._clock() - created > max_age:
            return Verdict.TOO_OLD
        if arrival.is_group and self.group_policy != "open" and not arrival.mentions_bot:
            return Verdict.NOT_MENTIONED
        if not self.allowed(arrival.sender_id):
            if arrival.sender_id in self._refused:
                return Verdict.REFUSED_AGAIN
            self._refused[arrival.sender_id] = True
            return Verdict.REFUSED
        return Verdict.ACCEPT
