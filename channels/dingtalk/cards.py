"""Confirmation cards for DingTalk's card instances API.

A card's ``outTrackId`` is derived from the confirmation id, so a click maps back to
its confirmation without any state kept in the channel. The parameter map carries the
variables of the standard card (the public MarkdownButton template that ships with
the dingtalk-stream SDK) and, beside them, plain variables a custom template can bind
(see docs/dingtalk.md).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from channels.dingtalk.events import CardCallbackShape, CardContent, CardParams
from channels.payloads import MalformedEvent, read
from gateway import texts
from gateway.confirm.ids import canonical_id
from gateway.confirm.model import Confirmation, Decision, Status
from gateway.confirm.views import card_view, grant_offered
from gateway.http.jsonapi import DEFAULT_MAX_JSON_DEPTH, JsonInputError, parse_json
from gateway.texts import again as again_texts
from gateway.texts import approvers as approver_texts

OUT_TRACK_PREFIX = "gwconf-"

# The public "MarkdownButton" template the dingtalk-stream SDK uses for
# MarkdownButtonCardInstance (dingtalk_stream/card_instance.py): title, markdown, tips
# and sys_full_json_obj.msgButtons. Any app can deliver it without drawing a template.
STANDARD_TEMPLATE_ID = "1366a1eb-bc54-4859-ac88-517c56a9acb1.schema"

ACTION_APPROVE = "approve"
ACTION_REJECT = "reject"
# Approve, and skip asking for the same tool in this session for a while (grants.py).
ACTION_APPROVE_GRANT = "approve_grant"
_ACTIONS = {
    ACTION_APPROVE: Decision.APPROVE,
    ACTION_REJECT: Decision.REJECT,
    ACTION_APPROVE_GRANT: Decision.APPROVE,
}
# 重新发起 / Ask again on an ended card (gateway/confirm/again.py): its requester only.
ACTION_AGAIN = "again"
# Between the confirmation id and the approver's digest in a direct copy's outTrackId.
_DIRECT_MARK = "_dm_"


def out_track_id(confirmation_id: str, *, direct_to: str | None = None) -> str:
    """The card's outTrackId; ``direct_to``: the copy in that staff id's direct chat (its
    own card, so each copy is updated by its own id)."""
    if direct_to is None:
        return f"{OUT_TRACK_PREFIX}{confirmation_id}"
    # Hashed: a staff id may hold characters an outTrackId should not.
    digest = hashlib.sha256(direct_to.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{OUT_TRACK_PREFIX}{confirmation_id}{_DIRECT_MARK}{digest}"


def confirmation_id_from(track_id: str) -> str | None:
    """The confirmation id inside one of our outTrackIds; None for cards we did not send."""
    if not track_id.startswith(OUT_TRACK_PREFIX):
        return None
    rest = track_id[len(OUT_TRACK_PREFIX) :].split(_DIRECT_MARK, 1)[0]
    cid = canonical_id(rest)
    return cid or None


@dataclass(frozen=True, slots=True)
class CardClick:
    """A button click as the card callback topic delivers it."""

    confirmation_id: str | None
    decision: Decision | None
    user_id: str
    out_track_id: str
    grant_minutes: int | None = None  # the grant button: approve and skip asking this long
    again: bool = False  # 重新发起 / Ask again pressed (no decision)


def parse_card_callback(data: object) -> CardClick:
    """Read ``{outTrackId, userId, content: "{cardPrivateData: {actionIds, params}}"}``;
    MalformedEvent (a ValueError) naming the first field whose shape is wrong."""
    callback = read(CardCallbackShape, data, what="card callback")
    content: object = callback.content or {}
    if isinstance(content, str):
        try:
            content = parse_json(content, max_depth=DEFAULT_MAX_JSON_DEPTH)
        except JsonInputError as exc:
            raise MalformedEvent(f"card callback: content: {exc}") from None
    private = read(CardContent, content, what="card callback: content").card_private_data
    action_ids = (private.action_ids if private else None) or []
    params = (private.params if private else None) or CardParams()
    # Custom templates name the button by actionId; the standard template's request
    # buttons only echo their params.
    candidates = [*action_ids, params.action or "", params.id or ""]
    action = next((c for c in candidates if c in _ACTIONS), None)
    track = callback.out_track_id or ""
    return CardClick(
        confirmation_id=confirmation_id_from(track),
        decision=_ACTIONS[action] if action is not None else None,
        user_id=callback.user_id or "",
        out_track_id=track,
        grant_minutes=texts.GRANT_MINUTES_BUTTON if action == ACTION_APPROVE_GRANT else None,
        again=action is None and ACTION_AGAIN in candidates,
    )


def _button(label: str, action: str, color: str, confirmation_id: str) -> dict[str, Any]:
    return {
        "text": label,
        "color": color,
        "request": True,
        "id": action,
        "params": {"action": action, "id": action, "confirmation_id": confirmation_id},
    }


def _buttons(c: Confirmation, *, direct: bool) -> list[dict[str, Any]]:
    """A pending card's buttons: approve (and, where a grant may apply, approve and skip
    asking for 30 minutes), then cancel. In a one-to-one four-eyes chat the requester may
    only withdraw; an approver's direct copy always decides."""
    buttons = [_button(texts.REJECT_BUTTON, ACTION_REJECT, "red", c.id)]
    if direct or c.is_group or not c.four_eyes:
        approve = [_button(texts.APPROVE_BUTTON, ACTION_APPROVE, "blue", c.id)]
        if grant_offered(c):
            approve.append(_button(texts.GRANT_BUTTON, ACTION_APPROVE_GRANT, "blue", c.id))
        buttons[:0] = approve
    return buttons


