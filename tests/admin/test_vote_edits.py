"""An approval with edited arguments never skips the approvers a rule asks for (issue 25):
an edit into a call whose rule says ``approvals = 2`` is refused (one person would approve
what needs two), and a call that takes votes cannot be edited at all."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from gateway.texts import votes as vote_texts
from tests.admin.conftest import TOKEN
from tests.admin.test_api import DELETE_3, ask
from tests.admin.test_edits import HEADERS, decide, record
from tests.webchat.support import base_url, make_settings, order_exists, running_gateway

TWO_FOR_CUSTOMERS = {
    "rules": [
        {
            "name": "customers-two",
            "tool": "sql_modify",
            "sql": {"tables": "customers"},
            "approvals": 2,
        }
    ]
}


async def test_an_edit_never_takes_a_call_past_its_approvers(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path,
        admin={"token": TOKEN},
        policy=TWO_FOR_CUSTOMERS,
        channels={"webchat": {"approvers": ["bob", "carol"]}},
    )
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw), headers=HEADERS) as admin,
    ):
        # A one-person call edited into one that needs two: refused, still as asked.
        cid = await ask(admin, "ed", "alice", DELETE_3)
        into = {"sql": "DELETE FROM customers WHERE id = 1"}
        body = {"decision": "approve", "actor": "bob", "arguments": into}
        status, answer = await decide(admin, cid, body)
        assert (status, answer["outcome"]) == (403, "forbidden")
        assert answer["message"] == vote_texts.NO_EDIT_WITH_VOTES
        assert (await record(admin, cid))["tool_call"]["args"] == {"sql": DELETE_3[5:]}
        assert order_exists(settings.data_dir, 3)

        # A call that takes votes: no edit, even into a call of one approver.
        two = await ask(admin, "ed2", "alice", "/sql DELETE FROM customers WHERE id = 2")
        body = {
            "decision": "approve",
            "actor": "bob",
            "arguments": {"sql": "DELETE FROM orders WHERE id = 4"},
        }
        status, answer = await decide(admin, two, body)
        assert (status, answer["outcome"]) == (403, "forbidden")
        assert (await record(admin, two))["votes"] == []
        assert order_exists(settings.data_dir, 4)
