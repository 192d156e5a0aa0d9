"""Prometheus metrics, on a registry owned by the gateway (not the global default)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.bus import InboundMessage, OutboundMessage, PublishResult
from gateway.confirm.service import ConfirmationEvent


class Metrics:
    """Counters the admin API exposes at /metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
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
        self.send_failures = Counter(
            "gateway_outbound_send_failures_total",
            "Outbound messages that could not be delivered after retries",
            ["channel"],
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
        self.inbound.labels(channel=msg.channel, result=result.value).inc()

    def on_confirmation(self, event: ConfirmationEvent) -> None:
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

    def on_send_failure(self, channel: str, msg: OutboundMessage, exc: BaseException) -> None:
        self.send_failures.labels(channel=channel).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
