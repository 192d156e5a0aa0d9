"""The web chat backlog benchmark still runs end to end (tiny sizes; no timing asserted)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench.webchat_backlog import run


async def test_the_bench_runs_round_trips_on_both_gateways(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(pending=50, chats=10, trips=2, rounds=2, scrapes=1)
    await run(args, tmp_path)
    out = capsys.readouterr().out
    assert "backlog gateway: 50 pending" in out
    assert out.count("per round trip") == 4
    assert "/metrics scrape" in out
