"""Cards carry text, not markup (issue 22 item 9).

The DingTalk card put the statement, a quoted table name and reasons unescaped into its
markdown: a table named like a link was a link. Values from a request are escaped now, the
statement is in a code block no backtick run inside it can end.
"""

from __future__ import annotations

import re
import sqlite3
import time

from channels.dingtalk.cards import card_params, out_track_id
from config.settings import Settings
from gateway.app import Gateway
from gateway.confirm.model import Confirmation, Status, ToolCall
from tests.channels.dingtalk.conftest import shown, wait_pending, wait_status, webhook_texts
from tests.fakes.dingtalk import FakeDingTalk

CARD_PATH = "/v1.0/card/instances/createAndDeliver"
TABLE = "<at id=all></at>[x](http://evil)"
STATEMENT = f'DELETE FROM "{TABLE}" WHERE id = 1'
REASON = "太危险 **bold** [see](https://evil.test/page) <at id=all></at>"
# An opening fence line and its closing fence (the same run of backticks).
_FENCE = re.compile(r"^(`{3,})[a-z]*\n(.*?)\n\1$", re.S | re.M)


def outside_fences(markdown: str) -> str:
    return _FENCE.sub("", markdown)


def fenced(markdown: str) -> list[str]:
    return [m[2] for m in _FENCE.finditer(markdown)]


def assert_no_markup(markdown: str) -> None:
    """Outside code blocks, no unescaped character that starts a link, a tag or emphasis."""
    rest = outside_fences(markdown)
    for char in "<[]()`":
        assert not re.search(rf"(?<!\\){re.escape(char)}", rest), (char, rest)


def create_table(settings: Settings) -> None:
    with sqlite3.connect(settings.data_dir / "demo.db") as db:
        db.execute(f'CREATE TABLE "{TABLE}" (id INTEGER PRIMARY KEY)')
        db.execute(f'INSERT INTO "{TABLE}" VALUES (1), (2)')


async def test_the_statement_is_fenced_and_names_and_reasons_are_text(
    gateway: Gateway, fake: FakeDingTalk, settings: Settings
) -> None:
    create_table(settings)
    fake.send_chatbot_message(text=f"/sql {STATEMENT}")
    [conf] = await wait_pending(gateway)
    await fake.wait_requests(CARD_PATH)
    markdown = fake.cards[out_track_id(conf.id)]["markdown"]
    assert fenced(markdown) == [STATEMENT]
    assert_no_markup(markdown)
    assert TABLE in shown(outside_fences(markdown))  # the summary and the tables line

    fake.send_chatbot_message(text=f"取消，{REASON}")
    done = await wait_status(gateway, conf.id, Status.REJECTED)
    assert done.reason == REASON
    [put] = await fake.wait_requests("/v1.0/card/instances", method="PUT")
    markdown = put.body["cardData"]["cardParamMap"]["markdown"]
    assert_no_markup(markdown)
    assert REASON in shown(markdown)


async def test_the_text_prompt_where_no_card_goes_is_escaped_too(
    gateway: Gateway, fake: FakeDingTalk, settings: Settings
) -> None:
    create_table(settings)
    fake.inject("POST", CARD_PATH, 403, times=10, body={"code": "Forbidden.AccessDenied"})
    fake.send_chatbot_message(text=f"/sql {STATEMENT}")
    [conf] = await wait_pending(gateway)
    await fake.wait_until(
        lambda: any(f"[{conf.id}]" in t for t in webhook_texts(fake)), what="the text prompt"
    )
    [prompt] = [
        r.body["markdown"]["text"]
        for r in fake.requests("/robot/sendBySession")
        if r.body and r.body.get("msgtype") == "markdown"
    ]
    assert fenced(prompt) == [STATEMENT]
    assert_no_markup(prompt)
    assert f"确认 {conf.id}" in shown(prompt)  # how to reply, as the card's tips say


def test_backticks_in_a_statement_cannot_end_its_code_block() -> None:
    statement = "UPDATE t SET note = '``` **x** ````' WHERE id = 1"
    now = time.time()
    conf = Confirmation(
        id="K7Q2",
        session_key="dingtalk:cid-1",
        channel="dingtalk",
        chat_id="cid-1",
        requester="staff-1",
        is_group=False,
        tool_call=ToolCall(name="sql_modify", args={"sql": statement}, call_id="c1"),
        summary="UPDATE t",
        details={"statement": statement},
        created_at=now,
        expires_at=now + 300,
    )
    markdown = card_params(conf, now=now)["markdown"]
    assert fenced(markdown) == [statement]
    assert markdown.count("`````sql\n") == 1
