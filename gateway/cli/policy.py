"""``gateway policy test TOOL 'JSON_ARGS'``: how the policy would decide a call."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from config.settings import Settings

EXIT_REFUSED = 1
EXIT_USAGE = 2


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("policy", help="test how the tool policy decides a call")
    actions = p.add_subparsers(dest="policy_action", required=True, metavar="ACTION")
    t = actions.add_parser(
        "test",
        help='print level, risk and deciding rule: policy test sql_modify \'{"sql": "..."}\'',
    )
    t.add_argument("tool", help="tool name, e.g. sql_modify")
    t.add_argument("args", nargs="?", default="{}", help="the call's arguments as JSON")
    t.add_argument("--json", action="store_true", help="print the decision as JSON")
    t.set_defaults(handler=cmd_policy_test)


def cmd_policy_test(args: argparse.Namespace) -> int:
    from config.settings import load_settings
    from gateway.logs import configure_logging

    settings = load_settings(args.config)
    # The preview may log (e.g. a row count the database could not give): keep stdout clean.
    configure_logging("error", "console")
    try:
        call_args = json.loads(args.args)
    except json.JSONDecodeError as exc:
        print(f"JSON_ARGS is not valid JSON: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not isinstance(call_args, dict):
        print('JSON_ARGS must be a JSON object, e.g. \'{"sql": "DELETE ..."}\'', file=sys.stderr)
        return EXIT_USAGE
    import asyncio

    return asyncio.run(_test(settings, args.tool, call_args, as_json=args.json))


async def _test(settings: Settings, name: str, call_args: dict[str, Any], *, as_json: bool) -> int:
    # Imported here, not at the top: SQLAlchemy and sqlglot would slow every `gateway --help`.
    from config.settings import ConfigError
    from gateway.tools.base import PluginError, ToolArgumentsError, ToolRegistry
    from gateway.tools.policy import Policy, four_eyes_problem
    from gateway.tools.policy_check import UnknownToolError, explain
    from gateway.tools.sql import SqlDatabase, SqlModifyTool, SqlQueryTool

    db = SqlDatabase(
        settings.sql_url,
        max_rows=settings.tools.sql.max_rows,
        timeout_seconds=settings.tools.sql.statement_timeout_seconds,
        allowed_functions=settings.tools.sql.allowed_functions,
    )
    try:
        if settings.uses_demo_database:
            # The same demo database `serve` would use, so row counts in rules are real.
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            await db.ensure_demo()
        registry = ToolRegistry([SqlQueryTool(db), SqlModifyTool(db)])
        try:
            registry.load_plugins(settings.tools.plugins)
        except PluginError as exc:
            raise ConfigError(str(exc)) from exc
        policy = Policy(settings.policy)
        eyes = four_eyes_problem(settings)
        for problem in [*policy.problems(registry.names), *([eyes] if eyes else [])]:
            print(f"warning: {problem}", file=sys.stderr)
        try:
            report = await explain(registry, policy, name, call_args)
        except (UnknownToolError, ToolArgumentsError) as exc:
            print(str(exc), file=sys.stderr)
            return EXIT_USAGE
    finally:
        await db.close()
    if report.refused:
        print(f"refused before the policy: {report.refused}")
        return EXIT_REFUSED
    matched = report.matched
    if as_json:
        out = report.to_dict()
        del out["refused"]
        print(json.dumps(out, ensure_ascii=False, indent=2))
        return 0
    print(f"tool:      {name}")
    print(f"call:      {report.summary}")
    print(f"level:     {report.level}")
    print(
        f"risk:      {report.risk}" + (f"  (set by {report.risk_rule})" if report.risk_rule else "")
    )
    print(f"rule:      {report.rule}")
    print(f"four-eyes: {'yes' if report.four_eyes else 'no'}")
    if report.approvals > 1:
        print(f"approvals: {report.approvals} people other than the requester")
    print(f"matched:   {', '.join(matched) if matched else '(no rule)'}")
    return 0
