"""What the web chat page shows: its labels, the lines its script writes, and each card.

The page (channels/webchat/page.py) is rendered from ``WEBCHAT_LABELS`` and carries
``WEBCHAT_SCRIPT`` as JSON for app.js, which fills the ``{name}`` fields; a card's words
come with the record in every frame (``web_card``), so the script composes none itself.
"""

from __future__ import annotations

from typing import Any

from gateway.confirm.model import Confirmation
from gateway.texts import votes
from gateway.texts.again import AGAIN_BUTTON
from gateway.texts.channels import APPROVE_BUTTON, REJECT_BUTTON
from gateway.texts.confirm import (
    FIELD_ARGS,
    FIELD_ASKED,
    FIELD_ASKED_AGAIN_FROM,
    FIELD_FOUR_EYES,
    FIELD_KIND,
    FIELD_NOTE,
    FIELD_REQUESTER,
    FIELD_ROWS,
    FIELD_STATEMENT,
    FIELD_TABLES,
    FIELD_TOOL,
    FOUR_EYES,
    MESSAGE_TOO_LONG,
    RISK_LABELS,
    STAGE_ICONS,
    TIME_LEFT,
    Stage,
    outcome,
    stage,
    stage_label,
)
from gateway.texts.effects import FIELD_PREVIEW, preview_tables
from gateway.texts.grants import GRANT_BUTTON
from gateway.texts.undo import FIELD_UNDO, UNDO_BUTTON, undo_line, undo_offer

# (Chinese, English): the page shows 中文 with the English beside it, set apart.
WEBCHAT_LABELS: dict[str, tuple[str, str]] = {
    "title": ("网关聊天", "Gateway chat"),
    "name": ("名字", "Name"),
    "room": ("会话", "Room"),
    "join": ("进入", "Join"),
    "offline": ("未连接", "offline"),
    "share": ("分享链接", "share link"),
    "change": ("更换", "change"),
    "change_title": ("更换名字或会话", "change name or room"),
    "share_title": ("把此链接发给同事", "send this link to a colleague"),
    "unverified": (
        "名字由使用者自己填写，未经验证。",
        "Names here are typed by their users, not verified.",
    ),
    "unverified_remote": ("此处的确认/取消不生效。", "Decisions from this page do not count."),
    "start": (
        "输入 /help 查看命令；试试 /sql DELETE FROM orders WHERE id = 3。",
        "Type /help for commands; try /sql DELETE FROM orders WHERE id = 3.",
    ),
    "message": ("输入消息", "message (Enter)"),
    "send": ("发送", "Send"),
    "card_title": ("⚠️ 需要确认", "Confirmation required"),
    "approve": (APPROVE_BUTTON.split()[0], APPROVE_BUTTON.split()[1]),
    "reject": (REJECT_BUTTON.split()[0], REJECT_BUTTON.split()[1]),
    "reason": ("原因（可选）", "reason"),
    "grant": (GRANT_BUTTON.split(" / ")[0], GRANT_BUTTON.split(" / ")[1]),
    "again": (AGAIN_BUTTON.split(" / ")[0], AGAIN_BUTTON.split(" / ")[1]),
    # a grant of the approver's shape (docs/grants.md, "Shapes an approver chooses")
    "grant_shape": ("自定授权", "a grant of your shape"),
    "grant_length": ("时长", "length"),
    "grant_once": ("仅下一次", "next call only"),
    "grant_pin": ("限定", "pinned to"),
    "grant_pin_scope": ("相同表和语句类型", "same tables and kind"),
    "grant_pin_args": ("完全相同的参数", "exactly these arguments"),
    "grant_approve_shaped": ("批准并授权", "Approve and grant"),
}

