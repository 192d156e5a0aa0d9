"""``[tools] plugins``: modules whose @tool functions register, sync and async."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.settings import ConfigError, Settings
from gateway.app import build
from gateway.bus import OutboundKind
from tests.agent.conftest import GatewayFactory, say
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls

SAMPLE = "tests.plugins.sample_tools"


async def test_plugin_tools_are_offered_to_the_model_and_run(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(("add", {"a": 2, "b": 3}), ("weather", {"city": "杭州", "unit": "C"})),
        tool_calls(("thread_kind", {})),
        text("5, sunny"),
    )
    gw, chat = await start_gateway(tools={"plugins": [SAMPLE]})
    assert {"add", "weather", "send_email", "explode", "refund", "thread_kind"} <= set(
        gw.registry.names
    )
    await say(gw, "2+3, and the weather?")
    await chat.wait_text("5, sunny")

    tools = {t["function"]["name"]: t["function"] for t in fake_llm.requests[0].body["tools"]}
    # Schemas come from the type hints (pydantic); descriptions from docstrings or @tool.
    assert tools["add"]["parameters"]["properties"] == {
        "a": {"title": "A", "type": "integer"},
        "b": {"title": "B", "type": "integer"},
    }
    assert tools["add"]["parameters"]["required"] == ["a", "b"]
    assert tools["add"]["description"] == "Add two integers."
    assert tools["weather"]["parameters"]["properties"]["unit"]["enum"] == ["C", "F"]
    assert tools["weather"]["description"] == "Today's weather in a city (async)."

    first = list(fake_llm.requests[1].tool_results().values())
    assert first == ["5", "杭州: 21°C, sunny"]  # sync, then async
    assert list(fake_llm.requests[2].tool_results().values())[-1] == "worker"


async def test_requires_confirmation_means_confirm(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(("send_email", {"to": "boss@example.com", "subject": "report"})),
        text("邮件已发送 / mail sent"),
    )
    gw, chat = await start_gateway(tools={"plugins": [SAMPLE]})
    await say(gw, "mail the boss")
    prompt = await chat.wait_prompt()
    assert prompt.tool_call.name == "send_email"
    assert prompt.risk.value == "high"
    assert len(fake_llm.requests) == 1
    await say(gw, "确认")
    await chat.wait_text("邮件已发送")
    assert "sent to boss@example.com: report" in next(
        iter(fake_llm.requests[1].tool_results().values())
    )


async def test_a_rule_can_relax_requires_confirmation(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(("send_email", {"to": "me@example.com", "subject": "note"})),
        text("sent"),
    )
    gw, chat = await start_gateway(
        tools={"plugins": [SAMPLE]},
        policy={
            "rules": [
                {"tool": "send_email", "when": {"to": {"glob": "*@example.com"}}, "level": "auto"}
            ]
        },
    )
    await say(gw, "mail me")
    await chat.wait_text("sent")
    assert not [m for m in chat.sent if m.kind is OutboundKind.CONFIRMATION]


@pytest.mark.parametrize(
    ("module", "message"),
    [
        ("tests.plugins.broken_import", "cannot import 'tests.plugins.broken_import'"),
        ("tests.plugins.bad_schema", "parameter 'x' needs a type hint"),
        ("tests.plugins.bad_json_schema", "no JSON schema for its arguments"),
        ("tests.plugins.no_tools", "'tests.plugins.no_tools' defines no @tool"),
        ("tests.plugins.not_there", "cannot import 'tests.plugins.not_there'"),
    ],
)
async def test_a_bad_plugin_stops_start_up_naming_the_module(
    tmp_path: Path, module: str, message: str
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        confirmation={"store": "memory"},
        keywords={"watch": False},
        channels={"webchat": {"enabled": False}},
        tools={"plugins": [SAMPLE, module]},
    )
    with pytest.raises(ConfigError, match=message) as info:
        await build(settings, serve_http=False)
    assert module in str(info.value)
