"""How long a clean stop may take: the figure a supervisor must wait before it kills.

Gateway.stop() waits, one after another: running calls (``confirmation.stop_timeout_seconds``),
then the calls it cancelled to record "interrupted", running turns, the outbound queue, and
each platform channel (its ``stop_timeout_seconds``). The sum, plus a margin for closing the
stores and the HTTP server, is the stop budget: deploy/gateway.service (``TimeoutStopSec``),
compose.yaml (``stop_grace_period``) and ``docker stop -t`` use it, docs/deploy.md
("Stopping") states it. Kill earlier and running calls are cut off without being recorded.
"""

from __future__ import annotations

import math

from config.settings import Settings

# Executor.stop waits this long for the calls it cancelled to be recorded "interrupted"
# (gateway/tools/executor.py uses it).
INTERRUPT_RECORD_SECONDS = 5.0
# Running turns (the agent thinking, a reply on its way) get this long, then are cancelled.
TURN_STOP_SECONDS = 5.0
# What is queued for the chats (cancellations, "interrupted" notices) goes out within this.
OUTBOUND_DRAIN_SECONDS = 5.0
# Closing the stores, the HTTP server and the database pools.
CLOSE_MARGIN_SECONDS = 5.0
# A step of the stop still running after this long is logged with its name.
SLOW_STOP_STEP_SECONDS = 5.0


def stop_budget_seconds(settings: Settings) -> int:
    """The longest a clean stop takes with ``settings``, in whole seconds (rounded up)."""
    channels = settings.channels
    return math.ceil(
        settings.confirmation.stop_timeout_seconds
        + INTERRUPT_RECORD_SECONDS
        + TURN_STOP_SECONDS
        + OUTBOUND_DRAIN_SECONDS
        + channels.feishu.stop_timeout_seconds
        + channels.dingtalk.stop_timeout_seconds
        + CLOSE_MARGIN_SECONDS
    )
