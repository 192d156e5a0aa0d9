"""compose.yaml: the services, and the settings the gateway gets from it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml
from sqlalchemy.engine import make_url

from config.checks import open_file_warnings
from config.settings import Settings, load_settings
from tests.deploy.kit import ROOT, clean_env, is_setting

TEXT = (ROOT / "compose.yaml").read_text(encoding="utf-8")
COMPOSE: dict[str, Any] = yaml.safe_load(TEXT)
SERVICES: dict[str, Any] = COMPOSE["services"]
GATEWAY = SERVICES["gateway"]
# What an operator writes into .env for the postgres profile (shown in the file's header).
POSTGRES_URL = re.search(r"GATEWAY_TOOLS__SQL__URL=(\S+)", TEXT)


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} with ``variables`` as .env."""

    def one(match: re.Match[str]) -> str:
        name, op, rest = match.group(1), match.group(2), match.group(3)
        if variables.get(name):
            return variables[name]
        if op == ":?":
            raise KeyError(f"{name}: {rest}")
        return rest or ""

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", one, value)


def gateway_settings(monkeypatch: pytest.MonkeyPatch, dotenv: dict[str, str]) -> Settings:
    """The settings the gateway container starts with, given this .env."""
    for name in list(os.environ):
        if name.startswith("GATEWAY_"):
            monkeypatch.delenv(name)
    for name, value in GATEWAY["environment"].items():
        monkeypatch.setenv(name, interpolate(str(value), dotenv))
    monkeypatch.setenv("GATEWAY_DATA_DIR", "/data")  # from the image
    return load_settings(None)


def test_services_and_profiles() -> None:
    assert set(SERVICES) == {"gateway", "redis", "postgres"}
    assert "profiles" not in GATEWAY
    assert "profiles" not in SERVICES["redis"]
    assert SERVICES["postgres"]["profiles"] == ["postgres"]
    assert GATEWAY["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "healthcheck" in SERVICES["redis"]


def test_gateway_keeps_its_data_in_the_image_volume() -> None:
    assert any(v.endswith(":/data") for v in GATEWAY["volumes"])
    assert GATEWAY["ports"] == ["127.0.0.1:8080:8080"]


def test_env_names_are_settings() -> None:
    assert [n for n in GATEWAY["environment"] if not is_setting(n)] == []


def test_the_admin_token_is_required() -> None:
    with pytest.raises(KeyError, match="GATEWAY_ADMIN__TOKEN"):
        interpolate(GATEWAY["environment"]["GATEWAY_ADMIN__TOKEN"], {})


def test_gateway_uses_the_redis_service_and_the_demo_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = gateway_settings(monkeypatch, {"GATEWAY_ADMIN__TOKEN": "t" * 32})
    assert settings.confirmation.store == "redis"
    assert make_url(settings.confirmation.redis_url).host in SERVICES
    assert settings.admin.token is not None
    assert settings.uses_demo_database


def test_postgres_profile_points_the_sql_tools_at_the_postgres_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert POSTGRES_URL is not None, "the header shows no GATEWAY_TOOLS__SQL__URL for .env"
    url_text = POSTGRES_URL.group(1).replace("<password>", "secret")
    dotenv = {"GATEWAY_ADMIN__TOKEN": "t" * 32, "GATEWAY_TOOLS__SQL__URL": url_text}
    settings = gateway_settings(monkeypatch, dotenv)
    assert not settings.uses_demo_database
    url = make_url(settings.sql_url)
    postgres = SERVICES["postgres"]["environment"]
    assert url.drivername == "postgresql+asyncpg"
    assert url.host == "postgres"
    assert url.username == postgres["POSTGRES_USER"]
    assert url.database == postgres["POSTGRES_DB"]


def compose_command() -> list[str] | None:
    """The Compose v2 plugin when there is one, else Debian's docker-compose (v1.29, which
    validates the file against the Compose schema without an engine)."""
    docker = shutil.which("docker")
    if docker:
        version = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
        if version.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_docker_compose_accepts_the_file(tmp_path: Any) -> None:
    compose = compose_command()
    if compose is None:
        # scripts/test.sh installs Debian's docker-compose; without it, YAML checks only.
        if os.environ.get("GATEWAY_TEST_REQUIRE_SERVICES") == "1":
            pytest.fail("no docker compose: install Debian's docker-compose (scripts/test.sh)")
        pytest.skip("no docker compose: compose.yaml checked only as YAML")
    out = subprocess.run(
        [*compose, "-f", str(ROOT / "compose.yaml"), "--profile", "postgres", "config"],
        env=clean_env(GATEWAY_ADMIN__TOKEN="t" * 32),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr


def test_the_open_file_limit_stays_well_above_the_default_caps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nofile = GATEWAY["ulimits"]["nofile"]
    assert nofile["soft"] == nofile["hard"]
    settings = gateway_settings(monkeypatch, {"GATEWAY_ADMIN__TOKEN": "t" * 32})
    assert open_file_warnings(settings, soft_limit=nofile["soft"] // 2) == []
