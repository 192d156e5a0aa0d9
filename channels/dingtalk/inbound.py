"""Reading DingTalk chatbot messages (stream frames and HTTP robot callbacks alike).

Both modes deliver the same JSON (``ChatbotMessage`` in the SDK). It is read here with
plain dict access so one parser serves both modes and a payload missing an optional
key never raises (the SDK's ``ChatbotMessage.from_dict`` raises KeyError then).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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


def _text_of(data: Mapping[str, Any], msgtype: str) -> str | None:
    if msgtype == "text":
        text = data.get("text")
        content = text.get("content") if isinstance(text, Mapping) else None
        return str(content) if content is not None else ""
    if msgtype == "richText":
        content = data.get("content")
        items = content.get("richText") if isinstance(content, Mapping) else None
        parts = [
            str(item["text"])
            for item in (items if isinstance(items, list) else [])
            if isinstance(item, Mapping) and item.get("text") is not None
        ]
        return "".join(parts) if parts else None
    return None


def parse_chatbot_message(data: Mapping[str, Any]) -> ChatbotEvent | None:
    """Parse a chatbot message; None when it lacks what any reply needs."""
    msg_id = str(data.get("msgId") or "")
    conversation_id = str(data.get("conversationId") or "")
    sender = str(data.get("senderStaffId") or data.get("senderId") or "")
    if not (msg_id and conversation_id and sender):
        return None
    msgtype = str(data.get("msgtype") or "")
    text = _text_of(data, msgtype)
    expires_at = _ms_to_seconds(data.get("sessionWebhookExpiredTime"))
    return ChatbotEvent(
        msg_id=msg_id,
        conversation_id=conversation_id,
        is_group=str(data.get("conversationType")) == CONVERSATION_GROUP,
        sender_id=sender,
        sender_nick=str(data["senderNick"]) if data.get("senderNick") else None,
        # In groups DingTalk removes the @bot mention but leaves the space after it.
        text=text.strip() if text is not None else None,
        msgtype=msgtype,
        is_in_at_list=bool(data.get("isInAtList")),
        session_webhook=str(data["sessionWebhook"]) if data.get("sessionWebhook") else None,
        session_webhook_expires_at=expires_at,
        robot_code=str(data["robotCode"]) if data.get("robotCode") else None,
        created_at=_ms_to_seconds(data.get("createAt")),
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


def _ms_to_seconds(value: Any) -> float | None:
    try:
        return int(value) / 1000 if value is not None else None
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity
        return None
