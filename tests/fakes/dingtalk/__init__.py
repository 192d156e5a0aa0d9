"""Loopback fake of DingTalk (stream gateway, OAuth, robot send, card instances)."""

from tests.fakes.dingtalk.server import (
    CARD_CALLBACK_TOPIC,
    CHATBOT_TOPIC,
    FakeDingTalk,
)
from tests.fakes.threaded_server import RecordedRequest

__all__ = ["CARD_CALLBACK_TOPIC", "CHATBOT_TOPIC", "FakeDingTalk", "RecordedRequest"]
