"""The channel abstraction every platform adapter implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from gateway.bus import MessageBus, OutboundMessage

if TYPE_CHECKING:
    from aiohttp import web

    from config.settings import Settings
    from gateway.confirm.service import ConfirmationService
    from gateway.metrics import Metrics


class ChannelSendError(Exception):
    """Sending failed. ``retryable`` ones are retried with backoff by the manager."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True, slots=True, kw_only=True)
class ChannelContext:
    """What the composition root hands a channel factory."""

    settings: Settings
    bus: MessageBus
    confirmations: ConfirmationService
    http: web.Application | None
    metrics: Metrics | None = None


class Channel(ABC):
    """A platform adapter: turns platform events into InboundMessages and sends replies.

    Channels verify requests, drop duplicates, strip mentions and pick the session key;
    they never parse replies or know policies (that is the core's job).
    """

    name: ClassVar[str]

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def stop(self) -> None: ...

    @abstractmethod
    async def send(self, msg: OutboundMessage) -> None:
        """Deliver one message. Confirmation prompts and updates arrive here too: a channel
        with cards renders them; the default is the message's text."""

    @property
    def ready(self) -> bool:
        return True

    def status(self) -> dict[str, Any]:
        """What ``/readyz`` shows for the channel: ``reason`` says why it is not ready."""
        ready = self.ready
        return {"name": self.name, "ready": ready, "reason": None if ready else "not started"}
