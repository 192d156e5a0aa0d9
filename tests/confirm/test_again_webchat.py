"""The web chat card's 重新发起 / Ask again button through the real server and its
WebSocket: an expired card offers it to its requester (others see it, and why it is not
theirs), a press asks the same call again as a new card, approving that one runs it, and
a second press says where the first went."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.app import Gateway
from tests.support import ShiftedClock, pass_deadline
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


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Gateway, ShiftedClock]]:
    clock = ShiftedClock()  # the card's deadline passes when the test says
    async with running_gateway(make_settings(tmp_path), clock=clock) as gw:
        yield gw, clock


async def test_the_requester_asks_an_expired_card_again_and_approves_the_new_one(
    served: tuple[Gateway, ShiftedClock], tmp_path: Path
) -> None:
    gw, clock = served
    async with (
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
        tab(http, "ag", "alice") as alice,
        tab(http, "ag", "bob") as bob,
    ):
        await alice.send_json({"type": "message", "text": DELETE_3})
        card = await next_frame(alice, is_kind("confirmation", "pending"))
        cid = card["confirmation"]["id"]
        assert card["can_decide"]["again"]["offered"] is False  # pending: nothing to ask again
        await pass_deadline(gw.confirmations, clock, cid)
        expired = await next_frame(alice, is_kind("confirmation_update", "expired"))
        assert expired["can_decide"]["again"] == {
            "offered": True,
            "allowed": True,
            "why": "",
            "went": None,
        }
        bob_sees = await next_frame(bob, is_kind("confirmation_update", "expired"))
        offer = bob_sees["can_decide"]["again"]
        assert offer["offered"] is True and offer["allowed"] is False
        assert "仅发起人 alice 可以重新发起" in offer["why"]

        # bob presses anyway: refused, nothing asked.
        await bob.send_json({"type": "again", "id": cid})
        refused = await next_frame(bob, lambda f: f["type"] == "again")
        assert refused["done"] is False and "only alice" in refused["message"]

        await alice.send_json({"type": "again", "id": cid})
        answer = await next_frame(alice, lambda f: f["type"] == "again")
        assert answer["done"] is True
        new_card = await next_frame(alice, is_kind("confirmation", "pending"))
        new = new_card["confirmation"]
        assert new["id"] != cid and new["details"]["asked_again_from"] == cid
        assert new["details"]["statement"] == "DELETE FROM orders WHERE id = 3"
        shown = {f["key"]: f["value"] for f in new_card["card"]["fields"]}
        assert shown["asked-again-from"] == cid
        assert answer["message"].startswith(f"↻ [{cid}]") and new["id"] in answer["message"]
        moved = await next_frame(
            bob, lambda f: is_kind("confirmation_update")(f) and f["confirmation"]["id"] == cid
        )
        assert moved["can_decide"]["again"]["offered"] is False
        assert new["id"] in moved["can_decide"]["again"]["went"]

        await alice.send_json({"type": "decide", "id": new["id"], "decision": "approve"})
        decided = await next_frame(alice, lambda f: f["type"] == "decision")
        assert decided["outcome"] == "decided"
        await eventually(lambda: _gone(tmp_path, 3))

        await alice.send_json({"type": "again", "id": cid})
        second = await next_frame(alice, lambda f: f["type"] == "again")
        assert second["done"] is False
        assert "asked again already" in second["message"] and new["id"] in second["message"]


async def _gone(tmp_path: Path, order_id: int) -> bool:
    return not order_exists(tmp_path / "data", order_id)
