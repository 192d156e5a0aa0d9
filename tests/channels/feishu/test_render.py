"""Card JSON 2.0 and message content for every confirmation state."""

from __future__ import annotations

import json
import time

import pytest

from channels.feishu.render import card_content, confirmation_card, message_content
from gateway import texts
from gateway.confirm.model import Confirmation, Risk, Status, ToolCall
from tests.channels.feishu.conftest import buttons, card_text


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
    assert [b["behaviors"][0]["value"]["decision"] for b in buttons(card)] == ["approve", "reject"]
    assert texts.reply_hint(_conf()) in card_text(card)
    # A fence inside the statement cannot end the code block early.
    assert card_text(card).count("```") == 2


@pytest.mark.parametrize(
    ("status", "template", "label"),
    [
        (Status.APPROVED, "green", "已批准 approved"),
        (Status.REJECTED, "red", "已取消 cancelled"),
        (Status.EXPIRED, "grey", "已超时 expired"),
    ],
)
def test_final_cards_have_no_buttons(status: Status, template: str, label: str) -> None:
    card = confirmation_card(_conf(status=status, decided_by="ou_alice"))
    assert buttons(card) == []
    assert card["header"]["template"] == template
    assert label in card["header"]["title"]["content"]
    assert json.loads(card_content(_conf(status=status))) is not None


def test_plain_text_stays_text_markdown_becomes_post() -> None:
    assert message_content("hello") == ("text", json.dumps({"text": "hello"}))
    kind, content = message_content("**bold** and a [link](http://x)")
    assert kind == "post"
    assert json.loads(content)["zh_cn"]["content"][0][0]["tag"] == "md"
