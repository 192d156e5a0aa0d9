"""Model failures: retried (429 / 5xx / timeout), or one clear sentence in the chat."""

from __future__ import annotations

import socket
from typing import Any

import structlog

from gateway import texts
from tests.agent.conftest import GatewayFactory, say
from tests.fakes.openai_server import FakeOpenAI, error, hold, text, tool_calls

PLUGINS: dict[str, Any] = {"plugins": ["tests.plugins.sample_tools"]}


async def test_500_then_success_is_retried(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(error(500, "upstream overloaded"), text("你好 / hello"))
    gw, chat = await start_gateway()
    await say(gw, "你好")
    await chat.wait_text("你好 / hello")
    requests = fake_llm.requests
    assert len(requests) == 2
    assert requests[0].body["messages"] == requests[1].body["messages"]
    assert not any("500" in t or "overloaded" in t for t in chat.texts())


async def test_429_with_retry_after_is_retried(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        error(429, "rate limited", error_type="rate_limit_error", headers={"retry-after": "0"}),
        text("ok"),
    )
    gw, chat = await start_gateway()
    await say(gw, "hi")
    await chat.wait_text("ok")
    assert len(fake_llm.requests) == 2


async def test_retries_are_bounded_then_the_chat_is_told(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(error(503), error(503), error(503), text("never sent"))
    gw, chat = await start_gateway(llm={"max_retries": 1})
    await say(gw, "hi")
    await chat.wait_text(texts.MODEL_UNAVAILABLE)
    assert len(fake_llm.requests) == 2, "max_retries=1: one try and one retry, no SDK retries"
    assert fake_llm.remaining == 2


async def test_401_is_one_clear_sentence_and_a_log_line(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    wrong_key = "sk-wrong-secret-123"
    gw, chat = await start_gateway(llm={"api_key": wrong_key})
    with structlog.testing.capture_logs() as logs:
        await say(gw, "hi")
        await chat.wait_text(texts.MODEL_AUTH_FAILED)
    assert len(fake_llm.requests) == 1, "a bad key is not retried"
    assert chat.texts() == [texts.MODEL_AUTH_FAILED]
    failed = [e for e in logs if e["event"] == "llm.failed"]
    assert len(failed) == 1
    assert failed[0]["kind"] == "auth"
    assert failed[0]["status"] == 401
    assert failed[0]["log_level"] == "error"
    assert not any(wrong_key in repr(e) for e in logs), "the key is never logged"
    # The gateway keeps working: the next message is a new turn.
    fake_llm.api_key = wrong_key
    fake_llm.script(text("now it works"))
    await say(gw, "again")
    await chat.wait_text("now it works")


async def test_unknown_model_is_reported(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    gw, chat = await start_gateway(llm={"model": "no-such-model"})
    await say(gw, "hi")
    await chat.wait_text(texts.MODEL_NOT_FOUND)
    assert len(fake_llm.requests) == 1


async def test_slow_model_times_out(start_gateway: GatewayFactory, fake_llm: FakeOpenAI) -> None:
    fake_llm.script(hold())
    gw, chat = await start_gateway(llm={"timeout_seconds": 0.3, "max_retries": 0})
    await say(gw, "hi")
    await chat.wait_text(texts.MODEL_TIMEOUT)
    assert len(fake_llm.requests) == 1


async def test_a_timeout_is_retried(start_gateway: GatewayFactory, fake_llm: FakeOpenAI) -> None:
    fake_llm.script(hold(), text("second try"))
    gw, chat = await start_gateway(llm={"timeout_seconds": 0.3, "max_retries": 1})
    await say(gw, "hi")
    await chat.wait_text("second try")
    assert len(fake_llm.requests) == 2


async def test_unreachable_model_is_reported(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    # A loopback port that was free a moment ago: connections are refused.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    gw, chat = await start_gateway(
        llm={"base_url": f"http://127.0.0.1:{port}/v1", "max_retries": 0}
    )
    await say(gw, "hi")
    await chat.wait_text(texts.MODEL_UNREACHABLE)


async def test_a_failing_tool_gives_the_model_the_error_not_the_chat(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(("explode", {"reason": "disk full"})),
        text("工具出错了：disk full / the tool failed"),
    )
    gw, chat = await start_gateway(tools=PLUGINS)
    await say(gw, "run it")
    await chat.wait_text("工具出错了")
    result = next(iter(fake_llm.requests[1].tool_results().values()))
    assert result == "Error: RuntimeError: boom: disk full"
    assert chat.texts() == ["工具出错了：disk full / the tool failed"]
    assert not any("Traceback" in t for t in chat.texts())


async def test_bad_arguments_and_unknown_tools_go_back_to_the_model(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(
        tool_calls(("add", '{"a": 1, "b": '), ("add", {"a": "x", "b": 2}), ("nope", {})),
        tool_calls(("add", {"a": 2, "b": 3})),
        text("2 + 3 = 5"),
    )
    gw, chat = await start_gateway(tools=PLUGINS)
    await say(gw, "2+3?")
    await chat.wait_text("2 + 3 = 5")
    first = list(fake_llm.requests[1].tool_results().values())
    assert first[0].startswith("Error: arguments are not valid JSON")
    assert first[1].startswith("Error: bad arguments for add: a:")
    assert first[2].startswith("Error: no tool named 'nope'. Available tools:")
    assert list(fake_llm.requests[2].tool_results().values())[-1] == "5"


async def test_a_model_that_never_stops_calling_tools_is_stopped(
    start_gateway: GatewayFactory, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(*[tool_calls(("add", {"a": i, "b": 1})) for i in range(3)])
    gw, chat = await start_gateway(tools=PLUGINS, llm={"max_steps": 3})
    await say(gw, "loop")
    await chat.wait_text(texts.model_step_limit(3))
    assert len(fake_llm.requests) == 3
