"""Confirm/cancel words: load, validate, save and hot-reload ``keywords.toml``."""

from __future__ import annotations

import asyncio
import tomllib
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog
import tomli_w

log = structlog.get_logger(__name__)

ListName = Literal["confirm", "cancel"]


class KeywordsError(ValueError):
    """The keywords file or an edit of it is invalid; the message says what to fix."""


def normalize_word(text: str) -> str:
    """NFKC, case-folded, inner whitespace collapsed: the form words are compared in."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


@dataclass(frozen=True, slots=True)
class KeywordSet:
    """A validated pair of word lists (normalised, order kept for display)."""

    confirm: tuple[str, ...]
    cancel: tuple[str, ...]

    @classmethod
    def build(cls, confirm: Iterable[str], cancel: Iterable[str]) -> KeywordSet:
        conf = _dedupe(normalize_word(w) for w in confirm)
        canc = _dedupe(normalize_word(w) for w in cancel)
        if "" in conf or "" in canc:
            raise KeywordsError("a word is empty: remove empty strings from the lists")
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
        conf, canc = list(self.confirm), list(self.cancel)
        (conf if which == "confirm" else canc).append(word)
        return KeywordSet.build(conf, canc)

    def without_word(self, word: str) -> KeywordSet:
        w = normalize_word(word)
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


def load_keywords(path: Path) -> KeywordSet:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise KeywordsError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise KeywordsError(f"{path} is not valid TOML: {exc}") from exc
    return parse_keywords(data)


HEADER = (
    "# Words that decide a pending confirmation (see the shipped file for the rules).\n"
    "# Matching is exact, never substring. The gateway reloads this file on change.\n\n"
)


def save_keywords(path: Path, words: KeywordSet) -> None:
    """Write atomically (temp file + rename) so a watcher never reads half a file."""
    body = HEADER + tomli_w.dumps(
        {"confirm": {"words": list(words.confirm)}, "cancel": {"words": list(words.cancel)}}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(body, encoding="utf-8")
    tmp.replace(path)


class KeywordStore:
    """The words in force, reloaded when the file changes.

    An invalid file never replaces valid words: the old set stays and the reason is logged.
    """

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
        save_keywords(self.path, words)
        self._apply(words)

    def add(self, which: ListName, word: str) -> KeywordSet:
        words = self._words.with_word(which, word)
        self.replace(words)
        return words

    def remove(self, word: str) -> KeywordSet:
        words = self._words.without_word(word)
        self.replace(words)
        return words

    async def start_watching(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._watch(), name="keywords-watch")

    async def stop_watching(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _watch(self) -> None:
        from watchfiles import awatch

        # Watch the directory, not the file: editors and save_keywords replace the file by
        # rename, which ends a watch on the old inode.
        target = self.path.resolve()
        directory = target.parent
        try:
            async for changes in awatch(directory, debounce=200, step=50):
                # resolve() of a few changed paths is a cheap local call
                if any(Path(p).resolve() == target for _, p in changes):  # noqa: ASYNC240
                    self.reload()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("keywords.watch_failed", path=str(self.path))
