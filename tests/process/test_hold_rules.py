"""Rules of the hold checked on a real ``gateway serve`` process (issue 27, item 2).

Each rule here has a first test closer to the code it names (cited per test); these go in
through the daemon's own HTTP server, as a person or a platform would, and read the answer
back from what the daemon says and stores.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from channels.dingtalk.cards import out_track_id
from gateway import texts
from tests.channels.dingtalk.conftest import webhook_texts
from tests.channels.feishu.conftest import card_sends, sent_texts
from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.feishu import FakeFeishu, card_action_event, message_event, webhook_request
from tests.webchat.support import ServeProcess, eventually, order_exists, serve

TOKEN = "hold-rules-admin-token-0123456789"
FOUR_EYES = json.dumps([{"name": "deletes", "tool": "sql_modify", "four_eyes": True}])
ENCRYPT_KEY = "hold-rules-encrypt-key"
VERIFICATION = "hold-rules-verification-token"
ALICE = "ou_alice"
BOB = "ou_bob"
P2P = "oc_p2p_hold_rules"


async def say(http: aiohttp.ClientSession, room: str, user: str, text: str) -> None:
    async with http.post(f"/api/chat/{room}/messages", json={"user": user, "text": text}) as r:
        assert r.status == 202, await r.text()


async def history(http: aiohttp.ClientSession, room: str) -> list[dict[str, Any]]:
    async with http.get(f"/api/chat/{room}/messages", params={"after": "0"}) as resp:
        assert resp.status == 200, await resp.text()
        messages: list[dict[str, Any]] = (await resp.json())["messages"]
        return messages


async def prompts(http: aiohttp.ClientSession, room: str, count: int) -> list[dict[str, Any]]:
    """The room's first ``count`` confirmation cards, once there are that many."""

    async def probe() -> list[dict[str, Any]] | None:
        found = [
            m["confirmation"] for m in await history(http, room) if m["kind"] == "confirmation"
        ]
        return found[:count] if len(found) >= count else None

    return await eventually(probe, timeout=20)


async def text_with(http: aiohttp.ClientSession, room: str, *fragments: str) -> str:
    async def probe() -> str | None:
        for m in await history(http, room):
            if m["kind"] == "text" and all(f in m["text"] for f in fragments):
                return str(m["text"])
        return None

    return await eventually(probe, timeout=20)


async def updates(http: aiohttp.ClientSession, room: str) -> list[dict[str, Any]]:
    return [m for m in await history(http, room) if m["kind"] == "confirmation_update"]


async def test_a_bare_confirm_with_two_pending_asks_which_on_a_real_daemon(
    tmp_path: Path,
) -> None:
    """First test: tests/core/test_confirmations.py::test_two_pending_bare_confirm_asks_which."""
    with serve(tmp_path, GATEWAY_CHANNELS__WEBCHAT__APPROVERS='["carol"]') as daemon:
        async with aiohttp.ClientSession(base_url=daemon.url) as http:
            await say(http, "ops", "alice", "/sql DELETE FROM orders WHERE id = 3")
            await prompts(http, "ops", 1)
            await say(http, "ops", "bob", "/sql DELETE FROM orders WHERE id = 4")
            first, second = await prompts(http, "ops", 2)
            # Carol may decide both: a bare 确认 from her names neither, so she is asked.
            await say(http, "ops", "carol", "确认")
            await text_with(http, "ops", "请带上编号", first["id"], second["id"])
            assert await updates(http, "ops") == []
            # Naming one decides exactly that one.
            await say(http, "ops", "carol", f"确认 {second['id']}")
            await eventually(lambda: _gone(daemon, 4), timeout=20)
            # Its card only: approved, then (maybe not yet) done.
            assert {u["confirmation"]["id"] for u in await updates(http, "ops")} == {second["id"]}
            assert order_exists(daemon.data_dir, 3)
    assert daemon.error_lines() == []


