"""What the Feishu channel sends: text, post (rich text) and confirmation cards (JSON 2.0).

Pure functions of the message or the confirmation record; no SDK import, so they are
cheap to test and the card a click answers with is the same card a patch writes.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any

from gateway import texts
from gateway.confirm.model import Confirmation, Decision, Risk
from gateway.confirm.views import card_view, grant_offered
from gateway.texts import Stage
from gateway.texts import again as again_texts
from gateway.texts import approvers as approver_texts

# Card header colours (Feishu template names) for the risk of a pending confirmation.
RISK_TEMPLATES = {
    Risk.LOW: "blue",
    Risk.MEDIUM: "yellow",
    Risk.HIGH: "orange",
    Risk.CRITICAL: "red",
}
# ... and for each later stage of its life (gateway/texts: the stage and its words).
STAGE_TEMPLATES = {
    Stage.APPROVED: "wathet",  # approved, running
    Stage.DONE: "green",
    Stage.FAILED: "red",
    Stage.INTERRUPTED: "orange",
    Stage.REJECTED: "red",
    Stage.EXPIRED: "grey",
    Stage.CANCELLED: "grey",
}

# Lines that make a reply worth rendering as Markdown (a post with an md element).
_MARKDOWN = re.compile(r"(^#{1,6}\s|^\s*[-*]\s|^\s*\d+\.\s|```|\*\*|\[[^\]]+\]\([^)]+\))", re.M)


# An @ tag: Feishu reads it in text messages and md elements alike, so a value a reply
# quotes (a table name, a row, a tool result) could ping the whole group (issue 22).
_AT_TAG = re.compile(r"<(\s*/?\s*at\b)", re.IGNORECASE)


def message_content(text: str) -> tuple[str, str]:
    """(msg_type, content JSON string) for a normal reply: post for Markdown, else text.

    The agent's reply may be Markdown, never a mention: an @ tag in it is shown with a
    full-width ``＜`` instead of read (``＜at user_id="all">``).
    """
    text = _AT_TAG.sub(r"＜\1", text)
    if _MARKDOWN.search(text):
        post = {"zh_cn": {"title": "", "content": [[{"tag": "md", "text": text}]]}}
        return "post", json.dumps(post, ensure_ascii=False)
    return "text", json.dumps({"text": text}, ensure_ascii=False)


def plain_content(text: str) -> tuple[str, str]:
    """(msg_type, content) that shows ``text`` as written: a post of text elements.

    Not a text message: Feishu reads ``<at user_id="all">`` and ``[..](..)`` links in
    those, so a table name or a reason could ping the whole group (issue 22). For texts
    that carry values from a request: confirmation prompts, outcomes, direct copies.
    """
    lines = [[{"tag": "text", "text": line}] for line in text.split("\n")]
    return "post", json.dumps({"zh_cn": {"title": "", "content": lines}}, ensure_ascii=False)


def mention_content(text: str, mentions: Sequence[str]) -> tuple[str, str]:
    """(msg_type, content) of ``plain_content`` with a first line that @-mentions each of
    ``mentions`` (open_ids): a post's ``at`` elements, the one way a mention is made here,
    so nothing in ``text`` can mention anyone."""
    msg_type, content = plain_content(text)
    post = json.loads(content)
    ats: list[dict[str, str]] = []
    for open_id in mentions:
        ats += [{"tag": "at", "user_id": open_id}, {"tag": "text", "text": " "}]
    post["zh_cn"]["content"].insert(0, ats)
    return msg_type, json.dumps(post, ensure_ascii=False)


def _text(content: str, *, element_id: str | None = None, **style: str) -> dict[str, Any]:
    """Text shown as written: a plain_text div, never lark_md (issue 22: a quoted table
    name put ``<at id=all></at>`` and a link on the card). Every value on a confirmation
    card comes from a request (statement, tables, summary, reason, names, arguments), so
    the card has no markdown element at all."""
    element: dict[str, Any] = {"tag": "div", "text": {"tag": "plain_text", "content": content}}
    element["text"].update(style)
    if element_id is not None:
        element["element_id"] = element_id
    return element


# The element_id of the statement's element (Feishu: unique in the card, at most 20 chars).
STATEMENT_ELEMENT = "statement"

# What a button's callback value says; a grant button adds the minutes it grants.
GRANT_MINUTES = "grant_minutes"


def _button(c: Confirmation, decision: Decision, *, grant: bool = False) -> dict[str, Any]:
    approve = decision is Decision.APPROVE
    value: dict[str, Any] = {"confirmation_id": c.id, "decision": decision.value}
    label = texts.APPROVE_BUTTON if approve else texts.REJECT_BUTTON
    kind = "primary_filled" if approve else "danger"
    if grant:
        value[GRANT_MINUTES] = texts.GRANT_MINUTES_BUTTON
        label, kind = texts.GRANT_BUTTON, "primary"
    return {
        "tag": "button",
        "element_id": "btn_grant" if grant else f"btn_{decision.value}",
        "text": {"tag": "plain_text", "content": label},
        "type": kind,
        "behaviors": [{"type": "callback", "value": value}],
    }


def _decisions(c: Confirmation, *, direct: bool) -> tuple[Decision, ...]:
    """The buttons worth showing: in a one-to-one four-eyes chat only the requester reads
    the card, and the requester may only withdraw (approvers decide elsewhere)."""
    if c.four_eyes and not c.is_group and not direct:
        return (Decision.REJECT,)
    return (Decision.APPROVE, Decision.REJECT)


def _row(buttons: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "tag": "column_set",
        "flex_mode": "none",
        "columns": [{"tag": "column", "width": "auto", "elements": [b]} for b in buttons],
    }


def confirmation_card(
    c: Confirmation, *, now: float | None = None, direct: bool = False
) -> dict[str, Any]:
    """The card for a confirmation at its stage; buttons only while pending.

    ``direct``: the copy in an approver's direct chat (gateway/confirm/views.py), which
    says who asks and where, and asks for the id in a typed reply. Once settled, every
    copy shows the same outcome: approved and running, then how the run ended.
    """
    now = time.time() if now is None else now
    stage = texts.stage(c)
    pending = stage is Stage.PENDING
    # The statement gets an element of its own below.
    lines = texts.detail_lines(c, statement=False)
    elements: list[dict[str, Any]] = []
    if pending and direct:
        elements.append(_text(approver_texts.direct_intro(c)))
    elements.append(_text(c.summary))
    statement = c.details.get("statement")
    if statement:
        elements.append(_text(str(statement), element_id=STATEMENT_ELEMENT))
    elements.append(_text("\n".join(lines)))
    if pending:
        template = RISK_TEMPLATES.get(c.risk, "orange")
        title = texts.confirmation_title(c)
        elements.append(_text(texts.time_left(c, now)))
        decisions = _decisions(c, direct=direct)
        elements.append(_row([_button(c, decision) for decision in decisions]))
        if Decision.APPROVE in decisions and grant_offered(c):
            elements.append(_row([_button(c, Decision.APPROVE, grant=True)]))
        # The typed reply always works, also where a client cannot show the buttons.
        hint = approver_texts.direct_reply_hint(c) if direct else texts.reply_hint(c)
        elements.append(_text(hint))
    else:
        template = STAGE_TEMPLATES[stage]
        title = texts.status_line(c)
        elements.append(_text(texts.outcome(c), text_size="heading"))
        elements.extend(_again_elements(c, direct=direct))
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


# What the 重新发起 / Ask again button's callback value says (gateway/confirm/again.py).
AGAIN = "again"


def _again_elements(c: Confirmation, *, direct: bool) -> list[dict[str, Any]]:
    """An ended card's 重新发起 / Ask again button (the click is judged when it comes: only
    the requester), or, once asked again, where the call went. Not on an approver's
    direct copy: the requester asks again in the chat where they asked."""
    offer = card_view(c).again_offer()
    if offer["went"]:
        return [_text(str(offer["went"]))]
    if not offer["offered"] or direct:
        return []
    button = {
        "tag": "button",
        "element_id": "btn_again",
        "text": {"tag": "plain_text", "content": again_texts.AGAIN_BUTTON},
        "type": "primary",
        "behaviors": [{"type": "callback", "value": {"confirmation_id": c.id, AGAIN: True}}],
    }
    return [_row([button]), _text(again_texts.AGAIN_HINT.format(id=c.id))]


def card_content(c: Confirmation, *, now: float | None = None, direct: bool = False) -> str:
    return json.dumps(confirmation_card(c, now=now, direct=direct), ensure_ascii=False)


def callback_response(
    *, toast: str, kind: str = "info", card: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The body a ``card.action.trigger`` callback answers with (toast, optional new card)."""
    body: dict[str, Any] = {"toast": {"type": kind, "content": toast}}
    if card is not None:
        body["card"] = {"type": "raw", "data": card}
    return body
