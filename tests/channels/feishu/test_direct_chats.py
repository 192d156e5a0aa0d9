"""Approvers' direct chats and grant buttons on Feishu (issue 15, items 2 and 4), through the
real lark-oapi long connection against the fake platform.

A four-eyes or critical call also goes to each approver's direct chat (a send by open_id);
a decision in any copy settles the call and every copy is patched; the group card's
"skip asking for 30 min" button approves and grants.
"""

from __future__ import annotations

from typing import Any

import pytest

from config.settings import Settings
from gateway import texts
from gateway.app import Gateway
from gateway.confirm.model import Confirmation, ExecState, Risk, Status
from gateway.texts import approvers as approver_texts
from tests.channels.feishu.conftest import (
    ALICE,
    BOT_MENTION,
    buttons,
    card_sends,
    card_text,
    make_settings,
    order_ids,
    sent_texts,
    wait_pending,
    wait_status,
    wait_until,
)
from tests.fakes.feishu import FakeFeishu, RecordedRequest, card_action_event, message_event
from tests.support import ShiftedClock, pass_deadline, wait_record

BOB = "ou_bob"
CAROL = "ou_carol"
GROUP = "oc_group_dm"


def group_msg(sender: str, text: str) -> dict[str, Any]:
    return message_event(
        chat_id=GROUP,
        chat_type="group",
        sender=sender,
        text=f"@_user_1 {text}",
        mentions=[BOT_MENTION],
    )


def click(
    conf: Confirmation, operator: str, message_id: str, chat: str, **extra: Any
) -> dict[str, Any]:
    value = {"confirmation_id": conf.id, "decision": "approve", **extra}
    return card_action_event(
        operator=operator, value=value, open_message_id=message_id, open_chat_id=chat
    )


async def admin_part(gw: Gateway, name: str) -> str:
    """A part of the /admin page (loopback without a token: no login needed)."""
    import aiohttp

    assert gw.http is not None
    async with aiohttp.ClientSession() as http, http.get(f"{gw.http.url}/admin/part/{name}") as r:
        assert r.status == 200, await r.text()
        return await r.text()


def decisions(card: dict[str, Any]) -> list[str]:
    return [b["behaviors"][0]["value"]["decision"] for b in buttons(card)]


@pytest.fixture
def settings(tmp_path: Any, fake: FakeFeishu) -> Settings:
    # Medium-risk calls need a second person; bob and carol approve on Feishu.
    return make_settings(
        tmp_path, fake, approvers=[BOB, CAROL], policy={"four_eyes_risks": ["medium"]}
    )


async def copies(fake: FakeFeishu) -> tuple[RecordedRequest, dict[str, RecordedRequest]]:
    """The group's card and each approver's direct copy, once all were sent."""
    group = await fake.wait_request(
        lambda r: r in card_sends(fake) and r.body["receive_id"] == GROUP, what="group card"
    )
    direct = {
        who: await fake.wait_request(
            lambda r, who=who: r in fake.direct_sends(who), what=f"{who}'s direct copy"
        )
        for who in (BOB, CAROL)
    }
    return group, direct


