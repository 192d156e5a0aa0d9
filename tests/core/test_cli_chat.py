"""`gateway chat` end to end in a pseudo-terminal, as a newcomer would use it."""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
from pathlib import Path

import pexpect
import pytest

from config.settings import DEFAULT_KEYWORDS_FILE
from tests.support import ctrl_c_delivered

ROOT = Path(__file__).resolve().parents[2]


def spawn_chat(tmp_path: Path) -> pexpect.spawn:
    kw = tmp_path / "keywords.toml"
    shutil.copy(DEFAULT_KEYWORDS_FILE, kw)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(
        GATEWAY_DATA_DIR=str(tmp_path / "data"),
        GATEWAY_KEYWORDS__FILE=str(kw),
        GATEWAY_CONFIRMATION__STORE="sqlite",
        PYTHONPATH=str(ROOT),
    )
    child = pexpect.spawn(
        sys.executable,
        ["-m", "gateway", "chat"],
        cwd=str(tmp_path),
        env=env,
        encoding="utf-8",
        preexec_fn=ctrl_c_delivered,
        timeout=30,
    )
    child.expect("Ctrl-D")
    return child


def count(tmp_path: Path, where: str) -> int:
    with sqlite3.connect(tmp_path / "data" / "demo.db") as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM orders WHERE {where}").fetchone()[0])


@pytest.mark.parametrize(("reply", "gone"), [("确认", True), ("取消", False)])
def test_chat_sql_delete(tmp_path: Path, reply: str, gone: bool) -> None:
    child = spawn_chat(tmp_path)
    try:
        child.sendline("/sql DELETE FROM orders WHERE status = 1")
        child.expect(r"Confirmation required \[([0-9A-Z]{4,6})\]")
        child.expect("Rows affected: 3")
        child.expect("Time left")
        child.sendline(reply)
        if gone:
            child.expect("DELETE: 3 行 / 3 rows")
        else:
            child.expect("rejected by local")
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert count(tmp_path, "status = 1") == (0 if gone else 3)


def test_chat_ctrl_c_cancels_pending(tmp_path: Path) -> None:
    child = spawn_chat(tmp_path)
    try:
        child.sendline("/sql DELETE FROM orders WHERE id = 1")
        child.expect("Confirmation required")
        child.sendintr()
        child.expect("cancelled")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert count(tmp_path, "id = 1") == 1
