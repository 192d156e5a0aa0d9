"""Verifying DingTalk HTTP robot callbacks: a fresh timestamp, the app's signature, used once.

DingTalk signs only the timestamp (``sign = base64(HMAC-SHA256(appSecret, timestamp +
"\\n" + appSecret))``), not the body. A captured header pair would therefore carry any
body, a forged decision included, for as long as its timestamp is inside the window: so
each accepted pair is remembered and refused a second time until it has left the window.
(DingTalk redelivers a late-acknowledged message with a new timestamp, and so a new sign.)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from collections.abc import Callable

from channels.platform import UsedOnce, same_secret


def robot_signature(timestamp: str, secret: str) -> str:
    """``base64(HMAC-SHA256(appSecret, timestamp + "\\n" + appSecret))``."""
    digest = hmac.new(
        secret.encode("utf-8"), f"{timestamp}\n{secret}".encode(), hashlib.sha256
    ).digest()
    return base64.b64encode(digest).decode("ascii")


class RobotVerifier:
    """Checks the ``timestamp`` and ``sign`` headers of one HTTP robot callback."""

    def __init__(
        self,
        *,
        secret: str,
        window_seconds: float,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._secret = secret
        self._window = window_seconds
        self._clock = clock
        # A pair accepted at time t carries a timestamp no older than t - window, so it
        # leaves the window by t + 2 * window at the latest; it is forgotten after that.
        self._used = UsedOnce(seconds=max(2 * window_seconds, 1.0), clock=monotonic)

    def problem(self, *, timestamp: str | None, sign: str | None) -> str | None:
        """Why the request is refused, or None when it is good (its pair is then used up)."""
        if not timestamp or not sign:
            return "missing timestamp or sign header"
        if not (timestamp.isascii() and timestamp.isdigit()):
            return "timestamp is not a number"
        if abs(self._clock() - int(timestamp) / 1000) > self._window:
            # A captured request must not be replayable later.
            return "timestamp outside the allowed window"
        if not same_secret(sign, robot_signature(timestamp, self._secret)):
            return "bad signature"
        if not self._used.first_use(sign):
            return "timestamp and sign already used"
        return None
