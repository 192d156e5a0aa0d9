"""One data dir, one owner: real ``gateway serve`` processes on one SQLite data dir.

Two processes on one data dir each adopted the other's pending calls and both ran an
approved DELETE (issue 12). The second is now refused; a kill -9 of the first leaves no
stale lock behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import require_service
from tests.webchat.support import GATEWAY_BIN, ServeProcess, wait_until

EXIT_CONFIG = 2
REDIS_URL = "redis://127.0.0.1:6379/0"


def ready(url: str) -> bool:
    with urllib.request.urlopen(url + "/readyz", timeout=5) as resp:
        return bool(resp.status == 200)


def second_serve(first: ServeProcess) -> subprocess.CompletedProcess[str]:
    """Another ``gateway serve`` with the first one's environment (so: its data dir)."""
    env = {
        **os.environ,
        "GATEWAY_DATA_DIR": str(first.data_dir),
        "GATEWAY_SERVER__HOST": "127.0.0.1",
        "GATEWAY_SERVER__PORT": "0",
        "GATEWAY_KEYWORDS__FILE": str(first.tmp_path / "keywords.toml"),
        "GATEWAY_LOG__FORMAT": "json",
        "NO_PROXY": "127.0.0.1,localhost",
        **first.env,
    }
    return subprocess.run(
        [str(GATEWAY_BIN), "serve"],
        cwd=first.tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def first(tmp_path: Path) -> Iterator[ServeProcess]:
    process = ServeProcess(tmp_path=tmp_path, env={"GATEWAY_CONFIRMATION__STORE": "sqlite"})
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_a_second_serve_on_the_data_dir_is_refused_until_the_first_dies(
    first: ServeProcess, tmp_path: Path
) -> None:
    assert first.proc is not None
    assert ready(first.url)

    refused = second_serve(first)
    assert refused.returncode == EXIT_CONFIG, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert str(first.data_dir) in lines[0]
    assert f"pid {first.proc.pid}" in lines[0]
    assert "Traceback" not in refused.stderr
    assert ready(first.url), "the refused process must leave the first one serving"

    # kill -9: no clean-up runs, yet the kernel drops the lock with the process.
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(15)
    after = ServeProcess(tmp_path=tmp_path, env=first.env)
    after.start()
    try:
        assert ready(after.url)
        assert (first.data_dir / "gateway.lock").read_text().strip() == str(after.proc.pid)  # type: ignore[union-attr]
    finally:
        assert after.stop() == 0


def test_with_redis_several_processes_share_a_data_dir(tmp_path: Path) -> None:
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        require_service("Redis at 127.0.0.1:6379", exc)
    prefix = f"test-owner-{uuid.uuid4().hex}"
    env = {"GATEWAY_CONFIRMATION__STORE": "redis", "GATEWAY_CONFIRMATION__REDIS_PREFIX": prefix}
    one = ServeProcess(tmp_path=tmp_path, env=env)
    two = ServeProcess(tmp_path=tmp_path, env=env)
    try:
        one.start()
        two.start()
        wait_until(lambda: ready(one.url) and ready(two.url))
        assert not (tmp_path / "data" / "gateway.lock").exists()
    finally:
        assert two.stop() == 0
        assert one.stop() == 0
        for key in client.scan_iter(f"{prefix}*"):
            client.delete(key)
        client.close()


def test_chat_beside_a_serve_says_how_to_talk_to_it(first: ServeProcess) -> None:
    """`gateway chat` on the data dir `serve` holds: one line naming what to do instead."""
    port = first.url.rsplit(":", 1)[1]
    env = {
        **os.environ,
        "GATEWAY_DATA_DIR": str(first.data_dir),
        "GATEWAY_SERVER__HOST": "127.0.0.1",
        "GATEWAY_SERVER__PORT": port,  # the daemon's settings, as one config file gives both
        "GATEWAY_KEYWORDS__FILE": str(first.tmp_path / "keywords.toml"),
        **first.env,
    }
    refused = subprocess.run(
        [str(GATEWAY_BIN), "chat"],
        input="",
        cwd=first.tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == EXIT_CONFIG, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert str(first.data_dir) in lines[0]
    assert first.url in lines[0]  # its web chat
    assert "gateway chat --store memory" in lines[0]  # or a separate demo
    assert ready(first.url)

    demo = subprocess.run(
        [str(GATEWAY_BIN), "chat", "--store", "memory"],
        input="/pending\n",
        cwd=first.tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr
    assert "nothing is waiting for confirmation" in demo.stdout  # the advice works
