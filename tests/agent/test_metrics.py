"""/metrics has what people expect (issue 16): process and platform collectors, build info,
no ``_created`` series, and per-tool, per-channel and per-model counters with latencies."""

from __future__ import annotations

import platform
import re
from importlib.metadata import version

from prometheus_client.parser import text_string_to_metric_families

from gateway.bus import PublishResult
from gateway.extras import DISTRIBUTION
from tests.agent.conftest import GatewayFactory, say
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls


def samples(exposition: str) -> dict[str, float]:
    """``name{label="v",...}`` -> value, labels sorted by name."""
    out = {}
    for family in text_string_to_metric_families(exposition):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


async def test_metrics_cover_process_build_tools_channels_and_the_model(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(("sql_query", {"sql": "SELECT id FROM orders WHERE id = 1"})),
        text("订单 1 在 / order 1 is there"),
    )
    gw, chat = await start_gateway()
    assert await say(gw, "订单 1 还在吗") is PublishResult.QUEUED
    await chat.wait_text("order 1 is there")
    exposition = gw.metrics.render().decode()
    got = samples(exposition)

    assert got["process_cpu_seconds_total"] > 0
    assert got["process_resident_memory_bytes"] > 0
    assert any(name.startswith("python_info{") for name in got)
    python, gateway = platform.python_version(), version(DISTRIBUTION)
    build = f'gateway_build_info{{python="{python}",version="{gateway}"}}'
    assert got[build] == 1.0
    assert "_created" not in exposition

    assert got['gateway_tool_runs_total{result="ok",tool="sql_query"}'] == 1.0
    assert got['gateway_tool_run_seconds_count{tool="sql_query"}'] == 1.0
    assert got['gateway_model_requests_total{model="fake-model",result="ok"}'] == 2.0
    assert got['gateway_model_request_seconds_count{model="fake-model"}'] == 2.0
    channel = chat.name
    assert got[f'gateway_outbound_messages_total{{channel="{channel}"}}'] >= 1.0
    assert got[f'gateway_outbound_send_seconds_count{{channel="{channel}"}}'] >= 1.0
    # Every histogram has its buckets, sum and count: latencies are plottable.
    assert re.search(r'gateway_tool_run_seconds_bucket\{le="0.005",tool="sql_query"\}', exposition)
