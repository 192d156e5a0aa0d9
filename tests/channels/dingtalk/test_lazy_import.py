"""dingtalk_stream is loaded only when the channel runs in stream mode."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """
import sys
import channels.dingtalk
import gateway.app
assert "dingtalk_stream" not in sys.modules, "imported by the package or the app"
import channels.dingtalk.channel
assert "dingtalk_stream" not in sys.modules, "imported by HTTP-mode code"
import channels.dingtalk.stream
assert "dingtalk_stream" in sys.modules
"""


def test_sdk_is_imported_only_for_stream_mode() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
