"""What the /admin page shows: its labels, as (Chinese, English) pairs, and the readings
its reply and policy testers answer with (``reply_reading``, ``policy_reading``).

The page's templates (gateway/http/templates/) show a label as 中文 with the English
beside it, set apart (``bi``), or as one plain string in an attribute (``plain``), both
from gateway/texts/labels.py; ``{name}`` fields are filled there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from gateway.confirm.model import Risk
from gateway.texts.confirm import (
    FIELD_FOUR_EYES,
    FIELD_REASON,
    FIELD_RISK,
    FIELD_RULE,
    RISK_LABELS,
    RISK_WORDS,
    STAGE_WORDS,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gateway.confirm.replies import ParsedReply


class PolicyReport(Protocol):
    """What ``policy_reading`` reads of the policy's answer (gateway/tools/policy_check.py
    builds it; texts import nothing of the tools)."""

    @property
    def tool(self) -> str: ...
    @property
    def summary(self) -> str: ...
    @property
    def level(self) -> str: ...
    @property
    def risk(self) -> str: ...
    @property
    def rule(self) -> str: ...
    @property
    def risk_rule(self) -> str | None: ...
    @property
    def four_eyes(self) -> bool: ...
    @property
    def approvals(self) -> int: ...
    @property
    def matched(self) -> Sequence[str]: ...
    @property
    def refused(self) -> str | None: ...


ADMIN_LABELS: dict[str, tuple[str, str]] = {
    # the bar and the login
    "title": ("网关管理", "Gateway admin"),
    "acting_as": ("操作人", "acting as"),
    "log_in_to_decide": ("登录后才能决定", "log in to decide"),
    "log_out": ("退出", "Log out"),
    "no_token": (
        "未设置管理令牌：本机上任何人都能打开此页并做决定",
        "No admin token is set: anyone on this machine can open this page and decide",
    ),
    "set_token": ("设置令牌", "set one in"),
    "offline": ("未连接", "offline"),
    "live": ("实时", "live"),
    "bad_json": ("参数不是合法 JSON", "the arguments are not valid JSON"),
    "not_an_object": ("参数须为 JSON 对象", "the arguments must be a JSON object: {...}"),
    "log_in": ("登录", "Log in"),
    "known_as": ("登录代理认定你是", "the login proxy says you are"),
    "your_name": ("你的名字（决定以此署名）", "Your name (decisions are recorded as yours)"),
    "admin_token": ("管理令牌", "Admin token"),
    "token_is": ("令牌即", "the token is"),
    "too_many_logins": (
        "登录失败次数太多，请 {wait} 秒后再试",
        "too many wrong logins: try again in {wait} s",
    ),
    "wrong_token": ("令牌不对", "wrong token"),
    "name_needed": ("请写上你的名字", "your name is needed to decide: {rule}"),
    # the panels
    "pending": ("待确认", "Pending"),
    "grants": ("免确认授权", "Grants"),
    "history": ("历史", "History"),
    "keywords": ("确认词与取消词", "Keywords"),
    "policy": ("策略测试", "Policy tester"),
    "health": ("实例与渠道", "Instances and channels"),
    # a pending call
    "nothing_waiting": ("没有待确认的调用。", "Nothing is waiting."),
    "four_eyes": ("四眼", "four-eyes"),
    "critical": ("严重风险", "critical"),
    "session": ("会话", "session"),
    "requester": ("发起人", "requester"),
    "time_left": ("剩余", "time left"),
    "approve": ("批准", "Approve"),
    "reject": ("拒绝", "Reject"),
    "reason_hint": ("原因", "reason"),
    "waiting": ("等待审批人或您决定", "waiting for an approver or you"),
    "approvers": ("审批人", "approvers"),
    "sent_to": ("已私信", "sent to the direct chats of"),
    "escalated": ("已升级", "escalated"),
    "escalated_at": ("升级时间", "escalated at"),
    "edit_then_approve": ("修改参数后批准", "Edit arguments, then approve"),
    "arguments_json": ("参数 (JSON)", "arguments (JSON)"),
    "approve_edited": ("按修改后的参数批准", "Approve as edited"),
    "grant_session": ("批准，30 分钟内同类免确认", "Approve, skip asking 30 min"),
    "grant_call": ("总是批准此调用（7 天）", "Always this exact call (7 d)"),
    # an approver's shaped grant (docs/grants.md, "Shapes")
    "grant_shape": ("批准并设定授权", "Approve with a grant of your shape"),
    "grant_length": ("时长", "length"),
    "grant_once": ("仅下一次", "next call only"),
    "grant_pin": ("限定", "pinned to"),
    "grant_pin_scope": ("相同表和语句类型", "same tables and statement kind"),
    "grant_pin_args": ("完全相同的参数", "exactly these arguments"),
    "grant_approve_shaped": ("批准并授权", "Approve and grant"),
    "grant_single_use": ("一次", "once"),
    "grant_pinned_args": ("限参数", "these arguments"),
    # grants
    "no_grants": ("没有生效的授权。", "No live grants."),
    "granted_by": ("授权人", "by"),
    "until": ("至", "until"),
    "revoke": ("撤销", "Revoke"),
    # history
    "tool": ("工具", "tool"),
    "status": ("状态", "status"),
    "person": ("人员", "person"),
    "search": ("搜索", "Search"),
    "no_records": ("没有匹配的记录。", "No matching records."),
    "edited": ("参数已修改", "edited"),
    # keywords and the testers
    "confirm_words": ("确认词", "confirm"),
    "cancel_words": ("取消词", "cancel"),
    "confirm_list": ("确认", "confirm"),
    "cancel_list": ("取消", "cancel"),
    "file": ("文件", "file"),
    "add": ("添加", "Add"),
    "word_example": ("好的", "sure"),
    "reply_example": ("确认 K7Q2", "ok K7Q2"),
    "reply_question": ("这句回复会怎样理解？", "How would this reply be read?"),
    "test": ("测试", "Test"),
    "raw_json": ("原始 JSON", "the raw JSON answer"),
    # one record
    "no_events": ("没有审计记录。", "No audit events."),
    "risk": ("风险", "risk"),
    "created": ("创建于", "created"),
    "decided_by": ("决定人", "decided by"),
    "via": ("途径", "via"),
    "decided_at": ("决定于", "decided at"),
    "reason": ("原因", "reason"),
    "execution": ("执行", "execution"),
    "result": ("结果", "result"),
    "edited_by": ("修改人", "edited by"),
    "args_before": ("修改前参数", "arguments before"),
    "call_args": ("调用参数", "arguments"),
    "audit_trail": ("审计记录", "audit trail"),
    "whole_record": ("完整记录", "the whole record"),
    # the health panel
    "channels": ("渠道", "channels"),
    "store": ("存储", "store"),
    "instances": ("实例", "instances"),
    "ready": ("就绪", "ready"),
    "down": ("不可用", "down"),
    "silent_for": ("心跳超过", "silent for more than"),
    "counts_dead": ("即视为失联", "counts as dead"),
    "no_instances": ("存储中没有实例。", "The store knows no instance."),
    "alive": ("存活", "alive"),
    "dead": ("失联", "dead"),
    "this_one": ("本实例", "this one"),
    "started": ("启动于", "started"),
    "last_seen": ("上次心跳 {ago} 秒前", "last seen {ago} s ago"),
    "outcome": ("结果", "outcome"),
    # a record's stage and risk, in the words of its cards: "stage.done", "risk.high"
    **{f"stage.{stage.value}": words for stage, words in STAGE_WORDS.items()},
    **{f"risk.{risk.value}": words for risk, words in RISK_WORDS.items()},
}


# What admin.js writes itself, given to it as JSON in the page.
ADMIN_SCRIPT_LABELS = ("live", "offline", "bad_json", "not_an_object")


def admin_line(key: str, **fields: object) -> str:
    """One label as a line of text (an error message): ``中文 / English``."""
    zh, en = ADMIN_LABELS[key]
    return f"{zh.format(**fields)} / {en.format(**fields)}"


# ---- The testers' readings: what the reply and policy testers answer, as sentences ----

# A reply's reading, by its intent: what the gateway does with it (Chinese, English);
# ``{target}`` is the id the reply names, else the one pending call.
REPLY_INTENTS: dict[str, tuple[str, str]] = {
    "confirm": ("确认：批准{target}", "confirm: approves {target}"),
    "cancel": ("取消：拒绝{target}", "cancel: rejects {target}"),
    "unclear": ("不明确：网关会再问一次", "unclear: the gateway asks again"),
    "none": ("不是决定：按普通消息处理", "not a decision: handled as an ordinary message"),
}
REPLY_TARGET = ("待确认的调用", "the pending call")
# Why the reply parser read it so (gateway/confirm/replies.py's ``why``, up to a colon).
REPLY_WHY: dict[str, tuple[str, str]] = {
    "clean decision": ("明确的决定", "a clean decision"),
    "cancel with a reason": ("取消并附原因", "cancel with a reason"),
    "empty": ("空消息", "an empty message"),
    "no decision words": ("没有确认词或取消词", "no confirm or cancel word"),
    "an id without 确认 or 取消": (
        "只有编号，没有确认词或取消词",
        "an id without confirm or cancel",
    ),
    "a question": ("是个问句", "a question"),
    "both confirm and cancel words": ("确认词和取消词都有", "both confirm and cancel words"),
    "other words besides the decision": ("决定之外还有别的词", "other words besides the decision"),
    "a request to confirm, not a confirm": (
        "是请人确认，不是确认",
        "a request to confirm, not one",
    ),
    "a duration after 取消": ("取消后面跟了时长", "a duration after cancel"),
    "a duration after ids": ("时长只能给单个编号", "a duration with several ids"),
    "thanks for a confirm, not a confirm": (
        "是感谢别人确认，不是确认",
        "thanks for a confirm, not one",
    ),
}
FIELD_WHY = "为何 Why"
FIELD_MATCHED = "匹配的词 Matched"
FIELD_CALL = "调用 Call"
FIELD_MATCHED_RULES = "匹配的规则 Matching rules"
NO_RULE = "无 none"
# A policy level in words: what happens to a call at that level (Chinese, English).
LEVEL_WORDS: dict[str, tuple[str, str]] = {
    "auto": ("自动执行，不询问", "auto: runs without asking"),
    "notify": ("执行并告知聊天", "notify: runs, and the chat is told"),
    "confirm": ("需确认：有人批准后才执行", "confirm: runs only after a person approves"),
    "manual": ("仅展示：显示会执行什么，从不执行", "manual: shown, never run"),
    "deny": ("禁止：从不执行", "deny: never runs"),
}
YES_NO = {True: "是 yes", False: "否 no"}


def reply_reading(parsed: ParsedReply) -> list[str]:
    """How a reply would be read, as lines: the verdict (Chinese, then English), then why
    and the words matched. The person's own words (a reason) follow the sentence."""
    # Several ids: the decision is for each of them (gateway/confirm/several.py).
    cid = " ".join(parsed.confirmation_ids) if parsed.names_several else parsed.confirmation_id
    target_zh, target_en = (f" {cid}", cid) if cid else REPLY_TARGET
    zh, en = REPLY_INTENTS[parsed.intent.value]
    zh, en = zh.format(target=target_zh), en.format(target=target_en)
    if parsed.grant_minutes is not None:
        n = parsed.grant_minutes
        zh += f"，{n} 分钟内同类调用免确认"
        en += f", and skips asking for {n} min"
    lines = [f"{zh} / {en}" + (f" · {FIELD_REASON}: {parsed.reason}" if parsed.reason else "")]
    key, _, tail = parsed.why.partition(": ")
    if key in REPLY_WHY:
        why_zh, why_en = REPLY_WHY[key]
        detail = f"：{tail}" if tail else ""
        lines.append(f"{FIELD_WHY}: {why_zh}{detail} / {why_en}{detail.replace('：', ': ')}")
    elif parsed.why:
        lines.append(f"{FIELD_WHY}: {parsed.why}")
    if parsed.matched:
        lines.append(f"{FIELD_MATCHED}: {' '.join(parsed.matched)}")
    return lines


