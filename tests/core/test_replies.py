"""Reply parsing: the public corpus, and the rules DESIGN.md invariant 4 names."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from config.keywords import (
    FILLERS_ASCII,
    FILLERS_CJK,
    QUESTION_PARTICLES,
    REQUESTS_ASCII,
    REQUESTS_CJK,
    KeywordSet,
    load_keywords,
)
from config.settings import DEFAULT_KEYWORDS_FILE
from gateway.confirm.ids import ID_ALPHABET, canonical_id
from gateway.confirm.replies import ReplyIntent, ReplyParser
from tests.fuzzing import examples

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
    if conf_id is not None and " " in conf_id:  # several ids: each, and never a bare one
        assert parsed.confirmation_ids == tuple(conf_id.split())
        assert parsed.confirmation_id is None
    elif conf_id is not None:
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


_WORDS = load_keywords(DEFAULT_KEYWORDS_FILE)
_PARSER_VOCABULARY = {
    *FILLERS_CJK,
    *FILLERS_ASCII,
    *REQUESTS_CJK,
    *REQUESTS_ASCII,
    *QUESTION_PARTICLES,
}
_VOCABULARY = {*_WORDS.confirm, *_WORDS.cancel, *_PARSER_VOCABULARY}
# Other words hold no character of any word the parser knows, so each stays "other" however
# the parser segments it.
_OTHER_CJK = [c for c in "数据表格删除更新列订单库存今天明天" if c not in "".join(_VOCABULARY)]
_IDS = st.text(alphabet=ID_ALPHABET, min_size=4, max_size=6).filter(
    lambda s: any(c.isdigit() for c in s) and any(c.isalpha() for c in s)
)


def _part(kind: str, words: Iterable[str]) -> st.SearchStrategy[tuple[str, str]]:
    """A word of ``kind``, as typed: any case."""
    spelled = st.sampled_from(sorted(words)).flatmap(
        lambda w: st.sampled_from(sorted({w, w.upper(), w.title()}))
    )
    return st.tuples(st.just(kind), spelled)


_CONFIRM = _part("confirm", _WORDS.confirm)
_FILLER = _part("filler", FILLERS_CJK | FILLERS_ASCII)
_REQUEST = _part("request", REQUESTS_CJK | REQUESTS_ASCII)
_ID = st.tuples(st.just("id"), _IDS)
# One way each to miss the rule: the test runs each on every example.
_SPOILERS: dict[str, st.SearchStrategy[tuple[str, str]]] = {
    "cancel": _part("cancel", _WORDS.cancel),
    "question": _part("question", {*QUESTION_PARTICLES, "?", "？"}),
    "other": st.tuples(
        st.just("other"),
        st.one_of(
            st.text(alphabet="".join(_OTHER_CJK), min_size=1, max_size=4),
            st.text(alphabet="abcdefghjkmnpqrstuvwxyz", min_size=1, max_size=6).filter(
                lambda w: w not in _VOCABULARY
            ),
            st.sampled_from(["🙂", "ок", "ß"]),
        ),
    ),
    "request before": _REQUEST,
}


def _last_confirm(parts: list[tuple[str, str]]) -> int:
    return max(i for i, (kind, _) in enumerate(parts) if kind == "confirm")


@st.composite
def _confirms(draw: st.DrawFn) -> list[tuple[str, str]]:
    """A clean confirm: confirm words and fillers in any order, perhaps one id anywhere,
    perhaps a request after the last confirm word ("确认 请", "yes please")."""
    parts = draw(
        st.permutations(
            draw(st.lists(_CONFIRM, min_size=1, max_size=2)) + draw(st.lists(_FILLER, max_size=2))
        )
    )
    # No id, one, or several (issue 25: "确认 K7Q2 M3XA" decides each it names).
    for _ in range(draw(st.integers(0, 3))):
        parts.insert(draw(st.integers(0, len(parts))), draw(_ID))
    if draw(st.booleans()):
        parts.insert(draw(st.integers(_last_confirm(parts) + 1, len(parts))), draw(_REQUEST))
    return parts


@st.composite
def _spoiled(draw: st.DrawFn, spoiler: str) -> list[tuple[str, str]]:
    """A clean confirm with one ``spoiler`` put in: never a confirm."""
    parts = draw(_confirms())
    last = _last_confirm(parts) if spoiler == "request before" else len(parts)
    parts.insert(draw(st.integers(0, last)), draw(_SPOILERS[spoiler]))
    return parts


def _is_confirm(parts: list[tuple[str, str]]) -> bool:
    """The rule (DESIGN.md invariant 4): confirm words, fillers, ids, nothing else; a
    request (请, please) only after the last confirm word."""
    kinds = [kind for kind, _ in parts]
    confirms = [i for i, kind in enumerate(kinds) if kind == "confirm"]
    return (
        bool(confirms)
        and not {"cancel", "question", "other"} & set(kinds)
        and not any(kind == "request" and i < confirms[-1] for i, kind in enumerate(kinds))
    )


@pytest.mark.parametrize("spoiler", [None, *_SPOILERS])
@settings(max_examples=examples(150))
@given(
    data=st.data(),
    separators=st.lists(st.sampled_from([" ", "  ", "，", ", ", "、", "。", " ~ "]), min_size=8),
    before=st.sampled_from(["", "/", " "]),
    after=st.sampled_from(["", "!", "。", "！！", " "]),
)
def test_confirm_exactly_when_the_rule_says(
    spoiler: str | None, data: st.DataObject, separators: list[str], before: str, after: str
) -> None:
    """Every reply built from the vocabulary is a confirm exactly when the rule says so:
    each clean confirm is one (naming the id it holds, matching only confirm words), and
    each way of missing the rule is tried on every example of its own run."""
    parts = data.draw(_confirms() if spoiler is None else _spoiled(spoiler), label="parts")
    expected = _is_confirm(parts)
    assert expected is (spoiler is None), parts  # the generators are what they claim
    text = before + "".join(
        sep + word for sep, (_, word) in zip(["", *separators], parts, strict=False)
    )
    text += after
    parsed = ReplyParser(_WORDS).parse(text)
    assert (parsed.intent is ReplyIntent.CONFIRM) is expected, (text, parts, parsed)
    if expected:
        assert parsed.matched and set(parsed.matched) <= set(_WORDS.confirm), (text, parsed)
        ids = tuple(dict.fromkeys(canonical_id(word) for kind, word in parts if kind == "id"))
        assert parsed.confirmation_ids == ids, (text, parsed)
        # One id picks that call; several are each decided, and none is a bare confirm.
        assert parsed.confirmation_id == (ids[0] if len(ids) == 1 else None), (text, parsed)
        assert parsed.grant_minutes is None


@given(
    st.sampled_from(["确认", "confirm", "yes", "ok", "批准"]),
    st.sampled_from(["不", "不要", "no", "取消", "cancel", "别", "don't", "not"]),
)
def test_negated_confirm_never_confirms(word: str, negation: str) -> None:
    p = ReplyParser(load_keywords(DEFAULT_KEYWORDS_FILE))
    for text in (f"{negation}{word}", f"{negation} {word}", f"{word}{negation}", f"{word}吗"):
        assert p.parse(text).intent is not ReplyIntent.CONFIRM, text


@given(cid=_IDS, word=st.sampled_from(["确认", "取消", "ok", "cancel"]))
@example(cid="MN5H", word="取消")
@example(cid="997H", word="确认")
@example(cid="K30M", word="确认")
@settings(max_examples=examples(500))
def test_a_decision_with_an_id_names_that_id_and_asks_for_no_grant(cid: str, word: str) -> None:
    # Regression: "确认 MN5H" read the id's tail "5H" as five hours (unclear), and
    # "确认 997H" as a bare confirm with a 997-hour grant.
    p = ReplyParser(load_keywords(DEFAULT_KEYWORDS_FILE))
    parsed = p.parse(f"{word} {cid}")
    assert parsed.confirmation_id == cid
    assert parsed.intent in (ReplyIntent.CONFIRM, ReplyIntent.CANCEL)
    assert parsed.grant_minutes is None
