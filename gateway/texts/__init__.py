"""Everything a chat user reads, in one package: Chinese first, English beside it.

Change wording here; channels and the core import these functions and constants. This
module holds the sentences of a chat; ``gateway.texts.approvers`` holds what approvers
read in their direct chats and on the buttons that decide with a grant.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gateway.confirm.model import Confirmation, ExecState, Risk, Status

if TYPE_CHECKING:
    from gateway.confirm.grants import Grant

RISK_LABELS = {
    Risk.LOW: "低 low",
    Risk.MEDIUM: "中 medium",
    Risk.HIGH: "高 high",
    Risk.CRITICAL: "严重 critical",
}

STATUS_LABELS = {
    Status.PENDING: "待确认 pending",
    Status.APPROVED: "已批准 approved",
    # A person's 取消 is a rejection in the record; in chat it reads like the button said.
    Status.REJECTED: "已取消 cancelled",
    Status.EXPIRED: "已超时 expired",
    Status.CANCELLED: "已取消 cancelled",
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
SUPERSEDED_REASON = "收到新消息，已取消 / superseded by a new message"
TOO_MANY_UNCLEAR = "多次回复不明确 / too many unclear replies"
TIMEOUT_REASON = "超时未确认 / no decision before the timeout"
RESTART_REASON = "网关重启时已过期 / expired while the gateway was down"
ERROR_REASON = "内部错误 / internal error: {error}"
MESSAGE_TOO_LONG = "消息过长（上限 {limit} 字）/ message too long (limit {limit} characters)"
WEBCHAT_UNREADABLE_FRAME = "无法读取这条消息（{error}）/ this message could not be read: {error}"
WEBCHAT_SLOW_DOWN = (
    "请稍慢一点：每分钟最多 {limit} 条消息，{seconds} 秒后可以再发 / "
    "Please slow down: at most {limit} messages a minute; you can send again in {seconds} s"
)


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
    lines = [f"工具 Tool: {c.tool_call.name}"]
    if statement and d.get("statement"):
        lines.append(f"语句 Statement: {d['statement']}")
    extra = []
    if d.get("kind"):
        extra.append(f"类型 Kind: {d['kind']}")
    if d.get("tables"):
        extra.append(f"表 Tables: {', '.join(d['tables'])}")
    if d.get("rows_affected") is not None:
        extra.append(f"影响行数 Rows affected: {d['rows_affected']}")
    if extra:
        lines.append(" · ".join(extra))
    if not d.get("statement"):
        args = ", ".join(f"{k}={v!r}" for k, v in c.tool_call.args.items())
        lines.append(f"参数 Args: {args}")
    if d.get("warning"):
        lines.append(f"注意 Note: {d['warning']}")
    lines.append(f"风险 Risk: {RISK_LABELS[c.risk]}")
    if d.get("policy_rule"):
        lines.append(f"规则 Rule: {d['policy_rule']}")
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


def time_left(c: Confirmation, now: float) -> str:
    return (
        f"剩余 Time left: {_fmt_left(c.seconds_left(now))}"
        f"（{_fmt_time(c.expires_at)} 过期 expires）"
    )


def expires_at(c: Confirmation) -> str:
    """The expiry as a clock time, for a card that is not redrawn every second."""
    return f"过期时间 Expires: {_fmt_time(c.expires_at)}"


def prompt(c: Confirmation, now: float) -> str:
    """A confirmation prompt as text."""
    lines = [confirmation_title(c), c.summary, *detail_lines(c)]
    lines.append(time_left(c, now))
    if c.four_eyes:
        lines.append(FOUR_EYES)
    lines.append(reply_hint(c))
    return "\n".join(lines)


def status_line(c: Confirmation) -> str:
    """One line: what became of a confirmation."""
    label = STATUS_LABELS[c.status]
    who = f" · {c.decided_by}" if c.decided_by else ""
    why = f" · {c.reason}" if c.reason else ""
    return f"[{c.id}] {label}{who}{why}"


def superseded(c: Confirmation) -> bool:
    """Ended by the requester's next message instead of a decision."""
    return c.feedback or c.reason == SUPERSEDED_REASON


