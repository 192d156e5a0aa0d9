"""Fuzzing an in-process gateway from hypothesis' synchronous tests.

Hypothesis calls the test body once per case, synchronously. The gateway lives on an event
loop of the fixture's own; each case runs that loop until its requests are answered (the
gateway's background work goes on during those runs). One gateway serves every case of a
test: the property includes "and the server keeps answering".
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import aiohttp
import structlog
from hypothesis import HealthCheck, settings

from config.settings import Settings
from gateway.app import Gateway, build
from tests.fuzzing import examples

T = TypeVar("T")

FUZZ = settings(
    max_examples=examples(600),
    deadline=None,
    database=None,  # no .hypothesis/ directory in the working tree
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


class GatewayOnLoop:
    """A started gateway, an aiohttp client, and the loop they run on."""

    def __init__(self, settings: Settings) -> None:
        self.loop = asyncio.new_event_loop()
        self.gateway: Gateway = self.run(build(settings))
        self.run(self.gateway.start())
        assert self.gateway.http is not None
        self.url = self.gateway.http.url
        self.http: aiohttp.ClientSession = self.run(_session())
        self._logs = structlog.testing.LogCapture()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 30.0) -> T:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    async def post(
        self, path: str, body: bytes, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        async with self.http.post(self.url + path, data=body, headers=headers) as resp:
            return resp.status, await resp.read()

    async def get(self, path: str) -> tuple[int, bytes]:
        async with self.http.get(self.url + path) as resp:
            return resp.status, await resp.read()

    def close(self) -> None:
        try:
            self.run(self.http.close())
            self.run(self.gateway.stop())
        finally:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()


async def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession()


def problems(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Log events a fuzz run must not cause: errors, and anything with a traceback."""
    return [
        e
        for e in events
        if e.get("log_level") in ("error", "critical", "exception") or e.get("exc_info")
    ]
