"""Fail closed on what the parser cannot read (issue 22): an opaque command (``REPLACE INTO
audit_log …`` and ``VACUUM INTO '/path'`` on SQLite parse as one, listing no tables) or
several statements is never ``auto``, matches every table rule, and a table ``deny`` wins.

The real tools on a demo SQLite database; then the same through the web chat of a running
gateway, where the denied statements must not have run."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway import texts
from gateway.confirm.model import Risk
from tests.policy.conftest import Decide
from tests.webchat.support import base_url, eventually, make_settings, running_gateway
from tests.webchat.test_rest import poll, say, wait_for_kind

AUDIT_DENY = {"name": "audit-read-only", "tool": "sql_*", "sql": {"tables": {"glob": "audit_*"}}}
OPAQUE = ["REPLACE INTO audit_log (id, note) VALUES (1, 'x')", "VACUUM INTO '{path}'"]


@pytest.mark.parametrize("sql", OPAQUE)
async def test_an_opaque_command_matches_a_table_deny_rule(
    decide: Decide, tmp_path: Path, sql: str
) -> None:
    policy = {"rules": [{**AUDIT_DENY, "level": "deny"}]}
    d = await decide(policy, "sql_modify", {"sql": sql.format(path=tmp_path / "copy.db")})
    assert (d.level, d.rule) == ("deny", "rule 'audit-read-only'")


async def test_deny_wins_over_every_other_table_rule_it_matches(decide: Decide) -> None:
    policy = {
        "rules": [
            {"name": "scratch-is-free", "tool": "sql_modify", "sql": {"tables": "scratch"}},
            {**AUDIT_DENY, "level": "deny"},
        ]
    }
    policy["rules"][0]["level"] = "auto"
    d = await decide(policy, "sql_modify", {"sql": OPAQUE[0]})
    assert (d.level, d.rule) == ("deny", "rule 'audit-read-only'")


async def test_a_table_rule_never_makes_an_unreadable_statement_laxer(decide: Decide) -> None:
    lax: dict[str, Any] = {
        "four_eyes_for_critical": True,
        "rules": [
            {
                "name": "scratch-is-free",
                "tool": "sql_*",
                "sql": {"tables": "scratch"},
                "level": "auto",
                "risk": "low",
                "four_eyes": False,
            }
        ],
    }
    d = await decide(lax, "sql_modify", {"sql": OPAQUE[0]})
    assert (d.level, d.risk, d.four_eyes) == ("confirm", Risk.CRITICAL, True)
    assert d.rule == texts.opaque_statement("REPLACE")
    # A statement it can read is not touched by the rule.
    d = await decide(lax, "sql_modify", {"sql": "DELETE FROM orders WHERE id = 1"})
    assert (d.level, d.risk) == ("confirm", Risk.MEDIUM)


@pytest.mark.parametrize("levels", [{}, {"sql_query": "auto"}, {"sql_*": "notify"}])
async def test_several_statements_are_never_auto(decide: Decide, levels: dict[str, str]) -> None:
    policy = {"levels": levels}
    d = await decide(policy, "sql_query", {"sql": "SELECT * FROM orders; SELECT 1"})
    assert d.level == "confirm"
    assert d.rule == texts.several_statements(2)
    assert (await decide(policy, "sql_query", {"sql": "SELECT * FROM orders"})).level != "confirm"


async def said(http: aiohttp.ClientSession, room: str, start: str) -> str | None:
    texts = [str(m.get("text", "")) for m in (await poll(http, room))["messages"]]
    return next((t for t in texts if t.startswith(start)), None)


async def test_through_the_web_chat_denied_statements_do_not_run(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, policy={"rules": [{**AUDIT_DENY, "level": "deny"}]})
    copy = tmp_path / "copy.db"
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        demo = settings.data_dir / "demo.db"
        with sqlite3.connect(demo) as db:
            db.execute("CREATE TABLE audit_log (id INTEGER PRIMARY KEY, note TEXT)")
        for room, sql in zip(("replace", "vacuum"), OPAQUE, strict=True):
            await say(http, room, "alice", "/sql " + sql.format(path=copy))
            denied = await eventually(lambda room=room: said(http, room, "⛔ sql_modify"))
            assert "audit-read-only" in denied
        # Several statements: the same, though each names its tables (read-only here).
        await say(http, "batch", "alice", "/sql SELECT * FROM orders; SELECT 1")
        assert await eventually(lambda: said(http, "batch", "⛔ sql_query"))
    with sqlite3.connect(demo) as db:
        assert db.execute("SELECT COUNT(*) FROM audit_log").fetchone() == (0,)
    assert not copy.exists()


async def test_through_the_web_chat_several_queries_are_asked_for(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, policy={"levels": {"sql_query": "auto"}})
    async with (
        running_gateway(settings) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        await say(http, "batch", "alice", "/sql SELECT * FROM orders; SELECT 1")
        asked = await wait_for_kind(http, "batch", "confirmation", "pending")
        assert asked["confirmation"]["tool_call"]["name"] == "sql_query"
        assert asked["confirmation"]["details"]["policy_rule"] == texts.several_statements(2)
