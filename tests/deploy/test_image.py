"""The container image: built and run when a Docker engine answers, skipped otherwise."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from config.settings import Settings
from gateway.stop_budget import stop_budget_seconds
from tests.deploy.kit import ROOT

# Building installs every extra from PyPI: minutes, not seconds.
pytestmark = pytest.mark.timeout(1800)


def docker(
    *args: str, timeout: float = 120, check: bool = True
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and out.returncode != 0:
        pytest.fail(f"docker {' '.join(args)} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return out


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    if shutil.which("docker") is None:
        pytest.skip("no docker client: image not built")
    try:
        info = docker("info", check=False, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.skip("no Docker engine: image not built (docker info did not answer in 60 s)")
    if info.returncode != 0:
        reason = (info.stderr.strip().splitlines() or ["docker info failed"])[-1]
        pytest.skip(f"no Docker engine: image not built ({reason})")
    tag = f"chat-gateway:test-{uuid.uuid4().hex[:8]}"
    docker("build", "--tag", tag, str(ROOT), timeout=1500)
    try:
        yield tag
    finally:
        docker("image", "rm", "--force", tag, check=False)


def test_image_runs_as_non_root_with_data_volume_and_healthcheck(image: str) -> None:
    (meta,) = json.loads(docker("image", "inspect", image).stdout)
    config = meta["Config"]
    assert config["User"] not in ("", "root", "0")
    assert "/data" in config["Volumes"]
    assert "8080/tcp" in config["ExposedPorts"]
    assert "/readyz" in " ".join(config["Healthcheck"]["Test"])


def test_container_refuses_to_listen_beyond_loopback_without_a_token(image: str) -> None:
    out = docker("run", "--rm", image, check=False, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "GATEWAY_ADMIN__TOKEN" in out.stderr


def wait_ready(url: str, container: str) -> None:
    """Wait for /readyz to answer 200, failing with the container's logs if it never does."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.5)
    logs = docker("logs", container, check=False)
    pytest.fail(f"{url} never became ready:\n{logs.stdout}{logs.stderr}")


def test_container_serves_and_stops_cleanly(image: str) -> None:
    name = f"chat-gateway-test-{uuid.uuid4().hex[:8]}"
    token = "GATEWAY_ADMIN__TOKEN=" + "t" * 32
    docker("run", "--detach", "--name", name, "--env", token, "--publish", "127.0.0.1::8080", image)
    try:
        host_port = docker("port", name, "8080/tcp").stdout.split()[0]
        wait_ready(f"http://{host_port}/readyz", name)
        uid = docker("exec", name, "id", "-u").stdout.strip()
        assert uid != "0"
        files = docker("exec", name, "ls", "/data").stdout.split()
        assert "confirmations.db" in files
        budget = stop_budget_seconds(Settings())
        docker("stop", "--time", str(budget), name, timeout=budget + 30)
        state = json.loads(docker("inspect", name).stdout)[0]["State"]
        assert state["ExitCode"] == 0, docker("logs", name, check=False).stderr
    finally:
        docker("rm", "--force", "--volumes", name, check=False)
