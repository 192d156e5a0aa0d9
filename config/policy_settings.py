"""Settings of the policy: which tool call needs what, by rules."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from config.section import Section

Level = Literal["auto", "notify", "confirm", "manual", "deny"]
RiskName = Literal["low", "medium", "high", "critical"]


class PolicyRule(Section):
    """One policy rule: a tool-name glob plus conditions that, when all hold, set level/risk.

    ``when`` holds conditions on the call's arguments (``{amount = {gt = 1000}}``); ``sql``
    holds conditions on the parsed SQL statement (``kind``, ``tables``, ``where``,
    ``statement_count``, ``rows_affected``). A condition is a value (equals), a list (one
    of), or a table of operators: ``equals not_equals in not_in glob not_glob regex
    not_regex contains gt ge lt le exists``.
    """

    name: str = ""
    tool: str = "*"
    level: Level | None = None
    risk: RiskName | None = None
    # True/False overrides four-eyes for calls this rule matches; None leaves it to risk.
    four_eyes: bool | None = None
    # N distinct people other than the requester must approve (issue 25); any one
    # rejection settles it. 1 is four-eyes; None leaves it to four_eyes and the risk.
    approvals: int | None = Field(default=None, ge=1, le=20)
    when: dict[str, Any] = Field(default_factory=dict)
    sql: dict[str, Any] = Field(default_factory=dict)

    @field_validator("when", "sql")
    @classmethod
    def _conditions(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key, condition in value.items():
            _check_condition(key, condition)
        return value

    @model_validator(mode="after")
    def _sets_something(self) -> PolicyRule:
        if (
            self.level is None
            and self.risk is None
            and self.four_eyes is None
            and self.approvals is None
        ):
            raise ValueError(
                f"rule {self.name or self.tool!r} sets none of level, risk, four_eyes, approvals"
            )
        return self

    @field_validator("sql")
    @classmethod
    def _sql_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - SQL_FIELDS)
        if unknown:
            raise ValueError(
                f"unknown SQL field(s) {', '.join(unknown)}; use {', '.join(sorted(SQL_FIELDS))}"
            )
        return value


SQL_FIELDS = frozenset({"kind", "tables", "where", "statement_count", "rows_affected"})
CONDITION_OPERATORS = frozenset(
    {
        "equals",
        "not_equals",
        "in",
        "not_in",
        "glob",
        "not_glob",
        "regex",
        "not_regex",
        "contains",
        "gt",
        "ge",
        "lt",
        "le",
        "exists",
    }
)


def _check_condition(key: str, condition: Any) -> None:
    """Refuse unknown operators and bad regexes at load time, naming the key."""
    if not isinstance(condition, dict):
        return
    if not condition:
        raise ValueError(f"condition {key!r} is an empty table")
    for op, operand in condition.items():
        if op not in CONDITION_OPERATORS:
            raise ValueError(
                f"condition {key!r}: unknown operator {op!r}; "
                f"use one of {', '.join(sorted(CONDITION_OPERATORS))}"
            )
        if op in ("gt", "ge", "lt", "le") and (
            isinstance(operand, bool) or not isinstance(operand, int | float)
        ):
            raise ValueError(f"condition {key!r}: {op} needs a number, got {operand!r}")
        if op in ("in", "not_in") and not isinstance(operand, list):
            raise ValueError(f"condition {key!r}: {op} needs a list, got {operand!r}")
        if op == "exists" and not isinstance(operand, bool):
            raise ValueError(f"condition {key!r}: exists needs true or false")
        if op in ("regex", "not_regex"):
            try:
                re.compile(str(operand))
            except re.error as exc:
                raise ValueError(f"condition {key!r}: bad regex {operand!r}: {exc}") from exc


class PolicySettings(Section):
    """Supervision levels per tool and rules that override them.

    ``levels`` maps a tool name or glob to its default level (the tool's own default when
    absent). Rules are checked on every call: a matching ``deny`` always wins, otherwise
    the most specific matching rule decides.
    """

    levels: dict[str, Level] = Field(default_factory=dict)
    rules: list[PolicyRule] = Field(default_factory=list)
    # Risks whose confirmations need an approver other than the requester.
    four_eyes_risks: list[RiskName] = Field(default_factory=list)
    four_eyes_for_critical: bool = False
