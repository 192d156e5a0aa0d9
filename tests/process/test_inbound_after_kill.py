"""kill -9 between acknowledging inbound messages and the agent taking them (invariant 9).

Before the inbox, 50 of 50 such messages were lost (issue 12). Here a real ``gateway
serve`` acknowledges web chat messages (202) while its agent is busy with an earlier one
of the same person (a SQL statement that runs for minutes: the next turns of that
person wait behind it, untaken). It is killed with SIGKILL; a new ``serve`` on the same
data dir answers every acknowledged message exactly once.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import urllib.request
from pathlib import Path
from typing import Any

from tests.webchat.support import ServeProcess, wait_until

ROOM = "inbox-kill"
# Runs until the statement timeout: the turn that runs it holds this person's next ones.
ENDLESS = (
    "/sql WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
)
COMMANDS = [f"/m{i:02d}" for i in range(1, 21)]


def post(url: str, text: str) -> str:
    body = json.dumps({"user": "alice", "text": text}).encode()
    request = urllib.request.Request(
        f"{url}/api/chat/{ROOM}/messages",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 202
        return str(json.loads(resp.read())["message_id"])


def history(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/chat/{ROOM}/messages", timeout=10) as resp:
        return list(json.loads(resp.read())["messages"])


def bot_lines(url: str) -> list[str]:
    return [m["text"] for m in history(url) if m["user"] is None]


def inbox_rows(data_dir: Path) -> dict[str, float | None]:
    """message_id -> taken_at, read as another process would (WAL: no lock needed)."""
    with sqlite3.connect(data_dir / "inbox.db", timeout=5) as conn:
        rows = conn.execute("SELECT message_id, taken_at FROM inbox").fetchall()
    return {str(mid): taken for mid, taken in rows}


def test_acknowledged_messages_are_answered_once_after_kill_9(tmp_path: Path) -> None:
    env = {
        "GATEWAY_CONFIRMATION__STORE": "sqlite",
        "GATEWAY_TOOLS__SQL__STATEMENT_TIMEOUT_SECONDS": "600",
    }
    first = ServeProcess(tmp_path=tmp_path, env=env)
    first.start()
    try:
        busy = post(first.url, ENDLESS)
        wait_until(lambda: inbox_rows(first.data_dir).get(busy) is not None, timeout=20)
        acked = [post(first.url, command) for command in COMMANDS]
        rows = inbox_rows(first.data_dir)
        assert all(mid in rows and rows[mid] is None for mid in acked), rows
        assert first.proc is not None
        first.proc.send_signal(signal.SIGKILL)
        assert first.proc.wait(20) == -signal.SIGKILL
    finally:
        first.stop()

    second = ServeProcess(tmp_path=tmp_path, env={"GATEWAY_CONFIRMATION__STORE": "sqlite"})
    second.start()
    try:
        wait_until(
            lambda: all(
                any(command in line for line in bot_lines(second.url)) for command in COMMANDS
            ),
            timeout=60,
        )
        # A message after them, from the same person, is answered after all of them: once
        # its answer is there, no second answer to any of them can still be on its way.
        post(second.url, "/done")
        wait_until(lambda: any("/done" in line for line in bot_lines(second.url)), timeout=30)
        lines = bot_lines(second.url)
        assert {c: sum(c in line for line in lines) for c in COMMANDS} == dict.fromkeys(COMMANDS, 1)
        # The busy turn had started: it is not replayed (its tool may have run).
        assert not any("count(*)" in line for line in lines)
        assert all(taken is not None for taken in inbox_rows(second.data_dir).values())
        assert second.error_lines() == []
    finally:
        second.stop()