def _again_buttons(c: Confirmation) -> list[dict[str, Any]]:
    """An ended card's 重新发起 / Ask again, while offered (the click is judged when it
    comes: only the requester)."""
    if not card_view(c).again_offer()["offered"]:
        return []
    return [_button(again_texts.AGAIN_BUTTON, ACTION_AGAIN, "blue", c.id)]


def _again_went(c: Confirmation) -> str:
    """Once asked again: where the call went, after the card's outcome ("" before)."""
    went = card_view(c).again_offer()["went"]
    return f"\n{went}" if went else ""


# What starts markup anywhere in a line: links and images ([x](url), ![x](url)), <at>
# and HTML tags, emphasis, code spans, tables, strikethrough; a backslash escapes each.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]()<>!|~{}#])")
# What starts markup only at the start of a line: lists, setext headings, rules.
_LINE_START = re.compile(r"^(\s*\d*)([-+=.)])")


def escape_markdown(text: str) -> str:
    """``text`` shown as written in DingTalk markdown (issue 22: a quoted table name put a
    link on the card). Each line separately: DingTalk needs a blank line between lines."""
    lines = []
    for line in text.splitlines():
        line = _MARKDOWN_SPECIAL.sub(r"\\\1", line)
        lines.append(_LINE_START.sub(r"\1\\\2", line))
    return "\n\n".join(line for line in lines if line.strip())


def code_fence(code: str, language: str = "sql") -> str:
    """``code`` in a fenced block no backtick run inside it can end (CommonMark: the
    closing fence must be at least as long as the opening one)."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{code}\n{fence}"


def prompt_markdown(c: Confirmation, *, direct: bool = False, as_text: bool = False) -> str:
    """A confirmation as DingTalk markdown: values from the request escaped, the statement
    in a code block. The card's body; ``as_text``: the markdown message sent where a card
    cannot go, with the title and how to reply (the card has them elsewhere)."""
    body = [c.summary]
    if direct and c.status is Status.PENDING:
        body.insert(0, approver_texts.direct_intro(c))
    blocks = [escape_markdown(line) for line in body]
    statement = c.details.get("statement")
    if statement:
        blocks.append(code_fence(str(statement)))
    blocks += [escape_markdown(line) for line in texts.detail_lines(c, statement=False)]
    if c.status is Status.PENDING:
        blocks.append(escape_markdown(texts.expires_at(c)))
        if c.four_eyes:
            blocks.append(escape_markdown(texts.FOUR_EYES))
        elif c.is_group:
            blocks.append(escape_markdown(texts.ONLY_APPROVERS))
    else:
        # The title says the stage; the body how it came to it, with the run's result.
        blocks.append("**" + escape_markdown(texts.outcome(c)) + "**")
    if as_text:
        blocks.insert(0, "**" + escape_markdown(texts.confirmation_title(c)) + "**")
        hint = approver_texts.direct_reply_hint(c) if direct else texts.reply_hint(c)
        blocks.append(escape_markdown(hint))
    # DingTalk markdown needs a blank line to break a line.
    return "\n\n".join(block for block in blocks if block)


def card_params(
    c: Confirmation, *, now: float | None = None, direct: bool = False
) -> dict[str, str]:
    """The card's ``cardParamMap``: every value a string, as DingTalk requires.

    ``direct``: the copy in an approver's direct chat, which says who asks and where and
    asks for the id in a typed reply; settled, every copy shows the same outcome.
    """
    now = time.time() if now is None else now
    pending = c.status is Status.PENDING
    if pending:
        title = texts.confirmation_title(c)
        tips = approver_texts.direct_reply_hint(c) if direct else texts.reply_hint(c)
        buttons = _buttons(c, direct=direct)
    else:
        title = texts.status_line(c)
        tips = texts.outcome(c) + _again_went(c)
        # Not on an approver's direct copy: the requester asks again where they asked.
        buttons = [] if direct else _again_buttons(c)
    markdown = prompt_markdown(c, direct=direct)
    return {
        # The standard (MarkdownButton) template.
        "title": title,
        "markdown": markdown,
        "tips": tips,
        "sys_full_json_obj": json.dumps({"msgButtons": buttons}, ensure_ascii=False),
        # Plain variables for a custom template (docs/dingtalk.md).
        "confirmation_id": c.id,
        "status": c.status.value,
        "stage": texts.stage(c).value,
        "status_text": texts.stage_label(texts.stage(c)),
        "status_line": texts.status_line(c),
        "summary": c.summary,
        "details": "\n".join(texts.detail_lines(c)),
        "reply_hint": tips if pending else texts.reply_hint(c),
        "decided_by": c.decided_by or "",
        "pending": "true" if pending else "false",
        # A custom template shows its grant button only where this is "true".
        "grant_offered": str(any(b["id"] == ACTION_APPROVE_GRANT for b in buttons)).lower(),
        "seconds_left": str(int(c.seconds_left(now))),
    }
