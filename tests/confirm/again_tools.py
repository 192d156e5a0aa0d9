"""A plugin tool for the ask-again tests: its preview counts rows that the test changes,
and its first run finds the count changed since approval (``EffectChangedError``), the way
the SQL tool's drift check does (issue 24), before helper "effect"'s SQL tool lands."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

from pydantic import BaseModel

from gateway.confirm.model import Risk
from gateway.tools.base import TOOL_ATTR, EffectChangedError, Level, Tool, ToolPreview

# What the "table" holds now, and how often the tool ran; the test sets and reads it.
STATE: dict[str, int] = {"rows": 3, "runs": 0, "drift_runs": 1}


class _Args(BaseModel):
    status: int


class ArchiveTool(Tool):
    """Archives the orders of one status; held, and drifts on its first run."""

    name: ClassVar[str] = "archive_orders"
    description: ClassVar[str] = "Archive the orders of a status."
    params: ClassVar[type[BaseModel]] = _Args
    default_level: ClassVar[Level] = "confirm"
    risk: ClassVar[Risk] = Risk.HIGH

    async def preview(self, args: BaseModel) -> ToolPreview:
        rows = STATE["rows"]
        return ToolPreview(
            summary=f"归档 {rows} 行 / archive {rows} rows",
            details={"effects": [{"statement": 0, "kind": "UPDATE", "total": rows}]},
        )

    async def run(self, args: BaseModel) -> Any:
        STATE["runs"] += 1
        if STATE["runs"] <= STATE["drift_runs"]:
            rows = STATE["rows"]
            raise EffectChangedError(
                f"数据在批准后已变化：现在 {rows} 行 / the data changed since approval: "
                f"{rows} rows now",
                detail=f"drift: {rows} rows",
                effect={"effects": [{"statement": 0, "kind": "UPDATE", "total": rows}]},
            )
        return f"archived {STATE['rows']} rows"


archive = SimpleNamespace(**{TOOL_ATTR: ArchiveTool()})
