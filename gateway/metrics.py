"""Prometheus metrics, on a registry owned by the gateway (not the global default).

What is exported, with example queries, is in docs/metrics.md.
"""

from __future__ import annotations

import platform
import time
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.gc_collector import GCCollector

from gateway.bus import InboundMessage, OutboundMessage, PublishResult
from gateway.confirm.service import ConfirmationEvent
from gateway.extras import DISTRIBUTION

# Seconds: a SQL statement or a plugin call; a platform send (with retries); a model step.
TOOL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SEND_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
MODEL_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)


def _version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


class Metrics:
    """What /metrics exposes: the process, the build, and the gateway's own counters."""

    def __init__(self) -> None:
        # A `_created` gauge beside every counter and histogram doubles the series and no
        # dashboard reads it. The switch is the library's, process-wide.
        disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in the library
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)  # CPU, memory, open fds, start time
        PlatformCollector(registry=self.registry)  # python_info
        GCCollector(registry=self.registry)
        Info("gateway_build", "Version of the running gateway", registry=self.registry).info(
            {"version": _version(), "python": platform.python_version()}
        )
        self.inbound = Counter(
            "gateway_inbound_messages_total",
            "Inbound messages by channel and what became of them",
            ["channel", "result"],
            registry=self.registry,
        )
        self.pending = Gauge(
            "gateway_pending_confirmations",
            "Confirmations waiting for a decision",
            registry=self.registry,
        )
        self.requested = Counter(
            "gateway_confirmations_requested_total",
            "Confirmations requested, by tool",
            ["tool"],
            registry=self.registry,
        )
        self.resolved = Counter(
            "gateway_confirmations_resolved_total",
            "Confirmations resolved, by outcome and how",
            ["outcome", "via"],
            registry=self.registry,
        )
        self.time_to_decision = Histogram(
            "gateway_confirmation_decision_seconds",
            "Seconds from prompt to decision",
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800),
            registry=self.registry,
        )
        self.tool_runs = Counter(
            "gateway_tool_runs_total",
            "Tool runs, by tool and result (ok or error)",
            ["tool", "result"],
            registry=self.registry,
        )
        self.tool_seconds = Histogram(
            "gateway_tool_run_seconds",
            "Seconds a tool ran, by tool",
            ["tool"],
            buckets=TOOL_BUCKETS,
            registry=self.registry,
        )
        self.outbound = Counter(
            "gateway_outbound_messages_total",
            "Outbound messages delivered, by channel",
            ["channel"],
            registry=self.registry,
        )
        self.send_seconds = Histogram(
            "gateway_outbound_send_seconds",
            "Seconds to deliver one outbound message, retries included, by channel",
            ["channel"],
            buckets=SEND_BUCKETS,
            registry=self.registry,
        )
        self.send_failures = Counter(
            "gateway_outbound_send_failures_total",
            "Outbound messages that could not be delivered after retries",
            ["channel"],
            registry=self.registry,
        )
        self.model_requests = Counter(
            "gateway_model_requests_total",
            "Model requests, by model and result (ok, or the error kind: timeout, auth, ...)",
            ["model", "result"],
            registry=self.registry,
        )
        self.model_seconds = Histogram(
            "gateway_model_request_seconds",
            "Seconds for one model step, retries included, by model",
            ["model"],
            buckets=MODEL_BUCKETS,
            registry=self.registry,
        )
        self.webchat_sockets = Gauge(
            "gateway_webchat_websockets",
            "Open web chat WebSocket connections",
            registry=self.registry,
        )
        self.sse_subscribers = Gauge(
            "gateway_admin_event_streams",
            "Open admin server-sent event streams",
            registry=self.registry,
        )

    def set_pending(self, count: int) -> None:
        """Set the pending gauge from the store: counting events drifts across restarts."""
        self.pending.set(count)

    def on_inbound(self, msg: InboundMessage, result: PublishResult) -> None:
        if msg.resumes is not None:
            return  # a waiting turn going on, not a message from a chat
        self.inbound.labels(channel=msg.channel, result=result.value).inc()

    def on_confirmation(self, event: ConfirmationEvent) -> None:
        if event.remote:
            return  # counted by the replica that made the change
        c = event.confirmation
        if event.kind == "requested":
            self.requested.labels(tool=c.tool_call.name).inc()
            self.pending.inc()
            return
        if event.kind != "resolved":
            return  # an execution ending: the status ended earlier and was counted then
        self.pending.dec()
        self.resolved.labels(outcome=c.status.value, via=c.decided_via or "-").inc()
        decided = c.decided_at or time.time()
        self.time_to_decision.observe(max(0.0, decided - c.created_at))

    def on_tool_run(self, tool: str, result: str, seconds: float) -> None:
        self.tool_runs.labels(tool=tool, result=result).inc()
        self.tool_seconds.labels(tool=tool).observe(seconds)

    def on_sent(self, channel: str, msg: OutboundMessage, seconds: float) -> None:
        self.outbound.labels(channel=channel).inc()
        self.send_seconds.labels(channel=channel).observe(seconds)

    def on_send_failure(self, channel: str, msg: OutboundMessage, exc: BaseException) -> None:
        self.send_failures.labels(channel=channel).inc()

    def on_model_request(self, model: str, result: str, seconds: float) -> None:
        self.model_requests.labels(model=model, result=result).inc()
        self.model_seconds.labels(model=model).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
