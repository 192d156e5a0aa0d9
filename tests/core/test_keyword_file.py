"""The keyword file lives with the data: copied on first run, edited in place (comments and
order kept), and the installed package is only ever read (issue 16)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from config.keywords import SHIPPED_KEYWORDS_FILE, KeywordSet, KeywordStore, WordExists
from config.settings import PACKAGE_DIR, Settings
from gateway.app import build

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = SHIPPED_KEYWORDS_FILE.read_text(encoding="utf-8")


def comments(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith("#")]


async def test_first_run_copies_the_shipped_words_to_the_data_dir(
    make_settings: Callable[..., Settings],
) -> None:
    settings = make_settings(keywords={"file": None})
    copy = settings.data_dir / "keywords.toml"
    assert not copy.exists()
    async with await build(settings, serve_http=False) as gw:
        assert gw.keywords.path == copy
    assert copy.read_text(encoding="utf-8") == SHIPPED  # comments and all
    copy.write_text(SHIPPED.replace('"go",', '"go", "搞定",'), encoding="utf-8")
    async with await build(settings, serve_http=False) as again:  # a later start keeps edits
        assert "搞定" in again.keywords.words.confirm


def test_add_and_remove_keep_comments_and_order(tmp_path: Path) -> None:
    path = tmp_path / "k.toml"
    store = KeywordStore.open(path)
    store.add("confirm", "搞定")
    store.remove("n")
    expected = SHIPPED.replace('"go",', '"go", "搞定",').replace('"no", "n", ', '"no", ')
    assert path.read_text(encoding="utf-8") == expected
    assert store.words.confirm[-1] == "搞定"


def test_replace_keeps_comments_and_the_order_of_kept_words(tmp_path: Path) -> None:
    path = tmp_path / "k.toml"
    store = KeywordStore.open(path)
    old = store.words
    confirm = [w for w in reversed(old.confirm) if w != "ok"] + ["行"]
    store.replace(KeywordSet.build(confirm, old.cancel))
    text = path.read_text(encoding="utf-8")
    assert comments(text) == comments(SHIPPED)
    assert store.words.confirm == (*[w for w in old.confirm if w != "ok"], "行")


def test_adding_a_word_that_is_there_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "k.toml"
    store = KeywordStore.open(path)
    before = path.read_bytes()
    with pytest.raises(WordExists, match="'OK' is already in the confirm list"):
        store.add("confirm", "OK")  # compared normalised
    assert path.read_bytes() == before


# Run a command with the package directory mounted read-only (root ignores file modes; a
# private mount namespace makes the directory truly unwritable for that one process).
READ_ONLY = 'mount --bind -o ro "$0" "$0" && exec "$@"'


def read_only_package_works() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--mount", "sh", "-c", READ_ONLY, str(PACKAGE_DIR), "true"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


def cli(
    *args: str, cwd: Path, data_dir: Path, read_only: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env |= {"PYTHONPATH": str(ROOT), "GATEWAY_DATA_DIR": str(data_dir)}
    command = [sys.executable, "-m", "gateway", *args]
    if read_only:
        command = ["unshare", "--mount", "sh", "-c", READ_ONLY, str(PACKAGE_DIR), *command]
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_cli_says_a_word_already_exists(tmp_path: Path) -> None:
    data = tmp_path / "data"
    out = cli("keywords", "add", "confirm", "确认", cwd=tmp_path, data_dir=data)
    assert out.returncode == 1
    assert "'确认' is already in the confirm list" in out.stderr
    assert "nothing changed" in out.stderr
    assert "added" not in out.stdout
    out = cli("keywords", "add", "confirm", "搞定", cwd=tmp_path, data_dir=data)
    assert out.returncode == 0, out.stderr
    assert f"added '搞定' to the confirm list of {data / 'keywords.toml'}" in out.stdout


def snapshot(directory: Path) -> dict[str, tuple[int, bytes]]:
    return {
        p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in directory.iterdir() if p.is_file()
    }


async def test_nothing_writes_into_the_installed_package(
    tmp_path: Path, make_settings: Callable[..., Settings]
) -> None:
    before = snapshot(PACKAGE_DIR)
    data = tmp_path / "cli-data"
    read_only = read_only_package_works()
    for args in (("add", "confirm", "搞定"), ("remove", "搞定"), ("add", "cancel", "罢了")):
        out = cli("keywords", *args, cwd=tmp_path, data_dir=data, read_only=read_only)
        assert out.returncode == 0, out.stderr
    assert "罢了" in (data / "keywords.toml").read_text(encoding="utf-8")
    # the daemon's own edits (the admin API's path) on default settings
    async with await build(make_settings(keywords={"file": None}), serve_http=False) as gw:
        gw.keywords.add("confirm", "搞定")
    assert snapshot(PACKAGE_DIR) == before
    assert not list(PACKAGE_DIR.glob(".*.tmp"))
