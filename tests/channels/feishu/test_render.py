"""Card JSON 2.0 and message content for every confirmation state."""

from __future__ import annotations

import json
import time

import pytest

from channels.feishu.render import (
    STATEMENT_ELEMENT,
    card_content,
    confirmation_card,
    message_content,
    plain_content,
)
from gateway import texts
from gateway.confirm.model import Confirmation, Risk, Status, ToolCall
from gateway.texts import Stage
from gateway.texts import approvers as approver_texts
from tests.channels.feishu.conftest import buttons, card_text
from tests.support import at_stage


def _conf(**changes: object) -> Confirmation:
    now = time.time()
    fields: dict[str, object] = {
        "id": "K7Q2",
        "session_key": "feishu:oc_1",
        "channel": "feishu",
        "chat_id": "oc_1",
        "requester": "ou_alice",
        "is_group": False,
        "tool_call": ToolCall(name="sql_modify", args={"sql": "x"}, call_id="c1"),
        "summary": "DELETE 1 row from orders",
        "details": {"statement": "DELETE FROM t WHERE a = '```'", "rows_affected": 1},
        "risk": Risk.HIGH,
        "created_at": now,
        "expires_at": now + 300,
    }
    fields.update(changes)
    return Confirmation(**fields)  # type: ignore[arg-type]


def test_pending_card_has_both_buttons_hint_and_risk_colour() -> None:
    card = confirmation_card(_conf())
    assert card["schema"] == "2.0"
    assert card["config"]["update_multi"] is True
    assert card["header"]["template"] == "orange"
    values = [b["behaviors"][0]["value"] for b in buttons(card)]
    assert [v["decision"] for v in values] == ["approve", "reject", "approve"]
    # The third is "skip asking for 30 min": approve and grant (gateway/confirm/grants.py).
    assert values[2]["grant_minutes"] == texts.GRANT_MINUTES_BUTTON
    assert buttons(card)[2]["text"]["content"] == texts.GRANT_BUTTON
    assert texts.reply_hint(_conf()) in card_text(card)
    # The statement is shown as written, in a plain_text element of its own (issue 22).
    [statement] = [
        el for el in card["body"]["elements"] if el.get("element_id") == STATEMENT_ELEMENT
    ]
    assert statement["text"] == {"tag": "plain_text", "content": "DELETE FROM t WHERE a = '```'"}
    assert all(el.get("tag") != "markdown" for el in card["body"]["elements"])


@pytest.mark.parametrize(
    "changes",
    [{"risk": Risk.CRITICAL}, {"four_eyes": True, "is_group": True}],
    ids=["critical", "four-eyes"],
)
def test_no_grant_button_where_a_grant_cannot_apply(changes: dict[str, object]) -> None:
    card = confirmation_card(_conf(**changes))
    assert [b["behaviors"][0]["value"] for b in buttons(card)] == [
        {"confirmation_id": "K7Q2", "decision": "approve"},
        {"confirmation_id": "K7Q2", "decision": "reject"},
    ]
    assert texts.GRANT_BUTTON not in card_text(card)


def test_an_approvers_direct_copy_says_who_asks_and_asks_for_the_id() -> None:
    c = _conf(four_eyes=True)  # one-to-one four-eyes: the requester's own card only withdraws
    assert [b["behaviors"][0]["value"]["decision"] for b in buttons(confirmation_card(c))] == [
        "reject"
    ]
    card = confirmation_card(c, direct=True)
    assert [b["behaviors"][0]["value"]["decision"] for b in buttons(card)] == ["approve", "reject"]
    assert approver_texts.direct_intro(c) in card_text(card)
    assert "ou_alice" in approver_texts.direct_intro(c)
    assert approver_texts.direct_reply_hint(c) in card_text(card)
    # Settled, every copy shows the same outcome.
    done = c.finished(Status.APPROVED, by="ou_bob", at=c.created_at + 1, via="text", reason=None)
    assert confirmation_card(done, direct=True) == confirmation_card(done)


@pytest.mark.parametrize(
    ("stage", "template"),
    [
        (Stage.APPROVED, "wathet"),
        (Stage.DONE, "green"),
        (Stage.FAILED, "red"),
        (Stage.INTERRUPTED, "orange"),
        (Stage.REJECTED, "red"),
        (Stage.EXPIRED, "grey"),
        (Stage.CANCELLED, "grey"),
    ],
)
def test_settled_cards_have_no_buttons_and_say_their_stage(stage: Stage, template: str) -> None:
    c = at_stage(_conf(), stage, by="ou_alice")
    card = confirmation_card(c)
    # No decision is left to make; an expired call offers its requester to ask it again.
    again = ["btn_again"] if stage is Stage.EXPIRED else []
    assert [b["element_id"] for b in buttons(card)] == again
    assert card["header"]["template"] == template
    assert texts.stage_label(stage) in card["header"]["title"]["content"]
    assert texts.outcome(c) in card_text(card)
    assert json.loads(card_content(c)) is not None


def test_plain_text_stays_text_markdown_becomes_post() -> None:
    assert message_content("hello") == ("text", json.dumps({"text": "hello"}))
    kind, content = message_content("**bold** and a [link](http://x)")
    assert kind == "post"
    assert json.loads(content)["zh_cn"]["content"][0][0]["tag"] == "md"


def test_a_reply_never_mentions() -> None:
    # Issue 22: a reply quoting a value (a table name, a row) must not ping the group.
    for text in ('rows: <at user_id="all"></at>', "**x** < AT id=all>all</at>"):
        _, content = message_content(text)
        assert "<at" not in content.lower() and "< at" not in content.lower(), content
        assert "＜" in content


def test_plain_content_is_text_elements_whatever_the_text() -> None:
    # A text message is not plain: Feishu reads <at user_id="all"> and links in it.
    kind, content = plain_content('**x** <at user_id="all"></at>\n[l](http://x)')
    assert kind == "post"
    assert json.loads(content)["zh_cn"]["content"] == [
        [{"tag": "text", "text": '**x** <at user_id="all"></at>'}],
        [{"tag": "text", "text": "[l](http://x)"}],
    ]
