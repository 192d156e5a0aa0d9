"""CachedToken, SdkThread and DeadLetters: the parts every platform channel shares."""

from __future__ import annotations

import asyncio
import threading

import aiohttp
import pytest
from aiohttp import web

from channels.platform import CachedToken, DeadLetters, SdkThread


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_token_is_fetched_once_and_again_before_it_expires() -> None:
    clock = Clock()
    fetched: list[str] = []

    async def fetch() -> tuple[str, float]:
        fetched.append(f"t{len(fetched) + 1}")
        return fetched[-1], 7200

    token = CachedToken(fetch=fetch, refresh_early_seconds=300, clock=clock)
    assert await asyncio.gather(token.get(), token.get(), token.get()) == ["t1", "t1", "t1"]
    clock.now += 7200 - 301
    assert await token.get() == "t1"
    clock.now += 2  # within the last 300 s of its life: refreshed early
    assert await token.get() == "t2"
    assert fetched == ["t1", "t2"]


async def test_a_short_lived_token_is_used_for_half_its_life() -> None:
    clock = Clock()
    count = 0

    async def fetch() -> tuple[str, float]:
        nonlocal count
        count += 1
        return f"t{count}", 100  # shorter than the early refresh

    token = CachedToken(fetch=fetch, refresh_early_seconds=300, clock=clock)
    await token.get()
    clock.now += 49
    assert await token.get() == "t1"
    clock.now += 2
    assert await token.get() == "t2"


async def test_a_refused_token_is_fetched_again_once() -> None:
    count = 0

    async def fetch() -> tuple[str, float]:
        nonlocal count
        count += 1
        return f"t{count}", 7200

    token = CachedToken(fetch=fetch, refresh_early_seconds=300)
    used: list[str] = []

    async def call(t: str) -> int:
        used.append(t)
        return 401 if t == "t1" else 200

    assert await token.call(call, refused=lambda status: status == 401) == 200
    assert used == ["t1", "t2"]
    # A token refused twice is not fetched a third time by one call.
    used.clear()
    token.invalidate("t2")
    assert await token.call(lambda t: _record(used, t, 401), refused=lambda s: s == 401) == 401
    assert used == ["t3", "t4"]


async def _record(used: list[str], token: str, status: int) -> int:
    used.append(token)
    return status


async def test_sdk_thread_runs_on_its_own_loop_and_stops_by_cancel() -> None:
    gateway_loop = asyncio.get_running_loop()
    seen: dict[str, object] = {}
    handed: asyncio.Queue[str] = asyncio.Queue()
    ended = threading.Event()
    sdk = SdkThread(name="test-sdk")

    async def main() -> None:
        seen["loop"] = asyncio.get_running_loop()
        seen["thread"] = threading.current_thread().name
        answer = await asyncio.wrap_future(sdk.run_on_gateway(_on_gateway()))
        seen["answer"] = answer
        try:
            sdk.hand_over(handed.put_nowait, "hello")
            await asyncio.Event().wait()  # until stop() cancels it
        finally:
            ended.set()

    await sdk.start(main)
    assert await asyncio.wait_for(handed.get(), 5) == "hello"
    assert sdk.alive
    assert await sdk.stop(5)
    assert ended.is_set()
    assert not sdk.alive
    assert seen["loop"] is not gateway_loop
    assert seen["thread"] == "test-sdk"
    assert seen["answer"] == ("on the gateway", gateway_loop)


async def _on_gateway() -> tuple[str, asyncio.AbstractEventLoop]:
    return "on the gateway", asyncio.get_running_loop()


async def test_sdk_thread_stop_is_bounded_when_the_sdk_blocks_its_loop() -> None:
    release = threading.Event()

    async def main() -> None:
        release.wait(10)  # a blocking SDK call: cancellation cannot reach it

    sdk = SdkThread(name="stuck-sdk")
    await sdk.start(main)
    try:
        assert await sdk.stop(0.1) is False
        assert sdk.alive
    finally:
        release.set()
    await asyncio.to_thread(sdk._thread.join, 5)  # type: ignore[union-attr]
    assert not sdk.alive


async def test_run_on_gateway_without_a_gateway_loop_raises() -> None:
    sdk = SdkThread(name="unused")
    coro = _on_gateway()
    with pytest.raises(RuntimeError):
        sdk.run_on_gateway(coro)  # never started: no gateway loop


async def test_dead_letters_are_bounded_and_served() -> None:
    letters = DeadLetters(channel="demo", size=2, clock=lambda: 5.0)
    for n in range(3):
        letters.add(chat_id="c", kind="text", text=f"m{n}" * 300, error="boom", attempts=3, code=n)
    assert len(letters) == 2
    app = web.Application()
    letters.register(app)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/api/channels/demo/failed") as resp,
        ):
            body = await resp.json()
    finally:
        await runner.cleanup()
    assert body["channel"] == "demo"
    assert [e["code"] for e in body["failed"]] == [1, 2]
    first = body["failed"][0]
    assert first["attempts"] == 3
    assert first["at"] == 5.0
    assert len(first["text"]) == 500