async def test_four_eyes_call_reaches_each_approver_and_one_dm_settles_every_copy(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 3"))
    [conf] = await wait_pending(gateway)
    assert conf.four_eyes
    group, direct = await copies(fake)
    assert texts.GRANT_BUTTON not in card_text(group.content)  # never on four-eyes calls
    for who, send in direct.items():
        assert send.query == {"receive_id_type": "open_id"}
        assert send.body["msg_type"] == "interactive"
        assert decisions(send.content) == ["approve", "reject"]
        assert approver_texts.direct_intro(conf) in card_text(send.content)
        assert f"确认 {conf.id}" in card_text(send.content), who
    # One ref per copy, on the record (the store is what another process reads).
    refs = {
        "feishu_message_id": group.message_id,
        f"feishu_dm:{BOB}": direct[BOB].message_id,
        f"feishu_dm:{CAROL}": direct[CAROL].message_id,
    }
    await wait_record(gateway, conf.id, lambda c: dict(c.prompt_refs) == refs, what="refs")
    # The admin page marks it as waiting for an approver, and says who was sent it.
    page = await admin_part(gateway, "pending")
    assert "waiting for an approver or you" in page and "waits-for-approver" in page
    assert f'<span class="told">{BOB}, {CAROL}</span>' in page

    # Bob answers from his direct chat, by id.
    fake.send_frame(message_event(chat_id=fake.p2p_chat(BOB), sender=BOB, text=f"确认 {conf.id}"))
    done = await wait_status(gateway, conf.id, Status.APPROVED)
    assert done.decided_by == BOB
    await wait_until(lambda: 3 not in order_ids(settings), what="row 3 deleted")
    for message_id in refs.values():
        assert message_id is not None
        await wait_until(
            lambda m=message_id: "已批准" in card_text(fake.card(m)),
            what=f"card {message_id} patched",
        )
        # No decision is left to make; the group card may offer undo once the run ended.
        left = {b.get("element_id") for b in buttons(fake.card(message_id))}
        assert left <= {"btn_undo"}, left
    # The group hears it in words too (the card may have scrolled away).
    await wait_until(
        lambda: any(f"[{conf.id}] {BOB} 已批准" in t for t in sent_texts(fake)), what="outcome"
    )

    # Carol clicks her copy afterwards: told it is settled; the call ran once.
    late = fake.send_frame(click(conf, CAROL, direct[CAROL].message_id, fake.p2p_chat(CAROL)))
    ack = await fake.wait_ack(late)
    assert ack.data["toast"]["type"] == "info"
    assert f"by {BOB}" in ack.data["toast"]["content"]
    ran = await wait_record(
        gateway, conf.id, lambda c: c.execution.state.is_final, what="the run to end"
    )
    assert ran.execution.state is ExecState.SUCCEEDED
    assert ran.execution.attempts == 1
    events = await gateway.confirmations.store.events(conf.id)
    assert [e.kind for e in events].count("started") == 1


async def test_a_click_in_a_direct_copy_decides_and_patches_the_others(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 4"))
    [conf] = await wait_pending(gateway)
    group, direct = await copies(fake)
    await wait_record(gateway, conf.id, lambda c: len(c.prompt_refs) == 3, what="refs")
    reject = click(conf, CAROL, direct[CAROL].message_id, fake.p2p_chat(CAROL), decision="reject")
    ack = await fake.wait_ack(fake.send_frame(reject))
    assert ack.data["toast"]["type"] == "success"
    assert "已拒绝 / rejected" in card_text(ack.data["card"]["data"])
    await wait_status(gateway, conf.id, Status.REJECTED)
    for send in (group, direct[BOB]):
        assert send.message_id is not None
        await wait_until(
            lambda m=send.message_id: "已拒绝 / rejected" in card_text(fake.card(m)),
            what="the other copies patched",
        )
    assert 4 in order_ids(settings)


async def test_critical_call_reaches_approvers_and_expiry_updates_every_copy(
    tmp_path: Any, fake: FakeFeishu
) -> None:
    from gateway.app import build

    settings = make_settings(tmp_path, fake, approvers=[BOB, ALICE])
    clock = ShiftedClock()  # the deadline passes once the copies are out, not on a timer
    async with await build(settings, clock=clock) as gw:
        await fake.wait_connected()
        fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders"))
        [conf] = await wait_pending(gw)
        assert conf.risk is Risk.CRITICAL and not conf.four_eyes
        bob_copy = await fake.wait_request(lambda r: r in fake.direct_sends(BOB), what="copy")
        assert fake.direct_sends(ALICE) == []  # the requester is not sent a copy
        assert texts.GRANT_BUTTON not in card_text(bob_copy.content)  # never on critical calls
        await wait_record(gw, conf.id, lambda c: len(c.prompt_refs) == 2, what="refs")
        assert gw.confirmations is not None
        await pass_deadline(gw.confirmations, clock, conf.id)
        await wait_status(gw, conf.id, Status.EXPIRED)
        assert bob_copy.message_id is not None
        await wait_until(
            lambda: "已过期 / expired" in card_text(fake.card(bob_copy.message_id)),
            what="bob's copy shows the expiry",
        )
        assert set(order_ids(settings)) >= {1, 2, 3}


async def test_grant_button_approves_and_the_next_same_call_runs_without_asking(
    tmp_path: Any, fake: FakeFeishu
) -> None:
    from gateway.app import build

    settings = make_settings(tmp_path, fake)
    async with await build(settings) as gw:
        await fake.wait_connected()
        fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 5"))
        [conf] = await wait_pending(gw)
        send = await fake.wait_request(lambda r: r in card_sends(fake), what="card")
        [grant_button] = [b for b in buttons(send.content) if b["element_id"] == "btn_grant"]
        assert grant_button["text"]["content"] == texts.GRANT_BUTTON
        value = grant_button["behaviors"][0]["value"]
        assert send.message_id is not None
        ack = await fake.wait_ack(
            fake.send_frame(
                card_action_event(
                    operator=ALICE, value=value, open_message_id=send.message_id, open_chat_id=GROUP
                )
            )
        )
        assert ack.data["toast"]["type"] == "success"
        await wait_status(gw, conf.id, Status.APPROVED)
        [grant] = await gw.confirmations.grants.live()
        assert (grant.scope, grant.granted_by, grant.granted_via) == ("session", ALICE, "card")
        assert round(grant.expires_at - grant.created_at) == 30 * 60
        await wait_until(
            lambda: texts.grant_given(grant) in sent_texts(fake), what="the grant announced"
        )
        await wait_until(lambda: 5 not in order_ids(settings), what="row 5 deleted")

        # The same tool again in the same session: it runs at once, and the chat says by
        # whose grant until when.
        fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 6"))
        await wait_until(lambda: 6 not in order_ids(settings), what="row 6 deleted unasked")
        await wait_until(
            lambda: texts.grant_used("sql_modify", grant, now=grant.created_at) in sent_texts(fake),
            what="the grant named in the chat",
        )
        assert len(await gw.confirmations.list()) == 1  # nobody was asked the second time


async def test_a_decision_on_another_replica_patches_every_copy_from_the_stored_refs(
    tmp_path: Any, fake: FakeFeishu
) -> None:
    import aiohttp

    from gateway.app import build
    from tests.services import REDIS_URL, redis_prefix

    token = "replica-admin-token-0123456789"
    async with redis_prefix() as prefix:
        confirmation = {"store": "redis", "redis_url": REDIS_URL, "redis_prefix": prefix}
        settings = make_settings(
            tmp_path,
            fake,
            approvers=[BOB],
            policy={"four_eyes_risks": ["medium"]},
            confirmation=confirmation,
            admin_token=token,
        )
        async with await build(settings) as first:
            await fake.wait_connected()
            async with await build(settings) as second:
                await fake.wait_connected(2)
                # Feishu gives each event to one connection: here the second replica's.
                fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 7"))
                [conf] = await wait_pending(second)
                group = await fake.wait_request(lambda r: r in card_sends(fake), what="card")
                bob = await fake.wait_request(lambda r: r in fake.direct_sends(BOB), what="copy")
                await wait_record(first, conf.id, lambda c: len(c.prompt_refs) == 2, what="refs")

                # The first replica, which sent nothing, decides through its admin API.
                assert first.http is not None
                async with (
                    aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http,
                    http.post(
                        f"{first.http.url}/api/confirmations/{conf.id}/decision",
                        json={"decision": "approve", "actor": "oncall"},
                    ) as resp,
                ):
                    assert resp.status == 200, await resp.text()
                for send in (group, bob):
                    assert send.message_id is not None
                    await wait_until(
                        lambda m=send.message_id: "已批准" in card_text(fake.card(m)),
                        what=f"copy {send.message_id} patched by the other replica",
                    )
                await wait_until(lambda: 7 not in order_ids(settings), what="row 7 deleted")
                ran = await wait_record(
                    second, conf.id, lambda c: c.execution.state.is_final, what="the run"
                )
                assert (ran.execution.state, ran.execution.attempts) == (ExecState.SUCCEEDED, 1)


async def test_a_prompt_shown_again_after_a_restart_keeps_every_copy_updatable(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    from gateway.bus import OutboundKind, OutboundMessage

    fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 8"))
    [conf] = await wait_pending(gateway)
    first, direct = await copies(fake)
    stored = await wait_record(gateway, conf.id, lambda c: len(c.prompt_refs) == 3, what="refs")
    # What a process that adopts the call after a restart posts (gateway/confirm/replicas.py).
    await gateway.bus.publish_outbound(
        OutboundMessage(
            channel="feishu",
            chat_id=GROUP,
            kind=OutboundKind.CONFIRMATION,
            text=texts.prompt_reposted(stored, stored.created_at),
            confirmation=stored,
        )
    )
    second = await fake.wait_request(
        lambda r: r in card_sends(fake) and r.message_id != first.message_id, what="card again"
    )
    await wait_record(gateway, conf.id, lambda c: len(c.prompt_refs) == 4, what="both cards")
    assert len(fake.direct_sends()) == 2  # the approvers' copies still work: not sent again

    fake.send_frame(message_event(chat_id=fake.p2p_chat(BOB), sender=BOB, text=f"确认 {conf.id}"))
    await wait_status(gateway, conf.id, Status.APPROVED)
    for message_id in (first.message_id, second.message_id, direct[BOB].message_id):
        assert message_id is not None
        await wait_until(
            lambda m=message_id: "已批准" in card_text(fake.card(m)),
            what=f"card {message_id} patched",
        )


async def test_the_requester_cannot_approve_her_own_four_eyes_call_by_click_or_reply(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    """Four-eyes on Feishu. First tests: tests/core/test_confirmations.py::
    test_four_eyes_requester_may_reject_not_approve, tests/agent/test_model_safety.py::
    test_four_eyes_requester_cannot_approve_an_approver_can."""
    fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 5"))
    [conf] = await wait_pending(gateway)
    assert conf.four_eyes
    group, _ = await copies(fake)
    assert group.message_id is not None
    # Her click on the group card: a toast saying why, the card unchanged.
    ack = await fake.wait_ack(fake.send_frame(click(conf, ALICE, group.message_id, GROUP)))
    assert ack.data["toast"]["content"] == texts.FOUR_EYES
    assert "card" not in ack.data
    # Her typed 确认: told the same in the group.
    fake.send_frame(group_msg(ALICE, "确认"))
    await wait_until(lambda: texts.FOUR_EYES in sent_texts(fake), what="the four-eyes notice")
    assert (await wait_status(gateway, conf.id, Status.PENDING)).decided_by is None
    assert 5 in order_ids(settings)
    assert fake.patches(group.message_id) == []
    # Bob's click is the second person's.
    ack = await fake.wait_ack(fake.send_frame(click(conf, BOB, group.message_id, GROUP)))
    assert ack.data["toast"]["type"] == "success"
    assert (await wait_status(gateway, conf.id, Status.APPROVED)).decided_by == BOB
    await wait_until(lambda: 5 not in order_ids(settings), what="row 5 deleted")


async def test_an_approvers_reply_by_id_from_another_group_decides_nothing(
    gateway: Gateway, fake: FakeFeishu, settings: Settings
) -> None:
    """Only a direct chat stands in for the chat that asked. First test:
    tests/core/test_direct_replies.py::test_nobody_else_and_no_group_decides_from_elsewhere."""
    fake.send_frame(group_msg(ALICE, "/sql DELETE FROM orders WHERE id = 6"))
    [conf] = await wait_pending(gateway)
    await copies(fake)
    elsewhere = message_event(
        chat_id="oc_other_group",
        chat_type="group",
        sender=BOB,
        text=f"@_user_1 确认 {conf.id}",
        mentions=[BOT_MENTION],
    )
    fake.send_frame(elsewhere)
    await wait_until(
        lambda: texts.unknown_id(conf.id) in sent_texts(fake), what="the no-such-call answer"
    )
    assert (await wait_status(gateway, conf.id, Status.PENDING)).decided_by is None
    assert 6 in order_ids(settings)
    # From his direct chat the same words decide.
    fake.send_frame(message_event(chat_id=fake.p2p_chat(BOB), sender=BOB, text=f"确认 {conf.id}"))
    assert (await wait_status(gateway, conf.id, Status.APPROVED)).decided_by == BOB
