"""Loopback fake of the Feishu (Lark) open platform: long connection, webhook, IM API."""

from tests.fakes.feishu.crypto import encrypt, signature, webhook_request
from tests.fakes.feishu.events import card_action_event, message_event, url_verification
from tests.fakes.feishu.server import (
    INVALID_TOKEN_CODE,
    RATE_LIMIT_CODE,
    Ack,
    FakeFeishu,
    RecordedRequest,
)

__all__ = [
    "INVALID_TOKEN_CODE",
    "RATE_LIMIT_CODE",
    "Ack",
    "FakeFeishu",
    "RecordedRequest",
    "card_action_event",
    "encrypt",
    "message_event",
    "signature",
    "url_verification",
    "webhook_request",
]