async def test_four_eyes_holds_against_the_admin_api_on_a_real_daemon(tmp_path: Path) -> None:
    """First test: tests/webchat/test_four_eyes.py::
    test_the_admin_token_does_not_make_the_requester_a_second_person."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with serve(
        tmp_path,
        GATEWAY_ADMIN__TOKEN=TOKEN,
        GATEWAY_POLICY__RULES=FOUR_EYES,
        GATEWAY_CHANNELS__WEBCHAT__APPROVERS='["carol"]',
    ) as daemon:
        async with aiohttp.ClientSession(base_url=daemon.url, headers=auth) as http:
            await say(http, "ops", "alice", "/sql DELETE FROM orders WHERE id = 3")
            [prompt] = await prompts(http, "ops", 1)
            assert prompt["four_eyes"] is True
            path = f"/api/confirmations/{prompt['id']}"
            # The operator's token, the requester named as the actor: not a second person.
            body = {"decision": "approve", "actor": "alice"}
            async with http.post(f"{path}/decision", json=body) as resp:
                assert resp.status == 403, await resp.text()
                assert (await resp.json())["outcome"] == "forbidden"
            async with http.get(path) as resp:
                assert (await resp.json())["confirmation"]["status"] == "pending"
            assert order_exists(daemon.data_dir, 3)
            # Someone else's approval through the same API runs it.
            async with http.post(f"{path}/decision", json={**body, "actor": "carol"}) as resp:
                assert resp.status == 200, await resp.text()
            await eventually(lambda: _gone(daemon, 3), timeout=20)
    assert daemon.error_lines() == []


async def test_a_web_user_cannot_decide_another_rooms_call_on_a_real_daemon(
    tmp_path: Path,
) -> None:
    """First test: tests/webchat/test_websocket.py::
    test_a_web_user_cannot_decide_another_rooms_confirmation (in process)."""
    with serve(tmp_path) as daemon:
        async with aiohttp.ClientSession(base_url=daemon.url) as http:
            await say(http, "room-a", "alice", "/sql DELETE FROM orders WHERE id = 3")
            [prompt] = await prompts(http, "room-a", 1)
            cid = prompt["id"]
            # The requester herself, from another room's tab: a click by id finds nothing.
            async with http.ws_connect("/ws?session=room-b&user=alice") as ws:
                await ws.send_json({"type": "decide", "id": cid, "decision": "approve"})
                answer = await _decision_frame(ws)
            assert answer["outcome"] == "not_found"
            # Typed there, by id: a web room is a group, not her direct chat.
            await say(http, "room-b", "alice", f"确认 {cid}")
            await text_with(http, "room-b", f"没有待确认的 {cid}")
            assert await updates(http, "room-a") == []
            assert order_exists(daemon.data_dir, 3)
            # In its own room the same click decides.
            async with http.ws_connect("/ws?session=room-a&user=alice") as ws:
                await ws.send_json({"type": "decide", "id": cid, "decision": "approve"})
                assert (await _decision_frame(ws))["outcome"] == "decided"
            await eventually(lambda: _gone(daemon, 3), timeout=20)
    assert daemon.error_lines() == []


async def _decision_frame(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    while True:
        frame: dict[str, Any] = json.loads((await ws.receive(timeout=20)).data)
        if frame["type"] == "decision":
            return frame


async def _gone(daemon: ServeProcess, order_id: int) -> bool:
    return not order_exists(daemon.data_dir, order_id)


# ---------------------------------------------------------------------- Feishu webhook


@contextmanager
def feishu_serve(tmp_path: Path, **env: str) -> Iterator[tuple[ServeProcess, FakeFeishu]]:
    """``gateway serve`` with the Feishu channel in webhook mode (signed, encrypted), its
    replies going to the loopback fake Feishu; ``env``: more settings."""
    with (
        FakeFeishu(app_id="cli_" + uuid.uuid4().hex[:10], bot_open_id="ou_bot") as fake,
        serve(
            tmp_path,
            GATEWAY_CHANNELS__FEISHU__ENABLED="true",
            GATEWAY_CHANNELS__FEISHU__MODE="webhook",
            GATEWAY_CHANNELS__FEISHU__APP_ID=fake.app_id,
            GATEWAY_CHANNELS__FEISHU__APP_SECRET=fake.app_secret,
            GATEWAY_CHANNELS__FEISHU__DOMAIN=fake.url,
            GATEWAY_CHANNELS__FEISHU__ENCRYPT_KEY=ENCRYPT_KEY,
            GATEWAY_CHANNELS__FEISHU__VERIFICATION_TOKEN=VERIFICATION,
            GATEWAY_CHANNELS__FEISHU__ALLOW_FROM='["*"]',
            **env,
        ) as daemon,
    ):
        yield daemon, fake


@pytest.fixture
def feishu_daemon(tmp_path: Path) -> Iterator[tuple[ServeProcess, FakeFeishu]]:
    with feishu_serve(tmp_path) as (daemon, fake):
        yield daemon, fake


def _event(text: str) -> dict[str, Any]:
    return message_event(chat_id=P2P, sender=ALICE, text=text, token=VERIFICATION)


async def _post(
    http: aiohttp.ClientSession, headers: dict[str, str], body: bytes
) -> tuple[int, str]:
    async with http.post("/webhook/feishu/event", data=body, headers=headers) as resp:
        return resp.status, await resp.text()


async def _only_pending_answered(fake: FakeFeishu, http: aiohttp.ClientSession) -> None:
    """A fresh /pending is answered, and nothing before it was: answers in one chat go
    out in order, so a refused /help taken after all would have been answered first."""
    status, _ = await _post(http, *webhook_request(_event("/pending"), encrypt_key=ENCRYPT_KEY))
    assert status == 200
    await fake.wait_until(
        lambda: any("没有待确认" in t for t in sent_texts(fake)), within=20, what="/pending"
    )
    assert len(sent_texts(fake)) == 1, sent_texts(fake)


async def test_a_replayed_feishu_request_is_refused_by_a_real_daemon(
    feishu_daemon: tuple[ServeProcess, FakeFeishu],
) -> None:
    """First test: tests/channels/feishu/test_webhook.py::
    test_replayed_nonce_and_old_timestamp_are_rejected (nonce half). Here the very bytes
    of a taken request, sent again inside the replay window, and a new body under a nonce
    already used."""
    daemon, fake = feishu_daemon
    async with aiohttp.ClientSession(base_url=daemon.url) as http:
        headers, body = webhook_request(_event("/pending"), encrypt_key=ENCRYPT_KEY, nonce="n-1")
        assert (await _post(http, headers, body))[0] == 200
        await fake.wait_until(lambda: len(sent_texts(fake)) == 1, within=20, what="answer")
        assert (await _post(http, headers, body))[0] == 401
        again = webhook_request(_event("/help"), encrypt_key=ENCRYPT_KEY, nonce="n-1")
        assert (await _post(http, *again))[0] == 401
        # Answers in one chat go out in order: had the /help been taken, it would have
        # been answered before this /pending.
        fresh = webhook_request(_event("/pending"), encrypt_key=ENCRYPT_KEY)
        assert (await _post(http, *fresh))[0] == 200
        await fake.wait_until(lambda: len(sent_texts(fake)) == 2, within=20, what="answer")
        assert not any("/sql" in t for t in sent_texts(fake))  # /help never answered
    await _refused(daemon, "nonce already used", 2)


async def test_a_stale_feishu_request_is_refused_by_a_real_daemon(
    feishu_daemon: tuple[ServeProcess, FakeFeishu],
) -> None:
    """First test: tests/channels/feishu/test_webhook.py::
    test_replayed_nonce_and_old_timestamp_are_rejected (timestamp half). Correctly signed,
    never seen nonces, a timestamp an hour old or an hour ahead."""
    daemon, fake = feishu_daemon
    async with aiohttp.ClientSession(base_url=daemon.url) as http:
        for shift in (-3600, 3600):
            stale = webhook_request(
                _event("/help"), encrypt_key=ENCRYPT_KEY, timestamp=int(time.time()) + shift
            )
            assert (await _post(http, *stale))[0] == 401
        await _only_pending_answered(fake, http)
    await _refused(daemon, "timestamp outside the replay window", 2)


async def _pending_id(http: aiohttp.ClientSession) -> str:
    """The id of the one pending call, read from the daemon's admin API."""

    async def probe() -> str | None:
        async with http.get("/api/confirmations", params={"status": "pending"}) as resp:
            assert resp.status == 200, await resp.text()
            found = (await resp.json())["confirmations"]
        return str(found[0]["id"]) if found else None

    return await eventually(probe, timeout=20)


