"""What the Feishu channel sends: text, post (rich text) and confirmation cards (JSON 2.0).

Pure functions of the message or the confirmation record; no SDK import, so they are
cheap to test and the card a click answers with is the same card a patch writes.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from gateway import texts
from gateway.confirm.model import Confirmation, Decision, Risk, Status

# Card header colours (Feishu template names) for the risk of a pending confirmation.
RISK_TEMPLATES = {
    Risk.LOW: "blue",
    Risk.MEDIUM: "yellow",
    Risk.HIGH: "orange",
    Risk.CRITICAL: "red",
}
STATUS_TEMPLATES = {
    Status.APPROVED: "green",
    Status.REJECTED: "red",
    Status.EXPIRED: "grey",
    Status.CANCELLED: "grey",
}

# Lines that make a reply worth rendering as Markdown (a post with an md element).
_MARKDOWN = re.compile(r"(^#{1,6}\s|^\s*[-*]\s|^\s*\d+\.\s|```|\*\*|\[[^\]]+\]\([^)]+\))", re.M)


def message_content(text: str) -> tuple[str, str]:
    """(msg_type, content JSON string) for a normal reply: post for Markdown, else text."""
    if _MARKDOWN.search(text):
        post = {"zh_cn": {"title": "", "content": [[{"tag": "md", "text": text}]]}}
        return "post", json.dumps(post, ensure_ascii=False)
    return "text", json.dumps({"text": text}, ensure_ascii=False)


def _code_block(statement: str) -> str:
    # A statement containing a fence would end the block early and render as Markdown.
    return "```sql\n" + statement.replace("```", "'''") + "\n```"


def _md(content: str) -> dict[str, Any]:
    return {"tag": "markdown", "content": content}


def _button(c: Confirmation, decision: Decision) -> dict[str, Any]:
    approve = decision is Decision.APPROVE
    return {
        "tag": "button",
        "element_id": f"btn_{decision.value}",
        "text": {
            "tag": "plain_text",
            "content": texts.APPROVE_BUTTON if approve else texts.REJECT_BUTTON,
        },
        "type": "primary_filled" if approve else "danger",
        "behaviors": [
            {
                "type": "callback",
                "value": {"confirmation_id": c.id, "decision": decision.value},
            }
        ],
    }


def _decisions(c: Confirmation) -> tuple[Decision, ...]:
    """The buttons worth showing: in a one-to-one four-eyes chat only the requester reads
    the card, and the requester may only withdraw (approvers decide elsewhere)."""
    if c.four_eyes and not c.is_group:
        return (Decision.REJECT,)
    return (Decision.APPROVE, Decision.REJECT)


def confirmation_card(c: Confirmation, *, now: float | None = None) -> dict[str, Any]:
    """The card for a confirmation in its current state; buttons only while pending."""
    now = time.time() if now is None else now
    # The statement gets a code block of its own below.
    lines = texts.detail_lines(c, statement=False)
    elements: list[dict[str, Any]] = [_md(c.summary)]
    statement = c.details.get("statement")
    if statement:
        elements.append(_md(_code_block(str(statement))))
    elements.append(_md("\n".join(lines)))
    if c.status is Status.PENDING:
        template = RISK_TEMPLATES.get(c.risk, "orange")
        title = texts.confirmation_title(c)
        elements.append(_md(texts.time_left(c, now)))
        elements.append(
            {
                "tag": "column_set",
                "flex_mode": "none",
                "columns": [
                    {"tag": "column", "width": "auto", "elements": [_button(c, decision)]}
                    for decision in _decisions(c)
                ],
            }
        )
        # The typed reply always works, also where a client cannot show the buttons.
        elements.append(_md(texts.reply_hint(c)))
    else:
        template = STATUS_TEMPLATES.get(c.status, "grey")
        title = texts.status_line(c)
        elements.append(_md("**" + texts.outcome(c) + "**"))
    return {
        "schema": "2.0",
        # update_multi: one shared card for everyone in the chat, so a patch reaches all.
        "config": {"update_multi": True, "width_mode": "fill"},
        "header": {
            "title": {"tag": "plain_text", "content": title},
            "template": template,
        },
        "body": {"elements": elements},
    }


def card_content(c: Confirmation, *, now: float | None = None) -> str:
    return json.dumps(confirmation_card(c, now=now), ensure_ascii=False)


def callback_response(
    *, toast: str, kind: str = "info", card: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The body a ``card.action.trigger`` callback answers with (toast, optional new card)."""
    body: dict[str, Any] = {"toast": {"type": kind, "content": toast}}
    if card is not None:
        body["card"] = {"type": "raw", "data": card}
    return body
