"""`gateway chat` on a terminal (issue 16): line editing and history through prompt_toolkit
in a real pseudo-terminal, and "thinking…" in the prompt while a turn runs."""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pexpect
import pytest

from channels.console import ConsoleChannel
from gateway import texts
from gateway.bus import InboundMessage, MessageBus, OutboundKind, OutboundMessage
from gateway.confirm.model import Status
from tests.core.test_texts import NOW, confirmation
from tests.fakes.openai_server import FakeOpenAI, hold, text
from tests.support import ctrl_c_delivered

ROOT = Path(__file__).resolve().parents[2]
UP = "\x1b[A"
CTRL_A = "\x01"
BACKSPACE = "\x7f"
HELP_LINE = "No model is configured"


def spawn_chat(tmp_path: Path, **env: str) -> pexpect.spawn:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    clean.update(
        GATEWAY_DATA_DIR=str(tmp_path / "data"),
        GATEWAY_CONFIRMATION__STORE="sqlite",
        PYTHONPATH=str(ROOT),
        NO_PROXY="127.0.0.1,localhost",
        TERM="xterm",
        **env,
    )
    child = pexpect.spawn(
        sys.executable,
        ["-m", "gateway", "chat"],
        cwd=str(tmp_path),
        env=clean,
        encoding="utf-8",
        preexec_fn=ctrl_c_delivered,
        timeout=30,
        dimensions=(40, 160),
    )
    child.expect("Ctrl-D")
    # The prompt is drawn once prompt_toolkit runs, with its history loaded: keys typed
    # before that would race the history load.
    child.expect("›")
    return child


def finish(child: pexpect.spawn) -> None:
    # The prompt drawn after the last answer: it reads in raw mode again. A Ctrl-D sent
    # before that (while the terminal was still cooked) would go unread.
    child.expect("›")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_line_editing_and_history_across_runs(tmp_path: Path) -> None:
    child = spawn_chat(tmp_path)
    try:
        child.send("help" + CTRL_A + "/\r")  # typed without the slash, then fixed at the start
        child.expect(HELP_LINE)
        child.send("/pending\r")
        child.expect("nothing is waiting")
        child.send(UP + UP + "\r")  # two lines back: /help again
        child.expect(HELP_LINE)
        finish(child)
    finally:
        child.close(force=True)
    history = (tmp_path / "data" / "chat_history").read_text(encoding="utf-8")
    assert "+/help" in history and "+/pending" in history

    again = spawn_chat(tmp_path)  # a new run recalls the last line of the previous one
    try:
        # The history file loads in a task the first drawing starts: a key echoed back
        # shows the loop went round after it.
        again.send("zq")
        again.expect("zq")
        again.send(BACKSPACE * 2 + UP + "\r")  # /help, the last line of the first run
        again.expect(HELP_LINE)
        finish(again)
    finally:
        again.close(force=True)


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def test_thinking_shows_while_a_turn_runs(tmp_path: Path, fake_llm: FakeOpenAI) -> None:
    fake_llm.script(hold(), text("第二个回答 / second answer"))
    child = spawn_chat(
        tmp_path,
        GATEWAY_LLM__MODEL="fake-model",
        GATEWAY_LLM__BASE_URL=fake_llm.base_url,
        GATEWAY_LLM__API_KEY="sk-test",
    )
    try:
        child.send("你好\r")
        child.expect("thinking…")  # the model holds its answer: the prompt says so
        fake_llm.release()
        child.expect("released")
        child.send("再问一次\r")
        child.expect("second answer")
        finish(child)
    finally:
        child.close(force=True)


async def test_activity_follows_the_turn_and_the_decision() -> None:
    """thinking while the turn runs, nothing while the person decides, running once
    approved, nothing when the turn ends; other chats' turns do not count."""
    console = ConsoleChannel(
        bus=MessageBus(), user="local", interactive=False, stdout=io.StringIO()
    )
    mine = InboundMessage(
        channel="console", chat_id="local", sender_id="local", text="x", message_id="1"
    )
    other = replace(mine, chat_id="someone-else")
    console.on_turn(other, True)
    assert console.activity is None
    console.on_turn(mine, True)
    assert console.activity == texts.CONSOLE_THINKING
    prompt = OutboundMessage(
        channel="console",
        chat_id="local",
        session_key="console:local",
        text="?",
        kind=OutboundKind.CONFIRMATION,
    )
    await console.send(prompt)
    assert console.activity is None  # waiting for the person, not the gateway
    approved = replace(
        prompt,
        kind=OutboundKind.CONFIRMATION_UPDATE,
        confirmation=confirmation().finished(
            Status.APPROVED, by="local", at=NOW, via="text", reason=None
        ),
    )
    await console.send(approved)
    assert console.activity == texts.CONSOLE_RUNNING
    console.on_turn(mine, False)
    assert console.activity is None
