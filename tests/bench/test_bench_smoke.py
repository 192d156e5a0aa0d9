"""The confirmation benchmark still runs: every round trip approved, memory measured.

Timing is never asserted here (DESIGN.md: speed is measured by hand under bench/).
"""

from __future__ import annotations

from bench.confirm_roundtrip import (
    pending_memory_baseline,
    pending_memory_real,
    run_baseline,
    run_real,
)

SESSIONS = 20
TRIPS = 3
PENDING = 200


async def test_real_round_trips_all_approved() -> None:
    result = await run_real(SESSIONS, TRIPS)
    assert result.trips == SESSIONS * TRIPS
    assert result.approved == result.trips
    assert len(result.latencies) == result.trips


async def test_baseline_round_trips_all_approved() -> None:
    result = await run_baseline(SESSIONS, TRIPS)
    assert result.approved == result.trips == SESSIONS * TRIPS
    assert len(result.latencies) == result.trips


async def test_pending_memory_is_measured() -> None:
    real = await pending_memory_real(PENDING)
    baseline = await pending_memory_baseline(PENDING)
    for mem in (real, baseline):
        assert mem.pending == PENDING
        assert mem.total_bytes > 0
        assert sum(mem.by_area.values()) == mem.total_bytes
    # The real path keeps a store record per pending confirmation; the baseline has no store.
    assert real.by_area.get("service: store entries", 0) > 0
    assert "service: store entries" not in baseline.by_area
    # Each design's waiting turn (the caller's Task) is told apart from what it holds.
    assert real.by_area.get("waiting turn (caller): Task", 0) > 0
    assert baseline.by_area.get("baseline: request() coroutine", 0) > 0
