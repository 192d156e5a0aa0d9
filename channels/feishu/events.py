"""The shape of the Feishu events the channel reads (schema 2.0), field by field.

Only the fields ``channels.feishu.inbound`` reads are declared; anything else Feishu sends
is ignored. Types are Feishu's own (``create_time`` is a string of milliseconds), checked
without coercion: see channels/payloads.py.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import StringConstraints

from channels.payloads import Shape

NonEmpty = Annotated[str, StringConstraints(min_length=1)]
# Milliseconds since the epoch, as a string of digits (Feishu's type).
MillisString = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,16}$")]


class UserIds(Shape):
    open_id: str | None = None


class MentionShape(Shape):
    key: str  # the placeholder in the text, e.g. "@_user_1"
    id: UserIds | None = None
    name: str | None = None


class MessageShape(Shape):
    # Without them the message can be neither answered nor told from a redelivery.
    message_id: NonEmpty
    chat_id: NonEmpty
    chat_type: str | None = None
    message_type: str | None = None
    content: str | None = None  # a JSON string, read by message_text
    create_time: MillisString | None = None
    mentions: list[MentionShape] | None = None
    parent_id: str | None = None
    thread_id: str | None = None


class SenderShape(Shape):
    sender_id: UserIds | None = None
    sender_type: str | None = None


class MessageReceived(Shape):
    """The ``event`` of ``im.message.receive_v1``."""

    sender: SenderShape | None = None
    message: MessageShape


class OperatorShape(Shape):
    # The person who clicked: a click without one cannot be a decision.
    open_id: NonEmpty


class ActionShape(Shape):
    # The button's value as our card set it; its fields are read by the channel, which
    # answers a value it does not know with a toast (the clicker learns the card is stale).
    value: Any = None


class ContextShape(Shape):
    open_message_id: str | None = None
    open_chat_id: str | None = None


class CardActionTriggered(Shape):
    """The ``event`` of ``card.action.trigger``."""

    operator: OperatorShape
    action: ActionShape
    context: ContextShape | None = None


class MessageEvent(Shape):
    event: MessageReceived


class CardActionEvent(Shape):
    event: CardActionTriggered
