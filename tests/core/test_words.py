"""One word per outcome everywhere (issue 26): each stage a call can be at reads the same,
Chinese and English, on every surface that shows it — the chat's sentence (also the admin
API's ``message``), the Feishu, DingTalk and web chat cards, the admin page's chip and
record page, the admin feed and the CLI — and no surface uses another outcome's word for
it (a person's no was "已取消 / cancelled" in the chat and "Reject" / ``rejected`` on the
admin page). The words come from one table, ``texts.STAGE_WORDS``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from aiohttp import web

from channels.dingtalk.cards import card_params
from channels.feishu.render import confirmation_card
from gateway import texts
from gateway.cli.admin import _details, _line
from gateway.confirm.events import ConfirmationEvent
from gateway.confirm.model import Confirmation, Risk, Status, ToolCall
from gateway.http.admin import event_payload
from gateway.http.page import setup_templates
from gateway.texts import Stage
from tests.core.harness import Harness
from tests.support import ShiftedClock, at_stage, pass_deadline

NOW = time.time()
TEMPLATES = setup_templates(web.Application())


def _asked() -> Confirmation:
    return Confirmation(
        id="K7Q2",
        session_key="feishu:oc_1",
        channel="feishu",
        chat_id="oc_1",
        requester="alice",
        is_group=True,
        tool_call=ToolCall(name="sql_modify", args={"sql": "x"}, call_id="c1"),
        summary="DELETE 1 row from orders",
        details={"statement": "DELETE FROM orders WHERE id = 3", "rows_affected": 1},
        risk=Risk.HIGH,
        created_at=NOW,
        expires_at=NOW + 300,
    )


def _admin_row(c: Confirmation) -> str:
    return TEMPLATES.get_template("history.html").render(history=[c])


def _admin_record(c: Confirmation) -> str:
    return TEMPLATES.get_template("detail.html").render(
        c=c, events=[], actor="", logout=False, no_token=False, now=NOW
    )


Surface = Callable[[Confirmation], str]
# Every surface that names a settled call's stage...
SETTLED: dict[str, Surface] = {
    "chat and the API's message": texts.outcome,
    "feishu card": lambda c: json.dumps(confirmation_card(c, now=NOW), ensure_ascii=False),
    "dingtalk card title": lambda c: card_params(c, now=NOW)["title"],
    "dingtalk card words": lambda c: card_params(c, now=NOW)["status_text"],
    "web chat card": lambda c: f"{texts.web_card(c)['title']} {texts.web_card(c)['outcome']}",
    "admin feed": lambda c: str(event_payload(ConfirmationEvent("executed", c))["outcome"]),
    "admin history chip": _admin_row,
    "admin record page": _admin_record,
    "cli show": lambda c: _details(c.to_dict()),
    "cli list": lambda c: _line(c.to_dict()),
}
# ...and those that name a pending one too.
ANY = ("dingtalk card words", "admin history chip", "admin record page", "cli show", "cli list")

CASES = [(stage, name) for stage in Stage if stage is not Stage.PENDING for name in SETTLED]
CASES += [(Stage.PENDING, name) for name in ANY]

# Outcomes that must never read like one another.
RIVALS = {
    Stage.REJECTED: (Stage.CANCELLED, Stage.EXPIRED),
    Stage.CANCELLED: (Stage.REJECTED, Stage.EXPIRED),
    Stage.EXPIRED: (Stage.REJECTED, Stage.CANCELLED),
    Stage.DONE: (Stage.FAILED, Stage.INTERRUPTED),
    Stage.FAILED: (Stage.DONE, Stage.INTERRUPTED),
    Stage.INTERRUPTED: (Stage.DONE, Stage.FAILED),
}


@pytest.mark.parametrize(("stage", "surface"), CASES)
def test_each_stage_reads_the_same_word_on_each_surface(stage: Stage, surface: str) -> None:
    shown = SETTLED[surface](at_stage(_asked(), stage))
    zh, en = texts.STAGE_WORDS[stage]
    assert zh in shown and en in shown, shown
    for rival in RIVALS.get(stage, ()):
        for word in texts.STAGE_WORDS[rival]:
            assert word not in shown, (rival, shown)


def test_a_persons_no_is_rejected_and_the_buttons_say_the_words_of_their_outcomes() -> None:
    # The buttons everywhere (cards, admin page) lead to the words their outcomes read.
    assert texts.APPROVE_BUTTON == "批准 Approve" and texts.REJECT_BUTTON == "拒绝 Reject"
    assert texts.ADMIN_LABELS["approve"] == ("批准", "Approve")
    assert texts.ADMIN_LABELS["reject"] == ("拒绝", "Reject")
    no = _asked().finished(Status.REJECTED, by="bob", at=NOW, via="text", reason="too risky")
    assert texts.outcome(no) == (
        "🚫 [K7Q2] bob 已拒绝，sql_modify 未执行 / rejected by bob; sql_modify did not run"
        " · 原因 Reason: too risky"
    )
    assert texts.already_decided(no) == "[K7Q2] 已处理：已拒绝（bob）/ already rejected by bob"


def test_no_bilingual_sentence_sits_inside_another() -> None:
    """The shutdown notice read "已取消：网关关闭 / gateway shutting down，… / cancelled (网关关闭
    / gateway shutting down); …": the gateway's own reasons, in both languages, now follow
    the whole sentence."""
    for reason in (
        texts.SHUTDOWN_REASON,
        texts.ERROR_REASON.format(error="RuntimeError"),
        texts.UNSURE_CREATE_REASON,
    ):
        c = _asked().finished(Status.CANCELLED, by=None, at=NOW, via="system", reason=reason)
        sentence, _, why = texts.outcome(c).partition(" · ")
        assert sentence == "🚫 [K7Q2] 已取消，sql_modify 未执行 / cancelled; sql_modify did not run"
        assert why == f"原因 Reason: {reason}"
    refused = texts.grant_refused(texts.GRANT_NOT_CRITICAL)
    assert refused.endswith(f"no grant: {texts.GRANT_NOT_CRITICAL}")
    assert refused.count(" / ") == 1 + texts.GRANT_NOT_CRITICAL.count(" / ")


async def test_a_call_that_expires_reads_expired_on_every_surface_with_its_reason() -> None:
    """The stored reason of an expiry said "超时未确认" while its stage said 已过期 / expired:
    two words for one outcome on the record page and in ``confirmations show``. The reason
    now names the outcome in its word; taken here through the real deadline."""
    clock = ShiftedClock()
    h = Harness(clock=clock)
    task, asked = await h.ask()
    await pass_deadline(h.service, clock, asked.id)
    expired = await task
    assert expired.status is Status.EXPIRED and expired.reason is not None
    zh, en = texts.STAGE_WORDS[Stage.EXPIRED]
    assert zh in expired.reason and en in expired.reason, expired.reason
    for name, surface in SETTLED.items():
        shown = surface(expired)
        assert zh in shown and en in shown, (name, shown)
        assert "超时" not in shown, (name, shown)
        for rival in RIVALS[Stage.EXPIRED]:
            assert not any(word in shown for word in texts.STAGE_WORDS[rival]), (name, shown)


@pytest.mark.parametrize(
    ("reason", "ends_as"),
    [
        (texts.TIMEOUT_REASON, Stage.EXPIRED),
        (texts.RESTART_REASON, Stage.EXPIRED),
        (texts.SHUTDOWN_REASON, Stage.CANCELLED),
        (texts.SUPERSEDED_REASON, Stage.CANCELLED),
        (texts.UNSURE_CREATE_REASON, Stage.CANCELLED),
        (texts.TOO_MANY_UNCLEAR, Stage.REJECTED),
    ],
)
def test_the_gateways_own_reasons_never_use_another_outcomes_word(
    reason: str, ends_as: Stage
) -> None:
    for rival in RIVALS[ends_as]:
        for word in texts.STAGE_WORDS[rival]:
            assert word not in reason, (rival, reason)
