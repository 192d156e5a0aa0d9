"""A message's sessionWebhook is posted to only when its host is on the allow-list (SSRF)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from channels.dingtalk.webhooks import WebhookRule
from gateway.app import build
from tests.channels.dingtalk.conftest import make_settings
from tests.fakes.dingtalk import FakeDingTalk

OTO_PATH = "/v1.0/robot/oToMessages/batchSend"


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://oapi.dingtalk.com/robot/sendBySession?session=x", True),
        ("https://OAPI.DingTalk.com:443/robot/sendBySession", True),
        ("http://oapi.dingtalk.com/robot/sendBySession", False),  # scheme
        ("https://oapi.dingtalk.com:8443/robot/sendBySession", False),  # port
        ("https://evil.example/robot/sendBySession", False),
        ("https://oapi.dingtalk.com.evil.example/", False),
        ("https://oapi.dingtalk.com./", False),
        ("https://user:pw@oapi.dingtalk.com/", False),
        ("https://oapi.dingtalk.com%2f@evil.example/", False),
        ("https://oapi.dingtalk.com\\@evil.example/", False),
        ("https://127.0.0.1:9/steal", False),
        ("https://[::1]/steal", False),
        ("/v1.0/robot/groupMessages/send", False),  # a path would go to the API endpoint
        ("file:///etc/passwd", False),
        ("https://oapi.dingtalk.com:99999/", False),
        ("", False),
    ],
)
def test_default_rule(url: str, allowed: bool) -> None:
    rule = WebhookRule(hosts=["oapi.dingtalk.com"], schemes=["https"])
    assert rule.allows(url) is allowed


def test_a_listed_port_and_scheme_allow_exactly_that_origin() -> None:
    rule = WebhookRule(hosts=["127.0.0.1:8123", "[::1]:8124"], schemes=["http"])
    assert rule.allows("http://127.0.0.1:8123/robot/sendBySession?session=s")
    assert rule.allows("http://[::1]:8124/x")
    assert not rule.allows("http://127.0.0.1:8124/x")
    assert not rule.allows("http://127.0.0.1/x")
    assert not rule.allows("https://127.0.0.1:8123/x")


def test_a_refused_host_is_logged_once() -> None:
    rule = WebhookRule(hosts=["oapi.dingtalk.com"], schemes=["https"])
    with structlog.testing.capture_logs() as logs:
        for session in range(3):
            assert not rule.allows(f"https://evil.example/hook?session={session}")
        assert not rule.allows("https://other.example/hook")
    refused = [e for e in logs if e["event"] == "dingtalk.webhook_refused"]
    assert [e["host"] for e in refused] == ["evil.example", "other.example"]
    # The URL's query string is the session's credential: never logged.
    assert "session=" not in repr(logs)


@pytest.fixture
def thief() -> Iterator[FakeDingTalk]:
    with FakeDingTalk() as server:
        yield server


async def test_a_webhook_elsewhere_is_not_posted_to_and_the_reply_still_arrives(
    tmp_path: Path, fake: FakeDingTalk, thief: FakeDingTalk
) -> None:
    async with await build(make_settings(tmp_path, fake)):
        await fake.wait_connected()
        payload = fake.chatbot_payload(text="/help", sender_staff_id="bob")
        payload["sessionWebhook"] = thief.session_webhook("steal")
        fake.send_chatbot_message(payload=payload)
        [oto] = await fake.wait_requests(OTO_PATH)
        assert oto.body["userIds"] == ["bob"]
        assert "/sql" in json.loads(oto.body["msgParam"])["content"]
    # The webhook is tried before the OpenAPI: had it been used, it would have been first.
    assert thief.requests() == []


async def test_by_default_only_dingtalk_https_webhooks_are_used(
    tmp_path: Path, fake: FakeDingTalk
) -> None:
    # The defaults: https and oapi.dingtalk.com. The fake's loopback http webhook is refused.
    settings = make_settings(
        tmp_path, fake, webhook_hosts=["oapi.dingtalk.com"], webhook_schemes=["https"]
    )
    async with await build(settings):
        await fake.wait_connected()
        fake.send_chatbot_message(text="/help", sender_staff_id="bob")
        await fake.wait_requests(OTO_PATH)
    assert fake.requests("/robot/sendBySession") == []


def test_settings_refuse_what_is_not_a_host() -> None:
    from pydantic import ValidationError

    from config.channel_settings import DingTalkSettings

    assert DingTalkSettings().webhook_hosts == ["oapi.dingtalk.com"]
    assert DingTalkSettings(webhook_hosts=[" OAPI.dingtalk.com "]).webhook_hosts == [
        "oapi.dingtalk.com"
    ]
    for bad in ("https://oapi.dingtalk.com", "oapi.dingtalk.com/robot", "a b", ""):
        with pytest.raises(ValidationError, match="not a host name"):
            DingTalkSettings(webhook_hosts=[bad])
    with pytest.raises(ValidationError):
        DingTalkSettings(webhook_schemes=["ftp"])
