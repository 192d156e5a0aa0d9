"""``gateway --version``, ``--config`` on either side of the subcommand, ``gateway init``,
and paths that are absolute from the start."""

from __future__ import annotations

import json
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from config.settings import load_settings
from gateway.extras import DISTRIBUTION
from tests.cli.support import gateway


def test_version_prints_the_installed_version(tmp_path: Path) -> None:
    out = gateway("--version", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"gateway {version(DISTRIBUTION)}"


@pytest.mark.parametrize("where", ["before", "after"])
def test_config_is_read_before_or_after_the_subcommand(tmp_path: Path, where: str) -> None:
    cfg = tmp_path / "elsewhere.toml"
    cfg.write_text("[server]\nport = 9123\n", encoding="utf-8")
    args = ["--config", str(cfg)]
    argv = [*args, "check-config"] if where == "before" else ["check-config", *args]
    out = gateway(*argv, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.rpartition("\n}")[0] + "\n}")["server"]["port"] == 9123


def test_config_after_a_nested_subcommand(tmp_path: Path) -> None:
    words = tmp_path / "words.toml"
    cfg = tmp_path / "g.toml"
    cfg.write_text(f"[keywords]\nfile = {json.dumps(str(words))}\n", encoding="utf-8")
    out = gateway("keywords", "add", "confirm", "搞定", "--config", str(cfg), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "搞定" in words.read_text(encoding="utf-8")


def test_init_writes_a_commented_file_for_the_chosen_channels(tmp_path: Path) -> None:
    out = gateway("init", "--channel", "feishu", "--channel", "webchat", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    path = tmp_path / "gateway.toml"
    text = path.read_text(encoding="utf-8")
    assert text.count("\n#") > 10  # commented for a reader
    assert "GATEWAY_CHANNELS__FEISHU__APP_SECRET" in text  # secrets are named, not written
    data = tomllib.loads(text)
    assert data["channels"]["feishu"]["enabled"] is True
    assert data["channels"]["webchat"]["enabled"] is True
    assert "dingtalk" not in data["channels"]
    settings = load_settings(path)  # every key it writes is a real setting
    assert settings.channels.feishu.enabled
    assert not settings.channels.dingtalk.enabled
    # its app_id is a placeholder: check-config says so (issue 26), naming the file
    secret = {"GATEWAY_CHANNELS__FEISHU__APP_SECRET": "s" * 32}
    checked = gateway("check-config", cwd=tmp_path, env=secret)
    assert checked.returncode == 2
    assert (
        f"channels.feishu.app_id is not configured: {path} has the placeholder "
        '"cli_xxxxxxxxxxxxxxxx"' in checked.stderr
    )
    assert "configuration OK" not in checked.stderr
    # with the real id and the secret from the environment, the written file passes
    real_id = {"GATEWAY_CHANNELS__FEISHU__APP_ID": "cli_a1b2c3d4e5f60708"}
    checked = gateway("check-config", cwd=tmp_path, env=secret | real_id)
    assert checked.returncode == 0, checked.stderr


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "g.toml"
    assert gateway("--config", str(path), "init", cwd=tmp_path).returncode == 0
    first = path.read_text(encoding="utf-8")
    assert tomllib.loads(first)["channels"]["webchat"]["enabled"] is True  # the default
    again = gateway("init", "--channel", "dingtalk", "--config", str(path), cwd=tmp_path)
    assert again.returncode == 1
    assert "--force" in again.stderr
    assert path.read_text(encoding="utf-8") == first
    forced = gateway("init", "--channel", "dingtalk", "--force", "-c", str(path), cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    assert data["channels"]["dingtalk"]["enabled"] is True
    assert data["channels"]["webchat"]["enabled"] is False


def test_paths_are_absolute_from_the_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GATEWAY_DATA_DIR", raising=False)
    monkeypatch.delenv("GATEWAY_KEYWORDS__FILE", raising=False)
    settings = load_settings(None, data_dir="rel/data", keywords={"file": "~/w.toml"})
    assert settings.data_dir == tmp_path / "rel" / "data"
    assert settings.keywords_file == Path.home() / "w.toml"
    default = load_settings(None, data_dir="d")
    assert default.keywords_file == tmp_path / "d" / "keywords.toml"
