"""Confirm/cancel words: load, validate, save and hot-reload ``keywords.toml``."""

from __future__ import annotations

import asyncio
import os
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog
import tomlkit
from tomlkit.exceptions import TOMLKitError

log = structlog.get_logger(__name__)

ListName = Literal["confirm", "cancel"]

# How often the running daemon looks at the keyword file for changes.
WATCH_SECONDS = 1.0


class KeywordsError(ValueError):
    """The keywords file or an edit of it is invalid; the message says what to fix."""


class WordExists(KeywordsError):
    """The word is already in that list: nothing to add."""


def normalize_word(text: str) -> str:
    """NFKC, case-folded, inner whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


# The reply parser's own vocabulary (gateway/confirm/replies.py reads replies with it).
# Words that add nothing to a decision: "确认吧", "yes please".
FILLERS_CJK = frozenset({"吧", "了", "啊", "呀", "哦", "噢", "嗯", "哈", "呗", "的", "哟"})
FILLERS_ASCII = frozenset({"thanks", "thx", "thank", "you"})
# Thanks (issue 25): ignored before or after a decision word ("确认，谢谢", "谢谢 确认",
# "取消 辛苦了"), except glued to the front of a confirm word: "谢谢确认" thanks someone for
# a confirmation and is not one (unclear). The English forms are FILLERS_ASCII.
THANKS_CJK = frozenset({"谢谢", "多谢", "辛苦了", "辛苦"})
# Request forms: "请确认" / "please confirm" asks someone (often another member) to confirm;
# it is not the confirm itself. After the word ("yes please") they are mere politeness.
REQUESTS_CJK = frozenset({"请", "請", "麻烦", "麻煩", "劳驾", "烦请", "恳请", "敬请", "务必"})
REQUESTS_ASCII = frozenset({"please", "pls", "plz", "kindly"})
QUESTION_PARTICLES = frozenset({"吗", "么", "嘛", "呢", "吧?"})
TRAILING = ".。!！~～…·、,，;；"
QUESTION_MARKS = "?？"
# One ASCII word of a reply; a configured phrase is such words joined by single spaces.
ASCII_WORD = r"[a-z0-9]+(?:['’][a-z]+)?"
_ASCII_PHRASE = re.compile(rf"{ASCII_WORD}(?: {ASCII_WORD})*")
# A configured word equal to one of these would make the bare filler decide ("请" confirming)
# or turn "请确认" (a request) into two confirms.
_PARSER_WORDS = (
    FILLERS_CJK | FILLERS_ASCII | THANKS_CJK | REQUESTS_CJK | REQUESTS_ASCII | QUESTION_PARTICLES
)


def is_cjk(ch: str) -> bool:
    """A letter of a script written without spaces (Chinese, Japanese kana...)."""
    return unicodedata.category(ch) == "Lo"


def reply_form(text: str) -> str:
    """The form a reply is read in: normalised, a leading "/" and trailing punctuation gone."""
    return normalize_word(text).lstrip("/").rstrip(TRAILING + " ")


def keyword_form(word: str) -> str:
    """``word`` as the parser compares it, or KeywordsError saying why no reply could match it.

    Words are validated in this form, so "ok." beside "ok" is one word, not two.
    """
    form = reply_form(word)
    if not form:
        raise KeywordsError(
            f"a word is empty{f' once its punctuation is dropped ({word!r})' if word else ''}:"
            " remove it from the lists"
        )
    if form in _PARSER_WORDS:
        raise KeywordsError(
            f"{word!r} is a filler, request or question word that replies may contain anyway"
            " (请, 吧, please, 吗...): it cannot confirm or cancel; remove it"
        )
    if not (_ASCII_PHRASE.fullmatch(form) or all(is_cjk(c) for c in form)):
        raise KeywordsError(
            f"{word!r} can never match a reply: a word is Chinese characters only, or ASCII"
            " letters and digits (words joined by single spaces); remove or respell it"
        )
    return form


@dataclass(frozen=True, slots=True)
class KeywordSet:
    """A validated pair of word lists (normalised, order kept for display)."""

    confirm: tuple[str, ...]
    cancel: tuple[str, ...]

    @classmethod
    def build(cls, confirm: Iterable[str], cancel: Iterable[str]) -> KeywordSet:
        conf = _dedupe(keyword_form(w) for w in confirm)
        canc = _dedupe(keyword_form(w) for w in cancel)
        if not conf:
            raise KeywordsError("the confirm list is empty: add at least one word")
        if not canc:
            raise KeywordsError("the cancel list is empty: add at least one word")
        both = sorted(set(conf) & set(canc))
        if both:
            raise KeywordsError(
                f"word(s) in both lists: {', '.join(both)}; a word may only confirm or cancel"
            )
        return cls(confirm=conf, cancel=canc)

    def with_word(self, which: ListName, word: str) -> KeywordSet:
        if keyword_form(word) in getattr(self, which):
            raise WordExists(f"{word!r} is already in the {which} list")
        conf, canc = list(self.confirm), list(self.cancel)
        (conf if which == "confirm" else canc).append(word)
        return KeywordSet.build(conf, canc)

    def without_word(self, word: str) -> KeywordSet:
        w = reply_form(word)
        if w not in self.confirm and w not in self.cancel:
            raise KeywordsError(f"{word!r} is in neither list")
        return KeywordSet.build(
            [x for x in self.confirm if x != w], [x for x in self.cancel if x != w]
        )

    def to_dict(self) -> dict[str, list[str]]:
        return {"confirm": list(self.confirm), "cancel": list(self.cancel)}


def _dedupe(words: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(words))


def parse_keywords(data: object) -> KeywordSet:
    """Validate parsed TOML (``[confirm] words`` / ``[cancel] words``)."""
    if not isinstance(data, dict):
        raise KeywordsError("expected tables [confirm] and [cancel]")
    lists: dict[str, list[str]] = {}
    for name in ("confirm", "cancel"):
        table = data.get(name)
        if not isinstance(table, dict) or "words" not in table:
            raise KeywordsError(f"missing [{name}] words = [...]")
        words = table["words"]
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise KeywordsError(f"[{name}] words must be a list of strings")
        lists[name] = words
    return KeywordSet.build(lists["confirm"], lists["cancel"])


SHIPPED_KEYWORDS_FILE = Path(__file__).resolve().parent / "keywords.toml"


def load_keywords(path: Path) -> KeywordSet:
    return parse_keywords(_parse(_read(path), path).unwrap())


def _read(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise KeywordsError(f"cannot read {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise KeywordsError(f"{path} is not valid TOML: {exc}") from exc


def _parse(text: str, path: Path) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(text)
    except TOMLKitError as exc:
        raise KeywordsError(f"{path} is not valid TOML: {exc}") from exc


def ensure_keywords_file(path: Path) -> bool:
    """Copy the shipped words to ``path`` when it does not exist yet; True when copied.

    The copy keeps the shipped comments. The package's own file is only ever read.
    """
    if path.exists():
        return False
    _write_atomically(path, SHIPPED_KEYWORDS_FILE.read_text(encoding="utf-8"))
    log.info("keywords.file_created", path=str(path), source=str(SHIPPED_KEYWORDS_FILE))
    return True


def save_keywords(path: Path, words: KeywordSet) -> KeywordSet:
    """Write ``words`` into the file, keeping its comments, layout and word order.

    Words already in a list keep their place (and their spelling); new ones are appended;
    removed ones are taken out. Returns the words as the file now holds them.
    """
    try:
        doc = _parse(_read(path), path)
    except KeywordsError:  # a missing or broken file: start again from the shipped one
        doc = tomlkit.parse(SHIPPED_KEYWORDS_FILE.read_text(encoding="utf-8"))
    for name, wanted in (("confirm", words.confirm), ("cancel", words.cancel)):
        table = doc.get(name)
        if not isinstance(table, dict):
            table = tomlkit.table()
            doc[name] = table
        array = table.get("words")
        if not isinstance(array, list):
            table["words"] = list(wanted)
            continue
        _sync(array, wanted)
    saved = parse_keywords(doc.unwrap())
    _write_atomically(path, tomlkit.dumps(doc))
    return saved


def _sync(array: list[object], wanted: tuple[str, ...]) -> None:
    """Make ``array`` hold ``wanted`` (normalised words) in place, editing as little as can be."""
    keep = set(wanted)
    seen: set[str] = set()
    for i in reversed(range(len(array))):
        item = array[i]
        word = reply_form(item) if isinstance(item, str) else None
        if word is None or word not in keep:
            del array[i]
    for item in array:
        seen.add(reply_form(str(item)))
    # a duplicate spelling ("OK" and "ok") stays as the admin wrote it; dedupe is in KeywordSet
    for word in wanted:
        if word not in seen:
            array.append(word)
            seen.add(word)


def _write_atomically(path: Path, text: str) -> None:
    """Temp file + rename, so a watcher never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


