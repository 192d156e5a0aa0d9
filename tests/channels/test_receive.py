"""The receive rules Feishu and DingTalk share, tested once here (each platform's end-to-end
tests drive them through the real SDK and the loopback fakes)."""

from __future__ import annotations

from typing import Any

import pytest

from channels.receive import Arrival, ReceiveRules, Verdict

NOW = 1_700_000_000.0


def rules(**overrides: Any) -> ReceiveRules:
    options: dict[str, Any] = {
        "channel": "test",
        "allow_from": ["*"],
        "group_policy": "mention",
        "max_message_age_seconds": 600,
        "clock": lambda: NOW,
    }
    options.update(overrides)
    return ReceiveRules(**options)


_ids = iter(range(1_000_000))


def arrival(**overrides: Any) -> Arrival:
    fields: dict[str, Any] = {
        "message_id": f"m{next(_ids)}",
        "chat_id": "c1",
        "sender_id": "alice",
        "is_group": False,
        "mentions_bot": False,
        "created_at": NOW - 1,
    }
    fields.update(overrides)
    return Arrival(**fields)


def test_a_direct_message_from_an_allowed_sender_is_accepted() -> None:
    assert rules().judge(arrival()) is Verdict.ACCEPT


def test_a_redelivery_of_a_refused_message_is_not_answered_again() -> None:
    # Redeliveries are the bus's to drop; a refused one never reaches it, and the person
    # was told once already.
    r = rules(allow_from=["bob"])
    first = arrival(message_id="x1")
    assert r.judge(first) is Verdict.REFUSED
    assert r.judge(first) is Verdict.REFUSED_AGAIN


@pytest.mark.parametrize(
    ("allow_from", "verdict"),
    [
        ([], Verdict.REFUSED),
        (["bob"], Verdict.REFUSED),
        (["alice"], Verdict.ACCEPT),
        (["*"], Verdict.ACCEPT),
    ],
)
def test_allow_from_empty_is_nobody_and_star_is_everyone(
    allow_from: list[str], verdict: Verdict
) -> None:
    assert rules(allow_from=allow_from).judge(arrival()) is verdict


def test_a_refused_sender_is_told_once_then_dropped() -> None:
    r = rules(allow_from=["bob"])
    assert r.judge(arrival()) is Verdict.REFUSED
    assert r.judge(arrival()) is Verdict.REFUSED_AGAIN
    assert r.judge(arrival(sender_id="mallory")) is Verdict.REFUSED


def test_groups_need_a_mention_unless_the_policy_is_open() -> None:
    unmentioned = {"is_group": True, "mentions_bot": False}
    assert rules().judge(arrival(**unmentioned)) is Verdict.NOT_MENTIONED
    assert rules().judge(arrival(is_group=True, mentions_bot=True)) is Verdict.ACCEPT
    assert rules(group_policy="open").judge(arrival(**unmentioned)) is Verdict.ACCEPT


def test_an_unmentioned_group_message_from_a_stranger_is_not_answered() -> None:
    # Group chatter not meant for the bot gets no "not allowed" answer.
    r = rules(allow_from=["bob"])
    assert r.judge(arrival(is_group=True, mentions_bot=False)) is Verdict.NOT_MENTIONED


def test_old_messages_are_skipped_and_zero_turns_the_check_off() -> None:
    old = {"created_at": NOW - 601}
    assert rules().judge(arrival(**old)) is Verdict.TOO_OLD
    assert rules().judge(arrival(created_at=NOW - 599)) is Verdict.ACCEPT
    assert rules(max_message_age_seconds=0).judge(arrival(**old)) is Verdict.ACCEPT
    # An unknown time is never too old.
    assert rules().judge(arrival(created_at=None)) is Verdict.ACCEPT


def test_the_bots_own_messages_are_skipped() -> None:
    assert rules().judge(arrival(from_bot=True)) is Verdict.FROM_BOT
