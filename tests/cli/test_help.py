"""``gateway --help`` loads no settings, SQL or web code (it took 0.66 s through sqlalchemy)."""

from __future__ import annotations

import subprocess
import sys

from tests.cli.support import ROOT

HEAVY = (
    "pydantic",
    "pydantic_settings",
    "sqlalchemy",
    "sqlglot",
    "aiohttp",
    "structlog",
    "asyncio",
)
PROBE = """
import sys
from gateway.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
heavy = set(sys.argv[1].split(","))
print("LOADED:" + ",".join(sorted({m.split(".")[0] for m in sys.modules} & heavy)))
"""


def loaded_by(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.replace("sys.argv[1:]", repr(list(args))), ",".join(HEAVY)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = out.stdout.rpartition("LOADED:")[2].strip()
    return [name for name in loaded.split(",") if name]


def test_help_imports_nothing_heavy() -> None:
    assert loaded_by("--help") == []
    assert loaded_by("serve", "--help") == []
    assert loaded_by("policy", "test", "--help") == []
