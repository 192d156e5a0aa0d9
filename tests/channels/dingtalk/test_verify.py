"""HTTP robot callbacks: the documented signature, the window, and each pair used once."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from channels.dingtalk.verify import RobotVerifier, robot_signature

SECRET = "ding-secret"
NOW = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def _verifier(clock: Clock) -> RobotVerifier:
    return RobotVerifier(secret=SECRET, window_seconds=300, clock=clock, monotonic=clock)


def _ts(offset: float = 0.0) -> str:
    return str(int((NOW + offset) * 1000))


def test_signature_matches_the_documented_formula() -> None:
    ts = "1700000000000"
    expected = base64.b64encode(
        hmac.new(SECRET.encode(), f"{ts}\n{SECRET}".encode(), hashlib.sha256).digest()
    ).decode()
    assert robot_signature(ts, SECRET) == expected


@pytest.mark.parametrize(
    ("offset", "good_sign", "problem"),
    [
        (0, True, None),
        (0, False, "bad signature"),
        (-301, True, "timestamp outside the allowed window"),
        (301, True, "timestamp outside the allowed window"),
    ],
)
def test_window_and_signature(offset: int, good_sign: bool, problem: str | None) -> None:
    ts = _ts(offset)
    sign = robot_signature(ts, SECRET if good_sign else "other")
    assert _verifier(Clock()).problem(timestamp=ts, sign=sign) == problem


@pytest.mark.parametrize(
    ("timestamp", "sign", "problem"),
    [
        (None, "x", "missing timestamp or sign header"),
        ("1", None, "missing timestamp or sign header"),
        ("nan", "x", "timestamp is not a number"),
        ("١٧٠٠", "x", "timestamp is not a number"),  # Unicode digits int() would take
        (_ts(), "签名", "bad signature"),  # non-ASCII: 401, never a TypeError
        (_ts(), "\udcff", "bad signature"),  # an undecodable header byte
    ],
)
def test_malformed_headers(timestamp: str | None, sign: str | None, problem: str) -> None:
    assert _verifier(Clock()).problem(timestamp=timestamp, sign=sign) == problem


def test_a_pair_is_used_once_within_its_window() -> None:
    clock = Clock()
    verifier = _verifier(clock)
    ts = _ts()
    sign = robot_signature(ts, SECRET)
    assert verifier.problem(timestamp=ts, sign=sign) is None
    assert verifier.problem(timestamp=ts, sign=sign) == "timestamp and sign already used"
    clock.now += 299
    assert verifier.problem(timestamp=ts, sign=sign) == "timestamp and sign already used"
    # Once out of the window it is refused for its age, whatever the memory holds.
    clock.now += 2
    assert verifier.problem(timestamp=ts, sign=sign) == "timestamp outside the allowed window"
    # Another timestamp is another pair.
    fresh = _ts(301)
    assert verifier.problem(timestamp=fresh, sign=robot_signature(fresh, SECRET)) is None
