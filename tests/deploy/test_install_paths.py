"""Install paths that work as written: every documented pip command installs the project
from the checkout or from a wheel built from it, never by name from a package index.

The project is on no index; a doc line installing ``held-call-gateway`` by name would install
whatever someone registered under it. The install runs need PyPI for the dependencies
(about 30 s each): they skip unless GATEWAY_TEST_REQUIRE_SERVICES=1 (CI).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from tests.deploy.kit import ROOT, clean_env

NAME = canonicalize_name(
    tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
)
# Where an operator or a hint finds a pip command.
SOURCES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
    ROOT / "Dockerfile",
    *sorted((ROOT / "deploy").iterdir()),
    *sorted((ROOT / "config").glob("*.toml")),
    *sorted((ROOT / "scripts").glob("*.sh")),
    *sorted((ROOT / "gateway").rglob("*.py")),
]
PIP_INSTALL = re.compile(r"\bpip3?\s+install\b([^`\n]*)")
# What the wheel/venv runs substitute: the install dir and the extras (the defaults only,
# to bound the time; the extras' resolution is pip's, checked by test_extras).
VENV = "/opt/chat-gateway"
EXTRAS = "[feishu,llm]"


def by_name(args: str) -> list[str]:
    """The arguments of one ``pip install`` that name this project as an index requirement."""
    try:
        words = shlex.split(args, comments=True)
    except ValueError:  # prose around an inline command
        words = args.split()
    found = []
    for word in words:
        if word.startswith(("-", ".", "/", "$", "{")) or "/" in word or "://" in word:
            continue  # an option, a path, a URL or a shell expansion
        try:
            requirement = Requirement(word)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) == NAME:
            found.append(word)
    return found


def test_by_name_tells_an_index_install_from_a_path() -> None:
    assert by_name(" 'held-call-gateway[feishu,llm]'") == ["held-call-gateway[feishu,llm]"]
    assert by_name(" --upgrade held_call_gateway==0.2") == ["held_call_gateway==0.2"]
    assert by_name(" -e '.[feishu]' && gateway serve") == []
    assert by_name(' "$(ls dist/held_call_gateway-*.whl)[feishu,llm]"') == []
    assert by_name(" '/srv/chat-gateway[llm]'") == []
    assert by_name(" nanobot-ai==0.3.5 lark-oapi==1.7.5") == []


def test_no_doc_or_hint_installs_the_project_by_name() -> None:
    found = {
        f"{path.relative_to(ROOT)}:{n}": line.strip()
        for path in SOURCES
        if path.is_file()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for match in PIP_INSTALL.finditer(line)
        if by_name(match.group(1))
    }
    assert found == {}


def deploy_block(marker: str) -> list[str]:
    """The commands of the fenced sh block in docs/deploy.md that contains ``marker``."""
    text = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```sh\n(.*?)```", text, re.DOTALL) if marker in b]
    assert len(blocks) == 1, marker
    return [line for line in blocks[0].splitlines() if line.strip()]


def checkout_copy(tmp_path: Path) -> Path:
    """The checkout's tracked files as they are now (a build writes into its source)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    src = tmp_path / "checkout"
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    return src


def run_documented(commands: list[str], *, cwd: Path, venv: Path) -> None:
    """``commands`` as the docs give them: the venv under tmp_path, the default extras."""
    env = clean_env()
    env.pop("PYTHONPATH")
    env.pop("VIRTUAL_ENV", None)
    for command in commands:
        if command.rstrip().endswith(" serve"):
            continue  # a daemon: `gateway --version` below proves the install
        line = command.replace(VENV, str(venv)).replace(EXTRAS, "")
        line = line.replace("python3 -m", f"{shlex.quote(sys.executable)} -m")
        done = subprocess.run(
            line, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"


def installed_version(venv: Path) -> str:
    out = subprocess.run(
        [str(venv / "bin" / "gateway"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env() | {"PYTHONPATH": ""},
        cwd=venv,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


needs_pypi = pytest.mark.skipif(
    os.environ.get("GATEWAY_TEST_REQUIRE_SERVICES") != "1",
    reason="installs the dependencies from PyPI (about 30 s): GATEWAY_TEST_REQUIRE_SERVICES=1",
)


@needs_pypi
def test_the_documented_checkout_install_works(tmp_path: Path) -> None:
    src = checkout_copy(tmp_path)
    venv = tmp_path / "venv"
    commands = deploy_block(
        "python3 -m venv /opt/chat-gateway\n/opt/chat-gateway/bin/pip install '.["
    )
    run_documented(commands, cwd=src, venv=venv)
    assert installed_version(venv).startswith("gateway ")


@needs_pypi
def test_the_documented_wheel_install_works_and_its_hint_names_the_wheel(
    tmp_path: Path,
) -> None:
    src = checkout_copy(tmp_path)
    venv = tmp_path / "venv"
    commands = deploy_block("pip wheel --no-deps -w dist .")
    run_documented(commands, cwd=src, venv=venv)
    assert installed_version(venv).startswith("gateway ")
    (wheel,) = (src / "dist").glob("held_call_gateway-*.whl")
    # A missing extra is told as the command that adds it from the same wheel.
    env = clean_env(
        GATEWAY_DATA_DIR=str(tmp_path / "data"),
        GATEWAY_CHANNELS__DINGTALK__ENABLED="true",
        GATEWAY_CHANNELS__DINGTALK__CLIENT_ID="ding_id",
        GATEWAY_CHANNELS__DINGTALK__CLIENT_SECRET="s" * 32,
    )
    env.pop("PYTHONPATH")

    def check_config() -> str:
        argv = [str(venv / "bin" / "gateway"), "check-config"]
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
        )
        return out.stderr

    (hint,) = re.findall(r"needs the \[dingtalk\] extra: (.*)", check_config())
    assert f"-m pip install '{wheel}[dingtalk]'" in hint
    assert hint.startswith(str(venv / "bin" / "python"))
    done = subprocess.run(hint, shell=True, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "[dingtalk] extra" not in check_config()