def policy_reading(report: PolicyReport) -> list[str]:
    """What the policy says of a call, as lines: the level in words, the call, the rule
    that set the level, the risk (and the rule that set it), four-eyes and the rules that
    match. A call the tool refuses before the policy says what the tool found wrong."""
    if report.refused:
        return [
            f"⛔ {report.tool} 不接受此调用，未经策略判断 / {report.tool} does not accept "
            f"this call; the policy was not asked · {FIELD_REASON}: {report.refused}"
        ]
    zh, en = LEVEL_WORDS.get(report.level, (report.level, report.level))
    risk = f"{FIELD_RISK}: {RISK_LABELS[Risk(report.risk)]}"
    if report.risk_rule:
        risk += f"（来自 set by {report.risk_rule}）"
    return [
        f"{report.tool}: {zh} / {en}",
        f"{FIELD_CALL}: {report.summary}",
        f"{FIELD_RULE}: {report.rule}",
        risk,
        f"{FIELD_FOUR_EYES}: {YES_NO[report.four_eyes]}",
        *(
            [f"审批人数 Approvals: {report.approvals}"]
            if report.approvals > 1
            else []  # four-eyes says it for one
        ),
        f"{FIELD_MATCHED_RULES}: {', '.join(report.matched) if report.matched else NO_RULE}",
    ]


def tester_error(message: str, field: str | None) -> str:
    """A tester's question it could not answer (a bad body, no such tool, arguments the
    tool refuses): what to change."""
    where = f" · {field}" if field else ""
    return (
        f"⛔ 无法测试，请修改后再试 / cannot test this; change it and try again{where}: {message}"
    )