# Lines app.js writes; {fields} are filled there.
WEBCHAT_SCRIPT: dict[str, str] = {
    "gateway": "网关 gateway",
    "connecting": "连接中… connecting",
    "online": "已连接 {session} · {user} / online",
    "offline": "已断开 offline",
    "offline_because": "已断开 offline（{reason}）",
    "reasons_joiner": "；",
    "restarted": "网关已重启，以下为新消息 / the gateway restarted; new messages below",
    "too_long": MESSAGE_TOO_LONG,
    "bad_name": (
        "名字和会话：1-64 个字母、数字或 . _ - @ / name and room: 1-64 letters, digits or . _ - @"
    ),
    "share_link": "分享此链接 / share this link: {link}",
    "time_left": TIME_LEFT,
}


def web_card(c: Confirmation) -> dict[str, Any]:
    """A card's words for the web chat page: risk, fields, hint, its stage and outcome."""
    d, at = c.details, stage(c)
    # (key, label, value, shown as code): "field-<key>" is its class on the page.
    fields: list[tuple[str, str, Any, bool]] = [("tool", FIELD_TOOL, c.tool_call.name, False)]
    if d.get("statement"):
        fields.append(("statement", FIELD_STATEMENT, d["statement"], True))
    else:
        fields.append(("args", FIELD_ARGS, c.tool_call.args, True))
    if d.get("kind"):
        fields.append(("kind", FIELD_KIND, d["kind"], False))
    if d.get("tables"):
        fields.append(("tables", FIELD_TABLES, ", ".join(d["tables"]), False))
    if d.get("rows_affected") is not None:
        fields.append(("rows-affected", FIELD_ROWS, d["rows_affected"], False))
    if d.get("warning"):
        fields.append(("note", FIELD_NOTE, d["warning"], False))
    if undo_line(d):
        fields.append(("undo", FIELD_UNDO, undo_line(d), False))
    if c.edit_note is not None:
        # Approved with edited arguments (docs/edits.md): what was asked, beside what runs.
        fields.append(("asked", FIELD_ASKED, c.edit_note.get("args_before") or {}, True))
    if d.get("asked_again_from"):  # a call asked again (gateway/confirm/again.py)
        fields.append(("asked-again-from", FIELD_ASKED_AGAIN_FROM, d["asked_again_from"], False))
    fields.append(("requester", FIELD_REQUESTER, c.requester, False))
    if c.four_eyes:
        if c.takes_votes:  # several approvers: how many, beside the tally below
            fields.append(("four-eyes", votes.FIELD_NEEDED, votes.needed(c), False))
        else:
            fields.append(("four-eyes", FIELD_FOUR_EYES, FOUR_EYES, False))
    if c.takes_votes:  # 1/2 已批准：alice, redrawn on every vote
        fields.append(("votes", votes.FIELD_VOTES, votes.tally(c), False))
    return {
        "risk": f"风险 {RISK_LABELS[c.risk]}",
        "fields": [
            {"key": key, "label": label, "value": value, "mono": mono}
            for key, label, value, mono in fields
        ],
        "hint": f"也可回复 确认 {c.id} / 取消 {c.id} (or reply confirm / cancel {c.id})",
        "stage": at.value,
        # Settled, the header says the stage in its word; the outcome line how it got there.
        "title": None if at is Stage.PENDING else f"{STAGE_ICONS[at]} {stage_label(at)}",
        "outcome": None if at is Stage.PENDING else outcome(c),
        # An Undo button, once the change ran and kept its rows: the text it sends.
        "undo": undo_offer(c.id, c.execution.result),
        "undo_label": UNDO_BUTTON,
        **_web_effects(c),
    }


def _web_effects(c: Confirmation) -> dict[str, Any]:
    """The rows the call changes (issue 24), as tables the page draws (app.js renderEffects)."""
    tables = preview_tables(c.details)
    return {
        "effects_label": FIELD_PREVIEW,
        "effects": [
            {
                "caption": t.caption,
                "columns": list(t.columns),
                "rows": [list(r) for r in t.rows],
                "notes": list(t.notes),
            }
            for t in tables
        ],
    }
