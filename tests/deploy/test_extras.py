"""Packaging: a missing extra is one line that says what to install; the defaults need none."""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
import urllib.request
from pathlib import Path

import pytest

from config.settings import ConfigError
from gateway.extras import require
from tests.deploy.kit import ROOT, clean_env, running_gateway

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# What each extra brings that the code imports, by top-level module name.
EXTRA_MODULES = {
    "feishu": ("lark_oapi", "websockets"),
    "dingtalk": ("dingtalk_stream",),
    "postgres": ("asyncpg",),
    "mysql": ("aiomysql", "pymysql"),
    "redis": ("redis",),
    "llm": ("openai",),
}


def test_require_passes_when_the_module_imports() -> None:
    require("sqlite3", "never", "the demo database")


def test_missing_module_names_the_extra_in_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        require("lark_oapi_not_installed", "feishu", "channels.feishu")
    # This environment is an editable install of the checkout: the hint installs from it.
    pip = f"{shlex.quote(sys.executable)} -m pip install -e '{ROOT}[feishu]'"
    assert str(info.value) == f"channels.feishu needs the [feishu] extra: {pip}"


def test_missing_dependency_of_an_installed_module_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A partial install: the SDK is there, a package it imports is not.
    (tmp_path / "half_installed_sdk.py").write_text("import dependency_that_is_gone\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"^redis store needs the \[redis\] extra: "):
        require("half_installed_sdk", "redis", "redis store")


def test_a_module_that_fails_for_another_reason_keeps_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_sdk.py").write_text("raise RuntimeError('bad build')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match="bad build"):
        require("broken_sdk", "feishu", "channels.feishu")


def test_extras_are_declared_and_all_and_dev_pull_them_in() -> None:
    extras = PYPROJECT["optional-dependencies"]
    assert set(EXTRA_MODULES) <= set(extras)
    assert extras["all"] == [f"held-call-gateway[{','.join(EXTRA_MODULES)}]"]
    assert "held-call-gateway[all]" in extras["dev"]
    defaults = " ".join(PYPROJECT["dependencies"])
    for sdk in ("lark-oapi", "dingtalk-stream", "asyncpg", "aiomysql", "redis", "openai"):
        assert not re.search(rf"(^|\s|\"){sdk}\b", defaults), f"{sdk} is a default dependency"


# Runs `gateway serve` as the default install would: every module an extra brings is made
# unimportable, exactly as if it were not installed.
SERVE_WITHOUT_EXTRAS = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))
class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NotInstalled())
from gateway.cli.main import main
sys.exit(main(["serve", "--host", "127.0.0.1", "--port", "0"]))
"""


def test_default_serve_runs_without_any_extra(tmp_path: Path) -> None:
    blocked = sorted({m for modules in EXTRA_MODULES.values() for m in modules})
    argv = [sys.executable, "-c", SERVE_WITHOUT_EXTRAS, ",".join(blocked)]
    env = clean_env(GATEWAY_DATA_DIR=str(tmp_path / "data"))
    with running_gateway(argv, cwd=tmp_path, env=env) as url:
        for path in ("/healthz", "/readyz", "/"):  # "/" is the web chat page
            with urllib.request.urlopen(url + path, timeout=10) as response:
                assert response.status == 200, path
    assert (tmp_path / "data" / "confirmations.db").is_file()
    assert (tmp_path / "data" / "demo.db").is_file()
