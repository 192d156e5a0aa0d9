"""Starting while Feishu is unreachable, and with credentials Feishu refuses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from config.settings import ConfigError
from gateway.app import Gateway, build
from tests.channels.feishu.conftest import ALICE, make_settings, sent_texts, wait_until
from tests.fakes.feishu import FakeFeishu, message_event, webhook_request

ENCRYPT_KEY = "startup-encrypt-key"
TOKEN = "startup-token"


async def _readyz(gw: Gateway) -> tuple[int, dict[str, Any]]:
    assert gw.http is not None
    async with aiohttp.ClientSession() as http, http.get(gw.http.url + "/readyz") as resp:
        return resp.status, await resp.json()


def _feishu(body: dict[str, Any]) -> dict[str, Any]:
    [found] = [c for c in body["channels"] if c["name"] == "feishu"]
    return found


async def test_an_unreachable_api_at_start_is_not_ready_then_recovers(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    fake.start_outage(503)
    async with await build(make_settings(tmp_path, fake)) as gw:
        # Started: the daemon runs, and /readyz says which channel is down, and why.
        status, body = await _readyz(gw)
        assert status == 503
        feishu = _feishu(body)
        assert feishu["ready"] is False
        assert "Feishu API unavailable" in feishu["reason"]
        assert "503" in feishu["reason"]
        fake.end_outage()
        await fake.wait_connected()
        await wait_until(lambda: gw.channels.channels["feishu"].ready, what="feishu ready")
        status, body = await _readyz(gw)
        assert status == 200
        assert _feishu(body)["reason"] is None
        assert _feishu(body)["bot_open_id"] == fake.bot_open_id


async def test_a_reply_queued_while_the_api_is_down_goes_out_when_it_is_back(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    settings = make_settings(
        tmp_path,
        fake,
        mode="webhook",
        encrypt_key=ENCRYPT_KEY,
        verification_token=TOKEN,
        # Enough tries that the reply outlasts the outage below by far.
        retry_attempts=200,
    )
    fake.start_outage(503)
    async with await build(settings) as gw:
        assert gw.http is not None
        assert (await _readyz(gw))[0] == 503
        before = fake.arrived("/open-apis/auth/v3/tenant_access_token/internal")
        headers, body = webhook_request(
            message_event(chat_id="oc_down", sender=ALICE, text="/pending", token=TOKEN),
            encrypt_key=ENCRYPT_KEY,
        )
        async with (
            aiohttp.ClientSession() as http,
            http.post(gw.http.url + "/webhook/feishu/event", data=body, headers=headers) as resp,
        ):
            assert resp.status == 200
        # The reply is being tried against the outage...
        await fake.wait_until(
            lambda: fake.arrived("/open-apis/auth/v3/tenant_access_token/internal") > before + 1,
            what="a failed send attempt",
        )
        assert sent_texts(fake) == []
        fake.end_outage()
        # ...and goes out once Feishu is back; the channel is ready again.
        await wait_until(lambda: any("没有待确认" in t for t in sent_texts(fake)), what="reply")
        await wait_until(lambda: gw.channels.channels["feishu"].ready, what="feishu ready")
        assert gw.channels.channels["feishu"].dead_letters.entries() == []


async def test_refused_credentials_are_a_configuration_error(
    tmp_path: Path, fake: FakeFeishu
) -> None:
    settings = make_settings(tmp_path, fake, app_secret="not-the-secret")
    gw = await build(settings)
    with pytest.raises(ConfigError, match="app_secret") as refused:
        await gw.start()
    assert "GATEWAY_CHANNELS__FEISHU__APP_SECRET" in str(refused.value)
    assert "\n" not in str(refused.value)
