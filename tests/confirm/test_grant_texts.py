"""A grant's end as the chat reads it: the date when it is not today, the zone when the
offset changes by then (issue 26: a 7-day grant was announced "until 01:36")."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gateway import texts
from gateway.confirm.grants import GrantBook, grant_sentence
from gateway.storage.grants import MemoryGrantStore
from tests.confirm.test_grants_contract import ask, confirmation

SHANGHAI_0136 = 1_795_714_560.0  # 2026-11-27 01:36 in Asia/Shanghai (17:36 UTC the day before)
BERLIN_NOON_BEFORE_DST = 1_774_699_200.0  # 2026-03-28 13:00 CET; CEST starts the next night


@pytest.fixture
def zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield
    monkeypatch.undo()
    time.tzset()


def use_zone(monkeypatch: pytest.MonkeyPatch, tz: str) -> None:
    monkeypatch.setenv("TZ", tz)
    time.tzset()


async def test_a_grant_that_ends_today_shows_the_time_alone(
    zone: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_zone(monkeypatch, "Asia/Shanghai")
    book = GrantBook(MemoryGrantStore(), clock=lambda: SHANGHAI_0136)
    _, said = await grant_sentence(
        book, confirmation(), scope="session", minutes=30, by="bob", via="text"
    )
    assert "02:06 前" in said and "until 02:06 " in said
    assert "2026" not in said


async def test_a_seven_day_grant_shows_its_date_when_given_and_when_used(
    zone: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_zone(monkeypatch, "Asia/Shanghai")
    now = SHANGHAI_0136
    book = GrantBook(MemoryGrantStore(), clock=lambda: now)
    grant, said = await grant_sentence(
        book, confirmation(), scope="call", minutes=7 * 24 * 60, by="bob", via="admin"
    )
    assert "2026-12-04 01:36 前" in said and "until 2026-12-04 01:36" in said
    assert grant is not None and await ask(book, args=grant.args) == grant
    used = texts.grant_used("sql_modify", grant, now=now)
    assert "至 2026-12-04 01:36）" in used and "until 2026-12-04 01:36" in used
    # On its last day, the time alone.
    assert "until 01:36" in texts.grant_used("sql_modify", grant, now=now + 7 * 86_400 - 60)


async def test_a_grant_across_a_clock_change_names_the_zone(
    zone: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_zone(monkeypatch, "Europe/Berlin")
    book = GrantBook(MemoryGrantStore(), clock=lambda: BERLIN_NOON_BEFORE_DST)
    _, said = await grant_sentence(
        book, confirmation(), scope="session", minutes=24 * 60, by="bob", via="text"
    )
    assert "until 2026-03-29 14:00 CEST" in said
