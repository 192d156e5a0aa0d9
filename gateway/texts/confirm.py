"""What chat users read about a confirmation: the prompt, the decision, what became of it."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from gateway.confirm.model import Confirmation, ExecState, Risk, Status
from gateway.texts import votes
from gateway.texts.effects import effect_lines
from gateway.texts.undo import FIELD_UNDO, undo_line

# A risk's word, (Chinese, English), on the cards, in the chat and on the admin page.
RISK_WORDS: dict[Risk, tuple[str, str]] = {
    Risk.LOW: ("低", "low"),
    Risk.MEDIUM: ("中", "medium"),
    Risk.HIGH: ("高", "high"),
    Risk.CRITICAL: ("严重", "critical"),
}
RISK_LABELS = {risk: f"{zh} {en}" for risk, (zh, en) in RISK_WORDS.items()}


class Stage(StrEnum):
    """Where a call is in its life, as every copy of its card shows it: its status, and
    once approved, how its run ended."""

    PENDING = "pending"
    APPROVED = "approved"  # the call waits to run, or runs
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


_RUN_ENDS = {
    ExecState.SUCCEEDED: Stage.DONE,
    ExecState.FAILED: Stage.FAILED,
    ExecState.INTERRUPTED: Stage.INTERRUPTED,
}


def stage(c: Confirmation) -> Stage:
    """The stage ``c`` is at: what its cards, its chat and the admin page say of it."""
    if c.status is Status.APPROVED:
        return _RUN_ENDS.get(c.execution.state, Stage.APPROVED)
    return Stage(c.status.value)


# Each stage's word, (Chinese, English): one word per outcome on every surface — the chat,
# every card, the admin page, the API's sentences and the CLI (issue 26). A person's no is
# 拒绝 / rejected (the typed 取消 too); shutdown and supersession are 已取消 / cancelled.
STAGE_WORDS: dict[Stage, tuple[str, str]] = {
    Stage.PENDING: ("待确认", "pending"),
    Stage.APPROVED: ("已批准", "approved"),
    Stage.DONE: ("已执行", "done"),
    Stage.FAILED: ("执行失败", "failed"),
    Stage.INTERRUPTED: ("已中断", "interrupted"),
    Stage.REJECTED: ("已拒绝", "rejected"),
    Stage.EXPIRED: ("已过期", "expired"),
    Stage.CANCELLED: ("已取消", "cancelled"),
}


def stage_label(at: Stage) -> str:
    """A stage's word as one string: ``已执行 / done``."""
    zh, en = STAGE_WORDS[at]
    return f"{zh} / {en}"


STAGE_ICONS = {
    Stage.PENDING: "⚠️",
    Stage.APPROVED: "✅",
    Stage.DONE: "✔️",
    Stage.FAILED: "❌",
    Stage.INTERRUPTED: "⚠️",
    Stage.REJECTED: "🚫",
    Stage.EXPIRED: "⌛",
    Stage.CANCELLED: "🚫",
}

