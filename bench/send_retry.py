"""CPU µs per outbound send spent around the channel: retry machinery on entry vs after a failure.

Both designs drive the real ``ChannelManager._send_one`` path shape: a send that works at
once through a channel whose ``send`` does nothing (so only the wrapper is measured).

- ``tenacity first``: every send enters ``gateway.runtime.retrying`` (an ``AsyncRetrying``
  built and iterated per send), as before issue 14.
- ``after failure``: ``gateway.runtime.after_failure_retrying``: one plain await; the
  policy is built only when the first attempt failed.
- ``bare``: ``await channel.send(msg)`` alone, the floor.

Run: .venv/bin/python bench/send_retry.py [--sends 50000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway.bus import OutboundMessage  # noqa: E402
from gateway.runtime import after_failure_retrying, retrying  # noqa: E402

MSG = OutboundMessage(channel="bench", chat_id="c1", text="hello")


async def null_send(msg: OutboundMessage) -> None:
    return None


def retryable(exc: BaseException) -> bool:
    return isinstance(exc, OSError)


async def tenacity_first(msg: OutboundMessage) -> None:
    attempts = 0
    async for attempt in retrying(attempts=4, initial=0.5, maximum=30, retry_on=retryable):
        with attempt:
            attempts += 1
            await null_send(msg)


async def after_failure(msg: OutboundMessage) -> None:
    attempts = 0

    async def send() -> None:
        nonlocal attempts
        attempts += 1
        await null_send(msg)

    await after_failure_retrying(send, attempts=4, initial=0.5, maximum=30, retry_on=retryable)


async def bare(msg: OutboundMessage) -> None:
    await null_send(msg)


DESIGNS: dict[str, Callable[[OutboundMessage], Awaitable[None]]] = {
    "tenacity first": tenacity_first,
    "after failure": after_failure,
    "bare": bare,
}


async def run(design: Callable[[OutboundMessage], Awaitable[None]], sends: int) -> float:
    gc.collect()
    start = time.process_time()
    for _ in range(sends):
        await design(MSG)
    return (time.process_time() - start) / sends * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sends", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    results: dict[str, list[float]] = {name: [] for name in DESIGNS}
    for r in range(args.rounds):
        order = list(DESIGNS.items())
        if r % 2:
            order.reverse()
        for name, design in order:
            results[name].append(asyncio.run(run(design, args.sends)))
    print(f"{args.sends} sends x {args.rounds} rounds, CPU µs per send (median, min):")
    for name, values in results.items():
        print(f"  {name:15} {statistics.median(values):7.2f}  {min(values):7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
