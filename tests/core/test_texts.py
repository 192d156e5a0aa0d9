"""Chat texts people notice (issue 16): the button and the result agree, "1 row", the
result line names the confirmation in both languages, superseded says so, the reply hint
addresses only those who may decide, and an approval says the call is running."""

from __future__ import annotations

from dataclasses import replace

import pytest

from channels.dingtalk.cards import card_params
from channels.feishu.render import confirmation_card
from gateway import texts
from gateway.confirm.model import Confirmation, ExecState, Status, ToolCall
from gateway.texts import Stage
from tests.support import at_stage

NOW = 1_700_000_000.0


def confirmation(**overrides: object) -> Confirmation:
    base = Confirmation(
        id="K7Q2",
        session_key="webchat:ops",
        channel="webchat",
        chat_id="ops",
        requester="alice",
        is_group=False,
        tool_call=ToolCall(
            name="sql_modify", args={"sql": "DELETE FROM orders WHERE id = 3"}, call_id="c1"
        ),
        summary="DELETE orders",
        created_at=NOW,
        expires_at=NOW + 300,
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def decided(status: Status, *, by: str = "bob", reason: str | None = None, **kw: bool) -> str:
    c = confirmation().finished(status, by=by, at=NOW + 5, via="text", reason=reason, **kw)
    return texts.outcome(c)


def test_a_reject_reads_rejected_like_its_button() -> None:
    assert texts.REJECT_BUTTON.startswith("拒绝")
    line = decided(Status.REJECTED, reason="太危险")
    assert line == (
        "🚫 [K7Q2] bob 已拒绝，sql_modify 未执行 / "
        "rejected by bob; sql_modify did not run · 原因 Reason: 太危险"
    )
    assert "取消" not in line and "cancelled" not in line
    c = confirmation().finished(Status.REJECTED, by="bob", at=NOW, via="card", reason=None)
    assert texts.status_line(c) == "🚫 [K7Q2] 已拒绝 / rejected · bob"


@pytest.mark.parametrize(
    ("n", "text"), [(0, "0 行 / 0 rows"), (1, "1 行 / 1 row"), (3, "3 行 / 3 rows")]
)
def test_row_counts_are_singular_for_one(n: int, text: str) -> None:
    assert texts.rows(n) == text


def test_the_result_line_names_the_confirmation_in_both_languages() -> None:
    line = texts.tool_result("sql_modify", "DELETE: 1 行 / 1 row", "K7Q2")
    assert line == "✔️ [K7Q2] sql_modify 已执行 / done: DELETE: 1 行 / 1 row"
    assert texts.tool_result("sql_query", "x") == "sql_query: x"  # no confirmation, no id


def test_an_approval_says_the_call_is_running() -> None:
    assert decided(Status.APPROVED) == (
        "✅ [K7Q2] bob 已批准，sql_modify 执行中… / approved by bob; running sql_modify…"
    )


def test_a_superseded_call_says_superseded() -> None:
    # reject_with_feedback: the person's message is their no, with feedback for the model.
    assert decided(Status.REJECTED, by="alice", reason="查一下别的", feedback=True) == (
        "↪️ [K7Q2] 已拒绝：alice 发了新消息，sql_modify 未执行 / "
        "rejected: superseded by a new message from alice; sql_modify did not run"
    )
    # on_other_message = "cancel": superseded, cancelled.
    assert decided(Status.CANCELLED, by="alice", reason=texts.SUPERSEDED_REASON) == (
        "↪️ [K7Q2] 已取消：alice 发了新消息，sql_modify 未执行 / "
        "cancelled: superseded by a new message from alice; sql_modify did not run"
    )


def test_the_reply_hint_addresses_only_those_who_may_decide() -> None:
    one_to_one = texts.prompt(confirmation(), NOW)
    assert "回复 确认 / 取消" in one_to_one
    group = texts.prompt(confirmation(is_group=True), NOW)
    assert "alice 或审批人回复 确认 / 取消" in group
    assert "alice or an approver: reply confirm / cancel" in group
    # Four-eyes, one to one: the requester may only withdraw, so the prompt does not ask.
    requester_copy = texts.prompt(confirmation(four_eyes=True), NOW)
    assert "确认 K7Q2" not in requester_copy
    assert "confirm" not in requester_copy.split("Tool")[-1].replace("Confirmation", "")
    assert "waiting for an approver; reply cancel K7Q2 to withdraw" in requester_copy
    four_eyes_group = texts.reply_hint(confirmation(four_eyes=True, is_group=True))
    assert four_eyes_group.startswith("审批人回复 确认 K7Q2 / 取消 K7Q2")
    assert "alice may reply cancel K7Q2 to withdraw" in four_eyes_group


def test_cards_show_no_approve_button_to_a_four_eyes_requester() -> None:
    c = confirmation(four_eyes=True, channel="feishu")
    columns = confirmation_card(c, now=NOW)["body"]["elements"]
    buttons = next(e for e in columns if e.get("tag") == "column_set")["columns"]
    assert [b["elements"][0]["text"]["content"] for b in buttons] == [texts.REJECT_BUTTON]
    assert texts.APPROVE_BUTTON not in card_params(c, now=NOW)["sys_full_json_obj"]
    group = confirmation(four_eyes=True, is_group=True)
    assert texts.APPROVE_BUTTON in card_params(group, now=NOW)["sys_full_json_obj"]


def test_the_card_says_who_approved_and_how_the_run_ended() -> None:
    asked = confirmation()
    assert texts.outcome(at_stage(asked, Stage.DONE)) == (
        "✔️ [K7Q2] bob 已批准，sql_modify 已执行 / "
        "approved by bob; sql_modify done: DELETE: 1 行 / 1 row"
    )
    assert texts.outcome(at_stage(asked, Stage.FAILED)) == (
        "❌ [K7Q2] bob 已批准，sql_modify 执行失败 / "
        "approved by bob; sql_modify failed: no such table: orders"
    )
    assert texts.outcome(at_stage(asked, Stage.INTERRUPTED)) == (
        "⚠️ [K7Q2] bob 已批准，sql_modify 已中断：可能已生效也可能未生效，如需重试请重新发起 / "
        "approved by bob; sql_modify interrupted: it may or may not have taken effect; "
        "ask again to re-run"
    )
    # While it runs, the card says it was approved and runs.
    approved = at_stage(asked, Stage.APPROVED)
    running = replace(approved, execution=replace(approved.execution, state=ExecState.RUNNING))
    assert texts.stage(running) is Stage.APPROVED
    assert texts.outcome(running) == decided(Status.APPROVED)
