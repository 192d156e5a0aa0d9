"""Plugin tests reuse the model-agent gateway fixtures (real gateway, loopback model)."""

from tests.agent.conftest import _no_proxy, fake_llm, start_gateway

__all__ = ["_no_proxy", "fake_llm", "start_gateway"]
