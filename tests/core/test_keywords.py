"""The keywords file: validation, CLI edits, hot reload into the running service."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

from config.keywords import KeywordsError, KeywordSet, KeywordStore, load_keywords
from config.settings import ConfirmationSettings
from gateway.bus import MessageBus
from gateway.confirm.replies import ReplyIntent, ReplyParser
from gateway.confirm.service import ConfirmationService
from gateway.storage.memory.confirmations import MemoryConfirmationStore

ROOT = Path(__file__).resolve().parents[2]


def test_word_in_both_lists_is_refused() -> None:
    with pytest.raises(KeywordsError, match="both lists: ok"):
        KeywordSet.build(["ok", "确认"], ["OK", "取消"])  # case-folded before comparing


@pytest.mark.parametrize(
    ("confirm", "cancel", "refused"),
    [
        # Issue 22: "ok." was kept beside "ok" and a reply "ok" then read as a cancel.
        (["ok.", "确认"], ["ok", "取消"], "both lists: ok"),
        (["确认。"], ["确认!", "取消"], "both lists: 确认"),
        (["/Yes"], ["YES", "no"], "both lists: yes"),
    ],
)
def test_words_are_compared_as_the_parser_reads_them(
    confirm: list[str], cancel: list[str], refused: str
) -> None:
    with pytest.raises(KeywordsError, match=refused):
        KeywordSet.build(confirm, cancel)


@pytest.mark.parametrize("word", ["请", "please", "吧", "吗", "thanks", "麻烦", "谢谢", "辛苦了"])
def test_a_filler_or_request_word_is_refused(word: str) -> None:
    # Issue 22: "请" as a confirm word made a bare "请" confirm, and "请确认" (a request
    # to someone else) read as two confirms.
    with pytest.raises(KeywordsError, match=f"'{word}' is a filler, request or question word"):
        KeywordSet.build(["确认", word], ["取消"])


@pytest.mark.parametrize("word", ["go-ahead", "ok了", "确 认", "да", "!!", "ok?"])
def test_a_word_no_reply_can_match_is_refused(word: str) -> None:
    with pytest.raises(KeywordsError, match=re.escape(repr(word))):
        KeywordSet.build(["确认", word], ["取消"])


def test_words_are_kept_in_the_form_replies_are_read() -> None:
    words = KeywordSet.build(["OK.", "确认！", "go ahead", "don't stop"], ["取消"])
    assert words.confirm == ("ok", "确认", "go ahead", "don't stop")
    parser = ReplyParser(words)
    assert parser.parse("ok").intent is ReplyIntent.CONFIRM
    assert parser.parse("Go  ahead!").intent is ReplyIntent.CONFIRM


def test_empty_list_is_refused() -> None:
    with pytest.raises(KeywordsError, match="confirm list is empty"):
        KeywordSet.build([], ["取消"])


def test_bad_toml_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "k.toml"
    bad.write_text("[confirm\nwords = [", encoding="utf-8")
    with pytest.raises(KeywordsError, match="not valid TOML"):
        load_keywords(bad)


def gateway_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=False,
    )


def test_cli_add_test_remove(tmp_path: Path, keywords_file: Path) -> None:
    f = ["keywords", "--file", str(keywords_file)]
    out = gateway_cli(*f, "test", "确认 K7Q2", cwd=tmp_path)
    assert out.stdout.split()[0] == "confirm"
    assert "id=K7Q2" in out.stdout
    assert gateway_cli(*f, "test", "搞定", cwd=tmp_path).stdout.split()[0] == "none"
    assert gateway_cli(*f, "add", "confirm", "搞定", cwd=tmp_path).returncode == 0
    assert gateway_cli(*f, "test", "搞定", cwd=tmp_path).stdout.split()[0] == "confirm"
    refused = gateway_cli(*f, "add", "cancel", "搞定", cwd=tmp_path)
    assert refused.returncode == 2
    assert "both lists" in refused.stderr
    assert gateway_cli(*f, "remove", "搞定", cwd=tmp_path).returncode == 0
    assert gateway_cli(*f, "test", "搞定", cwd=tmp_path).stdout.split()[0] == "none"
    assert gateway_cli(*f, "test", "不确认", cwd=tmp_path).stdout.split()[0] == "unclear"


class WatchedKeywords(KeywordStore):
    """The real store and watcher; each reload's result is also put on a queue for the test."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reloads: asyncio.Queue[bool] = asyncio.Queue()

    def reload(self) -> bool:
        applied = super().reload()
        self.reloads.put_nowait(applied)
        return applied


async def write_until_reloaded(store: WatchedKeywords, text: str) -> bool:
    """Write the file until the watcher reloads it: it may not watch yet at the first write."""
    for _ in range(20):
        store.path.write_text(text, encoding="utf-8")
        try:
            return await asyncio.wait_for(store.reloads.get(), 1.0)
        except TimeoutError:
            continue
    raise AssertionError("the watcher never reloaded the keywords file")


async def test_hot_reload_into_service(keywords_file: Path) -> None:
    store = WatchedKeywords(keywords_file)
    service = ConfirmationService(
        store=MemoryConfirmationStore(),
        bus=MessageBus(),
        settings=ConfirmationSettings(),
        keywords=store,
    )
    await store.start_watching()
    try:
        assert service.parser.parse("搞定").intent is ReplyIntent.NONE
        text = keywords_file.read_text(encoding="utf-8").replace('"确认",', '"确认", "搞定",', 1)
        assert await write_until_reloaded(store, text)
        assert service.parser.parse("搞定").intent is ReplyIntent.CONFIRM

        # An invalid file keeps the words in force and records why.
        keywords_file.write_text(text.replace('"取消",', '"取消", "搞定",', 1), encoding="utf-8")
        async with asyncio.timeout(10):
            while await store.reloads.get():
                pass  # a late event of the valid write: the refusal comes next
        assert "both lists" in (store.last_error or "")
        assert service.parser.parse("搞定").intent is ReplyIntent.CONFIRM
        assert service.parser.parse("确认").intent is ReplyIntent.CONFIRM
    finally:
        await store.stop_watching()


async def test_a_file_replaced_by_rename_is_reloaded(keywords_file: Path) -> None:
    # The watcher looks at the file itself (issue 14: a directory watch woke a thread for
    # every SQLite write beside it), so a rename over it must count as a change.
    store = WatchedKeywords(keywords_file)
    await store.start_watching(every=0.02)
    try:
        replacement = keywords_file.with_name("keywords.toml.new")
        text = keywords_file.read_text(encoding="utf-8").replace('"确认",', '"确认", "搞定",', 1)
        replacement.write_text(text, encoding="utf-8")
        replacement.replace(keywords_file)
        assert await asyncio.wait_for(store.reloads.get(), 10)
        assert "搞定" in store.words.confirm
    finally:
        await store.stop_watching()
