"""The SDK is imported only when the Feishu channel is built (``import lark_oapi`` is slow)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_importing_the_package_does_not_import_lark_oapi() -> None:
    code = (
        "import sys, channels.feishu, gateway.app\n"
        "assert 'lark_oapi' not in sys.modules, 'lark_oapi imported eagerly'\n"
        "assert callable(channels.feishu.create_channel)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