ONLY_APPROVERS = "仅发起人或审批人可操作 / only the requester or an approver can decide"
FOUR_EYES = "需要另一位审批人批准 / another approver must approve this (four-eyes)"
NO_PENDING = "当前没有待确认的操作 / nothing is waiting for confirmation here"
HELP_NO_MODEL = (
    "未配置模型，可用命令 / No model is configured. Commands:\n"
    "  /sql <语句 statement>  执行 SQL（修改需确认）/ run SQL (changes need confirmation)\n"
    "  /pending  查看待确认 / list pending confirmations\n"
    "  /help  帮助 / this help\n"
    "配置模型见 README「Use a model」/ to chat with a model, set [llm] (README: Use a model)."
)
UNKNOWN_COMMAND = "未知命令 {command}，输入 /help 查看 / unknown command {command}; type /help"
SHUTDOWN_REASON = "网关关闭 / gateway shutting down"
STORE_UNAVAILABLE_MESSAGE = (
    "⚠️ 确认存储暂不可用，这条消息未处理，请稍后再发 / the confirmation store is unavailable "
    "right now: this message was not handled; send it again later"
)
STORE_UNAVAILABLE = (
    "⚠️ 确认存储暂不可用，{tool} 未执行，请稍后重试 / the confirmation store is unavailable "
    "right now: {tool} did not run; try again later"
)
# A call not held because too many already wait (issue 22: 1,500 held calls in 46 s).
PENDING_LIMIT_SESSION = (
    "⚠️ 本会话已有 {limit} 个操作等待确认，{tool} 未执行：请先确认或取消它们 / this chat "
    "already has {limit} calls waiting for a decision: {tool} did not run; decide or cancel "
    "those first"
)
PENDING_LIMIT_TOTAL = (
    "⚠️ 网关已有 {limit} 个操作等待确认，{tool} 未执行，请稍后重试 / {limit} calls are "
    "already waiting for a decision in this gateway: {tool} did not run; try again later"
)
SUPERSEDED_REASON = "收到新消息，已取消 / superseded by a new message"
TOO_MANY_UNCLEAR = "多次回复不明确 / too many unclear replies"
# An expiry's reason names its outcome in the one word for it (STAGE_WORDS: 已过期 / expired).
TIMEOUT_REASON = "到期无人决定，已过期 / expired: no decision before the deadline"
RESTART_REASON = "网关重启时已过期 / expired while the gateway was down"
ERROR_REASON = "内部错误 / internal error: {error}"
UNSURE_CREATE_REASON = (
    "请求时确认存储无法访问，已取消 / cancelled: the confirmation store could not be reached "
    "when it was asked"
)
MESSAGE_TOO_LONG = "消息过长（上限 {limit} 字）/ message too long (limit {limit} characters)"
WEBCHAT_UNREADABLE_FRAME = "无法读取这条消息（{error}）/ this message could not be read: {error}"
WEBCHAT_SLOW_DOWN = (
    "请稍慢一点：每分钟最多 {limit} 条消息，{seconds} 秒后可以再发 / "
    "Please slow down: at most {limit} messages a minute; you can send again in {seconds} s"
)
# A WebSocket or long poll refused before it opens ({setting} names the cap to raise).
WEBCHAT_TOO_MANY_CONNECTIONS = (
    "打开的连接过多（上限 {limit}），请关闭一些页面后重试 / too many open connections "
    "(limit {limit}, {setting}): close some tabs and try again"
)


# The fields of a prompt, as text lines and as a card's labels (web chat, admin page).
FIELD_TOOL = "工具 Tool"
FIELD_STATEMENT = "语句 Statement"
FIELD_ARGS = "参数 Args"
FIELD_KIND = "类型 Kind"
FIELD_TABLES = "表 Tables"
FIELD_ROWS = "影响行数 Rows affected"
FIELD_NOTE = "注意 Note"
FIELD_RISK = "风险 Risk"
FIELD_RULE = "规则 Rule"
FIELD_ASKED_AGAIN_FROM = "重新发起自 Asked again from"
FIELD_REQUESTER = "发起人 Requested by"
FIELD_FOUR_EYES = "双人审批 Four-eyes"
FIELD_ASKED = "修改前 Asked"
FIELD_REASON = "原因 Reason"
EDITED = "参数已修改"


