"""deploy/gateway.service: systemd accepts it, it is hardened, and its command line runs."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from config.checks import open_file_warnings
from config.settings import Settings
from tests.deploy.kit import ROOT, clean_env, is_setting, running_gateway

UNIT_PATH = ROOT / "deploy" / "gateway.service"
UNIT_TEXT = UNIT_PATH.read_text(encoding="utf-8")
INSTALLED_GATEWAY = "/opt/chat-gateway/bin/gateway"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Sections -> key -> every value given (systemd keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {raw!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


UNIT = parse_unit(UNIT_TEXT)
SERVICE = UNIT["Service"]


def last(key: str) -> str:
    return SERVICE[key][-1]


def environment() -> dict[str, str]:
    pairs = (v.partition("=") for e in SERVICE.get("Environment", []) for v in shlex.split(e))
    return {k: v for k, _, v in pairs}


def local_unit(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this checkout's gateway, as installed it would."""
    gateway = Path(sys.executable).with_name("gateway")
    if not gateway.exists():
        pytest.skip(f"no gateway script next to {sys.executable}: install the project first")
    path = tmp_path / "chat-gateway.service"
    path.write_text(UNIT_TEXT.replace(INSTALLED_GATEWAY, str(gateway)), encoding="utf-8")
    return path


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("no systemd-analyze: the unit is checked structurally only")
    unit = local_unit(tmp_path)
    out = subprocess.run(
        [analyze, "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # verify exits 0 on an unknown key or a bad value, but says so.
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == ""
    security = subprocess.run(
        [analyze, "security", "--offline=yes", "--threshold=20", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert security.returncode == 0, security.stdout[-2000:]


def test_unit_is_hardened() -> None:
    dynamic = SERVICE.get("DynamicUser", ["no"])[-1] == "yes"
    assert dynamic or SERVICE.get("User", ["root"])[-1] not in ("", "root", "0")
    expected = {
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "NoNewPrivileges": "yes",
        "CapabilityBoundingSet": "",
        "Restart": "on-failure",
    }
    assert {key: last(key) for key in expected} == expected
    assert set(last("RestrictAddressFamilies").split()) <= {"AF_UNIX", "AF_INET", "AF_INET6"}


def test_the_data_dir_is_the_state_directory_and_writable() -> None:
    state = "/var/lib/" + last("StateDirectory")
    assert environment()["GATEWAY_DATA_DIR"] == state
    assert state in last("ReadWritePaths").split()
    assert last("WorkingDirectory") == state


def test_env_names_are_settings() -> None:
    names = [n for n in environment() if n.startswith("GATEWAY_")]
    assert names
    assert [n for n in names if not is_setting(n)] == []


def test_exec_start_runs_the_gateway(tmp_path: Path) -> None:
    """The unit's command line, with its config and data paths moved under tmp_path."""
    config = tmp_path / "gateway.toml"
    config.write_text("[server]\nport = 0\n", encoding="utf-8")
    argv = shlex.split(parse_unit(local_unit(tmp_path).read_text())["Service"]["ExecStart"][-1])
    argv = [str(config) if a == "/etc/chat-gateway/gateway.toml" else a for a in argv]
    assert str(config) in argv
    env = clean_env(**environment()) | {"GATEWAY_DATA_DIR": str(tmp_path / "data")}
    with (
        running_gateway(argv, cwd=tmp_path, env=env) as url,
        urllib.request.urlopen(url + "/readyz", timeout=10) as response,
    ):
        assert response.status == 200
    assert (tmp_path / "data" / "confirmations.db").is_file()


def test_the_open_file_limit_stays_well_above_the_default_caps() -> None:
    # Issue 22: systemd's default soft limit (1024) ran out under ~1,000 idle WebSockets.
    limit = int(last("LimitNOFILE"))
    settings = Settings()
    assert open_file_warnings(settings, soft_limit=limit // 2) == []
    (warning,) = open_file_warnings(settings, soft_limit=1024)
    assert "LimitNOFILE" in warning
