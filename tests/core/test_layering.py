"""Invariant 7: the core imports no platform SDK; channels neither parse replies nor know policy."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SDKS = ("lark_oapi", "dingtalk_stream")


def test_core_and_default_serve_import_no_platform_sdk() -> None:
    code = (
        "import sys, pkgutil, importlib, gateway, config\n"
        "import gateway.app, gateway.cli.main, gateway.http.admin, gateway.bus\n"
        "for m in pkgutil.walk_packages(gateway.__path__, 'gateway.'):\n"
        "    if m.name != 'gateway.__main__': importlib.import_module(m.name)\n"
        "import channels.webchat, channels.console, channels.manager\n"
        f"bad = [n for n in sys.modules if n.split('.')[0] in {SDKS!r}]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_sdks_only_inside_their_channel() -> None:
    for path in ROOT.glob("**/*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] not in ("gateway", "config", "channels"):
            continue
        for name in _imports(path):
            top = name.split(".")[0]
            if top == "lark_oapi":
                assert rel.parts[:2] == ("channels", "feishu"), rel
            if top == "dingtalk_stream":
                assert rel.parts[:2] == ("channels", "dingtalk"), rel


def test_channels_do_not_parse_replies_or_know_policy() -> None:
    forbidden = ("gateway.confirm.replies", "gateway.tools.policy", "gateway.tools.runner")
    for path in (ROOT / "channels").glob("**/*.py"):
        for name in _imports(path):
            assert not name.startswith(forbidden), f"{path.relative_to(ROOT)} imports {name}"


def test_http_and_confirm_import_nothing_from_channels() -> None:
    """The dependency direction (DESIGN.md): config <- core <- channels <- app/cli."""
    for package in ("gateway/http", "gateway/confirm"):
        for path in (ROOT / package).glob("**/*.py"):
            for name in _imports(path):
                assert not name.startswith("channels"), f"{path.relative_to(ROOT)} imports {name}"


def test_the_core_imports_no_channel_and_no_composition_root() -> None:
    """Only the composition root (gateway.app) and the CLI put channels and core together."""
    roots = ("gateway/app.py", "gateway/cli/")
    for path in (ROOT / "gateway").glob("**/*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(roots):
            continue
        for name in _imports(path):
            assert not name.startswith("channels"), f"{rel} imports {name}"
            assert name != "gateway.app", f"{rel} imports the composition root"
    for path in (ROOT / "config").glob("**/*.py"):
        for name in _imports(path):
            assert not name.startswith(("gateway", "channels")), f"{path} imports {name}"
