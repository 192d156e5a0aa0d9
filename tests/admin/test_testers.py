"""The admin page's testers over real HTTP: the reply and policy testers answer the page
with a reading a person reads (gateway/texts, Chinese first with English beside it) and
the JSON answer of the API behind a toggle (issue 26: they printed raw JSON, and the
policy tester's preset came back refused with empty fields). The browser test
(tests/browser/test_admin_browser.py) clicks them.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from config.keywords import load_keywords
from config.settings import DEFAULT_KEYWORDS_FILE
from gateway import texts
from gateway.app import Gateway
from gateway.confirm.replies import ReplyParser
from tests.admin.test_page import CJK, CSRF, login
from tests.webchat.support import base_url, make_settings, running_gateway

ROOT = Path(__file__).resolve().parents[2]


def reading(page: str) -> list[str]:
    """The reading's lines, as a person sees them."""
    box = re.search(r'<div class="reading[^"]*"[^>]*>(.*?)</div>', page, re.S)
    assert box, page
    return [html.unescape(p) for p in re.findall(r"<p[^>]*>(.*?)</p>", box.group(1), re.S)]


def toggled_json(page: str) -> Any:
    """What the page's <details> toggle holds: the raw JSON answer."""
    found = re.search(r'<details class="raw">.*?<pre>(.*?)</pre>\s*</details>', page, re.S)
    assert found, page
    return json.loads(html.unescape(found.group(1)))


async def ask_page(admin: aiohttp.ClientSession, tester: str, body: Any) -> tuple[int, str]:
    async with admin.post(f"/admin/tester/{tester}", json=body) as resp:
        assert resp.content_type == "text/html"
        return resp.status, await resp.text()


async def ask_api(admin: aiohttp.ClientSession, path: str, body: Any) -> tuple[int, Any]:
    async with admin.post(path, json=body) as resp:
        return resp.status, await resp.json()


@pytest.mark.parametrize(
    ("text", "verdict", "words"),
    [
        ("确认 K7Q2 30分钟", "confirm", ["确认：批准 K7Q2", "30 分钟", "confirm: approves K7Q2"]),
        ("取消，太危险了", "cancel", ["取消：拒绝", "cancel: rejects", "原因 Reason: 太危险了"]),
        ("确认吗？", "unclear", ["不明确", "unclear: the gateway asks again", "问句"]),
        ("今天天气不错", "none", ["不是决定", "not a decision"]),
    ],
)
async def test_the_reply_tester_answers_the_page_with_a_reading_and_the_json_behind_it(
    admin: aiohttp.ClientSession, text: str, verdict: str, words: list[str]
) -> None:
    status, page = await ask_page(admin, "reply", {"text": text})
    assert status == 200
    assert f'data-verdict="{verdict}"' in page
    shown = "\n".join(reading(page))
    for word in words:
        assert word in shown, shown
    assert '"intent"' not in shown  # a reading, not the JSON
    # The toggle holds exactly what the JSON API answers for the same question.
    api_status, answer = await ask_api(admin, "/api/replies/test", {"text": text})
    assert api_status == 200
    assert toggled_json(page) == answer
    assert answer["intent"] == verdict


async def test_the_policy_testers_preset_is_decided_by_the_policy_and_reads_as_such(
    gateway: Gateway, admin: aiohttp.ClientSession
) -> None:
    """The page's preset (a DELETE on the demo's orders) was put to sql_query, the first
    tool listed, which refused it before the policy: every field came back empty."""
    async with admin.get("/admin") as resp:
        page = await resp.text()
    tool = re.search(r'<option value="([^"]+)" selected>', page)
    args = re.search(r'<textarea name="args"[^>]*>(.*?)</textarea>', page, re.S)
    assert tool and args, page
    preset = {"tool": tool.group(1), "args": json.loads(html.unescape(args.group(1)))}
    assert preset == {"tool": "sql_modify", "args": {"sql": "DELETE FROM orders WHERE id = 3"}}

    api_status, answer = await ask_api(admin, "/api/policy/test", preset)
    assert api_status == 200
    assert answer["refused"] is None
    assert answer["level"] == "confirm" and answer["rule"] and answer["risk"]

    status, shown_page = await ask_page(admin, "policy", preset)
    assert status == 200
    lines = reading(shown_page)
    level_zh, level_en = texts.LEVEL_WORDS["confirm"]
    assert lines[0] == f"sql_modify: {level_zh} / {level_en}"
    shown = "\n".join(lines)
    risk_zh, risk_en = texts.RISK_WORDS[texts.Risk(answer["risk"])]
    assert f"规则 Rule: {answer['rule']}" in shown
    assert f"风险 Risk: {risk_zh} {risk_en}" in shown
    assert "双人审批 Four-eyes: 否 no" in shown
    assert "匹配的规则 Matching rules:" in shown
    assert toggled_json(shown_page) == answer


