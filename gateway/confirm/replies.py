"""Text -> reply intent, by whole configured words only (never substrings).

A reply decides only when it consists of decision words of one kind, optionally fillers
("吧", "thanks", "谢谢") and confirmation ids: one picks that call, several ("确认 K7Q2
M3XA") decide each of them (gateway/confirm/several.py). Anything else that contains
decision words is ``unclear`` (ask again); text without decision words is ``none``
(ordinary chat). Negations, questions, mixed words and conditions therefore never confirm:
"不确认" is [不, 确认] (mixed), "确认吗" has a question particle, "确认，但只删前10条" has
extra words. A request form before a confirm word ("请确认", "please confirm") asks someone
to confirm, so it is ``unclear``; before a cancel word ("请取消") it stays a cancel (fails
safe).
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass, replace
from enum import StrEnum

from config.keywords import (
    ASCII_WORD,
    FILLERS_ASCII,
    FILLERS_CJK,
    QUESTION_MARKS,
    QUESTION_PARTICLES,
    REQUESTS_ASCII,
    REQUESTS_CJK,
    THANKS_CJK,
    TRAILING,
    KeywordSet,
    is_cjk,
    reply_form,
)
from gateway.confirm.ids import ID_ALPHABET, canonical_id


class ReplyIntent(StrEnum):
    CONFIRM = "confirm"
    CANCEL = "cancel"
    UNCLEAR = "unclear"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class ParsedReply:
    intent: ReplyIntent
    confirmation_id: str | None = None
    matched: tuple[str, ...] = ()
    reason: str | None = None
    why: str = ""
    grant_minutes: int | None = None  # "确认 30分钟": approve, and skip asking for 30 min
    # Every id the reply names, in order. Two or more ("确认 K7Q2 M3XA"): the decision is
    # for each of them and ``confirmation_id`` is None — never a bare decision (several.py).
    confirmation_ids: tuple[str, ...] = ()

    @property
    def names_several(self) -> bool:
        """A decision that names two or more calls: it decides each of those, nothing else."""
        return len(self.confirmation_ids) > 1


# A separator after a cancel word that introduces a reason: "取消，太危险了" / "no: wrong table".
REASON_SEPARATORS = frozenset(",，:：;；。.-—")

_ID_CHARS = frozenset(ID_ALPHABET)
# A grant's length at the end of a confirm: "确认 30分钟", "ok 30 min", "确认 2小时".
# The number stands on its own (nothing alphanumeric glued before it), so the tail of an
# id is never read as one: "确认 MN5H" names MN5H, it does not ask for 5 hours. A bare "h"
# takes at most two digits: "确认 997H" is an id (ids have a digit and a letter), not 41 days.
_DURATION = re.compile(
    r"(?<![0-9a-z])(?:(\d{1,4})\s*(分钟|分|min|mins|minutes|小时|hours?)|(\d{1,2})\s*(h))$"
)
_HOURS = frozenset({"小时", "h", "hour", "hours"})


def _looks_like_id(token: str) -> bool:
    if not 4 <= len(token) <= 6:
        return False
    # The digit must be typed, not produced by the O->0 alias: "book" and "token" are words.
    if not any(c.isdigit() for c in token):
        return False
    cid = canonical_id(token)
    return all(c in _ID_CHARS for c in cid) and any(c.isalpha() for c in cid)


@dataclass(slots=True)
class _Token:
    text: str
    # "confirm" | "cancel" | "id" | "filler" | "thanks" | "request" | "question" | "unknown"
    kind: str
    start: int
    end: int


_ASCII_WORD = re.compile(ASCII_WORD)


class ReplyParser:
    """Parses replies against one KeywordSet. Rebuilt when the words change."""

    def __init__(self, words: KeywordSet) -> None:
        self.words = words
        self._confirm = frozenset(words.confirm)
        self._cancel = frozenset(words.cancel)
        cjk = {w for w in (*words.confirm, *words.cancel) if w and is_cjk(w[0])}
        self._cjk_vocab = cjk | FILLERS_CJK | THANKS_CJK | REQUESTS_CJK | QUESTION_PARTICLES
        self._cjk_max = max((len(w) for w in self._cjk_vocab), default=1)
        # Multi-word ASCII phrases ("go ahead") are matched over token runs.
        self._ascii_max_words = max(
            (len(w.split()) for w in (*words.confirm, *words.cancel)), default=1
        )
        # Replies repeat ("确认", "ok"); a parse was about 7 % of a round trip's instructions
        # in bench/confirm_roundtrip.py. The result is immutable, so it can be shared.
        self._remembered = functools.lru_cache(maxsize=1024)(self._parse_text)

    def _kind(self, word: str) -> str:
        if word in self._confirm:
            return "confirm"
        if word in self._cancel:
            return "cancel"
        if word in FILLERS_CJK or word in FILLERS_ASCII:
            return "filler"
        if word in THANKS_CJK:
            return "thanks"
        if word in REQUESTS_CJK or word in REQUESTS_ASCII:
            return "request"
        if word in QUESTION_PARTICLES:
            return "question"
        return "unknown"

    def _segment_cjk(self, run: str, offset: int) -> list[_Token]:
        """Greedy longest match against known words; unknown characters grouped."""
        tokens: list[_Token] = []
        i = 0
        unknown_start: int | None = None
        while i < len(run):
            match = None
            for size in range(min(self._cjk_max, len(run) - i), 0, -1):
                piece = run[i : i + size]
                if piece in self._cjk_vocab:
                    match = piece
                    break
            if match is None:
                if unknown_start is None:
                    unknown_start = i
                i += 1
                continue
            if unknown_start is not None:
                text = run[unknown_start:i]
                tokens.append(_Token(text, "unknown", offset + unknown_start, offset + i))
                unknown_start = None
            tokens.append(_Token(match, self._kind(match), offset + i, offset + i + len(match)))
            i += len(match)
        if unknown_start is not None:
            tokens.append(
                _Token(run[unknown_start:], "unknown", offset + unknown_start, offset + i)
            )
        # A one-character word inside a sentence is part of that sentence, not a decision:
        # "这是什么意思" holds 是 and "我不知道" holds 不, yet neither answers the prompt.
        for k in range(1, len(tokens) - 1):
            t = tokens[k]
            if (
                t.kind in ("confirm", "cancel")
                and len(t.text) == 1
                and tokens[k - 1].kind == "unknown"
                and tokens[k + 1].kind == "unknown"
            ):
                t.kind = "unknown"
        return tokens

    def _tokenize(self, text: str) -> list[_Token]:
        tokens: list[_Token] = []
        i = 0
        while i < len(text):
            ch = text[i]
            if is_cjk(ch):
                j = i
                while j < len(text) and is_cjk(text[j]):
                    j += 1
                tokens.extend(self._segment_cjk(text[i:j], i))
                i = j
            elif ch.isascii() and ch.isalnum():
                m = _ASCII_WORD.match(text, i)
                assert m is not None
                word = m.group(0)
                kind = self._kind(word)
                if kind == "unknown" and _looks_like_id(word):
                    kind = "id"
                tokens.append(_Token(word, kind, i, m.end()))
                i = m.end()
            elif ch.isspace() or ch in TRAILING or ch in QUESTION_MARKS or ch in "/@#'\"()[]{}":
                if ch in QUESTION_MARKS:
                    tokens.append(_Token(ch, "question", i, i + 1))
                i += 1
            else:
                # Emoji, other scripts, symbols: not a decision word.
                tokens.append(_Token(ch, "unknown", i, i + 1))
                i += 1
        return self._join_phrases(tokens, text)

    def _join_phrases(self, tokens: list[_Token], text: str) -> list[_Token]:
        if self._ascii_max_words < 2:
            return tokens
        out: list[_Token] = []
        i = 0
        while i < len(tokens):
            joined = None
            for size in range(min(self._ascii_max_words, len(tokens) - i), 1, -1):
                run = tokens[i : i + size]
                phrase = " ".join(t.text for t in run)
                if phrase in self._confirm or phrase in self._cancel:
                    joined = _Token(phrase, self._kind(phrase), run[0].start, run[-1].end)
                    i += size
                    break
            if joined is None:
                joined = tokens[i]
                i += 1
            out.append(joined)
        return out

    def parse(self, text: str) -> ParsedReply:
        """The intent of ``text`` and the confirmation id it names, if any.

        A clean confirm followed by a duration (``确认 30分钟``, ``ok 2h``) also asks for a
        session grant of that many minutes (gateway/confirm/grants.py); a duration after
        anything else is unclear.
        """
        return self._remembered(text)

    def _parse_text(self, text: str) -> ParsedReply:
        stripped = reply_form(text)
        duration = _DURATION.search(stripped)
        if duration is not None and duration.start() > 0:
            parsed = self._parse(stripped[: duration.start()].rstrip(TRAILING + " "))
            if parsed.intent is ReplyIntent.NONE:
                return self._parse(stripped)  # "开会 30分钟": ordinary chat
            if parsed.intent is ReplyIntent.CANCEL:
                return replace(parsed, intent=ReplyIntent.UNCLEAR, why="a duration after 取消")
            if parsed.intent is not ReplyIntent.CONFIRM:
                return parsed
            if parsed.names_several:  # a grant is given on one call
                return replace(parsed, intent=ReplyIntent.UNCLEAR, why="a duration after ids")
            number = duration.group(1) or duration.group(3)
            unit = 60 if (duration.group(2) or duration.group(4)) in _HOURS else 1
            return replace(parsed, grant_minutes=int(number) * unit)
        return self._parse(stripped)

    def _parse(self, stripped: str) -> ParsedReply:
        if not stripped:
            return ParsedReply(ReplyIntent.NONE, why="empty")
        tokens = self._tokenize(stripped)
        named = tuple(dict.fromkeys(canonical_id(t.text) for t in tokens if t.kind == "id"))
        parsed = self._read_tokens(tokens, stripped, named)
        return replace(parsed, confirmation_ids=named) if named else parsed

    def _read_tokens(
        self, tokens: list[_Token], stripped: str, named: tuple[str, ...]
    ) -> ParsedReply:
        """The intent of a reply's words; the ids it names are read the same whether it
        names one or several (``named``: each once, as typed first)."""
        ids = [t for t in tokens if t.kind == "id"]
        confirms = [t for t in tokens if t.kind == "confirm"]
        cancels = [t for t in tokens if t.kind == "cancel"]
        unknown = [t for t in tokens if t.kind == "unknown"]
        question = any(t.kind == "question" for t in tokens)
        matched = tuple(t.text for t in (*confirms, *cancels))
        conf_id = named[0] if len(named) == 1 else None

        if not confirms and not cancels:
            if ids and not unknown:
                return ParsedReply(ReplyIntent.UNCLEAR, conf_id, why="an id without 确认 or 取消")
            return ParsedReply(ReplyIntent.NONE, why="no decision words")
        if question:
            return ParsedReply(ReplyIntent.UNCLEAR, conf_id, matched, why="a question")
        if confirms and cancels:
            return ParsedReply(
                ReplyIntent.UNCLEAR, conf_id, matched, why="both confirm and cancel words"
            )
        if unknown:
            reason = self._cancel_reason(tokens, stripped)
            if cancels and reason is not None:
                return ParsedReply(
                    ReplyIntent.CANCEL, conf_id, matched, reason=reason, why="cancel with a reason"
                )
            return ParsedReply(
                ReplyIntent.UNCLEAR,
                conf_id,
                matched,
                why=f"other words besides the decision: {' '.join(t.text for t in unknown)}",
            )
        if confirms and any(t.kind == "request" and t.start < confirms[-1].start for t in tokens):
            return ParsedReply(
                ReplyIntent.UNCLEAR, conf_id, matched, why="a request to confirm, not a confirm"
            )
        if _thanks_for_a_confirm(tokens):
            return ParsedReply(
                ReplyIntent.UNCLEAR, conf_id, matched, why="thanks for a confirm, not a confirm"
            )
        intent = ReplyIntent.CONFIRM if confirms else ReplyIntent.CANCEL
        return ParsedReply(intent, conf_id, matched, why="clean decision")

    def _cancel_reason(self, tokens: list[_Token], text: str) -> str | None:
        """'取消，太危险了' -> '太危险了'; only when the reply starts with a cancel word."""
        meaningful = [t for t in tokens if t.kind not in ("filler", "thanks", "request", "id")]
        if not meaningful or meaningful[0].kind != "cancel":
            return None
        first = meaningful[0]
        # The ids right after the word belong to it: "cancel K7Q2 M3XA: wrong table".
        end = first.end
        for t in tokens:
            if t.start < end:
                continue
            if t.kind != "id" or text[end : t.start].strip(" " + "".join(REASON_SEPARATORS)):
                break
            end = t.end
        after = text[end:]
        gap = after[: len(after) - len(after.lstrip(" " + "".join(REASON_SEPARATORS)))]
        has_separator = any(c in REASON_SEPARATORS for c in gap)
        cjk_space = is_cjk(first.text[0]) and gap.startswith(" ")
        if not (has_separator or cjk_space):
            return None
        rest = after[len(gap) :]
        # Drop an id from the reason text.
        for t in tokens:
            if t.kind == "id" and t.start >= first.end:
                rest = rest.replace(t.text, "", 1)
        # What separated the ids from the reason goes with them ("取消，K7Q2，原因").
        reason = " ".join(rest.split()).lstrip("".join(REASON_SEPARATORS) + " ")
        return reason or None


# "撤销 K7Q2" / "undo K7Q2": ask to undo an approved change (gateway/tools/sql_undo.py). Not
# a decision: it asks for a new held call, which the agent turns it into.
UNDO_WORDS = frozenset({"撤销", "undo", "撤回改动"})


def parse_undo(text: str) -> str | None:
    """The confirmation id of an undo request (``撤销 K7Q2``, ``undo k7q2``), else None.

    Exact like every reply: the word, one id, nothing else (a trailing "." aside)."""
    words = reply_form(text).split()
    if len(words) != 2 or words[0] not in UNDO_WORDS or not _looks_like_id(words[1]):
        return None
    return canonical_id(words[1])


def _thanks_for_a_confirm(tokens: list[_Token]) -> bool:
    """ "谢谢确认": thanks glued to the front of a confirm word thanks someone for confirming.
    With a space or a comma between ("谢谢，确认") it is politeness, as after the word."""
    return any(
        t.kind == "thanks" and nxt.kind == "confirm" and t.end == nxt.start
        for t, nxt in itertools.pairwise(tokens)
    )
