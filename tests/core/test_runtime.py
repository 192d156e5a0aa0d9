"""BackgroundTasks, KeyedSerial and the one retry policy."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from gateway.runtime import BackgroundTasks, KeyedSerial, after_failure_retrying, retrying


async def test_a_crashed_task_is_logged_with_its_name() -> None:
    tasks = BackgroundTasks("test")

    async def boom() -> None:
        raise ValueError("bad")

    with structlog.testing.capture_logs() as logs:
        task = tasks.spawn(boom(), name="boom-1")
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)
    crashed = [e for e in logs if e["event"] == "task.crashed"]
    assert crashed and crashed[0]["task"] == "boom-1"
    assert len(tasks) == 0


async def test_stop_lets_quick_tasks_finish_and_cancels_slow_ones() -> None:
    tasks = BackgroundTasks("test")
    finished = asyncio.Event()
    never = asyncio.Event()

    async def quick() -> None:
        await asyncio.sleep(0)
        finished.set()

    slow = tasks.spawn(never.wait(), name="slow")
    tasks.spawn(quick(), name="quick")
    await tasks.stop(timeout=0.05)
    assert finished.is_set()
    assert slow.cancelled()
    assert len(tasks) == 0


async def test_cancel_ends_a_task_that_went_on_after_its_first_cancel() -> None:
    # Python 3.11's asyncio.wait_for returns its inner call's result when a cancel lands as
    # that call completes: a loop of Redis commands (each sent through wait_for) goes on.
    tasks = BackgroundTasks("test")
    swallowed = asyncio.Event()

    async def goes_on_once() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            swallowed.set()
        await asyncio.sleep(3600)

    task = tasks.spawn(goes_on_once(), name="reader")
    await asyncio.sleep(0)
    async with asyncio.timeout(10):
        await tasks.cancel(again_after=0.05)
    assert swallowed.is_set() and task.cancelled()
    assert len(tasks) == 0


async def test_cancel_lets_a_task_finish_its_cleanup() -> None:
    # A second cancel would cut short what a task does on its way out (a socket's close).
    tasks = BackgroundTasks("test")
    closed = asyncio.Event()

    async def connection() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(2.0)  # closing the socket, within its own bound (Feishu's)
            closed.set()

    tasks.spawn(connection(), name="connection")
    await asyncio.sleep(0)
    await tasks.cancel()
    assert closed.is_set()


async def test_keyed_serial_runs_one_at_a_time_per_key_and_forgets_idle_keys() -> None:
    serial = KeyedSerial()
    order: list[str] = []
    a_inside = asyncio.Event()
    release_a = asyncio.Event()

    async def first() -> None:
        async with serial.hold("room"):
            order.append("a-in")
            a_inside.set()
            await release_a.wait()
            order.append("a-out")

    async def second() -> None:
        async with serial.hold("room"):
            order.append("b-in")

    async def other_key() -> None:
        async with serial.hold("elsewhere"):
            order.append("c")

    ta = asyncio.create_task(first())
    await a_inside.wait()
    tb = asyncio.create_task(second())
    await other_key()  # another key is not held up by "room"
    assert order == ["a-in", "c"]
    release_a.set()
    await asyncio.gather(ta, tb)
    assert order == ["a-in", "c", "a-out", "b-in"]
    assert len(serial) == 0


async def test_retrying_retries_what_it_is_told_and_reraises_the_last_error() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError("down")
        return "up"

    async for attempt in retrying(
        attempts=5, initial=0.001, maximum=0.002, retry_on=lambda e: isinstance(e, OSError)
    ):
        with attempt:
            result = await flaky()
    assert result == "up" and calls == 3

    tries = 0

    async def not_retried() -> None:
        nonlocal tries
        async for attempt in retrying(
            attempts=5, initial=0.001, maximum=0.002, retry_on=lambda e: isinstance(e, OSError)
        ):
            with attempt:
                tries += 1
                raise KeyError("not retried")

    with pytest.raises(KeyError):
        await not_retried()
    assert tries == 1


async def test_after_failure_retrying_counts_the_first_failure_as_attempt_one() -> None:
    calls: list[int] = []
    slept: list[int] = []

    async def flaky() -> str:
        calls.append(len(calls) + 1)
        if len(calls) < 3:
            raise OSError("down")
        return "sent"

    def before_sleep(state: object) -> None:
        slept.append(state.attempt_number)  # type: ignore[attr-defined]

    result = await after_failure_retrying(
        flaky,
        attempts=3,
        initial=0.001,
        maximum=0.001,
        retry_on=lambda e: isinstance(e, OSError),
        before_sleep=before_sleep,
    )
    assert result == "sent" and calls == [1, 2, 3] and slept == [1, 2]

    calls.clear()
    with pytest.raises(OSError, match="down"):
        await after_failure_retrying(
            flaky, attempts=2, initial=0.001, maximum=0.001, retry_on=lambda e: True
        )
    assert calls == [1, 2]  # the policy's stop counts the first try

    async def refused() -> None:
        calls.append(0)
        raise ValueError("not retryable")

    calls.clear()
    with pytest.raises(ValueError, match="not retryable"):
        await after_failure_retrying(
            refused, attempts=4, initial=0.001, maximum=0.001, retry_on=lambda e: False
        )
    assert calls == [0]
