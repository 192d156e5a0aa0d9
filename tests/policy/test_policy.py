"""The policy engine: levels, rule kinds, precedence, risk and four-eyes."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from config.policy_settings import PolicySettings
from config.settings import Settings
from gateway.tools.policy import Policy, four_eyes_problem
from tests.policy.conftest import Decide


def rule(**fields: Any) -> dict[str, Any]:
    return fields


# ---------------------------------------------------------------------- defaults


async def test_tool_defaults(decide: Decide) -> None:
    d = await decide({}, "sql_query", {"sql": "SELECT * FROM orders"})
    assert (d.level, d.risk.value, d.rule) == ("auto", "low", "tool default (auto)")
    d = await decide({}, "sql_modify", {"sql": "DELETE FROM orders WHERE id = 1"})
    assert (d.level, d.risk.value, d.rule) == ("confirm", "medium", "tool default (confirm)")
    # @tool(requires_confirmation=True, risk="high")
    d = await decide({}, "send_email", {"to": "a@b.c", "subject": "s"})
    assert (d.level, d.risk.value) == ("confirm", "high")
    d = await decide({}, "add", {"a": 1, "b": 2})
    assert d.level == "auto"
    assert not d.four_eyes


@pytest.mark.parametrize("level", ["auto", "notify", "confirm", "manual", "deny"])
async def test_every_level_can_be_set_per_tool(decide: Decide, level: str) -> None:
    d = await decide({"levels": {"add": level}}, "add", {"a": 1, "b": 2})
    assert d.level == level
    assert d.rule == "levels.add"


async def test_levels_by_glob_most_specific_glob_wins(decide: Decide) -> None:
    levels = {"*": "confirm", "sql_*": "notify", "sql_q*": "auto"}
    d = await decide({"levels": levels}, "sql_query", {"sql": "SELECT 1"})
    assert (d.level, d.rule) == ("auto", "levels['sql_q*']")
    d = await decide({"levels": levels}, "sql_modify", {"sql": "DELETE FROM orders WHERE id=1"})
    assert (d.level, d.rule) == ("notify", "levels['sql_*']")
    d = await decide({"levels": levels}, "add", {"a": 1, "b": 2})
    assert (d.level, d.rule) == ("confirm", "levels['*']")
    d = await decide({"levels": {**levels, "add": "deny"}}, "add", {"a": 1, "b": 2})
    assert (d.level, d.rule) == ("deny", "levels.add")


async def test_requires_confirmation_tool_can_be_relaxed_by_a_rule(decide: Decide) -> None:
    policy = {
        "rules": [
            rule(
                name="internal-mail",
                tool="send_email",
                when={"to": {"glob": "*@example.com"}},
                level="auto",
            )
        ]
    }
    d = await decide(policy, "send_email", {"to": "me@example.com", "subject": "hi"})
    assert (d.level, d.rule) == ("auto", "rule 'internal-mail'")
    d = await decide(policy, "send_email", {"to": "me@elsewhere.org", "subject": "hi"})
    assert d.level == "confirm"


# ---------------------------------------------------------------------- argument conditions


@pytest.mark.parametrize(
    ("condition", "amount", "matches"),
    [
        (500.0, 500.0, True),  # a bare value is equals
        ({"equals": 500}, 500.0, True),
        ({"not_equals": 500}, 500.0, False),
        ({"gt": 1000}, 1000.0, False),
        ({"gt": 1000}, 1000.5, True),
        ({"ge": 1000}, 1000.0, True),
        ({"lt": 10}, 9.99, True),
        ({"le": 10}, 10.01, False),
        ({"ge": 100, "lt": 200}, 150.0, True),  # several operators: all must hold
        ({"ge": 100, "lt": 200}, 250.0, False),
        ([1.0, 2.0, 3.0], 2.0, True),  # a bare list is "in"
        ({"in": [1, 2]}, 3.0, False),
        ({"not_in": [1, 2]}, 3.0, True),
    ],
)
async def test_numeric_and_equality_conditions(
    decide: Decide, condition: Any, amount: float, matches: bool
) -> None:
    policy = {"rules": [rule(name="r", tool="refund", when={"amount": condition}, level="deny")]}
    d = await decide(policy, "refund", {"order_id": 1, "amount": amount})
    assert (d.level == "deny") is matches


@pytest.mark.parametrize(
    ("condition", "currency", "matches"),
    [
        ({"glob": "U*"}, "USD", True),
        ({"glob": "u?d"}, "USD", True),  # globs ignore case
        ({"glob": "E*"}, "USD", False),
        ({"not_glob": "E*"}, "USD", True),
        ({"regex": "^(USD|EUR)$"}, "EUR", True),
        ({"regex": "^usd$"}, "USD", False),  # regexes are as written (use (?i) for case)
        ({"regex": "(?i)^usd$"}, "USD", True),
        ({"not_regex": "^C"}, "CNY", False),
        ({"contains": "N"}, "CNY", True),
        ("cny", "CNY", True),  # equals ignores case for strings
        ({"exists": True}, "CNY", True),
    ],
)
async def test_string_conditions(
    decide: Decide, condition: Any, currency: str, matches: bool
) -> None:
    policy = {"rules": [rule(tool="refund", when={"currency": condition}, level="manual")]}
    d = await decide(policy, "refund", {"order_id": 1, "amount": 1, "currency": currency})
    assert (d.level == "manual") is matches
    if matches:
        assert d.rule == "rules[0]"


async def test_a_number_condition_never_matches_a_string(decide: Decide) -> None:
    policy = {"rules": [rule(tool="refund", when={"currency": {"gt": 0}}, level="deny")]}
    d = await decide(policy, "refund", {"order_id": 1, "amount": 1, "currency": "5"})
    assert d.level == "auto"


async def test_missing_argument_only_matches_exists_false(decide: Decide) -> None:
    policy = {
        "rules": [
            rule(tool="send_email", when={"cc": {"exists": False}}, level="auto"),
            rule(tool="send_email", when={"cc": "x"}, level="deny"),
        ]
    }
    d = await decide(policy, "send_email", {"to": "a@b.c", "subject": "s"})
    assert (d.level, d.rule) == ("auto", "rules[0]")


async def test_all_conditions_of_a_rule_must_hold(decide: Decide) -> None:
    policy = {
        "rules": [
            rule(
                name="big-usd",
                tool="refund",
                when={"amount": {"gt": 100}, "currency": "USD"},
                level="deny",
            )
        ]
    }
    assert (
        await decide(policy, "refund", {"order_id": 1, "amount": 500, "currency": "USD"})
    ).level == "deny"
    assert (await decide(policy, "refund", {"order_id": 1, "amount": 500})).level == "auto"
    assert (
        await decide(policy, "refund", {"order_id": 1, "amount": 5, "currency": "USD"})
    ).level == "auto"


async def test_tool_glob(decide: Decide) -> None:
    policy = {"rules": [rule(tool="sql_*", level="notify")]}
    assert (await decide(policy, "sql_query", {"sql": "SELECT 1"})).level == "notify"
    assert (await decide(policy, "add", {"a": 1, "b": 1})).level == "auto"


# ---------------------------------------------------------------------- SQL conditions


@pytest.mark.parametrize(
    ("sql_condition", "statement", "matches"),
    [
        ({"kind": "DELETE"}, "DELETE FROM orders WHERE id = 1", True),
        ({"kind": "delete"}, "DELETE FROM orders WHERE id = 1", True),
        ({"kind": ["DROP", "TRUNCATE"]}, "DROP TABLE orders", True),
        ({"kind": ["DROP", "TRUNCATE"]}, "DELETE FROM orders WHERE id = 1", False),
        # a DROP hidden in a script is still a DROP
        ({"kind": "DROP"}, "INSERT INTO orders VALUES (9, 'x', 1, 0); DROP TABLE orders", True),
        ({"where": False}, "DELETE FROM orders", True),
        ({"where": False}, "UPDATE orders SET status = 1 WHERE id = 2", False),
        ({"where": True}, "UPDATE orders SET status = 1 WHERE id = 2", True),
        ({"tables": "orders"}, "DELETE FROM orders WHERE id = 1", True),
        ({"tables": {"glob": "audit_*"}}, "DELETE FROM orders WHERE id = 1", False),
        ({"tables": {"not_in": ["orders"]}}, "DELETE FROM orders WHERE id = 1", False),
        ({"tables": {"contains": "ORDERS"}}, "DELETE FROM orders WHERE id = 1", True),
        (
            {"statement_count": {"gt": 1}},
            "DELETE FROM orders WHERE id=1; DELETE FROM orders WHERE id=2",
            True,
        ),
        ({"statement_count": {"gt": 1}}, "DELETE FROM orders WHERE id = 1", False),
        ({"rows_affected": {"ge": 3}}, "DELETE FROM orders WHERE status = 1", True),  # 3 rows
        ({"rows_affected": {"ge": 4}}, "DELETE FROM orders WHERE status = 1", False),
        ({"rows_affected": {"gt": 0}}, "INSERT INTO orders VALUES (9, 'x', 1, 0)", False),
        ({"kind": "UPDATE", "where": False}, "DELETE FROM orders", False),
    ],
)
async def test_sql_conditions(
    decide: Decide, sql_condition: dict[str, Any], statement: str, matches: bool
) -> None:
    policy = {"rules": [rule(name="sql", tool="sql_modify", sql=sql_condition, level="manual")]}
    d = await decide(policy, "sql_modify", {"sql": statement})
    assert (d.level == "manual") is matches, d


async def test_sql_conditions_on_a_query(decide: Decide) -> None:
    policy = {"rules": [rule(tool="sql_query", sql={"tables": "secrets"}, level="deny")]}
    d = await decide(policy, "sql_query", {"sql": "SELECT * FROM orders JOIN secrets ON 1=1"})
    assert d.level == "deny"
    d = await decide(policy, "sql_query", {"sql": "SELECT * FROM orders"})
    assert d.level == "auto"


async def test_sql_conditions_never_match_a_tool_without_sql(decide: Decide) -> None:
    policy = {"rules": [rule(tool="*", sql={"where": False}, level="deny")]}
    assert (await decide(policy, "add", {"a": 1, "b": 2})).level == "auto"


# ---------------------------------------------------------------------- precedence


async def test_deny_wins_over_a_more_specific_rule(decide: Decide) -> None:
    policy = {
        "rules": [
            rule(name="no-sql-on-orders", tool="sql_*", sql={"tables": "orders"}, level="deny"),
            rule(
                name="small-delete-ok",
                tool="sql_modify",
                sql={"kind": "DELETE", "where": True, "rows_affected": {"le": 1}},
                level="auto",
            ),
        ]
    }
    d = await decide(policy, "sql_modify", {"sql": "DELETE FROM orders WHERE id = 1"})
    assert (d.level, d.rule) == ("deny", "rule 'no-sql-on-orders'")


async def test_deny_wins_over_levels_and_tool_default(decide: Decide) -> None:
    policy = {
        "levels": {"add": "auto"},
        "rules": [rule(name="no-big", tool="add", when={"a": {"gt": 100}}, level="deny")],
    }
    assert (await decide(policy, "add", {"a": 101, "b": 1})).rule == "rule 'no-big'"
    assert (await decide(policy, "add", {"a": 1, "b": 1})).rule == "levels.add"


async def test_most_specific_rule_decides(decide: Decide) -> None:
    policy = {
        "rules": [
            rule(name="any-sql", tool="*", level="notify"),
            rule(name="modify", tool="sql_modify", level="confirm"),
            rule(
                name="delete",
                tool="sql_modify",
                sql={"kind": "DELETE"},
                level="confirm",
                risk="high",
            ),
            rule(
                name="delete-one",
                tool="sql_modify",
                sql={"kind": "DELETE", "where": True, "rows_affected": {"le": 1}},
                level="notify",
            ),
        ]
    }
    d = await decide(policy, "sql_modify", {"sql": "DELETE FROM orders WHERE id = 1"})
    assert (d.level, d.rule) == ("notify", "rule 'delete-one'")
    # risk comes from the most specific rule that sets one
    assert (d.risk.value, d.risk_rule) == ("high", "rule 'delete'")
    d = await decide(policy, "sql_modify", {"sql": "DELETE FROM orders WHERE status = 1"})
    assert d.rule == "rule 'delete'"
    d = await decide(policy, "sql_modify", {"sql": "INSERT INTO orders VALUES (9, 'x', 1, 0)"})
    assert d.rule == "rule 'modify'"  # an exact tool name beats "*"
    d = await decide(policy, "add", {"a": 1, "b": 1})
    assert d.rule == "rule 'any-sql'"


async def test_longer_glob_is_more_specific(decide: Decide) -> None:
    policy = {
        "rules": [
            rule(name="short", tool="s*", level="notify"),
            rule(name="long", tool="sql_mod*", level="manual"),
        ]
    }
    d = await decide(policy, "sql_modify", {"sql": "DELETE FROM orders WHERE id = 1"})
    assert d.rule == "rule 'long'"


async def test_ties_go_to_the_rule_written_first(decide: Decide) -> None:
    policy = {
        "rules": [
            rule(name="first", tool="add", level="notify"),
            rule(name="second", tool="add", level="manual"),
        ]
    }
    assert (await decide(policy, "add", {"a": 1, "b": 1})).rule == "rule 'first'"


async def test_a_risk_only_rule_leaves_the_level_to_the_defaults(decide: Decide) -> None:
    policy = {
        "rules": [rule(name="orders-high", tool="sql_*", sql={"tables": "orders"}, risk="high")]
    }
    d = await decide(policy, "sql_modify", {"sql": "INSERT INTO orders VALUES (9, 'x', 1, 0)"})
    assert (d.level, d.rule, d.risk.value, d.risk_rule) == (
        "confirm",
        "tool default (confirm)",
        "high",
        "rule 'orders-high'",
    )


async def test_risk_defaults_to_the_sql_analysis(decide: Decide) -> None:
    d = await decide({}, "sql_modify", {"sql": "DELETE FROM orders"})
    assert d.risk.value == "critical"
    assert d.risk_rule is None


# ---------------------------------------------------------------------- four-eyes


async def test_four_eyes_for_critical(decide: Decide) -> None:
    on = {"four_eyes_for_critical": True}
    assert (await decide(on, "sql_modify", {"sql": "DELETE FROM orders"})).four_eyes
    assert not (await decide(on, "sql_modify", {"sql": "DELETE FROM orders WHERE id=1"})).four_eyes
    assert not (await decide({}, "sql_modify", {"sql": "DELETE FROM orders"})).four_eyes


async def test_four_eyes_by_risk_list_and_by_rule(decide: Decide) -> None:
    policy = {"four_eyes_risks": ["high"]}
    assert (await decide(policy, "send_email", {"to": "a@b.c", "subject": "s"})).four_eyes
    policy = {
        "four_eyes_for_critical": True,
        "rules": [
            rule(
                name="big-refund",
                tool="refund",
                when={"amount": {"ge": 10000}},
                level="confirm",
                four_eyes=True,
            ),
            rule(
                name="drop-self-ok", tool="sql_modify", sql={"tables": "scratch"}, four_eyes=False
            ),
        ],
    }
    d = await decide(policy, "refund", {"order_id": 1, "amount": 20000})
    assert (d.level, d.four_eyes, d.risk.value) == ("confirm", True, "medium")
    d = await decide(policy, "sql_modify", {"sql": "DELETE FROM scratch"})
    assert d.risk.value == "critical"
    assert not d.four_eyes


# ---------------------------------------------------------------------- settings validation


@pytest.mark.parametrize(
    ("bad_rule", "message"),
    [
        (rule(tool="x", when={"a": {"between": [1, 2]}}, level="deny"), "unknown operator"),
        (rule(tool="x", when={"a": {"regex": "("}}, level="deny"), "bad regex"),
        (rule(tool="x", when={"a": {"gt": "10"}}, level="deny"), "needs a number"),
        (rule(tool="x", when={"a": {"in": "abc"}}, level="deny"), "needs a list"),
        (rule(tool="x", sql={"verb": "DELETE"}, level="deny"), "unknown SQL field"),
        (rule(tool="x", when={"a": 1}), "sets none of level, risk, four_eyes"),
        (rule(tool="x", level="block"), "level"),
        (rule(tool="x", risk="extreme"), "risk"),
    ],
)
def test_bad_rules_are_refused_at_load(bad_rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        PolicySettings(rules=[bad_rule])


async def test_dotted_paths_reach_nested_arguments(decide: Decide) -> None:
    policy = {"rules": [rule(tool="search_customers", when={"filter.region": "eu"}, level="deny")]}
    args = {"filter": {"region": "EU"}}
    assert (await decide(policy, "search_customers", args)).level == "deny"
    args = {"filter": {"country": "eu"}}
    assert (await decide(policy, "search_customers", args)).level == "auto"


def test_levels_and_rules_naming_no_tool_are_reported() -> None:
    policy = Policy(
        PolicySettings(
            levels={"sql_modfy": "deny", "sql_*": "confirm"},
            rules=[rule(name="typo", tool="refnd", level="deny"), rule(tool="ref*", level="auto")],
        )
    )
    assert policy.problems(["sql_query", "sql_modify", "refund"]) == [
        "policy.levels: 'sql_modfy' matches no tool",
        "policy rule 'typo': tool 'refnd' matches no tool",
    ]


def test_four_eyes_without_approvers_is_reported() -> None:
    on = {"four_eyes_for_critical": True}
    assert "no approvers" in (four_eyes_problem(Settings(policy=on)) or "")
    assert four_eyes_problem(Settings(policy=on, confirmation={"approvers": ["bob"]})) is None
    by_rule = {"rules": [rule(tool="x", four_eyes=True)]}
    assert four_eyes_problem(Settings(policy=by_rule)) is not None
    assert four_eyes_problem(Settings()) is None
