"""The card's whole life in the web chat (issue 26): pending, approved and running, then
done, failed or interrupted with the short result, on every open tab, through the real
server's WebSocket. The card alone tells what happened: its frame carries the stage and
the sentence the page shows."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import aiohttp

from gateway.app import Gateway
from gateway.confirm.model import ExecState
from gateway.texts import Stage
from tests.support import demo_db_locked, drop_demo_orders, wait_record
from tests.webchat.support import is_kind, next_frame
from tests.webchat.test_websocket import DELETE_3, tab


def card_at(stage: Stage) -> Callable[[dict[str, Any]], bool]:
    def match(frame: dict[str, Any]) -> bool:
        return is_kind("confirmation_update")(frame) and frame["card"]["stage"] == stage.value

    return match


async def ask_and_approve(
    alice: aiohttp.ClientWebSocketResponse, before_approving: Callable[[], object] = lambda: None
) -> str:
    await alice.send_json({"type": "message", "text": DELETE_3})
    card = await next_frame(alice, is_kind("confirmation", "pending"))
    assert card["card"]["stage"] == "pending" and card["card"]["outcome"] is None
    before_approving()
    cid: str = card["confirmation"]["id"]
    await alice.send_json({"type": "decide", "id": cid, "decision": "approve"})
    return cid


async def test_every_tab_sees_the_card_go_from_approved_to_done_with_its_result(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    async with tab(http, "life", "alice") as alice, tab(http, "life", "bob") as bob:
        cid = await ask_and_approve(alice)
        for ws in (alice, bob):
            approved = await next_frame(ws, card_at(Stage.APPROVED))
            assert approved["card"]["outcome"].startswith(f"✅ [{cid}] alice 已批准")
            done = await next_frame(ws, card_at(Stage.DONE))
            assert done["confirmation"]["execution"]["state"] == "succeeded"
            assert done["card"]["outcome"].startswith(
                f"✔️ [{cid}] alice 已批准，sql_modify 已执行 / "
                "approved by alice; sql_modify done: DELETE: 1 行 / 1 row"
            )
            # The card offers the undo: a button that says "撤销 <id>" (docs/undo.md).
            assert done["card"]["undo"] == f"撤销 {cid}"


async def test_the_card_ends_failed_when_the_run_fails(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    async with tab(http, "life-f", "alice") as alice:
        cid = await ask_and_approve(alice, lambda: drop_demo_orders(gateway.settings))
        failed = await next_frame(alice, card_at(Stage.FAILED))
        result = failed["confirmation"]["execution"]["result"]
        assert result and failed["card"]["outcome"] == (
            f"❌ [{cid}] alice 已批准，sql_modify 执行失败 / "
            f"approved by alice; sql_modify failed: {result}"
        )


async def test_the_card_ends_interrupted_when_its_run_is_cut_off(
    gateway: Gateway, http: aiohttp.ClientSession
) -> None:
    async with tab(http, "life-i", "alice") as alice:
        with contextlib.ExitStack() as locked:
            cid = await ask_and_approve(
                alice, lambda: locked.enter_context(demo_db_locked(gateway.settings))
            )
            await wait_record(
                gateway, cid, lambda c: c.execution.state is ExecState.RUNNING, what="running"
            )
            # As a replica that adopted this one's calls does when its heartbeat lapsed.
            me = gateway.confirmations.instance.id
            assert await gateway.confirmations.interrupt(cid, claimer=me) is not None
            interrupted = await next_frame(alice, card_at(Stage.INTERRUPTED))
        said = interrupted["card"]["outcome"]
        assert said.startswith(f"⚠️ [{cid}] alice 已批准，sql_modify 已中断")
        assert said.endswith(
            "interrupted: it may or may not have taken effect; ask again to re-run"
        )
