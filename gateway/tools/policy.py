"""Supervision policy: for each tool call, in code, whether it runs, asks, or is refused.

Levels: ``auto`` runs; ``notify`` runs and tells the chat; ``confirm`` waits for a person;
``manual`` shows what would run and never runs it; ``deny`` refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from config.settings import PolicySettings
from gateway.confirm.model import Risk
from gateway.tools.base import Level, Tool, ToolPreview


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    level: Level
    risk: Risk
    rule: str  # what decided: "tool default", "levels.sql_modify", a rule name
    four_eyes: bool = False


class Policy:
    """Evaluates a call: per-tool levels from config, else the tool's own default level."""

    def __init__(self, settings: PolicySettings) -> None:
        self.settings = settings

    def evaluate(self, tool: Tool, args: Mapping[str, Any], preview: ToolPreview) -> PolicyDecision:
        risk = preview.risk or tool.risk
        if tool.name in self.settings.levels:
            level: Level = self.settings.levels[tool.name]
            rule = f"levels.{tool.name}"
        else:
            level = tool.default_level
            rule = "tool default"
        four_eyes = self.settings.four_eyes_for_critical and risk is Risk.CRITICAL
        return PolicyDecision(level=level, risk=risk, rule=rule, four_eyes=four_eyes)
