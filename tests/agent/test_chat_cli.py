"""`gateway chat` with a model configured: a real process, the real CLI, the fake model."""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from config.settings import DEFAULT_KEYWORDS_FILE
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.support import ctrl_c_delivered

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def chat(tmp_path: Path, fake_llm: FakeOpenAI) -> Iterator[pexpect.spawn]:
    kw = tmp_path / "keywords.toml"
    shutil.copy(DEFAULT_KEYWORDS_FILE, kw)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(
        GATEWAY_DATA_DIR=str(tmp_path / "data"),
        GATEWAY_KEYWORDS__FILE=str(kw),
        GATEWAY_CONFIRMATION__STORE="memory",
        GATEWAY_LLM__BASE_URL=fake_llm.base_url,
        GATEWAY_LLM__MODEL="fake-model",
        GATEWAY_LLM__API_KEY=fake_llm.api_key,
        GATEWAY_LLM__TIMEOUT_SECONDS="10",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
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
    yield child
    child.close(force=True)


def test_model_chat_in_a_terminal(
    chat: pexpect.spawn, fake_llm: FakeOpenAI, tmp_path: Path
) -> None:
    fake_llm.script(
        tool_calls(("sql_modify", {"sql": "DELETE FROM orders WHERE status = 1"})),
        text("已删除 3 个已付款订单 / deleted 3 paid orders"),
    )
    chat.sendline("删除所有已付款订单")
    chat.expect(r"Confirmation required \[([0-9A-Z]{4,6})\]")
    chat.expect("Rows affected: 3")
    chat.sendline("确认")
    chat.expect("deleted 3 paid orders")
    chat.sendeof()
    chat.expect(pexpect.EOF)
    with sqlite3.connect(tmp_path / "data" / "demo.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM orders WHERE status = 1").fetchone()[0] == 0
    assert "DELETE: 3 行 / 3 rows" in next(iter(fake_llm.requests[1].tool_results().values()))
