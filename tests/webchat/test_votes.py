"""A call that needs two approvers, in web chat tabs: every tab's card shows "1/2 已批准"
after the first click, the voter's approve button is off (saying why), the second
person's click approves it.

First tests: tests/core/test_votes.py (the service) and tests/confirm/test_vote_contract.py.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp

from gateway.confirm.model import Confirmation
from gateway.texts import votes as vote_texts
from tests.webchat.support import (
    base_url,
    eventually,
    is_kind,
    make_settings,
    next_frame,
    order_exists,
    running_gateway,
)
from tests.webchat.test_websocket import DELETE_3, tab

TWO = {"rules": [{"name": "two-dbas", "tool": "sql_modify", "approvals": 2}]}


async def test_two_approvers_by_card_clicks_in_every_tab(tmp_path: Path) -> None:
    settings = make_settings(
        tmp_path, policy=TWO, channels={"webchat": {"approvers": ["carol", "dave"]}}
    )
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
        tab(http, "ops", "alice") as alice,
        tab(http, "ops", "carol") as carol,
        tab(http, "ops", "dave") as dave,
    ):
        await alice.send_json({"type": "message", "text": DELETE_3})
        card = await next_frame(alice, is_kind("confirmation"))
        cid = card["confirmation"]["id"]
        fields = {f["key"]: f["value"] for f in card["card"]["fields"]}
        assert fields["votes"] == "0/2 已批准 / approved 0 of 2"
        assert card["can_decide"]["approve"]["allowed"] is False  # the requester
        assert card["can_decide"]["grant"]["allowed"] is False

        await carol.send_json({"type": "decide", "id": cid, "decision": "approve"})
        said = await next_frame(carol, lambda f: f["type"] == "decision")
        assert said["outcome"] == "voted"
        # Every tab's card is redrawn with the tally; the delete has not run.
        for ws in (alice, carol, dave):
            update = await next_frame(ws, is_kind("confirmation_update"))
            assert update["confirmation"]["status"] == "pending"
            shown = {f["key"]: f["value"] for f in update["card"]["fields"]}
            assert shown["votes"] == "1/2 已批准：carol / approved 1 of 2: carol"
            if ws is carol:
                assert update["can_decide"]["approve"] == {
                    "allowed": False,
                    "why": vote_texts.already_voted(Confirmation.from_dict(update["confirmation"])),
                }
            if ws is dave:
                assert update["can_decide"]["approve"]["allowed"] is True
        assert order_exists(settings.data_dir, 3)

        await dave.send_json({"type": "decide", "id": cid, "decision": "approve"})
        assert (await next_frame(dave, lambda f: f["type"] == "decision"))["outcome"] == "decided"
        approved = await next_frame(alice, is_kind("confirmation_update", "approved"))
        assert "carol, dave" in approved["text"]
        await eventually(lambda: _gone(settings.data_dir))


async def _gone(data_dir: Path) -> bool:
    return not order_exists(data_dir, 3)
