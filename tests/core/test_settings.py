"""Settings from TOML and environment; check-config names bad keys and masks secrets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from config.settings import ConfigError, load_settings

ROOT = Path(__file__).resolve().parents[2]


def run(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **(env or {})},
        timeout=60,
        check=False,
    )


def test_defaults_run_on_a_fresh_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert s.confirmation.timeout_seconds == 300
    assert s.confirmation.on_other_message == "reject_with_feedback"
    assert s.server.port == 8080
    assert s.sql_url.startswith("sqlite+aiosqlite:///")


def test_env_nesting_and_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gateway.toml").write_text(
        '[confirmation]\ntimeout_seconds = 60\napprovers = ["boss"]\n', encoding="utf-8"
    )
    monkeypatch.setenv("GATEWAY_CONFIRMATION__TIMEOUT_SECONDS", "30")
    s = load_settings()
    assert s.confirmation.timeout_seconds == 30  # env beats the file
    assert s.confirmation.approvers == ["boss"]  # ./gateway.toml is read when present


def test_bad_value_names_key_and_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GATEWAY_CONFIRMATION__TIMEOUT_SECONDS", "-5")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert "confirmation.timeout_seconds" in str(err.value)
    assert "GATEWAY_CONFIRMATION__TIMEOUT_SECONDS" in str(err.value)


def test_check_config_masks_secrets(tmp_path: Path) -> None:
    out = run("check-config", cwd=tmp_path, env={"GATEWAY_ADMIN__TOKEN": "s3cret-token-value"})
    assert out.returncode == 0, out.stderr
    assert "s3cret-token-value" not in out.stdout
    data = json.loads(out.stdout)
    assert data["admin"]["token"] == "***"


def test_check_config_missing_feishu_keys(tmp_path: Path) -> None:
    out = run("check-config", cwd=tmp_path, env={"GATEWAY_CHANNELS__FEISHU__ENABLED": "true"})
    assert out.returncode == 2
    assert "channels.feishu.app_id is missing" in out.stderr
    assert "GATEWAY_CHANNELS__FEISHU__APP_ID" in out.stderr


def test_check_config_unknown_key(tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text("[confirmation]\ntimeout_secs = 5\n", encoding="utf-8")
    out = run("--config", str(cfg), "check-config", cwd=tmp_path)
    assert out.returncode == 2
    assert "confirmation.timeout_secs: unknown setting" in out.stderr


def test_missing_config_file(tmp_path: Path) -> None:
    out = run("--config", "nope.toml", "check-config", cwd=tmp_path)
    assert out.returncode == 2
    assert "does not exist" in out.stderr


def test_serve_refuses_public_bind_without_token(tmp_path: Path) -> None:
    out = run("serve", "--host", "0.0.0.0", "--port", "0", cwd=tmp_path)
    assert out.returncode == 2
    assert "admin.token is not set" in out.stderr


def _field_paths(model: type, prefix: str = "") -> list[str]:
    from pydantic import BaseModel

    paths = []
    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            paths += _field_paths(ann, f"{prefix}{name}.")
        else:
            paths.append(f"{prefix}{name}")
    return paths


def test_example_config_documents_every_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from config.settings import Settings

    example = ROOT / "config" / "gateway.example.toml"
    monkeypatch.chdir(tmp_path)
    load_settings(example)  # it loads as it is
    text = example.read_text(encoding="utf-8")
    missing = [p for p in _field_paths(Settings) if p.split(".")[-1] not in text]
    assert missing == []


def test_check_config_warns_when_a_channel_answers_nobody(tmp_path: Path) -> None:
    env = {
        "GATEWAY_CHANNELS__DINGTALK__ENABLED": "true",
        "GATEWAY_CHANNELS__DINGTALK__CLIENT_ID": "ding1",
        "GATEWAY_CHANNELS__DINGTALK__CLIENT_SECRET": "s",
    }
    out = run("check-config", cwd=tmp_path, env=env)
    assert out.returncode == 0
    assert "channels.dingtalk.allow_from is empty" in out.stderr
