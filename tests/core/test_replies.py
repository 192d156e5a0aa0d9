"""Reply parsing: the public corpus, and the rules DESIGN.md invariant 4 names."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from config.keywords import KeywordSet, load_keywords
from config.settings import DEFAULT_KEYWORDS_FILE
from gateway.confirm.ids import ID_ALPHABET
from gateway.confirm.replies import ReplyIntent, ReplyParser

CORPUS = Path(__file__).resolve().parents[1] / "data" / "replies.tsv"


def load_corpus() -> list[tuple[str, str, str | None]]:
    rows = []
    for line in CORPUS.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        rows.append((parts[0], parts[1], parts[2] if len(parts) > 2 else None))
    return rows


@pytest.fixture(scope="module")
def parser() -> ReplyParser:
    return ReplyParser(load_keywords(DEFAULT_KEYWORDS_FILE))


def test_corpus_is_large_enough() -> None:
    rows = load_corpus()
    assert len(rows) >= 150
    assert {r[0] for r in rows} == {"confirm", "cancel", "unclear", "none"}


@pytest.mark.parametrize(("expected", "text", "conf_id"), load_corpus())
def test_corpus_reply(parser: ReplyParser, expected: str, text: str, conf_id: str | None) -> None:
    parsed = parser.parse(text)
    if expected != "confirm":
        assert parsed.intent is not ReplyIntent.CONFIRM, f"false confirm: {text!r}"
    assert parsed.intent.value == expected, f"{text!r}: {parsed.why}"
    if conf_id is not None:
        assert parsed.confirmation_id == conf_id


@pytest.mark.parametrize(
    "text",
    ["不确认", "取消确认", "确认吗？", "no ok", "yes no", "确认，但只删除前10条", "token", "book"],
)
def test_issue_examples_never_confirm(parser: ReplyParser, text: str) -> None:
    assert parser.parse(text).intent is not ReplyIntent.CONFIRM


def test_cancel_reason_is_kept(parser: ReplyParser) -> None:
    parsed = parser.parse("取消，太危险了")
    assert parsed.intent is ReplyIntent.CANCEL
    assert parsed.reason == "太危险了"


def test_crockford_aliases_in_ids(parser: ReplyParser) -> None:
    # People type O for 0 and I/L for 1: "K7O2" is the id K702.
    assert parser.parse("确认 k7o2").confirmation_id == "K702"


def test_configured_words_only() -> None:
    words = KeywordSet.build(["go ahead", "确认"], ["stop"])
    p = ReplyParser(words)
    assert p.parse("go ahead").intent is ReplyIntent.CONFIRM
    assert p.parse("ok").intent is ReplyIntent.NONE  # not configured here
    assert p.parse("go ahead stop").intent is ReplyIntent.UNCLEAR


@given(st.text(max_size=40))
def test_confirm_only_from_confirm_words(text: str) -> None:
    """Whatever the text, a confirm needs a confirm word and no cancel word in it."""
    words = load_keywords(DEFAULT_KEYWORDS_FILE)
    parsed = ReplyParser(words).parse(text)
    if parsed.intent is ReplyIntent.CONFIRM:
        assert parsed.matched
        assert all(w in words.confirm for w in parsed.matched)


@given(
    st.sampled_from(["确认", "confirm", "yes", "ok", "批准"]),
    st.sampled_from(["不", "不要", "no", "取消", "cancel", "别", "don't", "not"]),
)
def test_negated_confirm_never_confirms(word: str, negation: str) -> None:
    p = ReplyParser(load_keywords(DEFAULT_KEYWORDS_FILE))
    for text in (f"{negation}{word}", f"{negation} {word}", f"{word}{negation}", f"{word}吗"):
        assert p.parse(text).intent is not ReplyIntent.CONFIRM, text


_IDS = st.text(alphabet=ID_ALPHABET, min_size=4, max_size=6).filter(
    lambda s: any(c.isdigit() for c in s) and any(c.isalpha() for c in s)
)


@given(cid=_IDS, word=st.sampled_from(["确认", "取消", "ok", "cancel"]))
@example(cid="MN5H", word="取消")
@example(cid="997H", word="确认")
@example(cid="K30M", word="确认")
@settings(max_examples=500)
def test_a_decision_with_an_id_names_that_id_and_asks_for_no_grant(cid: str, word: str) -> None:
    # Regression: "确认 MN5H" read the id's tail "5H" as five hours (unclear), and
    # "确认 997H" as a bare confirm with a 997-hour grant.
    p = ReplyParser(load_keywords(DEFAULT_KEYWORDS_FILE))
    parsed = p.parse(f"{word} {cid}")
    assert parsed.confirmation_id == cid
    assert parsed.intent in (ReplyIntent.CONFIRM, ReplyIntent.CANCEL)
    assert parsed.grant_minutes is None
