"""Shared fixtures: settings on a temp data dir with a private copy of the keywords file."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import hypothesis
import pytest
import structlog
from redis.asyncio import Redis

from config.settings import DEFAULT_KEYWORDS_FILE, Settings, load_settings
from tests import fuzzing
from tests.fakes.tcp_proxy import TcpProxy
from tests.services import REDIS_URL, private_redis, redis_prefix

# A fixed seed in the suite, GATEWAY_FUZZ=long for a longer random run (tests/fuzzing.py).
fuzzing.load_profile()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every property test is marked ``fuzz`` (``-m fuzz`` selects them for the long run);
    tests that run hypothesis inside their body carry the mark themselves. In the long run
    each may take LONG_FACTOR times the suite's per-test timeout."""
    for item in items:
        if isinstance(item, pytest.Function) and hypothesis.is_hypothesis_test(item.obj):
            item.add_marker(pytest.mark.fuzz)
        if fuzzing.long_run() and item.get_closest_marker("fuzz") is not None:
            timeout = float(item.config.getini("timeout") or 0)
            item.add_marker(pytest.mark.timeout(timeout * fuzzing.LONG_FACTOR))


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    """Each test starts from structlog's defaults: a CLI run that configured logging at
    "error" must not silence the log lines a later test captures."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture
def keywords_file(tmp_path: Path) -> Path:
    """A private copy of the shipped keywords file (tests may rewrite it)."""
    path = tmp_path / "keywords" / "keywords.toml"
    path.parent.mkdir()
    shutil.copy(DEFAULT_KEYWORDS_FILE, path)
    return path


@pytest.fixture
def make_settings(
    tmp_path: Path, keywords_file: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Settings]:
    """Settings for an in-process gateway: temp data dir, memory store, no web chat."""
    for name in list(__import__("os").environ):
        if name.startswith("GATEWAY_") and name != "GATEWAY_TEST_REQUIRE_SERVICES":
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)

    def make(**overrides: Any) -> Settings:
        base: dict[str, Any] = {
            "data_dir": tmp_path / "data",
            "keywords": {"file": keywords_file, "watch": False},
            "confirmation": {"store": "memory"},
            "server": {"host": "127.0.0.1", "port": 0},
            "channels": {"webchat": {"enabled": False}},
        }
        for key, value in overrides.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                base[key] = {**base[key], **value}
            else:
                base[key] = value
        return load_settings(None, **base)

    return make


@pytest.fixture
def private_redis_url() -> Iterator[str]:
    """A redis-server of the test's own: CLIENT PAUSE or a busy script holds up only it."""
    with private_redis() as url:
        yield url


@pytest.fixture
async def private_redis_admin(private_redis_url: str) -> AsyncIterator[Redis]:
    """A client of that server, to stall it or look inside."""
    client = Redis.from_url(private_redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A Redis key prefix of the test's own on the shared server, its keys deleted after."""
    async with redis_prefix() as prefix:
        yield prefix


@pytest.fixture
async def proxy() -> AsyncIterator[TcpProxy]:
    """A TCP proxy in front of the shared Redis: closing it cuts the gateway off."""
    parts = urlsplit(REDIS_URL)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    await proxy.start()
    yield proxy
    await proxy.stop()
