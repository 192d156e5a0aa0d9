"""The card's whole life on DingTalk (issue 26): pending, approved and running, then done,
failed or interrupted with the short result, on the group's card and every approver's
direct copy (a card, or a text copy in HTTP mode), through the real dingtalk-stream client
against the fake platform. The card alone tells what happened; the chat hears the result
once, from the turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from channels.dingtalk.cards import out_track_id
from config.settings import Settings
from gateway import texts
from gateway.app import Gateway, build
from gateway.confirm.model import ExecState
from gateway.texts import Stage
from tests.channels.dingtalk.conftest import make_settings, shown, wait_pending, webhook_texts
from tests.channels.dingtalk.test_direct_chats import CARD_PATH, GROUP, _as, _post, direct
from tests.fakes.dingtalk import FakeDingTalk
from tests.support import demo_db_locked, drop_demo_orders, wait_record


def shows(params: dict[str, Any] | None, stage: Stage) -> bool:
    """The card says ``stage`` in its title and its variables, with no decision buttons
    left (a done change that kept its rows offers only 撤销 Undo: docs/undo.md)."""
    if not params:
        return False
    buttons = json.loads(params["sys_full_json_obj"])["msgButtons"]
    return (
        params["stage"] == stage.value
        and texts.stage_label(stage) in params["title"]
        and [b["id"] for b in buttons] in ([], ["undo"])
    )


@pytest.fixture
def settings(tmp_path: Path, fake: FakeDingTalk) -> Settings:
    # Medium-risk calls need a second person: bob and carol get a card of their own.
    return make_settings(
        tmp_path, fake, approvers=["bob", "carol"], policy={"four_eyes_risks": ["medium"]}
    )


async def test_every_card_ends_done_with_its_result(gateway: Gateway, fake: FakeDingTalk) -> None:
    fake.send_chatbot_message(
        text="/sql DELETE FROM orders WHERE id = 3", sender_staff_id="alice", **GROUP
    )
    [conf] = await wait_pending(gateway)
    await fake.wait_requests(CARD_PATH, 3)
    await wait_record(gateway, conf.id, lambda c: len(c.prompt_refs) == 3, what="refs")
    fake.send_chatbot_message(text=f"确认 {conf.id}", sender_staff_id="bob", **direct("bob"))

    # The turn says the result in the group after the cards' update went out (one chat,
    # one order): from then on every card must already show how the call ended.
    result = f"[{conf.id}] sql_modify 已执行"
    await fake.wait_until(
        lambda: any(result in t for t in webhook_texts(fake)), what="the result line"
    )
    tracks = [
        out_track_id(conf.id),
        *(out_track_id(conf.id, direct_to=w) for w in ("bob", "carol")),
    ]
    for track in tracks:
        params = fake.card(track)
        assert shows(params, Stage.DONE), params
        assert params is not None
        assert "DELETE: 1 行 / 1 row" in params["tips"]
        assert "DELETE: 1 行 / 1 row" in shown(params["markdown"])
    # ...and the chat read the result once: the cards' update posts nothing in the chat.
    assert sum(result in t for t in webhook_texts(fake)) == 1


async def test_the_card_ends_failed_when_the_run_fails(tmp_path: Path, fake: FakeDingTalk) -> None:
    settings = make_settings(tmp_path, fake)
    async with await build(settings) as gw:
        await fake.wait_connected()
        fake.send_chatbot_message(
            text="/sql DELETE FROM orders WHERE id = 4", sender_staff_id="alice", **GROUP
        )
        [conf] = await wait_pending(gw)
        await fake.wait_requests(CARD_PATH)
        drop_demo_orders(settings)  # approved as asked, it cannot run any more
        click = fake.send_card_callback(
            out_track_id=out_track_id(conf.id), user_id="alice", action_id="approve"
        )
        await fake.wait_ack(click)
        ended = await wait_record(
            gw, conf.id, lambda c: c.execution.state.is_final, what="the run to end"
        )
        assert ended.execution.state is ExecState.FAILED
        await fake.wait_until(
            lambda: shows(fake.card(out_track_id(conf.id)), Stage.FAILED), what="card failed"
        )
        params = fake.card(out_track_id(conf.id)) or {}
        assert ended.execution.result is not None and ended.execution.result in params["tips"]


async def test_the_card_ends_interrupted_when_its_run_is_cut_off(
    tmp_path: Path, fake: FakeDingTalk
) -> None:
    settings = make_settings(tmp_path, fake)
    async with await build(settings) as gw:
        await fake.wait_connected()
        fake.send_chatbot_message(
            text="/sql DELETE FROM orders WHERE id = 5", sender_staff_id="alice", **GROUP
        )
        [conf] = await wait_pending(gw)
        await fake.wait_requests(CARD_PATH)
        with demo_db_locked(settings):
            fake.send_chatbot_message(text="确认", sender_staff_id="alice", **GROUP)
            await wait_record(
                gw, conf.id, lambda c: c.execution.state is ExecState.RUNNING, what="running"
            )
            # As a replica that adopted this one's calls does when its heartbeat lapsed.
            me = gw.confirmations.instance.id
            assert await gw.confirmations.interrupt(conf.id, claimer=me) is not None
            await fake.wait_until(
                lambda: shows(fake.card(out_track_id(conf.id)), Stage.INTERRUPTED),
                what="card interrupted",
            )
        params = fake.card(out_track_id(conf.id)) or {}
        assert params["tips"].startswith(f"⚠️ [{conf.id}] alice 已批准，sql_modify 已中断")


async def test_a_text_copy_in_an_approvers_chat_hears_how_the_run_ended(
    tmp_path: Path, fake: FakeDingTalk
) -> None:
    # HTTP mode has no cards (their buttons would be dead): bob's copy is text, and each
    # stage after it reaches him as a new message.
    settings = make_settings(
        tmp_path, fake, mode="http", approvers=["bob"], policy={"four_eyes_risks": ["medium"]}
    )
    async with await build(settings) as gw:
        await _post(
            gw,
            fake,
            fake.chatbot_payload(text="/sql DELETE FROM orders WHERE id = 3", **_as("alice")),
        )
        [conf] = await wait_pending(gw)
        await wait_record(
            gw, conf.id, lambda c: c.prompt_refs.get("dingtalk_dm:bob") == "text", what="ref"
        )
        bob = {**_as("bob"), **direct("bob")}
        await _post(gw, fake, fake.chatbot_payload(text=f"确认 {conf.id}", **bob))
        await fake.wait_until(
            lambda: len(fake.one_to_one_sends("bob")) == 3, what="approved, then done"
        )
        copy, approved, done = (s["msgParam"] for s in fake.one_to_one_sends("bob"))
        assert approved["content"].startswith(f"✅ [{conf.id}] bob 已批准")
        assert done["content"].startswith(
            f"✔️ [{conf.id}] bob 已批准，sql_modify 已执行 / "
            "approved by bob; sql_modify done: DELETE: 1 行 / 1 row"
        )
        # ...and how to undo it (docs/undo.md).
        assert done["content"].endswith(f"reply undo {conf.id} to undo it")
