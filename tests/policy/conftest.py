"""Real tools (SQL against a demo SQLite database, plugin functions) for policy tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from config.policy_settings import PolicySettings
from gateway.tools.base import ToolRegistry
from gateway.tools.policy import Policy, PolicyDecision
from gateway.tools.sql import SqlDatabase, SqlModifyTool, SqlQueryTool

Decide = Callable[..., Awaitable[PolicyDecision]]


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[ToolRegistry]:
    db = SqlDatabase(f"sqlite+aiosqlite:///{tmp_path / 'demo.db'}")
    await db.ensure_demo()
    reg = ToolRegistry([SqlQueryTool(db), SqlModifyTool(db)])
    reg.load_plugins(["tests.plugins.sample_tools"])
    yield reg
    await db.close()


@pytest.fixture
def decide(registry: ToolRegistry) -> Decide:
    """``await decide({policy settings}, "tool", {args})`` -> the decision, as the runner
    would get it (arguments parsed, preview computed by the real tool)."""

    async def run(policy: dict[str, Any], name: str, args: dict[str, Any]) -> PolicyDecision:
        tool = registry.get(name)
        assert tool is not None
        parsed = tool.parse_args(args)
        preview = await tool.preview(parsed)
        assert preview.error is None, preview.error
        return Policy(PolicySettings(**policy)).evaluate(tool, parsed.model_dump(), preview)

    return run
