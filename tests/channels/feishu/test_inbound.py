"""Events as Feishu sends them, read into what the shared receive rules judge (no gateway
needed; the rules themselves are tested in tests/channels/test_receive.py)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from channels.feishu.inbound import (
    FeishuMessage,
    arrival,
    message_from_event,
    message_text,
    to_inbound,
)
from channels.receive import ReceiveRules, Verdict
from tests.channels.feishu.conftest import ALICE, BOT, BOT_MENTION
from tests.fakes.feishu import message_event


def rules(
    allow_from: tuple[str, ...] = ("*",), group_policy: str = "mention", max_age: float = 600
) -> ReceiveRules:
    return ReceiveRules(
        channel="feishu",
        allow_from=allow_from,
        group_policy=group_policy,  # type: ignore[arg-type]
        max_message_age_seconds=max_age,
    )


def parse(event: dict[str, Any]) -> FeishuMessage:
    return message_from_event(json.loads(json.dumps(event)))


def judge(msg: FeishuMessage, with_rules: ReceiveRules | None = None) -> tuple[Verdict, str | None]:
    """The verdict and, when accepted, the text that reaches the bus."""
    verdict = (with_rules or rules()).judge(arrival(msg, bot_open_id=BOT))
    text = message_text(msg, bot_open_id=BOT) if verdict is Verdict.ACCEPT else None
    return verdict, text


def test_p2p_text_becomes_an_inbound_message() -> None:
    msg = parse(message_event(chat_id="oc_1", sender=ALICE, text="/sql SELECT 1"))
    verdict, text = judge(msg)
    assert (verdict, text) == (Verdict.ACCEPT, "/sql SELECT 1")
    inbound = to_inbound(msg, text)
    assert inbound.channel == "feishu"
    assert inbound.session_key == "feishu:oc_1"
    assert inbound.sender_id == ALICE
    assert inbound.message_id == msg.message_id
    assert inbound.is_group is False


def test_group_mention_of_the_bot_is_stripped_others_are_named() -> None:
    other = {"key": "@_user_2", "open_id": "ou_bob", "name": "Bob"}
    msg = parse(
        message_event(
            chat_id="oc_g",
            chat_type="group",
            sender=ALICE,
            text="@_user_1 ask @_user_2 确认",
            mentions=[BOT_MENTION, other],
        )
    )
    assert judge(msg) == (Verdict.ACCEPT, "ask @Bob 确认")


def test_group_without_bot_mention_needs_open_policy() -> None:
    msg = parse(message_event(chat_id="oc_g", chat_type="group", sender=ALICE, text="hi"))
    assert judge(msg)[0] is Verdict.NOT_MENTIONED
    assert judge(msg, rules(group_policy="open", max_age=0)) == (Verdict.ACCEPT, "hi")


@pytest.mark.parametrize(
    ("allow_from", "verdict"),
    [((), Verdict.REFUSED), (("ou_other",), Verdict.REFUSED), ((ALICE,), Verdict.ACCEPT)],
)
def test_allow_from(allow_from: tuple[str, ...], verdict: Verdict) -> None:
    msg = parse(message_event(chat_id="oc_1", sender=ALICE, text="hi"))
    assert judge(msg, rules(allow_from=allow_from, max_age=60))[0] is verdict


def test_bots_and_old_messages_are_skipped() -> None:
    from_app = parse(message_event(chat_id="oc_1", sender="ou_x", text="hi", sender_type="app"))
    assert judge(from_app)[0] is Verdict.FROM_BOT
    from_self = parse(message_event(chat_id="oc_1", sender=BOT, text="hi"))
    assert judge(from_self)[0] is Verdict.FROM_BOT
    stale_ms = int((time.time() - 3600) * 1000)
    old = parse(message_event(chat_id="oc_1", sender=ALICE, text="hi", create_time_ms=stale_ms))
    assert judge(old)[0] is Verdict.TOO_OLD


def test_post_rich_text_is_flattened_with_mentions() -> None:
    content = {
        "title": "DB",
        "content": [
            [{"tag": "at", "user_id": BOT, "user_name": "bot"}, {"tag": "text", "text": " /sql "}],
            [{"tag": "text", "text": "SELECT "}, {"tag": "a", "text": "1", "href": "http://x"}],
        ],
    }
    msg = parse(
        message_event(
            chat_id="oc_1",
            sender=ALICE,
            text="",
            message_type="post",
            content=content,
            mentions=[BOT_MENTION],
        )
    )
    assert message_text(msg, bot_open_id=BOT) == "DB\n /sql \nSELECT 1"
    # Received posts may name the mention by its placeholder key instead of the open_id.
    content["content"][0][0] = {"tag": "at", "user_id": "@_user_1", "user_name": "bot"}
    keyed = parse(
        message_event(
            chat_id="oc_1",
            sender=ALICE,
            text="",
            message_type="post",
            content=content,
            mentions=[BOT_MENTION],
        )
    )
    assert message_text(keyed, bot_open_id=BOT) == "DB\n /sql \nSELECT 1"


def test_images_have_no_text() -> None:
    msg = parse(
        message_event(
            chat_id="oc_1", sender=ALICE, text="", message_type="image", content={"image_key": "k"}
        )
    )
    assert judge(msg) == (Verdict.ACCEPT, None)


def test_no_group_message_mentions_the_bot_before_its_open_id_is_known() -> None:
    msg = parse(
        message_event(
            chat_id="oc_g",
            chat_type="group",
            sender=ALICE,
            text="@_user_1 hi",
            mentions=[BOT_MENTION],
        )
    )
    assert arrival(msg, bot_open_id=BOT).mentions_bot
    assert not arrival(msg, bot_open_id=None).mentions_bot
