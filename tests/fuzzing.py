"""Hypothesis settings for the suite: a fixed seed, and a longer random run by hand.

In the suite every property test runs on a fixed seed (``derandomize``): the same examples
on every run and every machine, so its verdict cannot flicker. Issue 27: the Feishu
``mentions`` 500 showed up once in about 20 runs, as a "flaky" test whose example nobody
saw. New examples come from the long run, by hand (README, Development):

    GATEWAY_FUZZ=long .venv/bin/python -m pytest -m fuzz -p no:randomly

which runs every property test on fresh random examples, ``LONG_FACTOR`` times as many
(with as many times the per-test timeout), and prints each failure's example with a
``@reproduce_failure`` line that replays it.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# How many times more examples the long run tries than the suite.
LONG_FACTOR = 20
_MODES = {"": "gateway", "long": "fuzz-long"}

# The machine is shared and noisy: a property test's verdict must not depend on how long one
# example took (a deadline hit under load reads as a flaky failure), and nothing is written
# into the working tree (no .hypothesis/ example database).
settings.register_profile(
    "gateway",
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "fuzz-long",
    settings.get_profile("gateway"),
    derandomize=False,
    max_examples=settings.default.max_examples * LONG_FACTOR,
    print_blob=True,
)


def load_profile() -> None:
    """The profile GATEWAY_FUZZ names (unset: the suite's fixed seed)."""
    mode = os.environ.get("GATEWAY_FUZZ", "")
    if mode not in _MODES:
        raise ValueError(f"GATEWAY_FUZZ={mode!r}: set it to 'long', or leave it unset")
    settings.load_profile(_MODES[mode])


def long_run() -> bool:
    return os.environ.get("GATEWAY_FUZZ") == "long"


def examples(suite: int) -> int:
    """A test's own example count: ``suite`` in the suite, LONG_FACTOR times that in the
    long run (an explicit ``max_examples`` would otherwise override the profile's)."""
    return suite * LONG_FACTOR if long_run() else suite
