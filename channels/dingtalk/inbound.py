"""Reading DingTalk chatbot messages (stream frames and HTTP robot callbacks alike).

Both modes deliver the same JSON (``ChatbotMessage`` in the SDK). Its shape is checked
once, here, against channels/dingtalk/events.py (pydantic), so one parser serves both
modes, a payload missing an optional key is read (the SDK's ``ChatbotMessage.from_dict``
raises KeyError then) and one with a field of the wrong type is a MalformedEvent.
"""

from __future__ import annotations

from dataclasses import dataclass

from channels.dingtalk.events import ChatbotMessageShape, RichTextContent
from channels.payloads import read
from channels.receive import Arrival

CONVERSATION_SINGLE = "1"
CONVERSATION_GROUP = "2"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatbotEvent:
    """The parts of a chatbot message the gateway uses."""

    msg_id: str
    conversation_id: str
    is_group: bool
    sender_id: str  # the staff id (userid); the opaque senderId for external users
    sender_nick: str | None
    text: str | None  # None for message types the gateway cannot read (pictures, files)
    msgtype: str
    is_in_at_list: bool
    session_webhook: str | None
    session_webhook_expires_at: float | None  # epoch seconds
    robot_code: str | None
    created_at: float | None  # epoch seconds (createAt)


def _text_of(message: ChatbotMessageShape, msgtype: str) -> str | None:
    if msgtype == "text":
        return (message.text.content if message.text else None) or ""
    if msgtype == "richText":
        content = read(RichTextContent, message.content or {}, what="chatbot message: content")
        parts = [item.text for item in content.rich_text or () if item.text is not None]
        return "".join(parts) if parts else None
    return None


def parse_chatbot_message(data: object) -> ChatbotEvent:
    """Parse a chatbot message; MalformedEvent (a ValueError) naming the first field whose
    shape is wrong, or saying what any reply needs and is missing (ids, a sender)."""
    message = read(ChatbotMessageShape, data, what="chatbot message")
    msgtype = message.msgtype or ""
    text = _text_of(message, msgtype)
    expires_at = message.session_webhook_expired_time
    created_at = message.create_at
    return ChatbotEvent(
        msg_id=message.msg_id,
        conversation_id=message.conversation_id,
        is_group=message.conversation_type == CONVERSATION_GROUP,
        # The validator made sure one of them is there.
        sender_id=message.sender_staff_id or message.sender_id or "",
        sender_nick=message.sender_nick or None,
        # In groups DingTalk removes the @bot mention but leaves the space after it.
        text=text.strip() if text is not None else None,
        msgtype=msgtype,
        is_in_at_list=bool(message.is_in_at_list),
        session_webhook=message.session_webhook or None,
        session_webhook_expires_at=expires_at / 1000 if expires_at is not None else None,
        robot_code=message.robot_code or None,
        created_at=created_at / 1000 if created_at is not None else None,
    )


def arrival(event: ChatbotEvent) -> Arrival:
    """What the shared receive rules read from a chatbot message."""
    return Arrival(
        message_id=event.msg_id,
        chat_id=event.conversation_id,
        sender_id=event.sender_id,
        is_group=event.is_group,
        # DingTalk pushes group messages only when the bot is @-mentioned, unless the bot
        # may read the whole group; isInAtList tells which.
        mentions_bot=event.is_in_at_list,
        created_at=event.created_at,
    )
