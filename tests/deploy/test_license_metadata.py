"""The package builds without a setuptools deprecation warning: ``license`` is an SPDX
string, not the TOML table that setuptools >= 77 warns about (issue 26)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.deploy.kit import ROOT

_NOT_SOURCE = shutil.ignore_patterns(
    ".*", "*.egg-info", "build", "dist", "__pycache__", "data", "tests", "bench", "docs"
)


def test_the_wheel_builds_without_a_deprecation_warning_and_names_its_license(
    tmp_path: Path,
) -> None:
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert "DeprecationWarning" not in built.stdout + built.stderr
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        metadata = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(metadata).decode()
        assert "License-Expression: Apache-2.0" in text
        assert any(n.endswith("licenses/LICENSE") for n in zf.namelist())
