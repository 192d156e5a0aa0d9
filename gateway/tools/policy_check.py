"""How the policy would decide a call, without running it: ``gateway policy test`` and the
admin page's policy tester both call ``explain``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from gateway.tools.base import ToolRegistry
from gateway.tools.policy import Policy


class UnknownToolError(LookupError):
    """No tool of that name; the message lists the tools there are."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyReport:
    """The policy's answer for one call, and the rules that matched it.

    ``refused`` is set when the tool's own preview refused the call before the policy
    (e.g. a statement that does not parse); the other fields are then empty.
    """

    tool: str
    summary: str = ""
    level: str = ""
    risk: str = ""
    rule: str = ""
    risk_rule: str | None = None
    four_eyes: bool = False
    approvals: int = 0  # a rule's approvals = N: people other than the requester
    matched: tuple[str, ...] = ()
    refused: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["matched"] = list(self.matched)
        return data


async def explain(
    registry: ToolRegistry, policy: Policy, name: str, args: Mapping[str, Any]
) -> PolicyReport:
    """Preview and evaluate ``name(args)``; raises UnknownToolError or ToolArgumentsError."""
    tool = registry.get(name)
    if tool is None:
        raise UnknownToolError(f"no tool named {name!r}; tools: {', '.join(registry.names)}")
    parsed = tool.parse_args(args)
    preview = await tool.preview(parsed)
    if preview.error:
        return PolicyReport(tool=name, refused=preview.error)
    dumped = parsed.model_dump()
    decision = policy.evaluate(tool, dumped, preview)
    return PolicyReport(
        tool=name,
        summary=preview.summary,
        level=decision.level,
        risk=decision.risk.value,
        rule=decision.rule,
        risk_rule=decision.risk_rule,
        four_eyes=decision.four_eyes,
        approvals=decision.approvals,
        matched=tuple(r.label for r in policy.matching_rules(tool, dumped, preview)),
    )
