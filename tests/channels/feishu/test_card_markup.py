"""Cards carry text, not markup (issue 22 item 9).

A quoted table name put ``<at id=all></at>`` (which pings the whole group) and a link on the
Feishu card: the summary and detail lines were lark_md. Every value from a request is now
in a plain_text element; what the real SDK sends to the loopback Feishu is checked.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from config.settings import Settings
from gateway.app import Gateway
from gateway.confirm.model import Status
from tests.channels.feishu.conftest import (
    ALICE,
    card_sends,
    wait_pending,
    wait_status,
    wait_until,
)
from tests.fakes.feishu import FakeFeishu, RecordedRequest, message_event

P2P = "oc_p2p_markup"
TABLE = "<at id=all></at>[x](http://evil)"
REASON = "太危险 **bold** [see](https://evil.test/page) <at id=all></at>"


def text_objects(node: Any) -> list[tuple[str, str]]:
    """(tag, content) of every text object in a card: plain_text, lark_md, markdown."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        if node.get("tag") in ("plain_text", "lark_md", "markdown") and "content" in node:
            found.append((node["tag"], str(node["content"])))
        for value in node.values():
            found += text_objects(value)
    elif isinstance(node, list):
        for item in node:
            found += text_objects(item)
    return found


def assert_text_only(card: dict[str, Any], *shown: str) -> None:
    """No markup from the request in any markdown element; each of ``shown`` as text."""
    objects = text_objects(card)
    for tag, content in objects:
        if tag != "plain_text":
            assert "<at" not in content, content
            assert "](" not in content, content
    plain = "\n".join(content for tag, content in objects if tag == "plain_text")
    for value in shown:
        assert value in plain


def sent_post_texts(r: RecordedRequest) -> list[str]:
    """A message whose every element is a plain text element: its texts (else fails)."""
    assert r.body["msg_type"] == "post", r.body
    paragraphs = r.content["zh_cn"]["content"]
    assert all(el["tag"] == "text" for para in paragraphs for el in para), paragraphs
    return [el["text"] for para in paragraphs for el in para]


async def test_a_table_name_and_a_reason_with_markup_stay_text(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    with sqlite3.connect(settings.data_dir / "demo.db") as db:
        db.execute(f'CREATE TABLE "{TABLE}" (id INTEGER PRIMARY KEY)')
        db.execute(f'INSERT INTO "{TABLE}" VALUES (1), (2)')
    fake.send_frame(
        message_event(chat_id=P2P, sender=ALICE, text=f'/sql DELETE FROM "{TABLE}" WHERE id = 1')
    )
    [conf] = await wait_pending(gateway)
    assert TABLE in conf.summary
    send = await fake.wait_request(lambda r: r in card_sends(fake), what="card send")
    assert_text_only(send.content, TABLE, f'DELETE FROM "{TABLE}" WHERE id = 1')
    assert send.message_id is not None

    # A reason with markdown, typed: the patched card and the outcome show it as text.
    fake.send_frame(message_event(chat_id=P2P, sender=ALICE, text=f"取消，{REASON}"))
    done = await wait_status(gateway, conf.id, Status.REJECTED)
    assert done.reason == REASON
    patch = await fake.wait_request(
        lambda r: r.op == "patch" and r.message_id == send.message_id, what="card patch"
    )
    assert_text_only(patch.content, REASON, TABLE)

    def outcome() -> RecordedRequest | None:
        for r in fake.requests_for("create", "reply"):
            if r.body.get("msg_type") != "interactive" and REASON in json.dumps(
                r.content, ensure_ascii=False
            ):
                return r
        return None

    await wait_until(lambda: outcome() is not None, what="the outcome in the chat")
    sent = outcome()
    assert sent is not None
    assert any(REASON in text for text in sent_post_texts(sent))
