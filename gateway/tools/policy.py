"""Supervision policy: for each tool call, in code, whether it runs, asks, or is refused.

Levels: ``auto`` runs; ``notify`` runs and tells the chat; ``confirm`` waits for a person;
``manual`` shows what would run and never runs it; ``deny`` refuses.

How a call is decided:

1. Every rule whose tool glob matches the tool name and whose conditions all hold matches.
2. A matching rule with level ``deny`` wins outright (the most specific such rule is named).
3. Otherwise the most specific matching rule that sets a level decides; ties go to the
   rule written first. Specificity: more conditions first, then an exact tool name over a
   glob, then the glob with more literal characters.
4. With no such rule: ``[policy] levels`` (exact tool name, else the most specific glob),
   then the tool's own default (``@tool(requires_confirmation=True)`` means ``confirm``).

Risk is set the same way (most specific matching rule that sets a risk), else the tool's
preview (SQL: parsed statement), else the tool's declared risk. Four-eyes (the requester
may reject but not approve) follows the most specific rule that sets ``four_eyes``, else
the risk: ``four_eyes_risks`` and ``four_eyes_for_critical``.

A call whose preview says it must be held (``ToolPreview.hold``: SQL calling a function
not on the allow-list, SQL the parser kept as an opaque command, several statements) fails
closed: it is ``confirm`` where the level would be ``auto`` or ``notify``, every rule's
``tables`` condition holds for it (so a table ``deny`` denies it), and no rule lowers its
risk below the tool's or turns off the four-eyes that risk brings.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from config.policy_settings import PolicyRule, PolicySettings
from config.settings import Settings
from gateway.confirm.grants import RISK_ORDER
from gateway.confirm.model import Risk
from gateway.tools.base import Level, Tool, ToolPreview

_MISSING = object()
_NUMERIC_OPS = {
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
}


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    level: Level
    risk: Risk
    rule: str  # what decided the level: "rule 'no-drop'", "levels.sql_modify", "tool default"
    four_eyes: bool = False
    risk_rule: str | None = None  # the rule that set the risk, when one did
    # People other than the requester who must approve: the most specific rule that sets
    # ``approvals`` (0: none sets it; four_eyes alone means one).
    approvals: int = 0


@dataclass(frozen=True, slots=True)
class _Rule:
    index: int
    spec: PolicyRule
    tool_regex: re.Pattern[str]
    specificity: tuple[int, int, int, int]

    @property
    def label(self) -> str:
        return f"rule {self.spec.name!r}" if self.spec.name else f"rules[{self.index}]"


def _glob_specificity(pattern: str) -> tuple[int, int]:
    exact = not any(ch in pattern for ch in "*?[")
    literal = len(re.sub(r"\[[^\]]*\]|[*?]", "", pattern))
    return (1 if exact else 0, literal)


def _compile(index: int, spec: PolicyRule) -> _Rule:
    exact, literal = _glob_specificity(spec.tool)
    conditions = len(spec.when) + len(spec.sql)
    # Earlier rules win ties: a smaller index sorts as more specific.
    return _Rule(
        index=index,
        spec=spec,
        tool_regex=re.compile(fnmatch.translate(spec.tool)),
        specificity=(conditions, exact, literal, -index),
    )


def sql_facts(details: Mapping[str, Any]) -> dict[str, Any]:
    """What SQL rules can look at, from a SQL tool's preview details.

    ``kind`` is a list of the statements' kinds (so ``DROP`` matches a script that contains
    one DROP among others); ``where`` is false when an UPDATE or DELETE has no WHERE.
    """
    facts: dict[str, Any] = {}
    kind = details.get("kind")
    if isinstance(kind, str) and kind:
        facts["kind"] = kind.split("+")
    if "tables" in details:
        facts["tables"] = list(details["tables"] or [])
    if "has_where" in details:
        facts["where"] = bool(details["has_where"])
    if "statement_count" in details:
        facts["statement_count"] = details["statement_count"]
    if details.get("rows_affected") is not None:
        facts["rows_affected"] = details["rows_affected"]
    return facts


def _lookup(data: Mapping[str, Any], path: str) -> Any:
    """``a.b.0`` into nested mappings and lists; ``_MISSING`` when absent."""
    if path in data:
        return data[path]
    value: Any = data
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, Sequence) and not isinstance(value, str) and part.isdigit():
            idx = int(part)
            if idx >= len(value):
                return _MISSING
            value = value[idx]
        else:
            return _MISSING
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(value: Any, expected: Any) -> bool:
    if isinstance(value, str) and isinstance(expected, str):
        # SQL kinds and table names are written in any case; so are most enum-like args.
        return value.casefold() == expected.casefold()
    if _is_number(value) and _is_number(expected):
        return bool(value == expected)
    return bool(value == expected)


def _test_one(op: str, value: Any, operand: Any) -> bool:
    """One operator against one scalar value."""
    if op == "equals":
        return _same(value, operand)
    if op == "in":
        return any(_same(value, o) for o in operand)
    if op == "glob":
        return isinstance(value, str) and fnmatch.fnmatchcase(value.casefold(), operand.casefold())
    if op == "regex":
        return isinstance(value, str) and re.search(str(operand), value) is not None
    if op in _NUMERIC_OPS:
        return _is_number(value) and bool(_NUMERIC_OPS[op](value, operand))
    raise ValueError(f"unknown operator {op!r}")


_NEGATED = {"not_equals": "equals", "not_in": "in", "not_glob": "glob", "not_regex": "regex"}


def condition_holds(value: Any, condition: Any) -> bool:
    """Whether a looked-up value meets a condition.

    A list value (SQL tables, kinds) meets a positive operator when any element does, and a
    negated one when no element meets the positive form.
    """
    if not isinstance(condition, dict):
        condition = {"in": condition} if isinstance(condition, list) else {"equals": condition}
    for op, operand in condition.items():
        if op == "exists":
            if (value is not _MISSING) is not operand:
                return False
            continue
        if value is _MISSING:
            return False
        if op == "contains":
            if isinstance(value, str):
                ok = isinstance(operand, str) and operand.casefold() in value.casefold()
            elif isinstance(value, list | tuple):
                ok = any(_same(v, operand) for v in value)
            else:
                ok = False
            if not ok:
                return False
            continue
        positive = _NEGATED.get(op, op)
        values = list(value) if isinstance(value, list | tuple) else [value]
        hit = any(_test_one(positive, v, operand) for v in values)
        if hit is (op in _NEGATED):
            return False
    return True


class Policy:
    """Evaluates calls against ``[policy]``: per-tool levels and rules (see module doc)."""

    def __init__(self, settings: PolicySettings) -> None:
        self.settings = settings
        self._rules = [_compile(i, r) for i, r in enumerate(settings.rules)]
        self._four_eyes = {Risk(r) for r in settings.four_eyes_risks}
        if settings.four_eyes_for_critical:
            self._four_eyes.add(Risk.CRITICAL)

    def problems(self, tool_names: Sequence[str]) -> list[str]:
        """Likely mistakes: levels or rules that name no registered tool (typos)."""
        found = []
        for pattern in self.settings.levels:
            if not any(fnmatch.fnmatchcase(n, pattern) for n in tool_names):
                found.append(f"policy.levels: {pattern!r} matches no tool")
        for rule in self._rules:
            if not any(rule.tool_regex.match(n) for n in tool_names):
                found.append(f"policy {rule.label}: tool {rule.spec.tool!r} matches no tool")
        return found

    def matching_rules(
        self, tool: Tool, args: Mapping[str, Any], preview: ToolPreview
    ) -> list[_Rule]:
        """Rules that match this call, most specific first."""
        facts = sql_facts(preview.details)
        found = []
        for rule in self._rules:
            if not rule.tool_regex.match(tool.name):
                continue
            if not all(condition_holds(_lookup(args, k), c) for k, c in rule.spec.when.items()):
                continue
            if not all(
                # What the tool cannot read may touch any table: every table rule matches.
                (k == "tables" and preview.hold is not None)
                or condition_holds(facts.get(k, _MISSING), c)
                for k, c in rule.spec.sql.items()
            ):
                continue
            found.append(rule)
        found.sort(key=lambda r: r.specificity, reverse=True)
        return found

    def _default_level(self, tool: Tool) -> tuple[Level, str]:
        levels = self.settings.levels
        if tool.name in levels:
            return levels[tool.name], f"levels.{tool.name}"
        globs = [p for p in levels if fnmatch.fnmatchcase(tool.name, p)]
        if globs:
            best = max(globs, key=_glob_specificity)
            return levels[best], f"levels[{best!r}]"
        return tool.default_level, f"tool default ({tool.default_level})"

    def evaluate(self, tool: Tool, args: Mapping[str, Any], preview: ToolPreview) -> PolicyDecision:
        matched = self.matching_rules(tool, args, preview)
        deny = next((r for r in matched if r.spec.level == "deny"), None)
        with_level = deny or next((r for r in matched if r.spec.level is not None), None)
        if with_level is not None:
            assert with_level.spec.level is not None
            level: Level = with_level.spec.level
            rule = with_level.label
        else:
            level, rule = self._default_level(tool)
        if preview.hold and level in ("auto", "notify"):
            # Running it would have an effect nobody approved (issue 22): ask instead.
            level, rule = "confirm", preview.hold

        risk_from = next((r for r in matched if r.spec.risk is not None), None)
        risk_rule: str | None = None
        if risk_from is not None:
            assert risk_from.spec.risk is not None
            risk = Risk(risk_from.spec.risk)
            risk_rule = risk_from.label
        else:
            risk = preview.risk or tool.risk

        eyes_from = next((r for r in matched if r.spec.four_eyes is not None), None)
        if eyes_from is not None:
            four_eyes = bool(eyes_from.spec.four_eyes)
        else:
            four_eyes = risk in self._four_eyes
        if preview.hold is not None:
            # Fail closed: table rules matched it only because what it touches is unknown,
            # so none of them may make it laxer than the tool's own reading of it.
            least = preview.risk or tool.risk
            if RISK_ORDER[risk] < RISK_ORDER[least]:
                risk, risk_rule = least, None
            four_eyes = four_eyes or risk in self._four_eyes
        approvals = next((r.spec.approvals for r in matched if r.spec.approvals is not None), 0)
        return PolicyDecision(
            level=level,
            risk=risk,
            rule=rule,
            # approvals = N counts people other than the requester: four-eyes and more.
            four_eyes=four_eyes or approvals >= 1,
            risk_rule=risk_rule,
            approvals=approvals,
        )


def four_eyes_problem(settings: Settings) -> str | None:
    """Four-eyes with nobody but the requester to approve: such calls can only be rejected."""
    p = settings.policy
    wanted = (
        p.four_eyes_for_critical
        or p.four_eyes_risks
        or any(r.four_eyes or r.approvals for r in p.rules)
    )
    channels = settings.channels
    approvers = (
        settings.confirmation.approvers
        or channels.webchat.approvers
        or channels.feishu.approvers
        or channels.dingtalk.approvers
    )
    if wanted and not approvers:
        return (
            "policy: four-eyes is on but no approvers are configured, so those calls can only "
            "be rejected; set [confirmation] approvers or a channel's approvers"
        )
    return approvals_problem(settings)


def approvals_problem(settings: Settings) -> str | None:
    """A rule asks for more approvers than any list names: its calls can only be rejected."""
    most = max((r.approvals or 0 for r in settings.policy.rules), default=0)
    channels = settings.channels
    people = set(settings.confirmation.approvers)
    named = max(
        len(people | set(c.approvers))
        for c in (channels.webchat, channels.feishu, channels.dingtalk)
    )
    if most > 1 and named < most:
        return (
            f"policy: a rule needs approvals = {most} but at most {named} approvers are "
            "configured for a channel, so those calls can only be rejected; name more people "
            "in [confirmation] approvers or a channel's approvers"
        )
    return None
