"""`gateway chat` with a script on stdin (issue 26): a real process reading a file or a pipe.

One message a line, each sent once the one before it is answered; a line after a
confirmation prompt is the reply. The chat ends, exit 0, after the last answer.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.webchat.support import GATEWAY_BIN, copy_keywords

DELETE = "/sql DELETE FROM orders WHERE status = 1\n"
SCRIPT = DELETE + "确认\n"
# An unclear reply is answered ("reply just confirm or cancel") and decides nothing: the
# next line is read then, while the call still waits. The last line has no newline.
UNCLEAR_FIRST = DELETE + "嗯确认吗\n确认"


def paid_orders(data_dir: Path) -> int:
    with sqlite3.connect(data_dir / "demo.db") as conn:
        return int(conn.execute("SELECT COUNT(*) FROM orders WHERE status = 1").fetchone()[0])


@pytest.mark.parametrize(
    ("source", "text"),
    [("file", SCRIPT), ("pipe", SCRIPT), ("pipe", UNCLEAR_FIRST)],
    ids=["file", "pipe", "unclear-reply"],
)
def test_a_script_on_stdin_is_answered_line_by_line(tmp_path: Path, source: str, text: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(
        GATEWAY_DATA_DIR=str(tmp_path / "data"),
        GATEWAY_KEYWORDS__FILE=str(copy_keywords(tmp_path)),
        GATEWAY_CONFIRMATION__STORE="sqlite",
    )
    script = tmp_path / "script.txt"
    script.write_text(text, encoding="utf-8")
    with script.open("rb") as file:
        # `gateway chat < script.txt`, or `printf ... | gateway chat`
        done = subprocess.run(
            [str(GATEWAY_BIN), "chat"],
            stdin=file if source == "file" else None,
            input=None if source == "file" else text.encode(),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert "Traceback" not in done.stderr.decode()
    # The prompt, then the reply read from the next line, then the result: in that order.
    asked = out.index("Confirmation required")
    approved = out.index("approved by local", asked)
    out.index("DELETE: 3 行 / 3 rows", approved)
    assert paid_orders(tmp_path / "data") == 0