async def _status(http: aiohttp.ClientSession, cid: str) -> dict[str, Any]:
    async with http.get(f"/api/confirmations/{cid}") as resp:
        assert resp.status == 200, await resp.text()
        record: dict[str, Any] = (await resp.json())["confirmation"]
        return record


async def test_four_eyes_holds_against_the_requesters_feishu_click_and_reply_on_a_real_daemon(
    tmp_path: Path,
) -> None:
    """First test: tests/channels/feishu/test_direct_chats.py::
    test_the_requester_cannot_approve_her_own_four_eyes_call_by_click_or_reply (long
    connection, in process). Here signed, encrypted webhook requests to a real daemon: her
    card click and her typed 确认 are refused; the approver's click on his copy runs it."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with feishu_serve(
        tmp_path,
        GATEWAY_ADMIN__TOKEN=TOKEN,
        GATEWAY_POLICY__RULES=FOUR_EYES,
        GATEWAY_CHANNELS__FEISHU__APPROVERS=json.dumps([BOB]),
    ) as (daemon, fake):
        async with aiohttp.ClientSession(base_url=daemon.url, headers=auth) as http:
            asked = _event("/sql DELETE FROM orders WHERE id = 3")
            assert (await _post(http, *webhook_request(asked, encrypt_key=ENCRYPT_KEY)))[0] == 200
            cid = await _pending_id(http)
            assert (await _status(http, cid))["four_eyes"] is True
            card = await fake.wait_request(
                lambda r: r in card_sends(fake) and r.body.get("receive_id") == P2P,
                within=20,
                what="the card in her chat",
            )
            copy = await fake.wait_request(
                lambda r: r in fake.direct_sends(BOB), within=20, what="bob's direct copy"
            )
            assert card.message_id is not None and copy.message_id is not None

            def click(operator: str, message_id: str, chat: str) -> dict[str, Any]:
                value = {"confirmation_id": cid, "decision": "approve"}
                return card_action_event(
                    operator=operator,
                    value=value,
                    open_message_id=message_id,
                    open_chat_id=chat,
                    token=VERIFICATION,
                )

            # Her click on her card: a toast saying why, no new card.
            hers = webhook_request(click(ALICE, card.message_id, P2P), encrypt_key=ENCRYPT_KEY)
            status, body = await _post_card(http, *hers)
            assert status == 200, body
            answer = json.loads(body)
            assert answer["toast"]["content"] == texts.FOUR_EYES
            assert "card" not in answer
            # Her typed 确认: told the same in her chat.
            typed = webhook_request(_event("确认"), encrypt_key=ENCRYPT_KEY)
            assert (await _post(http, *typed))[0] == 200
            await fake.wait_until(
                lambda: texts.FOUR_EYES in sent_texts(fake), within=20, what="the notice"
            )
            record = await _status(http, cid)
            assert (record["status"], record["decided_by"]) == ("pending", None)
            assert order_exists(daemon.data_dir, 3)
            assert fake.patches(card.message_id) == []
            # Bob's click on his copy is the second person's.
            bobs = click(BOB, copy.message_id, fake.p2p_chat(BOB))
            status, body = await _post_card(http, *webhook_request(bobs, encrypt_key=ENCRYPT_KEY))
            assert status == 200, body
            assert json.loads(body)["toast"]["type"] == "success"
            await eventually(lambda: _gone(daemon, 3), timeout=20)
            assert (await _status(http, cid))["decided_by"] == BOB
    assert daemon.error_lines() == []


async def _post_card(
    http: aiohttp.ClientSession, headers: dict[str, str], body: bytes
) -> tuple[int, str]:
    async with http.post("/webhook/feishu/card", data=body, headers=headers) as resp:
        return resp.status, await resp.text()


# ---------------------------------------------------------------------- DingTalk stream

DING_GROUP: dict[str, Any] = {
    "conversation_type": "2",
    "conversation_id": "cg-hold-rules",
    "session": "g-hr",
}


async def test_four_eyes_holds_against_the_requesters_dingtalk_click_and_reply_on_a_real_daemon(
    tmp_path: Path,
) -> None:
    """First test: tests/channels/dingtalk/test_direct_chats.py::
    test_the_requester_cannot_approve_her_own_four_eyes_call_by_click_or_reply (in
    process). Here a real daemon on the DingTalk stream (the real dingtalk-stream client
    against the loopback fake): her card click and her typed 确认 are refused; the
    approver's click runs it."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with (
        FakeDingTalk() as fake,
        serve(
            tmp_path,
            GATEWAY_ADMIN__TOKEN=TOKEN,
            GATEWAY_POLICY__RULES=FOUR_EYES,
            GATEWAY_CHANNELS__DINGTALK__ENABLED="true",
            GATEWAY_CHANNELS__DINGTALK__CLIENT_ID=fake.client_id,
            GATEWAY_CHANNELS__DINGTALK__CLIENT_SECRET=fake.client_secret,
            GATEWAY_CHANNELS__DINGTALK__OPENAPI_ENDPOINT=fake.url,
            GATEWAY_CHANNELS__DINGTALK__ALLOW_FROM='["*"]',
            GATEWAY_CHANNELS__DINGTALK__APPROVERS='["bob"]',
            GATEWAY_CHANNELS__DINGTALK__WEBHOOK_HOSTS=json.dumps([f"127.0.0.1:{fake.port}"]),
            GATEWAY_CHANNELS__DINGTALK__WEBHOOK_SCHEMES='["http"]',
        ) as daemon,
    ):
        await fake.wait_connected(within=20)
        async with aiohttp.ClientSession(base_url=daemon.url, headers=auth) as http:
            fake.send_chatbot_message(
                text="/sql DELETE FROM orders WHERE id = 3", sender_staff_id="alice", **DING_GROUP
            )
            cid = await _pending_id(http)
            assert (await _status(http, cid))["four_eyes"] is True
            group_track = out_track_id(cid)
            await fake.wait_until(lambda: fake.card(group_track), within=20, what="group card")

            def told() -> int:
                return sum(texts.FOUR_EYES in t for t in webhook_texts(fake))

            # Her click on the group card: told why, to her alone on the card and in chat.
            frame = fake.send_card_callback(
                out_track_id=group_track, user_id="alice", action_id="approve"
            )
            response = json.loads((await fake.wait_ack(frame, within=20))["data"])["response"]
            assert "cardData" not in response
            assert texts.FOUR_EYES in response["privateData"]["alice"]["cardParamMap"]["tips"]
            await fake.wait_until(lambda: told() == 1, within=20, what="the click's notice")
            # Her typed 确认: told the same.
            fake.send_chatbot_message(text="确认", sender_staff_id="alice", **DING_GROUP)
            await fake.wait_until(lambda: told() == 2, within=20, what="the reply's notice")
            record = await _status(http, cid)
            assert (record["status"], record["decided_by"]) == ("pending", None)
            assert fake.card(group_track)["status"] == "pending"  # type: ignore[index]
            assert order_exists(daemon.data_dir, 3)
            # Bob's click is the second person's.
            frame = fake.send_card_callback(
                out_track_id=group_track, user_id="bob", action_id="approve"
            )
            response = json.loads((await fake.wait_ack(frame, within=20))["data"])["response"]
            assert response["cardData"]["cardParamMap"]["status"] == "approved"
            await eventually(lambda: _gone(daemon, 3), timeout=20)
            assert (await _status(http, cid))["decided_by"] == "bob"
    assert daemon.error_lines() == []


async def _refused(daemon: ServeProcess, reason: str, count: int) -> None:
    """The daemon logged ``count`` requests refused for ``reason`` (its log is read by a
    thread: wait for the lines)."""

    async def logged() -> bool:
        return _count_refused(daemon, reason) == count

    await eventually(logged, timeout=20)


def _count_refused(daemon: ServeProcess, reason: str) -> int:
    count = 0
    for line in list(daemon.lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == "feishu.webhook_rejected" and entry.get("reason") == reason:
            count += 1
    return count
