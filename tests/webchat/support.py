"""Shared by the web chat, admin and browser tests: a real gateway, in process or as
``gateway serve`` in a subprocess, and small waiting helpers (no fixed sleeps)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

from config.settings import DEFAULT_KEYWORDS_FILE, Settings
from gateway.app import Gateway, build

REPO = Path(__file__).resolve().parents[2]
GATEWAY_BIN = Path(sys.executable).parent / "gateway"
T = TypeVar("T")


def copy_keywords(tmp_path: Path) -> Path:
    target = tmp_path / "keywords.toml"
    shutil.copyfile(DEFAULT_KEYWORDS_FILE, target)
    return target


def make_settings(tmp_path: Path, **overrides: Any) -> Settings:
    """A gateway on a free loopback port with its own data dir and keywords file."""
    options: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "server": {"host": "127.0.0.1", "port": 0},
        "confirmation": {"store": "memory"},
        "keywords": {"file": copy_keywords(tmp_path), "watch": False},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(options.get(key), dict):
            options[key] = {**options[key], **value}
        else:
            options[key] = value
    return Settings(**options)


@asynccontextmanager
async def running_gateway(
    settings: Settings, *, clock: Callable[[], float] = time.time
) -> AsyncIterator[Gateway]:
    gateway = await build(settings, clock=clock)
    async with gateway:
        yield gateway


def base_url(gateway: Gateway) -> str:
    assert gateway.http is not None
    return gateway.http.url


async def eventually(
    probe: Callable[[], Awaitable[T | None]], *, timeout: float = 10.0, every: float = 0.02
) -> T:
    """Poll ``probe`` until it returns something truthy; fail after ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(every)


async def next_frame(
    ws: aiohttp.ClientWebSocketResponse,
    match: Callable[[dict[str, Any]], bool],
    *,
    timeout: float = 10.0,
) -> dict[str, Any]:
    """Read frames until one matches; skips the others."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        left = deadline - loop.time()
        if left <= 0:
            raise AssertionError("no matching frame in time")
        msg = await ws.receive(timeout=left)
        if msg.type is not aiohttp.WSMsgType.TEXT:
            raise AssertionError(f"socket ended: {msg.type} {msg.data!r} {msg.extra!r}")
        frame: dict[str, Any] = msg.json()
        if match(frame):
            return frame


def is_kind(kind: str, status: str | None = None) -> Callable[[dict[str, Any]], bool]:
    def match(frame: dict[str, Any]) -> bool:
        if frame.get("type") != "message" or frame.get("kind") != kind:
            return False
        return status is None or frame["confirmation"]["status"] == status

    return match


def order_exists(data_dir: Path, order_id: int) -> bool:
    with sqlite3.connect(data_dir / "demo.db") as db:
        row = db.execute("SELECT 1 FROM orders WHERE id = ?", (order_id,)).fetchone()
    return row is not None


# ---------------------------------------------------------------------- subprocess


@dataclass
class ServeProcess:
    """``gateway serve`` in a subprocess on a free port (port 0; the URL is read from stdout)."""

    tmp_path: Path
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""
    lines: list[str] = field(default_factory=list)
    proc: subprocess.Popen[str] | None = None
    _ready: threading.Event = field(default_factory=threading.Event)
    _reader: threading.Thread | None = None

    @property
    def data_dir(self) -> Path:
        return self.tmp_path / "data"

    def start(self, timeout: float = 30.0) -> None:
        env = {
            **os.environ,
            "GATEWAY_DATA_DIR": str(self.data_dir),
            "GATEWAY_SERVER__HOST": "127.0.0.1",
            "GATEWAY_SERVER__PORT": "0",
            "GATEWAY_KEYWORDS__FILE": str(copy_keywords(self.tmp_path)),
            "GATEWAY_CONFIRMATION__STORE": store_for_subprocess(),
            "GATEWAY_LOG__FORMAT": "json",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            **self.env,
        }
        self.proc = subprocess.Popen(
            [str(GATEWAY_BIN), "serve"],
            cwd=self.tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._ready.wait(timeout):
            self.stop()
            raise AssertionError("gateway serve did not start:\n" + "".join(self.lines))
        if not self.url:
            raise AssertionError("gateway serve exited:\n" + "".join(self.lines))

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("gateway is running: open "):
                self.url = line.split("open ", 1)[1].split()[0]
                self._ready.set()
        self._ready.set()

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        how = f"exited {self.proc.poll()} before the stop"
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            how = "stopped on SIGTERM"
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
                how = f"did not stop within {timeout} s of SIGTERM: killed"
        if self._reader is not None:
            self._reader.join(timeout)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if self.proc.returncode != 0:
            # Shown with a failing test's output: where the process stood when it ended.
            print(f"gateway serve {how}, exit {self.proc.returncode}; its last lines:")
            print("".join(self.lines[-60:]))
        return self.proc.returncode

    def error_lines(self) -> list[str]:
        """Log lines at error level or above (the JSON log: one object a line)."""
        found = []
        for line in self.lines:
            try:
                level = json.loads(line).get("level")
            except (ValueError, AttributeError):
                continue
            if level in ("error", "critical"):
                found.append(line)
        return found


def store_for_subprocess() -> str:
    return "sqlite"


@contextmanager
def serve(tmp_path: Path, **env: str) -> Iterator[ServeProcess]:
    process = ServeProcess(tmp_path=tmp_path, env=env)
    process.start()
    try:
        yield process
    finally:
        process.stop()


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.02)
