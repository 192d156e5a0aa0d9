"""Four-eyes in the web chat: the web chat's own approvers count as approvers."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from config.settings import Settings
from gateway.tools.policy import four_eyes_problem
from tests.webchat.support import base_url, eventually, make_settings, order_exists, running_gateway
from tests.webchat.test_rest import DELETE_3, say, wait_for_kind

FOUR_EYES_ON = {"four_eyes_risks": ["high"], "four_eyes_for_critical": True}


def test_web_chat_approvers_are_approvers_for_the_four_eyes_check() -> None:
    alone = Settings(policy=FOUR_EYES_ON)
    assert "no approvers" in (four_eyes_problem(alone) or "")
    web = Settings(policy=FOUR_EYES_ON, channels={"webchat": {"approvers": ["carol"]}})
    assert four_eyes_problem(web) is None


async def test_the_web_chat_approver_decides_what_the_requester_may_not(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        policy={"rules": [{"name": "deletes", "tool": "sql_modify", "four_eyes": True}]},
        channels={"webchat": {"approvers": ["carol"]}},
    )
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        await say(http, "ops", "alice", DELETE_3)
        prompt = await wait_for_kind(http, "ops", "confirmation")
        assert prompt["confirmation"]["four_eyes"] is True
        assert prompt["confirmation"]["approvers"] == ["carol"]
        await say(http, "ops", "carol", f"确认 {prompt['confirmation']['id']}")
        update = await wait_for_kind(http, "ops", "confirmation_update", "approved")
        assert update["confirmation"]["decided_by"] == "carol"
        await eventually(lambda: _gone(settings))


async def _gone(settings: Settings) -> bool:
    return not order_exists(settings.data_dir, 3)


async def test_the_admin_token_does_not_make_the_requester_a_second_person(
    tmp_path: Path,
) -> None:
    token = "four-eyes-admin-token-0123456789abcdef"
    settings = make_settings(
        tmp_path,
        admin={"token": token},
        policy={"rules": [{"name": "deletes", "tool": "sql_modify", "four_eyes": True}]},
        channels={"webchat": {"approvers": ["carol"]}},
    )
    auth = {"Authorization": f"Bearer {token}"}
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        await say(http, "ops", "alice", DELETE_3)
        cid = (await wait_for_kind(http, "ops", "confirmation"))["confirmation"]["id"]
        path = f"/api/confirmations/{cid}/decision"
        body = {"decision": "approve", "actor": "alice"}
        async with http.post(path, json=body, headers=auth) as resp:
            assert resp.status == 403
            assert (await resp.json())["outcome"] == "forbidden"
        assert order_exists(settings.data_dir, 3)
        # Withdrawing stays hers; another person's approval through the API runs it.
        async with http.post(path, json={**body, "actor": "dave"}, headers=auth) as resp:
            assert resp.status == 200, await resp.text()
        await eventually(lambda: _gone(settings))
