"""The admin token is an operator, never a second person (issue 22, item 12): four-eyes
is judged on the person behind an admin decision — the login proxy's header, the /admin
login's name, or the ``actor`` the request names, which is then required."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.app import Gateway
from tests.admin.conftest import TOKEN
from tests.admin.test_cli import run_cli
from tests.webchat.support import base_url, make_settings, order_exists, running_gateway
from tests.webchat.test_rest import DELETE_3, say, wait_for_kind

BEARER = {"Authorization": f"Bearer {TOKEN}"}
CSRF = {"X-Requested-With": "gateway-admin"}


@pytest.fixture
async def four_eyes(tmp_path: Path) -> AsyncIterator[Gateway]:
    settings = make_settings(
        tmp_path,
        admin={"token": TOKEN},
        policy={"rules": [{"name": "deletes", "tool": "sql_modify", "four_eyes": True}]},
        channels={"webchat": {"approvers": ["carol"]}},
    )
    async with running_gateway(settings) as gw:
        yield gw


async def alices_call(gw: Gateway, room: str) -> str:
    async with aiohttp.ClientSession(base_url=base_url(gw)) as http:
        await say(http, room, "alice", DELETE_3)
        prompt = await wait_for_kind(http, room, "confirmation")
    assert prompt["confirmation"]["four_eyes"] is True
    return str(prompt["confirmation"]["id"])


async def test_leaving_actor_out_does_not_let_the_requester_approve(four_eyes: Gateway) -> None:
    cid = await alices_call(four_eyes, "own")
    path = f"/api/confirmations/{cid}/decision"
    async with aiohttp.ClientSession(base_url=base_url(four_eyes), headers=BEARER) as alice:
        for body in ({"decision": "approve"}, {"decision": "approve", "actor": "  "}):
            async with alice.post(path, json=body) as resp:
                assert resp.status == 422
                answer = await resp.json()
                assert answer["field"] == "actor"
                assert "actor is required" in answer["error"]
        # Named, she is refused; her name spelt otherwise is still her.
        for actor in ("alice", "Alice", " ALICE "):
            async with alice.post(path, json={"decision": "approve", "actor": actor}) as resp:
                assert resp.status == 403, actor
    assert order_exists(four_eyes.settings.data_dir, 3)
    record = await four_eyes.confirmations.get(cid)
    assert record is not None and record.status.value == "pending"


async def test_the_page_decides_as_the_name_its_login_gave(four_eyes: Gateway) -> None:
    cid = await alices_call(four_eyes, "page")
    path = f"/api/confirmations/{cid}/decision"
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(base_url=base_url(four_eyes), cookie_jar=jar) as page:
        async with page.post("/admin/login", data={"name": "alice", "token": TOKEN}) as resp:
            assert resp.status == 200
        # The body cannot rename the person the login named.
        body = {"decision": "approve", "actor": "dave"}
        async with page.post(path, json=body, headers=CSRF) as resp:
            assert resp.status == 403
        async with page.post("/admin/logout") as resp:
            assert resp.status == 200
        async with page.post("/admin/login", data={"name": "dave", "token": TOKEN}) as resp:
            assert resp.status == 200
        async with page.post(path, json={"decision": "approve"}, headers=CSRF) as resp:
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["confirmation"]["decided_by"] == "dave"


async def test_the_cli_asks_who_is_deciding(
    four_eyes: Gateway, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_ADMIN__TOKEN", TOKEN)
    cid = await alices_call(four_eyes, "cli")
    url = base_url(four_eyes)
    with pytest.raises(SystemExit):
        await run_cli("confirmations", "approve", cid, "--url", url)
    assert "--actor" in capsys.readouterr().err
    assert await run_cli("confirmations", "approve", cid, "--url", url, "--actor", "alice") == 1
    assert await run_cli("confirmations", "approve", cid, "--url", url, "--actor", "carol") == 0
