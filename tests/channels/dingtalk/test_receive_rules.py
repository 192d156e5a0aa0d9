"""Who and what reaches the bot: allow_from, message types, the dead-letter route's token."""
# test_dead_letter_route_needs_the_admin_token relies on the server's require_admin
# middleware (every /api/ path): the channel has no token check of its own.

from __future__ import annotations

from pathlib import Path

import aiohttp

from config.settings import Settings
from gateway.app import Gateway, build
from tests.channels.dingtalk.conftest import make_settings, webhook_texts
from tests.fakes.dingtalk import FakeDingTalk


async def test_allow_from_refuses_others_and_tells_them_once(
    tmp_path: Path, fake: FakeDingTalk
) -> None:
    settings = make_settings(tmp_path, fake, allow_from=["alice"])
    group = {"conversation_type": "2", "conversation_id": "cg-a", "session": "ga"}
    async with await build(settings) as gw:
        await fake.wait_connected()
        fake.send_chatbot_message(text="/help", sender_staff_id="bob", **group)
        fake.send_chatbot_message(text="/help", sender_staff_id="bob", **group)
        fake.send_chatbot_message(text="/pending", sender_staff_id="alice", **group)
        await fake.wait_until(
            lambda: any("没有待确认" in t for t in webhook_texts(fake)), what="alice's answer"
        )
        said = webhook_texts(fake)
        assert len(said) == 2
        assert "没有使用此机器人的权限" in said[0]
        assert gw.ready


async def test_rich_text_is_read_and_pictures_are_answered(
    gateway: Gateway, fake: FakeDingTalk
) -> None:
    rich = fake.chatbot_payload(text="", msgtype="richText")
    rich["content"] = {"richText": [{"text": "/pen"}, {"downloadCode": "img"}, {"text": "ding"}]}
    fake.send_chatbot_message(payload=rich)
    await fake.wait_until(
        lambda: any("没有待确认" in t for t in webhook_texts(fake)), what="/pending answer"
    )
    picture = fake.chatbot_payload(text="", msgtype="picture")
    picture["content"] = {"downloadCode": "img"}
    fake.send_chatbot_message(payload=picture)
    await fake.wait_until(
        lambda: any("暂只支持文字消息" in t for t in webhook_texts(fake)), what="unsupported"
    )


async def test_dead_letter_route_needs_the_admin_token(tmp_path: Path, fake: FakeDingTalk) -> None:
    settings = make_settings(tmp_path, fake)
    settings = Settings.model_validate(
        {**settings.model_dump(), "admin": {"token": "s3cret-admin-token"}}
    )
    async with await build(settings) as gw, aiohttp.ClientSession() as http:
        assert gw.http is not None
        url = f"{gw.http.url}/api/channels/dingtalk/failed"
        async with http.get(url) as resp:
            assert resp.status == 401
        headers = {"Authorization": "Bearer s3cret-admin-token"}
        async with http.get(url, headers=headers) as resp:
            assert resp.status == 200
            assert (await resp.json())["failed"] == []
