"""What the /admin page shows: its labels, as (Chinese, English) pairs.

The page's templates (gateway/http/templates/) show a label as 中文 with the English
beside it, set apart (``bi``), or as one plain string in an attribute (``plain``), both
from gateway/texts/labels.py; ``{name}`` fields are filled there.
"""

from __future__ import annotations

from gateway.texts.confirm import RISK_WORDS, STAGE_WORDS

ADMIN_LABELS: dict[str, tuple[str, str]] = {
    # the bar and the login
    "title": ("网关管理", "Gateway admin"),
    "acting_as": ("操作人", "acting as"),
    "log_in_to_decide": ("登录后才能决定", "log in to decide"),
    "log_out": ("退出", "Log out"),
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
    "edit_then_approve": ("修改参数后批准", "Edit arguments, then approve"),
    "arguments_json": ("参数 (JSON)", "arguments (JSON)"),
    "approve_edited": ("按修改后的参数批准", "Approve as edited"),
    "grant_session": ("批准，30 分钟内同类免确认", "Approve, skip asking 30 min"),
    "grant_call": ("总是批准此调用（7 天）", "Always this exact call (7 d)"),
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
