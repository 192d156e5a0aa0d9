"""Feishu events as plain records, the text a person wrote, and the bus message.

Events are read here from their JSON (schema 2.0, as both transports deliver it) into
small frozen records (``FeishuMessage``, ``CardAction``), so the rest of the channel is
typed and the same for the long connection and the webhook. Each event's shape is checked
once, on the way in, against channels/feishu/events.py (pydantic: a signed event with a
field of the wrong type is a MalformedEvent, not a TypeError further on). Not through lark-oapi's
event models: the SDK's dispatcher parses every event twice into objects built by
reflection, about 100 µs of CPU per event, as much as the rest of receiving one
(bench/ingest_nanobot.py). Which messages reach the bus is decided by the shared
``channels.receive.ReceiveRules``, from the ``Arrival`` made here.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from channels.feishu.events import (
    CardActionEvent,
    ContextShape,
    MessageEvent,
    SenderShape,
    UserIds,
)
from channels.payloads import read
from channels.receive import Arrival
from gateway.bus import InboundMessage
from gateway.http.jsonapi import DEFAULT_MAX_JSON_DEPTH, JsonInputError, parse_json

CHANNEL = "feishu"


@dataclass(frozen=True, slots=True)
class Mention:
    key: str  # the placeholder in the text, e.g. "@_user_1"
    open_id: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FeishuMessage:
    """One ``im.message.receive_v1`` event."""

    message_id: str
    chat_id: str
    chat_type: str  # "p2p" | "group"
    sender_open_id: str
    sender_type: str  # "user" | "app"
    message_type: str  # "text" | "post" | "image" | ...
    content: str  # the JSON string Feishu sends
    create_time_ms: int
    mentions: tuple[Mention, ...] = ()
    parent_id: str | None = None
    thread_id: str | None = None

    @property
    def is_group(self) -> bool:
        return self.chat_type != "p2p"


# Where the webhook and the long connection hand each message they read.
MessageSink = Callable[[FeishuMessage], Awaitable[None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class CardAction:
    """One ``card.action.trigger`` callback (a button click)."""

    operator_open_id: str
    value: Mapping[str, Any] = field(default_factory=dict)
    open_message_id: str = ""
    open_chat_id: str = ""


def _open_id(ids: UserIds | None) -> str:
    return (ids.open_id if ids is not None else None) or ""


def message_from_event(payload: Mapping[str, Any]) -> FeishuMessage:
    """Read an ``im.message.receive_v1`` event; MalformedEvent (a ValueError) naming the
    first field whose shape is wrong (channels/feishu/events.py)."""
    event = read(MessageEvent, payload, what="message event").event
    msg = event.message
    sender = event.sender or SenderShape()
    mentions = tuple(
        Mention(key=m.key, open_id=_open_id(m.id), name=m.name or "") for m in msg.mentions or ()
    )
    return FeishuMessage(
        message_id=msg.message_id,
        chat_id=msg.chat_id,
        chat_type=msg.chat_type or "p2p",
        sender_open_id=_open_id(sender.sender_id),
        sender_type=sender.sender_type or "",
        message_type=msg.message_type or "",
        content=msg.content or "{}",
        create_time_ms=int(msg.create_time) if msg.create_time else int(time.time() * 1000),
        mentions=mentions,
        parent_id=msg.parent_id or None,
        thread_id=msg.thread_id or None,
    )


def card_action_from_event(payload: Mapping[str, Any]) -> CardAction:
    """Read a ``card.action.trigger`` callback; MalformedEvent (a ValueError) naming the
    first field whose shape is wrong."""
    event = read(CardActionEvent, payload, what="card callback").event
    value = event.action.value
    context = event.context or ContextShape()
    return CardAction(
        operator_open_id=event.operator.open_id,
        value=value if isinstance(value, dict) else {},
        open_message_id=context.open_message_id or "",
        open_chat_id=context.open_chat_id or "",
    )


def _post_text(content: Mapping[str, Any], mentions: Mapping[str, str]) -> str:
    # Received posts are {"title", "content": [[elements]]}; sent ones are keyed by locale.
    body: Any = content
    if "content" not in body:
        body = next((v for v in content.values() if isinstance(v, dict)), {})
    lines: list[str] = []
    title = body.get("title")
    if title:
        lines.append(str(title))
    paragraphs = body.get("content")
    for paragraph in paragraphs if isinstance(paragraphs, list) else []:
        parts: list[str] = []
        for el in paragraph if isinstance(paragraph, list) else []:
            if not isinstance(el, dict):
                continue
            tag = el.get("tag")
            if tag in ("text", "md", "a"):
                parts.append(str(el.get("text", "")))
            elif tag == "at":
                key = str(el.get("user_id", ""))
                parts.append(mentions.get(key, "@" + str(el.get("user_name", ""))))
            elif tag == "code_block":
                parts.append(str(el.get("text", "")))
        lines.append("".join(parts))
    return "\n".join(lines)


def message_text(msg: FeishuMessage, *, bot_open_id: str | None) -> str | None:
    """The text a person wrote, mentions of the bot removed; None for unsupported types."""
    try:
        content = parse_json(msg.content, max_depth=DEFAULT_MAX_JSON_DEPTH)
    except JsonInputError:
        return None
    if not isinstance(content, dict):
        return None
    # Placeholder -> what replaces it: nothing for the bot, "@Name" for anyone else.
    by_key = {m.key: ("" if m.open_id == bot_open_id else f"@{m.name}") for m in msg.mentions}
    by_open_id = {
        m.open_id: ("" if m.open_id == bot_open_id else f"@{m.name}") for m in msg.mentions
    }
    if msg.message_type == "text":
        text = str(content.get("text", ""))
        for key, replacement in sorted(by_key.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(key, replacement)
    elif msg.message_type == "post":
        # An "at" element names the mention by its placeholder key or by open_id.
        text = _post_text(content, {**by_open_id, **by_key})
        for key, replacement in sorted(by_key.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(key, replacement)
    else:
        return None
    return " ".join(text.split()) if "\n" not in text else text.strip()


def arrival(msg: FeishuMessage, *, bot_open_id: str | None) -> Arrival:
    """What the shared receive rules read from a message.

    Until the bot's own open_id is known (``/bot/v3/info``), no group message counts as
    mentioning it: in "mention" groups nothing is answered rather than everything.
    """
    mentioned = bot_open_id is not None and any(m.open_id == bot_open_id for m in msg.mentions)
    return Arrival(
        message_id=msg.message_id,
        chat_id=msg.chat_id,
        sender_id=msg.sender_open_id,
        is_group=msg.is_group,
        mentions_bot=mentioned,
        from_bot=msg.sender_type == "app"
        or (bot_open_id is not None and msg.sender_open_id == bot_open_id),
        created_at=msg.create_time_ms / 1000,
    )


def to_inbound(msg: FeishuMessage, text: str) -> InboundMessage:
    """The bus message: sender = open_id, session = ``feishu:<chat_id>``."""
    return InboundMessage(
        channel=CHANNEL,
        chat_id=msg.chat_id,
        sender_id=msg.sender_open_id,
        text=text,
        message_id=msg.message_id,
        is_group=msg.is_group,
        reply_to=msg.parent_id,
        metadata={"feishu_message_id": msg.message_id, "chat_type": msg.chat_type},
    )
