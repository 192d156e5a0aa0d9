"""Long-connection mode end to end: the real lark-oapi ws client and gateway, a fake Feishu."""

from __future__ import annotations

import asyncio
import time

from config.settings import Settings
from gateway import texts
from gateway.app import Gateway, build
from gateway.confirm.model import Status
from tests.channels.feishu.conftest import (
    ALICE,
    BOT_MENTION,
    MALLORY,
    buttons,
    card_sends,
    card_text,
    order_ids,
    sent_texts,
    wait_pending,
    wait_status,
    wait_until,
)
from tests.fakes.feishu import FakeFeishu, card_action_event, message_event
from tests.support import ShiftedClock, pass_deadline, wait_record

P2P = "oc_p2p_alice"
GROUP = "oc_group_1"


def _click(conf_id: str, decision: str, *, operator: str, message_id: str, chat: str) -> dict:  # type: ignore[type-arg]
    return card_action_event(
        operator=operator,
        value={"confirmation_id": conf_id, "decision": decision},
        open_message_id=message_id,
        open_chat_id=chat,
    )


async def test_p2p_delete_card_click_approves_and_patches_card(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    assert 3 in order_ids(settings)
    frame = fake.send_frame(
        message_event(chat_id=P2P, sender=ALICE, text="/sql DELETE FROM orders WHERE id = 3")
    )
    ack = await fake.wait_ack(frame)
    assert ack.code == 200

    [conf] = await wait_pending(gateway)
    assert conf.requester == ALICE
    assert conf.session_key == f"feishu:{P2P}"
    send = await fake.wait_request(lambda r: r in card_sends(fake), what="card send")
    assert send.query == {"receive_id_type": "chat_id"}
    assert send.body["receive_id"] == P2P
    assert send.body["uuid"]
    card = send.content
    assert card["schema"] == "2.0"
    assert card["config"]["update_multi"] is True
    values = [b["behaviors"][0]["value"] for b in buttons(card)]
    assert values == [
        {"confirmation_id": conf.id, "decision": "approve"},
        {"confirmation_id": conf.id, "decision": "reject"},
        # "skip asking for 30 min": approve and grant (gateway/confirm/grants.py).
        {"confirmation_id": conf.id, "decision": "approve", "grant_minutes": 30},
    ]
    assert all(b["behaviors"][0]["type"] == "callback" for b in buttons(card))
    assert f"或 确认 {conf.id} / 取消 {conf.id}" in card_text(card)
    assert "DELETE FROM orders WHERE id = 3" in card_text(card)
    assert send.message_id is not None

    click = fake.send_frame(
        _click(conf.id, "approve", operator=ALICE, message_id=send.message_id, chat=P2P)
    )
    click_ack = await fake.wait_ack(click)
    assert click_ack.code == 200
    assert click_ack.data["toast"]["type"] == "success"
    new_card = click_ack.data["card"]["data"]
    assert buttons(new_card) == []
    assert "已批准 / approved" in card_text(new_card)

    done = await wait_status(gateway, conf.id, Status.APPROVED)
    assert done.decided_by == ALICE
    assert done.decided_via == "card"
    await wait_until(lambda: 3 not in order_ids(settings), what="row 3 deleted")
    patch = await fake.wait_request(
        lambda r: r.op == "patch" and r.message_id == send.message_id, what="card patch"
    )
    assert patch.status == 200
    assert buttons(patch.content) == []
    assert "已批准 / approved" in card_text(patch.content)


async def test_type_card_frame_is_dispatched_and_acked(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    fake.send_frame(
        message_event(chat_id=P2P, sender=ALICE, text="/sql DELETE FROM orders WHERE id = 2")
    )
    [conf] = await wait_pending(gateway)
    send = await fake.wait_request(lambda r: r in card_sends(fake), what="card send")
    assert send.message_id is not None
    # lark-oapi 1.7.5 drops type=card frames without dispatch or ack; the channel must not.
    click = fake.send_frame(
        _click(conf.id, "reject", operator=ALICE, message_id=send.message_id, chat=P2P),
        frame_type="card",
    )
    ack = await fake.wait_ack(click)
    assert ack.code == 200
    assert "已拒绝 / rejected" in card_text(ack.data["card"]["data"])
    await wait_status(gateway, conf.id, Status.REJECTED)
    assert 2 in order_ids(settings)


async def test_group_requester_text_approves_other_member_decides_nothing(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    def group_msg(sender: str, text: str) -> dict:  # type: ignore[type-arg]
        return message_event(
            chat_id=GROUP,
            chat_type="group",
            sender=sender,
            text=f"@_user_1 {text}",
            mentions=[BOT_MENTION],
        )

    fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 4"))
    [conf] = await wait_pending(gateway)
    assert conf.is_group
    send = await fake.wait_request(lambda r: r in card_sends(fake), what="card send")
    assert send.message_id is not None

    # Another member's typed 确认 is not a decision; they are told so.
    fake.send_frame(group_msg(MALLORY, "确认"))
    await wait_until(
        lambda: any(texts.ONLY_APPROVERS in t for t in sent_texts(fake)), what="the notice"
    )
    # Nor is their click: a toast, and the card stays as it was.
    click = fake.send_frame(
        _click(conf.id, "approve", operator=MALLORY, message_id=send.message_id, chat=GROUP)
    )
    ack = await fake.wait_ack(click)
    assert ack.data["toast"]["content"] == texts.ONLY_APPROVERS
    assert "card" not in ack.data
    assert (await wait_status(gateway, conf.id, Status.PENDING)).decided_by is None
    assert 4 in order_ids(settings)
    assert fake.requests_for("patch") == []

    fake.send_frame(group_msg(ALICE, "确认"))
    done = await wait_status(gateway, conf.id, Status.APPROVED)
    assert done.decided_via == "text"
    await wait_until(lambda: 4 not in order_ids(settings), what="row 4 deleted")
    # Decided elsewhere than on the card: the card is patched for everyone.
    patch = await fake.wait_request(
        lambda r: r.op == "patch" and r.message_id == send.message_id, what="card patch"
    )
    assert "已批准 / approved" in card_text(patch.content)


async def test_three_unclear_replies_reject_the_call_and_patch_its_card(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    """Unclear replies are asked about twice, then the call is rejected, never run. First
    test: tests/core/test_confirmations.py::test_three_unclear_replies_reject."""
    fake.send_frame(
        message_event(chat_id=P2P, sender=ALICE, text="/sql DELETE FROM orders WHERE id = 5")
    )
    [conf] = await wait_pending(gateway)
    send = await fake.wait_request(lambda r: r in card_sends(fake), what="card send")
    for left in (2, 1):
        fake.send_frame(message_event(chat_id=P2P, sender=ALICE, text="确认吗？"))
        await wait_until(
            lambda left=left: any(f"还可 {left} 次" in t for t in sent_texts(fake)),
            what=f"the unclear notice, {left} left",
        )
        assert (await wait_status(gateway, conf.id, Status.PENDING)).decided_by is None
    fake.send_frame(message_event(chat_id=P2P, sender=ALICE, text="确认吗？"))
    done = await wait_status(gateway, conf.id, Status.REJECTED)
    assert (done.decided_by, done.reason) == (ALICE, texts.TOO_MANY_UNCLEAR)
    patch = await fake.wait_request(
        lambda r: r.op == "patch" and r.message_id == send.message_id, what="card patch"
    )
    assert buttons(patch.content) == []
    assert "已拒绝 / rejected" in card_text(patch.content)
    assert 5 in order_ids(settings)


async def test_group_message_without_mention_is_ignored(gateway: Gateway, fake: FakeFeishu) -> None:
    fake.send_frame(message_event(chat_id=GROUP, chat_type="group", sender=ALICE, text="/help"))
    fake.send_frame(
        message_event(
            chat_id=GROUP,
            chat_type="group",
            sender=ALICE,
            text="@_user_1 /pending",
            mentions=[BOT_MENTION],
        )
    )
    # One chat's messages are answered in order: once /pending is answered, an answer to
    # the unmentioned /help would have come first.
    await wait_until(lambda: any("没有待确认" in t for t in sent_texts(fake)), what="/pending")
    assert not any("/sql" in t for t in sent_texts(fake))


async def test_same_event_twice_runs_once(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    event = message_event(chat_id=P2P, sender=ALICE, text="/sql DELETE FROM orders WHERE id = 5")
    first = fake.send_frame(event)
    second = fake.send_frame(event)  # a redelivery: same message_id, new frame
    assert (await fake.wait_ack(first)).code == 200
    assert (await fake.wait_ack(second)).code == 200
    [conf] = await wait_pending(gateway)
    send = await fake.wait_request(lambda r: r in card_sends(fake), what="card send")
    assert send.message_id is not None
    click = fake.send_frame(
        _click(conf.id, "approve", operator=ALICE, message_id=send.message_id, chat=P2P)
    )
    await fake.wait_ack(click)
    await wait_status(gateway, conf.id, Status.APPROVED)
    await wait_until(lambda: 5 not in order_ids(settings), what="row 5 deleted")
    assert gateway.confirmations is not None
    assert len(await gateway.confirmations.list()) == 1
    assert len(card_sends(fake)) == 1


async def test_reconnects_after_the_server_drops_the_connection(
    gateway: Gateway, fake: FakeFeishu
) -> None:
    fake.drop_connection()
    await fake.wait_connected(opened=2)
    assert len(fake.requests_for("endpoint")) >= 2
    fake.send_frame(message_event(chat_id=P2P, sender=ALICE, text="/help"))
    await wait_until(lambda: any("/sql" in t for t in sent_texts(fake)), what="/help answer")


async def test_timeout_patches_open_card_to_expired(tmp_path, fake: FakeFeishu) -> None:  # type: ignore[no-untyped-def]
    from tests.channels.feishu.conftest import make_settings

    settings = make_settings(tmp_path, fake)
    clock = ShiftedClock()  # the deadline passes once the card is out, not on a timer
    async with await build(settings, clock=clock) as gw:
        await fake.wait_connected()
        fake.send_frame(
            message_event(chat_id=P2P, sender=ALICE, text="/sql DELETE FROM orders WHERE id = 6")
        )
        [conf] = await wait_pending(gw)
        send = await fake.wait_request(lambda r: r in card_sends(fake), what="card send")
        await wait_record(gw, conf.id, lambda c: bool(c.prompt_refs), what="the card's ref")
        assert gw.confirmations is not None
        await pass_deadline(gw.confirmations, clock, conf.id)
        await wait_status(gw, conf.id, Status.EXPIRED)
        patch = await fake.wait_request(
            lambda r: r.op == "patch" and r.message_id == send.message_id, what="card patch"
        )
        # No decision left; only 重新发起 / Ask again (gateway/confirm/again.py).
        assert [b["element_id"] for b in buttons(patch.content)] == ["btn_again"]
        assert "已过期 / expired" in card_text(patch.content)
        assert 6 in order_ids(settings)


async def test_stop_ends_the_connection(settings: Settings, fake: FakeFeishu) -> None:
    gw = await build(settings)
    await gw.start()
    try:
        await fake.wait_connected()

        def connection() -> list[asyncio.Task[object]]:
            return [t for t in asyncio.all_tasks() if t.get_name().startswith("feishu-ws")]

        # The connection runs on the gateway's loop (issue 14: no thread of its own). The
        # fake sees the socket before the gateway has started reading and pinging on it.
        await wait_until(
            lambda: (
                {"feishu-ws", "feishu-ws-receive", "feishu-ws-ping"}
                <= {t.get_name() for t in connection()}
            ),
            what="the connection's tasks",
        )
        running = connection()
    finally:
        await gw.stop()
    assert all(t.done() for t in running)
    await wait_until(lambda: fake.live_connections == 0, what="socket closed")


async def test_second_click_on_a_decided_card_changes_nothing(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    fake.send_frame(
        message_event(chat_id=P2P, sender=ALICE, text="/sql DELETE FROM orders WHERE id = 8")
    )
    [conf] = await wait_pending(gateway)
    send = await fake.wait_request(lambda r: r in card_sends(fake), what="card send")
    assert send.message_id is not None
    first = fake.send_frame(
        _click(conf.id, "reject", operator=ALICE, message_id=send.message_id, chat=P2P)
    )
    await fake.wait_ack(first)
    # A second client still showing the buttons: the first decision stands.
    second = fake.send_frame(
        _click(conf.id, "approve", operator=ALICE, message_id=send.message_id, chat=P2P)
    )
    ack = await fake.wait_ack(second)
    assert ack.data["toast"]["type"] == "info"
    assert "已处理" in ack.data["toast"]["content"]
    assert "已拒绝 / rejected" in card_text(ack.data["card"]["data"])
    assert (await wait_status(gateway, conf.id, Status.REJECTED)).decided_via == "card"
    assert 8 in order_ids(settings)


async def test_chunked_frame_and_unsupported_type(gateway: Gateway, fake: FakeFeishu) -> None:
    # Feishu may split a large event over several frames (sum/seq headers).
    fake.send_frame(
        message_event(chat_id=P2P, sender=ALICE, text="/sql SELECT * FROM orders"), chunks=3
    )
    await wait_until(lambda: any("Alice" in t for t in sent_texts(fake)), what="query answer")
    # An image is not dropped silently: the sender is told what works.
    fake.send_frame(
        message_event(
            chat_id=P2P,
            sender=ALICE,
            text="",
            message_type="image",
            content={"image_key": "img_v2_x"},
        )
    )
    await wait_until(
        lambda: texts.FEISHU_UNSUPPORTED_MESSAGE in sent_texts(fake), what="unsupported notice"
    )


async def test_a_redelivered_unsupported_message_is_answered_once(
    gateway: Gateway, fake: FakeFeishu
) -> None:
    # Never published, so the bus's window is asked before the notice is sent.
    image = message_event(
        chat_id=P2P,
        sender=ALICE,
        text="",
        message_id="om_image_twice",
        message_type="image",
        content={"image_key": "img_v2_y"},
    )
    for _ in range(2):
        assert (await fake.wait_ack(fake.send_frame(image))).code == 200
    fake.send_frame(message_event(chat_id=P2P, sender=ALICE, text="/sql SELECT * FROM orders"))
    await wait_until(lambda: any("Alice" in t for t in sent_texts(fake)), what="query answer")
    assert sent_texts(fake).count(texts.FEISHU_UNSUPPORTED_MESSAGE) == 1


async def test_other_event_types_and_broken_events_are_acked_not_redelivered(
    gateway: Gateway, fake: FakeFeishu
) -> None:
    # lark-oapi's dispatcher answered an event type without a handler with code 500
    # ("processor not found"), so Feishu sent it again; the events are read here now.
    added = {
        "schema": "2.0",
        "header": {"event_id": "e-added", "event_type": "im.chat.member.bot.added_v1"},
        "event": {"chat_id": "oc_new_group"},
    }
    assert (await fake.wait_ack(fake.send_frame(added))).code == 200
    broken = {
        "schema": "2.0",
        "header": {"event_id": "e-broken", "event_type": "im.message.receive_v1"},
        "event": {"message": "not an object"},
    }
    assert (await fake.wait_ack(fake.send_frame(broken))).code == 200
    # The connection goes on: a real message after them is answered.
    fake.send_frame(message_event(chat_id=P2P, sender=ALICE, text="/help"))
    await wait_until(lambda: bool(sent_texts(fake)), what="an answer")


async def test_senders_outside_allow_from_are_refused(tmp_path, fake: FakeFeishu) -> None:  # type: ignore[no-untyped-def]
    from tests.channels.feishu.conftest import make_settings

    settings = make_settings(tmp_path, fake, allow_from=[ALICE])
    async with await build(settings) as gw:
        await fake.wait_connected()
        fake.send_frame(message_event(chat_id=P2P, sender=MALLORY, text="/help"))
        fake.send_frame(message_event(chat_id=P2P, sender=ALICE, text="/pending"))
        fake.send_frame(message_event(chat_id=P2P, sender=MALLORY, text="/help again"))
        fake.send_frame(message_event(chat_id=P2P, sender=ALICE, text="/pending"))
        # Answers in one chat go out in order: once Alice's second answer is out, anything
        # for Mallory's second message would have come before it.
        await wait_until(
            lambda: sum("没有待确认" in t for t in sent_texts(fake)) == 2, what="two /pending"
        )
        # Mallory is told once why the bot does not answer, and not on every message.
        said = sent_texts(fake)
        assert said.count(texts.NOT_ALLOWED) == 1
        assert len(said) == 3
        assert not any("/sql" in t for t in said)
        assert gw.confirmations is not None


async def test_a_burst_of_old_messages_after_a_reconnect_is_skipped(
    gateway: Gateway, fake: FakeFeishu
) -> None:
    an_hour_ago = int((time.time() - 3600) * 1000)
    fake.send_frame(
        message_event(chat_id=P2P, sender=ALICE, text="/help", create_time_ms=an_hour_ago)
    )
    fake.send_frame(message_event(chat_id=P2P, sender=ALICE, text="/pending"))
    # One chat's answers go out in order: an answer to the old /help would come first.
    await wait_until(lambda: any("没有待确认" in t for t in sent_texts(fake)), what="/pending")
    assert len(sent_texts(fake)) == 1
