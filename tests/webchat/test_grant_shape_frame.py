"""A grant of the reader's shape from the web chat card (docs/grants.md, "Shapes an
approver chooses") through the real server: the ``decide`` frame's grant with ``pin`` and
``single_use`` gives exactly that grant; a bad shape closes the socket and decides
nothing; a length a shape may not have approves once and says why no grant was given."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import WSCloseCode

from gateway.app import Gateway
from tests.webchat.support import is_kind, next_frame, order_exists
from tests.webchat.test_grant_button import live_grants, said
from tests.webchat.test_websocket import DELETE_3, tab

ONCE_HERE = {"scope": "session", "minutes": 480, "pin": "args", "single_use": True}


async def test_a_shaped_grant_from_the_card_covers_the_next_same_call_once(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    async with tab(http, "shape", "alice") as alice:
        await alice.send_json({"type": "message", "text": DELETE_3})
        cid = (await next_frame(alice, is_kind("confirmation", "pending")))["confirmation"]["id"]
        await alice.send_json(
            {"type": "decide", "id": cid, "decision": "approve", "grant": ONCE_HERE}
        )
        given = await next_frame(alice, said("🔓 alice"))
        assert "with exactly these arguments" in given["text"] and "once" in given["text"]
        [grant] = await live_grants(http)
        assert grant["single_use"] is True and grant["args_key"] is not None
        assert grant["granted_via"] == "web"

        # The same statement again (the row is gone; the call is what the grant names):
        # run unasked, once.
        await alice.send_json({"type": "message", "text": DELETE_3})
        await next_frame(alice, said("✅ 已按 alice 的授权"))
        assert await live_grants(http) == []
        await alice.send_json({"type": "message", "text": DELETE_3})
        await next_frame(alice, is_kind("confirmation", "pending"))
    assert not order_exists(gateway.settings.data_dir, 3)


async def test_a_shape_of_the_wrong_length_approves_once_without_a_grant(
    http: aiohttp.ClientSession,
) -> None:
    async with tab(http, "shape-long", "alice") as alice:
        await alice.send_json({"type": "message", "text": DELETE_3})
        cid = (await next_frame(alice, is_kind("confirmation", "pending")))["confirmation"]["id"]
        grant = {"scope": "session", "minutes": 600, "pin": "args"}
        await alice.send_json({"type": "decide", "id": cid, "decision": "approve", "grant": grant})
        await next_frame(alice, is_kind("confirmation_update", "approved"))
        refused = await next_frame(alice, said("已批准这一次，但未授予免确认"))
        assert "5 to 480 minutes" in refused["text"]
        assert await live_grants(http) == []


@pytest.mark.parametrize(
    ("grant", "reason"),
    [
        ({"scope": "session", "minutes": 30, "pin": "rows"}, 'pin must be "scope" or "args"'),
        ({"scope": "session", "minutes": 30, "single_use": 1}, "single_use must be true or"),
    ],
)
async def test_a_bad_shape_closes_the_socket_and_decides_nothing(
    gateway: Gateway, http: aiohttp.ClientSession, grant: object, reason: str
) -> None:
    async with tab(http, "bad-shape", "alice") as alice:
        await alice.send_json({"type": "message", "text": DELETE_3})
        cid = (await next_frame(alice, is_kind("confirmation")))["confirmation"]["id"]
        await alice.send_json({"type": "decide", "id": cid, "decision": "approve", "grant": grant})
        closed = await alice.receive(timeout=10)
        assert closed.type is aiohttp.WSMsgType.CLOSE
        assert closed.data == WSCloseCode.UNSUPPORTED_DATA
        assert reason in closed.extra
    assert [c.id for c in await gateway.confirmations.list_pending("webchat:bad-shape")] == [cid]