async def test_a_call_the_tool_refuses_reads_as_refused_and_names_what_is_wrong(
    admin: aiohttp.ClientSession,
) -> None:
    question = {"tool": "sql_query", "args": {"sql": "DELETE FROM orders WHERE id = 3"}}
    status, page = await ask_page(admin, "policy", question)
    assert status == 200
    assert 'data-verdict="refused"' in page
    (line,) = reading(page)
    assert line.startswith("⛔ sql_query 不接受此调用，未经策略判断 / sql_query does not accept")
    assert "sql_query is read-only" in line  # what the tool found wrong
    _, answer = await ask_api(admin, "/api/policy/test", question)
    assert toggled_json(page) == answer


@pytest.mark.parametrize(
    ("tester", "body", "status", "named"),
    [
        ("policy", {"tool": "nope", "args": {}}, 404, "no tool named 'nope'"),
        ("policy", {"tool": "sql_modify", "args": {}}, 422, "args"),
        ("reply", {"text": 7}, 400, "text"),
    ],
)
async def test_a_question_the_tester_cannot_answer_says_what_to_change(
    admin: aiohttp.ClientSession, tester: str, body: Any, status: int, named: str
) -> None:
    got, page = await ask_page(admin, tester, body)
    assert got == status
    (line,) = reading(page)
    assert line.startswith("⛔ 无法测试，请修改后再试 / cannot test this")
    assert named in line
    api = "/api/policy/test" if tester == "policy" else "/api/replies/test"
    api_status, answer = await ask_api(admin, api, body)
    assert api_status == status
    assert toggled_json(page) == answer


async def test_the_page_testers_are_admin_routes_guarded_like_every_change(
    gateway: Gateway, anonymous: aiohttp.ClientSession
) -> None:
    for tester in ("reply", "policy"):
        async with anonymous.post(f"/admin/tester/{tester}", json={"text": "ok"}) as resp:
            assert resp.status == 401
    async with await login(gateway) as http:
        async with http.post("/admin/tester/reply", json={"text": "ok"}) as resp:
            assert resp.status == 403  # the cookie alone: no CSRF header
        async with http.post("/admin/tester/reply", json={"text": "ok"}, headers=CSRF) as resp:
            assert resp.status == 200
            assert 'data-verdict="confirm"' in await resp.text()


def test_every_reason_the_reply_parser_gives_has_words_in_both_languages() -> None:
    """The reading says why in Chinese and English (texts.REPLY_WHY): a reason added to
    gateway/confirm/replies.py without words would reach the page in English alone."""
    source = (ROOT / "gateway" / "confirm" / "replies.py").read_text(encoding="utf-8")
    given = {why.partition(": ")[0] for why in re.findall(r'why=f?"([^"{]*)', source)}
    assert len(given) >= 10, given
    assert given == set(texts.REPLY_WHY)
    parser = ReplyParser(load_keywords(DEFAULT_KEYWORDS_FILE))
    for text in ("确认", "确认 K7Q2 K8Q3", "确认 delete all", "", "K7Q2"):
        why = texts.reply_reading(parser.parse(text))[1]
        assert why.startswith("为何 Why: ") and CJK.search(why), why
    other = texts.reply_reading(parser.parse("确认 delete all"))[1]
    assert other == (
        "为何 Why: 决定之外还有别的词：delete all / other words besides the decision: delete all"
    )


async def test_the_page_warns_when_no_admin_token_is_set(
    tmp_path: Path, anonymous: aiohttp.ClientSession
) -> None:
    """Issue 26, small edges: open to anyone on this machine, the page says so and how to
    close it; with a token set (the ``anonymous`` fixture's gateway) it does not."""
    (tmp_path / "open").mkdir()
    async with (
        running_gateway(make_settings(tmp_path / "open")) as gw,
        aiohttp.ClientSession(base_url=base_url(gw)) as http,
    ):
        for path in ("/admin", "/admin/login"):
            async with http.get(path) as resp:
                page = await resp.text()
            banner = re.search(r'<p id="no-token"[^>]*>(.*?)</p>', page, re.S)
            assert banner, path
            words = re.sub(r"<[^>]+>", "", html.unescape(banner.group(1)))
            assert "未设置管理令牌" in words and "No admin token is set" in words
            assert "GATEWAY_ADMIN__TOKEN" in words
    async with anonymous.get("/admin/login") as resp:
        assert 'id="no-token"' not in await resp.text()
