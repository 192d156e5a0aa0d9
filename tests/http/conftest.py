from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gateway.app import Gateway, build
from tests.webchat.support import make_settings

if TYPE_CHECKING:
    # Imported where used: importing lark_oapi leaves an event loop open at exit
    # (a ResourceWarning) in test modules that never start the Feishu channel.
    from tests.fakes.dingtalk import FakeDingTalk
    from tests.fakes.feishu import FakeFeishu

TOKEN = "http-test-admin-token-0123456789"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    # Loopback must never go through a proxy from the environment.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def fakes() -> Iterator[tuple[FakeFeishu, FakeDingTalk]]:
    from tests.fakes.dingtalk import FakeDingTalk
    from tests.fakes.feishu import FakeFeishu

    app_id = "cli_" + uuid.uuid4().hex[:10]
    with FakeFeishu(app_id=app_id, bot_open_id="ou_bot") as feishu, FakeDingTalk() as dingtalk:
        yield feishu, dingtalk


def webhook_settings(
    tmp_path: Path, fakes: tuple[FakeFeishu, FakeDingTalk], **overrides: Any
) -> Any:
    """Web chat, admin API and both platforms' webhooks on one loopback server."""
    feishu, dingtalk = fakes
    return make_settings(
        tmp_path,
        admin={"token": TOKEN},
        channels={
            "feishu": {
                "enabled": True,
                "mode": "webhook",
                "app_id": feishu.app_id,
                "app_secret": feishu.app_secret,
                "domain": feishu.url,
                "encrypt_key": "feishu-encrypt-key",
                "verification_token": "feishu-verification-token",
                "allow_from": ["*"],
            },
            "dingtalk": {
                "enabled": True,
                "mode": "http",
                "client_id": dingtalk.client_id,
                "client_secret": dingtalk.client_secret,
                "openapi_endpoint": dingtalk.url,
                "allow_from": ["*"],
            },
        },
        **overrides,
    )


@pytest.fixture
async def gateway(tmp_path: Path, fakes: tuple[FakeFeishu, FakeDingTalk]) -> AsyncIterator[Gateway]:
    async with await build(webhook_settings(tmp_path, fakes)) as gw:
        yield gw
