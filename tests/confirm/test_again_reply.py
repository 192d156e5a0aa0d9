"""The ask-again reply form (gateway/confirm/again.py): which texts name a call to ask
again, and that none of them is a decision of a pending call."""

from __future__ import annotations

import pytest

from config.keywords import load_keywords
from config.settings import DEFAULT_KEYWORDS_FILE
from gateway.confirm.again import again_reply_id
from gateway.confirm.replies import ReplyIntent, ReplyParser

ASKS = [
    ("重新发起 K7Q2", "K7Q2"),
    ("重新发起K7Q2", "K7Q2"),
    ("请重新发起 K7Q2", "K7Q2"),
    ("重试 K7Q2", "K7Q2"),
    ("再问一次 m3xa", "M3XA"),
    ("retry K7Q2", "K7Q2"),
    ("Retry k7q2.", "K7Q2"),
    ("/retry K7Q2", "K7Q2"),
    ("please retry K7Q2", "K7Q2"),
    ("ask again K7Q2", "K7Q2"),
    ("RETRY\u3000Ｋ７Ｑ２", "K7Q2"),  # full-width, as a Chinese keyboard types it
]

NOT_ASKS = [
    "retry",  # no id: ordinary chat, for the agent
    "重新发起",
    "retry K7Q2 please",
    "retry K7Q2 M3XA",
    "retry book",  # a word, not an id (ids have a digit)
    "retry 1234",  # a number, not an id
    "确认 K7Q2",
    "重新发起 K7Q2 吗",
    "can you retry K7Q2 for me",
    "retry " + "K7Q2" * 20,
]


@pytest.mark.parametrize(("text", "cid"), ASKS)
def test_the_ask_again_forms_name_their_call(text: str, cid: str) -> None:
    assert again_reply_id(text) == cid


@pytest.mark.parametrize("text", NOT_ASKS)
def test_other_texts_ask_nothing_again(text: str) -> None:
    assert again_reply_id(text) is None


@pytest.mark.parametrize(("text", "cid"), ASKS)
def test_no_ask_again_form_decides_a_pending_call(text: str, cid: str) -> None:
    parser = ReplyParser(load_keywords(DEFAULT_KEYWORDS_FILE))
    assert parser.parse(text).intent not in (ReplyIntent.CONFIRM, ReplyIntent.CANCEL)