def outcome(c: Confirmation) -> str:
    """Posted to the chat when a confirmation ends; an approval says the call now runs."""
    tool = c.tool_call.name
    by = c.decided_by or "-"
    if c.status is Status.APPROVED and c.edit_note is not None:
        return edited_outcome(c)
    if c.status is Status.APPROVED:
        return f"✅ [{c.id}] {by} 已批准，{tool} 执行中… / approved by {by}; running {tool}…"
    if c.status is Status.EXPIRED:
        return f"⌛ [{c.id}] 超时未确认，{tool} 未执行 / expired; {tool} did not run"
    if superseded(c):
        return (
            f"↪️ [{c.id}] 已被 {by} 的新消息取代，{tool} 未执行 / "
            f"superseded by a new message from {by}; {tool} did not run"
        )
    # A person's 取消 (REJECTED) names them; shutdown and the like (CANCELLED) give a reason.
    who, who_en = (f"{by} ", f" by {by}") if c.status is Status.REJECTED else ("", "")
    reason = f"：{c.reason}" if c.reason else ""
    en = f" ({c.reason})" if c.reason else ""
    return (
        f"🚫 [{c.id}] {who}已取消{reason}，{tool} 未执行 / "
        f"cancelled{who_en}{en}; {tool} did not run"
    )


def already_decided(c: Confirmation) -> str:
    by = f" {c.decided_by}" if c.decided_by else ""
    return f"[{c.id}] 已处理：{STATUS_LABELS[c.status]} / already {c.status.value} by{by or ' -'}"


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


def interrupted(c: Confirmation) -> str:
    """The call's runner died or was stopped mid-run: never retried by itself."""
    return (
        f"⚠️ [{c.id}] {c.tool_call.name} 中断：可能已执行也可能未执行，如需重试请重新发起 / "
        "interrupted: it may or may not have taken effect; ask again to re-run"
    )


def ran_elsewhere(c: Confirmation) -> str:
    """A turn whose claim lost: another process has the call (and posts its result)."""
    return (
        f"ℹ️ [{c.id}] {c.tool_call.name} 由另一个网关进程执行，结果会在此发布 / "
        "run by another gateway process; its result is posted here"
    )


def execution_line(c: Confirmation) -> str | None:
    """The result line of an ended call, from its execution ledger (the replica that ran it
    posted it from the tool's whole output; another replica shows the kept part)."""
    ex = c.execution
    name = c.tool_call.name
    if ex.state is ExecState.SUCCEEDED:
        return tool_result(name, ex.result or "", c.id)
    if ex.state is ExecState.FAILED:
        return tool_failed(name, ex.result or "")
    if ex.state is ExecState.INTERRUPTED:
        return interrupted(c)
    return None


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
    return f"✔️ [{confirmation_id}] {name} 已完成 / done: {result}"


def rows(n: int) -> str:
    """A row count in both languages: "1 行 / 1 row", "3 行 / 3 rows"."""
    return f"{n} 行 / {n} row" + ("" if n == 1 else "s")


def tool_denied(name: str, reason: str) -> str:
    return f"⛔ {name} 被策略拒绝 / refused by policy: {reason}"


def tool_failed(name: str, error: str) -> str:
    return f"⚠️ {name} 执行失败 / failed: {error}"


def manual_only(name: str, what: str) -> str:
    return f"📝 {name} 仅展示、不执行（manual）/ shown, not run (manual):\n{what}"


def notify_ran(name: str, what: str) -> str:
    return f"ℹ️ 已执行 ran {name}: {what}"


# ---- Platform channels (Feishu, DingTalk) and the terminal chat ----

NOT_ALLOWED = "您没有使用此机器人的权限 / you are not allowed to use this bot"
APPROVE_BUTTON = "确认 Approve"
REJECT_BUTTON = "取消 Cancel"
CONSOLE_BANNER = "gateway chat — /help 帮助 · ↑ 历史 history · Ctrl-D 退出 exit"
CONSOLE_THINKING = "思考中… / thinking…"
CONSOLE_RUNNING = "执行中… / running…"
DINGTALK_UNSUPPORTED_MESSAGE = (
    "暂只支持文字消息 / only text messages are supported; please type your request"
)
FEISHU_UNSUPPORTED_MESSAGE = (
    "暂只支持文字和富文本消息 / only text and rich-text messages are supported"
)
FEISHU_CARD_UNKNOWN = "无法识别的操作 / unknown card action"
FEISHU_CARD_WORKING = "处理中，请稍候查看卡片 / still working; the card will show the result"
FEISHU_CARD_UNAVAILABLE = "网关暂不可用，请回复文字 确认/取消 / gateway unavailable; reply in text"


