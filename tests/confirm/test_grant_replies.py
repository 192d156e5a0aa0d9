"""``确认 30分钟``: a clean confirm with a duration asks for a session grant; a duration
never turns anything else into a decision."""

from __future__ import annotations

import pytest

from config.keywords import KeywordStore
from config.settings import DEFAULT_KEYWORDS_FILE
from gateway.confirm.replies import ReplyIntent, ReplyParser


@pytest.fixture(scope="module")
def parser() -> ReplyParser:
    return ReplyParser(KeywordStore(DEFAULT_KEYWORDS_FILE).words)


@pytest.mark.parametrize(
    ("text", "intent", "minutes", "cid"),
    [
        ("确认 30分钟", ReplyIntent.CONFIRM, 30, None),
        ("确认30分钟", ReplyIntent.CONFIRM, 30, None),
        ("确认 K7Q2 30分钟", ReplyIntent.CONFIRM, 30, "K7Q2"),
        ("ok 30 min", ReplyIntent.CONFIRM, 30, None),
        ("确认 2小时", ReplyIntent.CONFIRM, 120, None),
        ("确认", ReplyIntent.CONFIRM, None, None),
        ("取消 30分钟", ReplyIntent.UNCLEAR, None, None),
        ("确认吗 30分钟", ReplyIntent.UNCLEAR, None, None),
        ("不确认 30分钟", ReplyIntent.UNCLEAR, None, None),
        ("开会 30分钟", ReplyIntent.NONE, None, None),
        ("30分钟", ReplyIntent.NONE, None, None),
    ],
)
def test_a_duration_after_a_clean_confirm_asks_for_a_grant(
    parser: ReplyParser, text: str, intent: ReplyIntent, minutes: int | None, cid: str | None
) -> None:
    parsed = parser.parse(text)
    assert (parsed.intent, parsed.grant_minutes, parsed.confirmation_id) == (intent, minutes, cid)
