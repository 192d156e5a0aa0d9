"""Four-eyes in the web chat: the web chat's own approvers count as approvers."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from config.settings import Settings
from gateway import texts
from gateway.confirm.model import Status
from gateway.tools.policy import four_eyes_problem
from tests.webchat.support import (
    base_url,
    eventually,
    is_kind,
    make_settings,
    next_frame,
    order_exists,
    running_gateway,
)
from tests.webchat.test_rest import DELETE_3, say, wait_for_kind
from tests.webchat.test_websocket import tab

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


async def test_the_requester_cannot_approve_her_own_call_by_click_or_reply(
    tmp_path: Path,
) -> None:
    """Four-eyes in the web chat. First tests: tests/core/test_confirmations.py::
    test_four_eyes_requester_may_reject_not_approve, tests/agent/test_model_safety.py::
    test_four_eyes_requester_cannot_approve_an_approver_can."""
    settings = make_settings(
        tmp_path,
        policy={"rules": [{"name": "deletes", "tool": "sql_modify", "four_eyes": True}]},
        channels={"webchat": {"approvers": ["carol"]}},
    )
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
        tab(http, "ops", "alice") as alice,
        tab(http, "ops", "carol") as carol,
    ):
        await alice.send_json({"type": "message", "text": DELETE_3})
        card = await next_frame(alice, is_kind("confirmation"))
        cid = card["confirmation"]["id"]
        assert card["can_decide"]["approve"]["allowed"] is False
        # Her click anyway (a hand-made frame): refused, saying why.
        await alice.send_json({"type": "decide", "id": cid, "decision": "approve"})
        answer = await next_frame(alice, lambda f: f["type"] == "decision")
        assert (answer["outcome"], answer["message"]) == ("forbidden", texts.FOUR_EYES)
        # Her typed 确认: told the same in the room.
        await alice.send_json({"type": "message", "text": "确认"})
        told = await next_frame(alice, lambda f: is_kind("text")(f) and f["user"] != "alice")
        assert told["text"] == texts.FOUR_EYES
        assert gw.confirmations is not None
        record = await gw.confirmations.get(cid)
        assert record is not None and record.status is Status.PENDING
        assert order_exists(settings.data_dir, 3)
        # Carol's click is the second person's.
        await carol.send_json({"type": "decide", "id": cid, "decision": "approve"})
        assert (await next_frame(carol, lambda f: f["type"] == "decision"))["outcome"] == "decided"
        await eventually(lambda: _gone(settings))
