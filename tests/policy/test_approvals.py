"""A policy rule's ``approvals = N``: several people other than the requester approve."""

from __future__ import annotations

from typing import Any

import pytest

from config.settings import Settings
from gateway.tools.policy import four_eyes_problem
from tests.policy.conftest import Decide


async def test_a_rule_sets_approvals_and_four_eyes_with_it(decide: Decide) -> None:
    policy: dict[str, Any] = {
        "rules": [{"name": "schema", "tool": "sql_modify", "sql": {"kind": "DROP"}, "approvals": 2}]
    }
    d = await decide(policy, "sql_modify", {"sql": "DROP TABLE orders"})
    assert (d.approvals, d.four_eyes) == (2, True)
    d = await decide(policy, "sql_modify", {"sql": "DELETE FROM orders WHERE id = 1"})
    assert (d.approvals, d.four_eyes) == (0, False)


def test_approvals_must_be_a_positive_number_and_met_by_the_approvers() -> None:
    with pytest.raises(ValueError, match="approvals"):
        Settings.model_validate({"policy": {"rules": [{"tool": "x", "approvals": 0}]}})
    rules = [{"name": "two", "tool": "sql_modify", "approvals": 2}]
    few = Settings.model_validate(
        {"policy": {"rules": rules}, "confirmation": {"approvers": ["bob"]}}
    )
    problem = four_eyes_problem(few)
    assert problem is not None and "approvals = 2" in problem
    enough = Settings.model_validate(
        {"policy": {"rules": rules}, "confirmation": {"approvers": ["bob", "carol"]}}
    )
    assert four_eyes_problem(enough) is None
