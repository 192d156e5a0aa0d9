"""Local services (PostgreSQL, MariaDB, Redis) for tests: skip when absent, fail in CI.

A developer without the services gets a skip that says what is missing; CI sets
``GATEWAY_TEST_REQUIRE_SERVICES=1`` so a missing service fails the build instead of
quietly skipping the tests that need it.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import NoReturn

import pytest

REQUIRE_ENV = "GATEWAY_TEST_REQUIRE_SERVICES"


def services_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip() not in ("", "0", "false", "no")


def mask_url(url: str) -> str:
    """The URL with any password replaced, fit for a skip or failure message."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def require_service(name: str, exc: BaseException) -> NoReturn:
    """Skip (or, with GATEWAY_TEST_REQUIRE_SERVICES=1, fail) because ``name`` is unreachable.

    Call it from the ``except`` that caught the connection error, e.g.
    ``require_service("Redis at 127.0.0.1:6379", exc)``.
    """
    detail = f"{type(exc).__name__}: {exc}".strip()
    if services_required():
        pytest.fail(f"{name} is unreachable ({detail}) and {REQUIRE_ENV}=1", pytrace=False)
    pytest.skip(f"{name} is unreachable ({detail}); set {REQUIRE_ENV}=1 to fail instead")


REDIS_URL = os.environ.get("GATEWAY_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get(
    "GATEWAY_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
MARIADB_URL = os.environ.get(
    "GATEWAY_TEST_MARIADB_URL", "mysql+aiomysql://root@127.0.0.1:3306/test"
)


@asynccontextmanager
async def redis_prefix() -> AsyncIterator[str]:
    """A key prefix of this test's own on the shared local Redis; its keys go afterwards.

    Skips (or fails in CI) when Redis is unreachable.
    """
    from redis.asyncio import Redis  # only the Redis tests need the client

    prefix = f"gateway-test:{uuid.uuid4().hex}"
    admin = Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        await admin.ping()
    except (OSError, ConnectionError) as exc:
        await admin.aclose()
        require_service(f"Redis at {mask_url(REDIS_URL)}", exc)
    try:
        yield prefix
    finally:
        keys = [k async for k in admin.scan_iter(match=f"{prefix}:*")]
        if keys:
            await admin.delete(*keys)
        await admin.aclose()


@contextmanager
def private_redis() -> Iterator[str]:
    """A ``redis-server`` of this test's own on a free loopback port; yields its URL.

    For faults that would hit every other test on the shared Redis: ``CLIENT PAUSE`` stops
    all clients of a server, ``CLIENT KILL TYPE pubsub`` drops all subscribers. Skips (or
    fails in CI) when the ``redis-server`` binary is not installed.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        require_service("redis-server (the binary)", FileNotFoundError("not on PATH"))
    with socket.socket() as probe:  # a free port; a race with another binder is unlikely
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="redis-") as data:
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                data,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_listening(port, proc)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(10)


def _wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return
        except OSError as exc:
            if proc.poll() is not None or time.monotonic() > deadline:
                require_service(f"a private redis-server on port {port}", exc)
        if time.monotonic() > deadline:
            require_service(f"a private redis-server on port {port}", TimeoutError("no PONG"))
        time.sleep(0.02)