def to_person(name: str, text: str) -> str:
    """A line in a group chat meant for one person (whose card click was refused)."""
    return f"{name}: {text}"


# ---- Model agent (OpenAI-compatible model) ----

MODEL_AUTH_FAILED = (
    "模型服务拒绝了密钥，请管理员检查 llm.api_key / "
    "the model service rejected the API key: an admin should check llm.api_key"
)
MODEL_NOT_FOUND = (
    "找不到模型或接口地址，请管理员检查 llm.model 和 llm.base_url / "
    "model or endpoint not found: an admin should check llm.model and llm.base_url"
)
MODEL_BAD_REQUEST = (
    "模型服务拒绝了请求，详情见网关日志 / the model service refused the request; "
    "see the gateway log"
)
MODEL_UNAVAILABLE = (
    "模型服务暂时不可用，请稍后再试 / the model service is unavailable right now; try again later"
)
MODEL_TIMEOUT = "模型响应超时，请稍后再试 / the model did not answer in time; try again later"
MODEL_UNREACHABLE = (
    "无法连接模型服务，请管理员检查 llm.base_url / "
    "cannot reach the model service: an admin should check llm.base_url"
)
MODEL_EMPTY_REPLY = "模型没有给出回答 / the model gave no answer"


def model_step_limit(max_steps: int) -> str:
    return (
        f"已达到单轮最多 {max_steps} 步，先停在这里 / "
        f"stopped after {max_steps} steps in one turn (llm.max_steps)"
    )


# ---- Web chat without a login proxy ----

WEBCHAT_UNVERIFIED_DECISION = (
    "网页聊天的名字未经验证，此处的确认/取消不生效；请在管理页面或飞书/钉钉中决定 / "
    "web chat names are not verified here, so decisions from this page do not count: "
    "decide on the admin page, Feishu or DingTalk"
)


# ---- Grants (gateway/confirm/grants.py) ----

GRANT_BUTTON = "30 分钟内同类操作免确认 / skip asking for 30 min"
GRANT_MINUTES_BUTTON = 30


def _until(at: float) -> str:
    return time.strftime("%H:%M", time.localtime(at))


def grant_used(tool: str, grant: Grant) -> str:
    return (
        f"✅ 已按 {grant.granted_by} 的授权（至 {_until(grant.expires_at)}）直接执行 {tool}，"
        f"未再询问 / ran {tool} without asking: {grant.granted_by}'s grant "
        f"until {_until(grant.expires_at)}"
    )


def grant_given(grant: Grant) -> str:
    if grant.scope == "session":
        return (
            f"🔓 {grant.granted_by} 授权：{_until(grant.expires_at)} 前 "
            f"{grant.requester} 在本会话的 {grant.tool} 调用免确认（critical 除外）/ "
            f"{grant.granted_by} granted: "
            f"{grant.requester}'s {grant.tool} calls here run without asking until "
            f"{_until(grant.expires_at)} (never critical ones)"
        )
    return (
        f"🔓 {grant.granted_by} 授权：{_until(grant.expires_at)} 前完全相同的 {grant.tool} "
        f"调用免确认 / {grant.granted_by} granted: this exact {grant.tool} call runs without "
        f"asking until {_until(grant.expires_at)}"
    )


GRANT_NOT_CRITICAL = "critical 操作每次都要确认 / critical calls are always asked for, one by one"
GRANT_NOT_FOUR_EYES = "四眼操作每次都要第二人确认 / four-eyes calls need a second person each time"


def grant_length(scope: str, most: int) -> str:
    return f"授权时长须为 1 到 {most} 分钟 / a {scope} grant lasts 1 to {most} minutes"


def grant_refused(why: str) -> str:
    return f"已批准这一次，但未授予免确认：{why} / approved this once; no grant: {why}"


def grant_revoked(grant: Grant) -> str:
    return (
        f"🔒 {grant.revoked_by} 撤销了 {grant.granted_by} 给 {grant.tool} 的免确认授权 / "
        f"{grant.revoked_by} revoked {grant.granted_by}'s grant for {grant.tool}: "
        "calls are asked for again"
    )


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
    return (
        f"✏️ [{c.id}] {by} 修改参数后批准，{tool} 按修改后的参数执行中… / approved by {by} "
        f"with edited arguments; running {tool} as edited:\n改动 Changed:\n"
        + edited_changes(before, c.tool_call.args)
    )
