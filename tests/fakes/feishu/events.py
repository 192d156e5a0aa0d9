"""Event bodies as Feishu sends them (schema 2.0), for the fake's frames and webhook posts."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

_APP_ID = "cli_fake"


def _header(event_type: str, *, token: str, app_id: str) -> dict[str, Any]:
    return {
        "event_id": uuid.uuid4().hex,
        "token": token,
        "create_time": str(int(time.time() * 1000)),
        "event_type": event_type,
        "tenant_key": "tenant_fake",
        "app_id": app_id,
    }


def message_event(
    *,
    chat_id: str,
    sender: str,
    text: str,
    chat_type: str = "p2p",
    mentions: list[dict[str, Any]] | None = None,
    message_id: str | None = None,
    create_time_ms: int | None = None,
    sender_type: str = "user",
    message_type: str = "text",
    content: dict[str, Any] | None = None,
    token: str = "",
    app_id: str = _APP_ID,
) -> dict[str, Any]:
    """An ``im.message.receive_v1`` event. ``mentions``: ``[{"key","open_id","name"}]``."""
    body = content if content is not None else {"text": text}
    return {
        "schema": "2.0",
        "header": _header("im.message.receive_v1", token=token, app_id=app_id),
        "event": {
            "sender": {
                "sender_id": {"open_id": sender, "user_id": None, "union_id": "on_" + sender},
                "sender_type": sender_type,
                "tenant_key": "tenant_fake",
            },
            "message": {
                "message_id": message_id or "om_in_" + uuid.uuid4().hex[:12],
                "root_id": None,
                "parent_id": None,
                "create_time": str(
                    create_time_ms if create_time_ms is not None else int(time.time() * 1000)
                ),
                "chat_id": chat_id,
                "chat_type": chat_type,
                "message_type": message_type,
                "content": json.dumps(body, ensure_ascii=False),
                "mentions": [
                    {
                        "key": m["key"],
                        "id": {"open_id": m["open_id"], "union_id": "on_x", "user_id": None},
                        "name": m.get("name", "bot"),
                        "tenant_key": "tenant_fake",
                    }
                    for m in (mentions or [])
                ],
            },
        },
    }


def card_action_event(
    *,
    operator: str,
    value: dict[str, Any],
    open_message_id: str,
    open_chat_id: str,
    token: str = "",
    app_id: str = _APP_ID,
) -> dict[str, Any]:
    """A ``card.action.trigger`` callback for a button with a callback behaviour."""
    return {
        "schema": "2.0",
        "header": _header("card.action.trigger", token=token, app_id=app_id),
        "event": {
            "operator": {"open_id": operator, "union_id": "on_" + operator, "tenant_key": "t"},
            "token": "c-" + uuid.uuid4().hex,
            "action": {"value": value, "tag": "button"},
            "host": "im_message",
            "context": {"open_message_id": open_message_id, "open_chat_id": open_chat_id},
        },
    }


def url_verification(*, challenge: str, token: str) -> dict[str, Any]:
    return {"challenge": challenge, "token": token, "type": "url_verification"}
