"""What chat users read about asking a call again (gateway/confirm/again.py): the button, the
replies to 重新发起 K7Q2 / retry K7Q2, and the drift of a call whose data changed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.confirm.model import Confirmation

AGAIN_BUTTON = "重新发起 / Ask again"
AGAIN_HINT = (
    "回复「重新发起 {id}」或 retry {id} 再问一次 / reply 重新发起 {id} or retry {id} to ask again"
)
AGAIN_ONLY_REQUESTER = (
    "仅发起人 {requester} 可以重新发起 / only {requester}, who asked, can ask again"
)
AGAIN_NOT_ENDED = (
    "[{id}] 仍在等待决定，无需重新发起 / [{id}] is still waiting for a decision: "
    "nothing to ask again"
)
AGAIN_NOT_OFFERED = (
    "[{id}] 已有结果，不能重新发起；只有过期或因网关关闭而取消的操作可以 / [{id}] was settled: "
    "only a call that expired or was cancelled by a shutdown can be asked again"
)
AGAIN_NOBODY = (
    "⚠️ 网关暂时无法重新评估这个操作，请稍后再试 / the gateway cannot evaluate this call again "
    "right now; try again later"
)

# What asking again came to, said under the first call's id (the new prompt follows).
_OUTCOMES: Mapping[str, tuple[str, str]] = {
    "asked": (
        "已重新发起为 {new}，请在新的确认中决定",
        "asked again as {new}: decide on the new prompt",
    ),
    "asking": ("正在重新发起为 {new}", "being asked again as {new}"),
    "ran": ("策略现在允许直接执行，已执行", "the policy now lets it run without asking: it ran"),
    "denied": ("策略现在禁止这个操作，未执行", "the policy now denies this call: it did not run"),
    "manual": ("策略现在要求人工执行，未执行", "the policy now sets it to manual: it did not run"),
    "failed": (
        "重新发起未成功，未执行，可稍后再试",
        "asking again came to nothing: it did not run; you can ask again later",
    ),
    "cancelled": ("重新发起时网关正在关闭，已取消", "cancelled: the gateway was stopping"),
}


def again_outcome(first_id: str, link: Mapping[str, Any]) -> str:
    """``[K7Q2] 已重新发起为 M3XA / asked again as M3XA``: where a call asked again went."""
    zh, en = _OUTCOMES.get(str(link.get("outcome")), _OUTCOMES["failed"])
    new = link.get("id") or "-"
    by = link.get("by") or "-"
    return f"↻ [{first_id}] {by}：{zh.format(new=new)} / {en.format(new=new)}"


def again_already(first: Confirmation, link: Mapping[str, Any]) -> str:
    """A second ask from the same record: it was asked again already, and where it went."""
    return (
        f"[{first.id}] 已经重新发起过 / was asked again already — "
        f"{again_outcome(first.id, link).removeprefix('↻ ')}"
    )


def effect_changed(name: str, first_id: str, message: str) -> str:
    """A run stopped because the data changed since the approval (issue 24): the chat hears
    the new numbers (in ``message``) before the new question."""
    return (
        f"⚠️ [{first_id}] {name} 未执行：数据在批准后已变化，将按新数据重新请求确认 / "
        f"{name} did not run: the data changed since approval; asking again with the new "
        f"data\n{message}"
    )
