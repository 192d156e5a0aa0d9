"""CPU ms per Feishu reply through the real lark-oapi requests, against the loopback fake.

Both designs run in the same process, one after another, alternating per round:

- ``sdk per-call client``: ``FeishuApi(per_call_client=True)``: lark-oapi's own transport
  (``Transport.aexecute``: a new ``httpx.AsyncClient`` and SSL context per call).
- ``one client``: ``FeishuApi()``: the same SDK request objects sent through one
  long-lived ``httpx.AsyncClient`` per channel.

A reply is ``FeishuApi.reply(...)`` (build the typed request, take the tenant token from the
cache, send, unmarshal the SDK response), one after another. The fake Feishu
(tests/fakes/feishu) runs in its own thread; the CPU figure is the calling thread's
(``time.thread_time``), so the fake's own work is not counted.

Run: .venv/bin/python bench/feishu_send.py [--replies 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from channels.feishu.api import FeishuApi  # noqa: E402
from tests.fakes.feishu import FakeFeishu  # noqa: E402


async def run(fake: FakeFeishu, *, per_call_client: bool, replies: int) -> tuple[float, float]:
    api = FeishuApi(
        app_id=fake.app_id,
        app_secret=fake.app_secret,
        domain=fake.url,
        per_call_client=per_call_client,
    )
    try:
        await api.token.get()  # the token fetch is not a reply
        first = await api.reply(
            message_id="om_warm", msg_type="text", content='{"text":"hi"}', uuid="w"
        )
        assert first.ok, first
        gc.collect()
        cpu, wall = time.thread_time(), time.perf_counter()
        for i in range(replies):
            result = await api.reply(
                message_id=f"om_{i}", msg_type="text", content='{"text":"ok"}', uuid=f"u{i}"
            )
            assert result.ok, result
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    finally:
        await api.aclose()
    return cpu / replies * 1e3, replies / wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--replies", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    designs = {"sdk per-call client": True, "one client": False}
    cpu: dict[str, list[float]] = {name: [] for name in designs}
    rate: dict[str, list[float]] = {name: [] for name in designs}
    with FakeFeishu(app_id="cli_bench", bot_open_id="ou_bench") as fake:
        for r in range(args.rounds):
            order = list(designs.items())
            if r % 2:
                order.reverse()
            for name, per_call in order:
                ms, per_s = asyncio.run(run(fake, per_call_client=per_call, replies=args.replies))
                cpu[name].append(ms)
                rate[name].append(per_s)
    print(f"{args.replies} replies x {args.rounds} rounds (medians)")
    for name in designs:
        print(
            f"  {name:20} {statistics.median(cpu[name]):7.2f} CPU ms/reply"
            f"  {statistics.median(rate[name]):7.0f} replies/s"
        )
    before, after = (statistics.median(cpu[n]) for n in designs)
    print(f"  CPU per reply: {before / after:.1f}x less with one client")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
