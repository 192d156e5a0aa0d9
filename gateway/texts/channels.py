"""What chat users read from the platform channels, the terminal chat and the model agent."""

from __future__ import annotations

# ---- Platform channels (Feishu, DingTalk) and the terminal chat ----

NOT_ALLOWED = "您没有使用此机器人的权限 / you are not allowed to use this bot"
# The words of the outcomes they lead to (已批准 / approved, 已拒绝 / rejected), as on the
# admin page; typed replies still use the keywords (确认 / 取消 by default).
APPROVE_BUTTON = "批准 Approve"
REJECT_BUTTON = "拒绝 Reject"
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


def turn_failed(error: BaseException) -> str:
    """A turn, or a resumed one, that failed: said in its chat, never lost."""
    return f"⚠️ 处理失败 / failed: {type(error).__name__}"


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
