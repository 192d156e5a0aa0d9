"""A call the preview says to hold (SQL calling a function outside the allow-list) asks."""

from __future__ import annotations

from tests.policy.conftest import Decide

SLEEPS = {"sql": "SELECT sleep_a_while(10) FROM orders"}  # user-defined: not on the list


async def test_a_held_query_asks_instead_of_running(decide: Decide) -> None:
    d = await decide({}, "sql_query", SLEEPS)
    assert d.level == "confirm"
    assert "sleep_a_while" in d.rule
    # Only auto and notify become confirm: what refuses or only shows stays so.
    assert (await decide({"levels": {"sql_query": "notify"}}, "sql_query", SLEEPS)).level == (
        "confirm"
    )
    assert (await decide({"levels": {"sql_query": "manual"}}, "sql_query", SLEEPS)).level == (
        "manual"
    )
    deny = {"rules": [{"tool": "sql_query", "level": "deny"}]}
    assert (await decide(deny, "sql_query", SLEEPS)).level == "deny"
    # Not even a rule that says auto releases it.
    auto = {"rules": [{"tool": "sql_query", "level": "auto"}]}
    assert (await decide(auto, "sql_query", SLEEPS)).level == "confirm"
    # An ordinary query still runs by itself.
    plain = {"sql": "SELECT count(*), lower(customer) FROM orders GROUP BY customer"}
    assert (await decide({}, "sql_query", plain)).level == "auto"
