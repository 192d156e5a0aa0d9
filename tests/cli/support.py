"""Run the real ``gateway`` CLI in a subprocess, optionally as if some packages were missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# sys.modules[name] = None makes `import name` raise ModuleNotFoundError: as if the package
# were not installed, without touching the environment the tests run in.
WITHOUT = """
import sys
for name in sys.argv[1].split(","):
    if name:
        sys.modules[name] = None
from gateway.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def gateway(
    *args: str, cwd: Path, env: dict[str, str] | None = None, missing: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """``gateway ARGS`` with no GATEWAY_* variables but ``env``, the data dir under ``cwd``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    clean |= {
        "PYTHONPATH": str(ROOT),
        "GATEWAY_DATA_DIR": str(cwd / "data"),
        "GATEWAY_LOG__FORMAT": "json",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, ",".join(missing), *args],
        cwd=cwd,
        env=clean | (env or {}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