def _fmt_time(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def _fmt_left(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60}:{s % 60:02d}"


def detail_lines(c: Confirmation, *, statement: bool = True) -> list[str]:
    """What will happen, field by field (used by text prompts and cards).

    ``statement=False`` leaves the SQL statement out, for a card that shows it in a code block.
    """
    d = c.details
    lines = [f"{FIELD_TOOL}: {c.tool_call.name}"]
    if statement and d.get("statement"):
        lines.append(f"{FIELD_STATEMENT}: {d['statement']}")
    extra = []
    if d.get("kind"):
        extra.append(f"{FIELD_KIND}: {d['kind']}")
    if d.get("tables"):
        extra.append(f"{FIELD_TABLES}: {', '.join(d['tables'])}")
    if d.get("rows_affected") is not None:
        extra.append(f"{FIELD_ROWS}: {d['rows_affected']}")
    if extra:
        lines.append(" · ".join(extra))
    if not d.get("statement"):
        args = ", ".join(f"{k}={v!r}" for k, v in c.tool_call.args.items())
        lines.append(f"{FIELD_ARGS}: {args}")
    lines += effect_lines(d)  # the rows it changes (issue 24)
    if d.get("warning"):
        lines.append(f"{FIELD_NOTE}: {d['warning']}")
    undo = undo_line(d)
    if undo:
        lines.append(f"{FIELD_UNDO}: {undo}")
    lines.append(f"{FIELD_RISK}: {RISK_LABELS[c.risk]}")
    if d.get("policy_rule"):
        lines.append(f"{FIELD_RULE}: {d['policy_rule']}")
    if c.approvals > 1:  # takes votes: on every card and prompt, updated with each vote
        lines.append(f"{votes.FIELD_VOTES}: {votes.tally(c)}")
    if d.get("asked_again_from"):  # a call asked again (gateway/confirm/again.py)
        lines.append(f"{FIELD_ASKED_AGAIN_FROM}: {d['asked_again_from']}")
    return lines


def reply_hint(c: Confirmation) -> str:
    """How to answer by text, addressed to those who may decide (also under a card).

    With four-eyes the requester may only withdraw: in a one-to-one chat, where only the
    requester reads it, the prompt says it waits for an approver instead of asking.
    """
    if c.four_eyes and not c.is_group:
        return (
            f"⏳ 等待审批人批准，回复 取消 {c.id} 可撤回 / "
            f"waiting for an approver; reply cancel {c.id} to withdraw"
        )
    if c.four_eyes:
        return (
            f"审批人回复 确认 {c.id} / 取消 {c.id}；{c.requester} 可回复 取消 {c.id} 撤回 / "
            f"approvers: reply confirm {c.id} / cancel {c.id}; "
            f"{c.requester} may reply cancel {c.id} to withdraw"
        )
    who = f"{c.requester} 或审批人" if c.is_group else ""
    who_en = f"{c.requester} or an approver: " if c.is_group else ""
    return (
        f"{who}回复 确认 / 取消，或 确认 {c.id} / 取消 {c.id} / "
        f"{who_en}reply confirm / cancel (or confirm {c.id} / cancel {c.id})"
    )


def confirmation_title(c: Confirmation) -> str:
    """The first line of a prompt, the title of a card and of a notification."""
    return f"⚠️ 需要确认 Confirmation required [{c.id}]"


TIME_LEFT = "剩余 Time left: {left}（{at} 过期 expires）"


def time_left(c: Confirmation, now: float) -> str:
    return TIME_LEFT.format(left=_fmt_left(c.seconds_left(now)), at=_fmt_time(c.expires_at))


def expires_at(c: Confirmation) -> str:
    """The expiry as a clock time, for a card that is not redrawn every second."""
    return f"过期时间 Expires: {_fmt_time(c.expires_at)}"


def prompt(c: Confirmation, now: float) -> str:
    """A confirmation prompt as text."""
    lines = [confirmation_title(c), c.summary, *detail_lines(c)]
    lines.append(time_left(c, now))
    if c.approvals > 1:  # takes votes
        lines.append(votes.needed(c))
    elif c.four_eyes:
        lines.append(FOUR_EYES)
    lines.append(reply_hint(c))
    return "\n".join(lines)


def status_line(c: Confirmation) -> str:
    """One line: the stage a confirmation is at, and who decided it (a settled card's
    title; the card's sentence, ``outcome``, says the rest)."""
    at = stage(c)
    who = f" · {c.decided_by}" if c.decided_by else ""
    return f"{STAGE_ICONS[at]} [{c.id}] {stage_label(at)}{who}"


def superseded(c: Confirmation) -> bool:
    """Ended by the requester's next message instead of a decision."""
    return c.feedback or c.reason == SUPERSEDED_REASON


def outcome(c: Confirmation) -> str:
    """What became of a confirmation, in a sentence: posted to the chat when it is decided
    (an approval says the call now runs), and shown on every copy of its card, where once
    the run ends it says who approved and how the run ended, with the short result.

    Chinese first, then the English; a reason (a person's, or the gateway's own in both
    languages) follows the whole sentence, never inside it."""
    tool = c.tool_call.name
    by = votes.approved_by(c) if c.votes and c.status is Status.APPROVED else c.decided_by or "-"
    at = stage(c)
    zh, en = STAGE_WORDS[at]
    icon = STAGE_ICONS[at]
    if at in _RUN_ENDS.values():
        return run_ended(c, at)
    if c.status is Status.APPROVED and c.edit_note is not None:
        return edited_outcome(c)
    if c.status is Status.APPROVED:
        return f"{icon} [{c.id}] {by} {zh}，{tool} 执行中… / {en} by {by}; running {tool}…"
    if c.status is Status.EXPIRED:
        return f"{icon} [{c.id}] {zh}，{tool} 未执行 / {en}; {tool} did not run"
    if superseded(c):
        return (
            f"↪️ [{c.id}] {zh}：{by} 发了新消息，{tool} 未执行 / "
            f"{en}: superseded by a new message from {by}; {tool} did not run"
        )
    # A person's no (REJECTED) names them; shutdown and the like (CANCELLED) do not.
    who, who_en = (f"{by} ", f" by {by}") if c.status is Status.REJECTED else ("", "")
    why = f" · {FIELD_REASON}: {c.reason}" if c.reason else ""
    return f"{icon} [{c.id}] {who}{zh}，{tool} 未执行 / {en}{who_en}; {tool} did not run{why}"


def run_ended(c: Confirmation, at: Stage) -> str:
    """An approved call's end on its card: who approved it, and how the run ended (the
    result, the failure, or that it may or may not have taken effect)."""
    tool, by = c.tool_call.name, votes.approved_by(c) if c.votes else c.decided_by or "-"
    approved, approved_en = STAGE_WORDS[Stage.APPROVED]
    zh_by, en_by = f"{by} {approved}", f"{approved_en} by {by}"
    if c.edit_note is not None:
        zh_by, en_by = f"{zh_by}（{EDITED}）", f"{en_by} with edited arguments"
    zh, en = STAGE_WORDS[at]
    if at is Stage.INTERRUPTED:
        return (
            f"{STAGE_ICONS[at]} [{c.id}] {zh_by}，{tool} {zh}：{_INTERRUPTED_ZH} / "
            f"{en_by}; {tool} {en}: {_INTERRUPTED_EN}"
        )
    result = c.execution.result or ""
    return f"{STAGE_ICONS[at]} [{c.id}] {zh_by}，{tool} {zh} / {en_by}; {tool} {en}: {result}"


def already_decided(c: Confirmation) -> str:
    """A decision that came too late: how the call was settled, and by whom."""
    zh, en = STAGE_WORDS[Stage(c.status.value)]
    by = votes.approved_by(c) if c.votes and c.status is Status.APPROVED else c.decided_by or "-"
    return f"[{c.id}] 已处理：{zh}（{by}）/ already {en} by {by}"


def unknown_id(cid: str) -> str:
    return f"没有待确认的 {cid} / no pending confirmation {cid}"


def which_one(pending: Sequence[Confirmation]) -> str:
    lines = ["有多个待确认操作，请带上编号回复 / several are pending; reply with the id:"]
    for c in pending:
        lines.append(f"  确认 {c.id} / 取消 {c.id} — {c.summary}")
    return "\n".join(lines)


def unclear(c: Confirmation, attempts_left: int) -> str:
    return (
        f"没听懂，请只回复 确认 或 取消（[{c.id}]，还可 {attempts_left} 次）/ "
        f"unclear reply: answer just confirm or cancel ({attempts_left} tries left)"
    )


def still_pending(c: Confirmation) -> str:
    return (
        f"[{c.id}] 仍在等待确认，您的消息将在之后处理 / still waiting for a decision; "
        "your message will be handled after it"
    )


def pending_list(pending: Sequence[Confirmation], now: float) -> str:
    if not pending:
        return NO_PENDING
    lines = [f"待确认 Pending ({len(pending)}):"]
    for c in pending:
        lines.append(f"  [{c.id}] {c.summary} · {_fmt_left(c.seconds_left(now))} left")
    return "\n".join(lines)


# ---- The execution ledger: what became of an approved call ----

INTERRUPTED_RESULT = "interrupted: the process running it stopped before it reported an end"
NOT_RUN_STORE_RESULT = "not run: the confirmation store could not be reached to start it"


_INTERRUPTED_ZH = "可能已生效也可能未生效，如需重试请重新发起"
_INTERRUPTED_EN = "it may or may not have taken effect; ask again to re-run"


def interrupted(c: Confirmation) -> str:
    """The call's runner died or was stopped mid-run: never retried by itself."""
    zh, en = STAGE_WORDS[Stage.INTERRUPTED]
    return (
        f"{STAGE_ICONS[Stage.INTERRUPTED]} [{c.id}] {c.tool_call.name} {zh}：{_INTERRUPTED_ZH} / "
        f"{en}: {_INTERRUPTED_EN}"
    )


def prompt_reposted(c: Confirmation, now: float) -> str:
    """A pending prompt shown again after a restart, with the time left."""
    return (
        "🔁 网关已重启，此操作仍在等待确认 / the gateway restarted; this still waits:\n"
        + prompt(c, now)
    )


def tool_result(name: str, result: Any, confirmation_id: str | None = None) -> str:
    """A tool's result; after a confirmation, the line names its id and says it is done."""
    if confirmation_id is None:
        return f"{name}: {result}"
    zh, en = STAGE_WORDS[Stage.DONE]
    return f"{STAGE_ICONS[Stage.DONE]} [{confirmation_id}] {name} {zh} / {en}: {result}"


def rows(n: int) -> str:
    """A row count in both languages: "1 行 / 1 row", "3 行 / 3 rows"."""
    return f"{n} 行 / {n} row" + ("" if n == 1 else "s")


def tool_denied(name: str, reason: str) -> str:
    return f"⛔ {name} 被策略拒绝 / refused by policy: {reason}"


def tool_failed(name: str, error: str, confirmation_id: str | None = None) -> str:
    """A tool's failure; after a confirmation, the line names its id."""
    which = "" if confirmation_id is None else f"[{confirmation_id}] "
    zh, en = STAGE_WORDS[Stage.FAILED]
    return f"{STAGE_ICONS[Stage.FAILED]} {which}{name} {zh} / {en}: {error}"


def manual_only(name: str, what: str) -> str:
    return f"📝 {name} 仅展示、不执行（manual）/ shown, not run (manual):\n{what}"


def notify_ran(name: str, what: str) -> str:
    return f"ℹ️ 已执行 ran {name}: {what}"


# ---- Arguments edited before approving (gateway/tools/edits.py) ----

EDIT_FOUR_EYES = (
    "修改后的调用需要另一位审批人批准，未批准 / the edited call needs another approver "
    "(four-eyes): not approved"
)


def edit_refused(tool: str, level: str, rule: str) -> str:
    return (
        f"⛔ 修改后的 {tool} 调用被策略设为 {level}（{rule}），未批准 / "
        f"the edited {tool} call is {level} by policy ({rule}): not approved"
    )


def edited_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """What an edit changed, one argument a line: ``sql: 'a' → 'b'``."""
    lines = []
    for key in dict.fromkeys([*before, *after]):
        old = repr(before[key]) if key in before else "（无 none）"
        new = repr(after[key]) if key in after else "（删除 removed）"
        if old != new:
            lines.append(f"  {key}: {old} → {new}")
    return "\n".join(lines)


def edited_outcome(c: Confirmation) -> str:
    """An approval with new arguments: who changed what; what runs is the new call."""
    by, tool = c.decided_by or "-", c.tool_call.name
    before = (c.edit_note or {}).get("args_before") or {}
    zh, en = STAGE_WORDS[Stage.APPROVED]
    return (
        f"✏️ [{c.id}] {by} {zh}（{EDITED}），{tool} 按修改后的参数执行中… / {en} by {by} "
        f"with edited arguments; running {tool} as edited:\n改动 Changed:\n"
        + edited_changes(before, c.tool_call.args)
    )
