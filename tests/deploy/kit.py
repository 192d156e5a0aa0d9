"""Helpers for the deployment kit tests: a real ``gateway serve`` process, setting names."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel

from config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def clean_env(**settings: str) -> dict[str, str]:
    """This process's environment without GATEWAY_* settings, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env["PYTHONPATH"] = str(ROOT)
    return env | settings


@contextlib.contextmanager
def running_gateway(argv: list[str], *, cwd: Path, env: dict[str, str]) -> Iterator[str]:
    """Start ``argv``, yield the URL it prints once running; SIGTERM must stop it cleanly."""
    err_path = cwd / "gateway.stderr"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, text=True
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # "gateway is running: open http://..." once started
            found = re.search(r"http://\S+", line)
            if found is None:
                proc.kill()
                proc.wait(timeout=30)
                pytest.fail(f"gateway did not start: {line}{err_path.read_text()}")
            yield found.group(0)
        finally:
            proc.terminate()
            proc.communicate(timeout=60)
    assert proc.returncode == 0, err_path.read_text()


def is_setting(env_name: str) -> bool:
    """Whether ``GATEWAY_A__B`` names a field of Settings (``a.b``)."""
    if not env_name.startswith("GATEWAY_"):
        return False
    model: type[BaseModel] = Settings
    parts = env_name.removeprefix("GATEWAY_").lower().split("__")
    for i, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            return False
        annotation = field.annotation
        if i < len(parts) - 1:
            if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
                return False
            model = annotation
    return True