class KeywordStore:
    """The words in force, reloaded when the file changes.

    An invalid file never replaces valid words: the old set stays and the reason is logged.
    """

    @classmethod
    def open(cls, path: Path) -> KeywordStore:
        """The store on ``path``, first copying the shipped words there if it is missing."""
        ensure_keywords_file(path)
        return cls(path)

    def __init__(self, path: Path, *, initial: KeywordSet | None = None) -> None:
        self.path = path
        self._words = initial if initial is not None else load_keywords(path)
        self._listeners: list[Callable[[KeywordSet], None]] = []
        self._task: asyncio.Task[None] | None = None
        self.last_error: str | None = None

    @property
    def words(self) -> KeywordSet:
        return self._words

    def on_change(self, listener: Callable[[KeywordSet], None]) -> None:
        self._listeners.append(listener)

    def _apply(self, words: KeywordSet) -> None:
        changed = words != self._words
        self._words = words
        self.last_error = None
        if changed:
            for listener in self._listeners:
                listener(words)

    def reload(self) -> bool:
        """Re-read the file; True when the new words are in force."""
        try:
            words = load_keywords(self.path)
        except KeywordsError as exc:
            self.last_error = str(exc)
            log.warning("keywords.reload_refused", path=str(self.path), error=str(exc))
            return False
        if words != self._words:
            log.info("keywords.reloaded", confirm=len(words.confirm), cancel=len(words.cancel))
        self._apply(words)
        return True

    def replace(self, words: KeywordSet) -> None:
        """Save new (already validated) words to the file and apply them now."""
        self._apply(save_keywords(self.path, words))

    def add(self, which: ListName, word: str) -> KeywordSet:
        """Add one word; WordExists when it is already in that list."""
        self.replace(self._words.with_word(which, word))
        return self._words

    def remove(self, word: str) -> KeywordSet:
        self.replace(self._words.without_word(word))
        return self._words

    async def start_watching(self, *, every: float = WATCH_SECONDS) -> None:
        """Reload the file whenever it changes, checking every ``every`` seconds."""
        if self._task is None:
            # Stamped now: a change made once this returns is never missed.
            watch = self._watch(every, _stamp(self.path))
            self._task = asyncio.create_task(watch, name="keywords-watch")

    async def stop_watching(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _watch(self, every: float, seen: tuple[int, int, int] | None) -> None:
        # One stat per check, not an inotify watch (watchfiles): the file's directory is
        # the data dir, where the SQLite files are written on every message, and the
        # directory watch woke its thread for each of those writes (about 60 µs of CPU per
        # web chat message, bench/ingest.py). A stat also sees the file replaced by rename
        # (editors, save_keywords): its inode changes.
        while True:
            await asyncio.sleep(every)
            now = _stamp(self.path)
            if now == seen:
                continue
            seen = now
            if now is None:  # gone: the words in force stay until it is back
                continue
            try:
                self.reload()
            except Exception:  # a listener failed: say so, and keep watching
                log.exception("keywords.reload_failed", path=str(self.path))


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when the file is written or replaced; None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)
