"""The channel abstraction every platform adapter implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from gateway import texts
from gateway.bus import MessageBus, OutboundKind, OutboundMessage
from gateway.confirm.events import ConfirmationEvent
from gateway.confirm.model import Confirmation

if TYPE_CHECKING:
    from aiohttp import web

    from config.settings import Settings
    from gateway.confirm.service import ConfirmationService
    from gateway.metrics import Metrics
    from gateway.storage.rooms import RoomStore


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
    rooms: RoomStore | None = None  # the web chat's (gateway.storage.backends.open_rooms)


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


def run_ended(c: Confirmation) -> OutboundMessage:
    """The update that brings every copy of ``c``'s prompt to how its run ended.

    The same message a decision posts (a CONFIRMATION_UPDATE of the record), sent by the
    channel's one update path; ``copies_only``, as the turn tells the chat the result.
    """
    return OutboundMessage(
        channel=c.channel,
        chat_id=c.chat_id,
        session_key=c.session_key,
        kind=OutboundKind.CONFIRMATION_UPDATE,
        text=texts.outcome(c),
        confirmation=c,
        copies_only=True,
    )


def follow_run_ends(
    channel: str, confirmations: ConfirmationService, bus: MessageBus
) -> Callable[[], None]:
    """While a channel with cards runs: each call asked on it that ends running here (done,
    failed, interrupted: the service's ``executed`` event) updates its prompt's copies.

    A decision's update is posted by the service itself; an execution's end is only told to
    listeners, and reaches the cards here, through the outbound queue, so it keeps its place
    after the decision's update in its chat. Local events only: another replica's end was
    sent to the platform by that replica. Returns the unsubscribe.
    """

    async def on_event(event: ConfirmationEvent) -> None:
        c = event.confirmation
        if event.kind == "executed" and not event.remote and c.channel == channel:
            await bus.publish_outbound(run_ended(c))

    return confirmations.subscribe(on_event)
