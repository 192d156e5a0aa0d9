"""The /admin page in a real browser (Debian's Chromium through Playwright) against a real
gateway (``gateway.app.build``: command agent, demo SQLite database).

An operator logs in with the token, a call is asked for in the web chat after the page is
open (so it can only arrive over /api/events), the page lists it, and approving it from the
page runs it: the row is gone from the demo database. Screenshots at 360 px go to
test-artifacts/.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import Browser, Page, expect

from gateway.app import Gateway
from gateway.confirm.model import Instance
from tests.browser.test_webchat_browser import ARTIFACTS, TIMEOUT_MS, browser, page_errors
from tests.webchat.support import (
    base_url,
    eventually,
    make_settings,
    order_exists,
    running_gateway,
)

pytestmark = pytest.mark.browser
__all__ = ["browser", "page_errors"]  # fixtures shared with the web chat's browser test

WIDEST = """() => {
  let widest = [document.documentElement.scrollWidth, "page"];
  for (const el of document.querySelectorAll("body *")) {
    const right = el.getBoundingClientRect().right;
    if (right > 360 && right > widest[0] - 1) widest = [right, el.tagName + "." + el.className];
  }
  return widest;
}"""
TOKEN = "browser-admin-token-0123456789abcdef"


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    settings = make_settings(
        tmp_path,
        admin={"token": TOKEN, "sse_heartbeat_seconds": 1},
        confirmation={"store": "sqlite"},
    )
    async with running_gateway(settings) as gw:
        yield gw


async def open_admin(browser: Browser, url: str, errors: list[str]) -> Page:
    context = await browser.new_context(viewport={"width": 360, "height": 780}, locale="zh-CN")
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    page.on("pageerror", lambda exc: errors.append(f"admin: {exc}"))
    page.on(
        "console",
        lambda msg: errors.append(f"admin: {msg.text}") if msg.type == "error" else None,
    )
    await page.goto(f"{url}/admin")
    await expect(page.locator('input[name="token"]')).to_be_visible()
    await page.locator('input[name="name"]').fill("oncall")
    await page.locator('input[name="token"]').fill(TOKEN)
    await page.locator('button[type="submit"]').click()
    await expect(page.locator("#live.on")).to_be_visible()
    return page


async def say(url: str, room: str, user: str, text: str) -> None:
    async with (
        aiohttp.ClientSession(base_url=url) as http,
        http.post(f"/api/chat/{room}/messages", json={"user": user, "text": text}) as resp,
    ):
        assert resp.status == 202


async def test_a_pending_call_appears_live_and_approving_it_runs_it(
    gateway: Gateway, browser: Browser, page_errors: list[str]
) -> None:
    url = base_url(gateway)
    page = await open_admin(browser, url, page_errors)
    await expect(page.locator("#pending-list .empty")).to_be_visible()

    await say(url, "ops", "alice", "/sql DELETE FROM orders WHERE id = 3")
    card = page.locator("#pending-list .card")
    await expect(card).to_have_count(1)
    await expect(card.locator(".statement")).to_have_text("DELETE FROM orders WHERE id = 3")
    await expect(card.locator(".requester")).to_have_text("alice")
    await expect(card.locator(".session")).to_have_text("webchat:ops")
    cid = await card.get_attribute("data-id")
    assert cid
    # Nothing at 360 px is wider than the screen (no sideways scrolling on a phone).
    width = await page.evaluate(WIDEST)
    assert width[0] <= 360, width
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "admin-360-pending.png"), full_page=True)

    await card.locator(".approve").click()
    # The banner follows the call it decided, to how the run ended (issue 26), as does
    # its row: the page alone tells what happened.
    notice = page.locator("#notice")
    await expect(notice).to_have_attribute("data-stage", "done")
    await expect(notice).to_contain_text(f"[{cid}] oncall 已批准，sql_modify 已执行")
    await expect(notice).to_contain_text("done: DELETE: 1 行 / 1 row")
    await expect(page.locator("#pending-list .card")).to_have_count(0)
    row = page.locator(f'#history-list .row[data-id="{cid}"]')
    await expect(row).to_have_attribute("data-status", "approved")
    await expect(row).to_have_attribute("data-stage", "done")
    await expect(row.locator(".status")).to_have_text("已执行 done")
    await expect(row.locator(".decider")).to_contain_text("oncall")

    async def row_gone() -> bool:
        return not order_exists(gateway.settings.data_dir, 3)

    await eventually(row_gone)
    await page.screenshot(path=str(ARTIFACTS / "admin-360-after.png"), full_page=True)

    # The web chat, with no login proxy, says that names are typed (but decide on loopback).
    chat = await page.context.new_page()
    await chat.goto(f"{url}/?session=ops&user=alice")
    await expect(chat.locator("#identity-banner")).to_be_visible()
    await expect(chat.locator("#identity-remote")).to_be_hidden()
    await chat.close()

    # Its details page shows the decision.
    await row.locator(".cid").click()
    await expect(page.locator(".detail")).to_contain_text("approved")
    # Its audit trail: asked, decided on the page, then claimed, run and finished.
    trail = page.locator(".audit .event")
    await expect(trail.first).to_have_attribute("data-kind", "requested")
    await expect(page.locator('.audit .event[data-kind="decided"]')).to_contain_text("oncall")
    await expect(page.locator('.audit .event[data-kind="finished"]')).to_be_visible()
    await page.screenshot(path=str(ARTIFACTS / "admin-360-detail.png"), full_page=True)
    await page.context.close()


async def test_reject_with_a_reason_keywords_and_testers(
    gateway: Gateway, browser: Browser, page_errors: list[str]
) -> None:
    url = base_url(gateway)
    page = await open_admin(browser, url, page_errors)
    await say(url, "ops2", "bob", "/sql DELETE FROM orders WHERE id = 4")
    await expect(page.locator("#pending-list .card")).to_have_count(1)
    first = await page.locator("#pending-list .card").get_attribute("data-id")
    card = page.locator(f'#pending-list .card[data-id="{first}"]')
    await card.locator(".reason").fill("not during the sale")
    # Another call arrives while the reason is typed: the list is redrawn, the words stay.
    await say(url, "ops9", "dave", "/sql DELETE FROM orders WHERE id = 8")
    await expect(page.locator("#pending-list .card")).to_have_count(2)
    await expect(card.locator(".reason")).to_have_value("not during the sale")
    await card.locator(".reject").click()
    await expect(page.locator("#pending-list .card")).to_have_count(1)
    row = page.locator('#history-list .row[data-status="rejected"]')
    await expect(row).to_have_count(1)
    assert order_exists(gateway.settings.data_dir, 4)
    rejected = await gateway.confirmations.get(str(first))
    assert rejected is not None
    assert rejected.reason == "not during the sale"

    # History search by person (a plain GET form: works without the script as well).
    await page.locator('#history-form input[name="person"]').fill("nobody")
    await page.locator("#history-form button").click()
    await expect(page.locator("#history-list .empty")).to_be_visible()

    # Keywords: add a word, read a reply with it, remove it.
    await page.locator('#add-word input[name="word"]').fill("搞定")
    await page.locator("#add-word button").click()
    await expect(page.locator('.words[data-list="confirm"] .word', has_text="搞定")).to_be_visible()
    assert "搞定" in gateway.keywords.words.confirm
    await page.locator('#reply-test input[name="text"]').fill("搞定")
    await page.locator("#reply-test button").click()
    await expect(page.locator("#reply-result .reading")).to_have_attribute(
        "data-verdict", "confirm"
    )
    await page.locator('.remove-word[data-word="搞定"]').click()
    await expect(page.locator('.words[data-list="confirm"] .word', has_text="搞定")).to_have_count(
        0
    )
    await page.context.close()


async def test_the_testers_show_a_reading_and_keep_the_json_behind_a_toggle(
    gateway: Gateway, browser: Browser, page_errors: list[str]
) -> None:
    """Issue 26: the reply and policy testers printed raw JSON, and the policy tester's
    preset came back refused with every field empty. Now each answers with a sentence in
    Chinese and English; the JSON the API gives is one click away."""
    url = base_url(gateway)
    page = await open_admin(browser, url, page_errors)
    headers = {"Authorization": f"Bearer {TOKEN}"}

    async def api(path: str, body: dict[str, object]) -> object:
        async with (
            aiohttp.ClientSession(base_url=url, headers=headers) as http,
            http.post(path, json=body) as resp,
        ):
            return await resp.json()

    reply = page.locator("#reply-result")
    await page.locator('#reply-test input[name="text"]').fill("确认 K7Q2 30分钟")
    await page.locator("#reply-test button").click()
    await expect(reply.locator(".verdict")).to_have_text(
        "确认：批准 K7Q2，30 分钟内同类调用免确认 / confirm: approves K7Q2, and skips asking "
        "for 30 min"
    )
    await expect(reply.locator(".reading")).to_contain_text(
        "为何 Why: 明确的决定 / a clean decision"
    )
    raw = reply.locator("details.raw pre")
    await expect(raw).to_be_hidden()  # behind the toggle until asked for
    await reply.locator("details.raw summary").click()
    await expect(raw).to_be_visible()
    answer = await api("/api/replies/test", {"text": "确认 K7Q2 30分钟"})
    assert json.loads(await raw.text_content() or "") == answer

    # The policy tester's preset, as the page opens: a call the policy decides.
    policy = page.locator("#policy-result")
    await page.locator("#policy-test button").click()
    await expect(policy.locator(".verdict")).to_have_text(
        "sql_modify: 需确认：有人批准后才执行 / confirm: runs only after a person approves"
    )
    shown = policy.locator(".reading")
    await expect(shown).to_contain_text("规则 Rule: ")
    await expect(shown).to_contain_text("风险 Risk: ")
    await expect(shown).to_contain_text("双人审批 Four-eyes: 否 no")
    await policy.locator("details.raw summary").click()
    preset = {"tool": "sql_modify", "args": {"sql": "DELETE FROM orders WHERE id = 3"}}
    answer = await api("/api/policy/test", preset)
    assert isinstance(answer, dict) and answer["refused"] is None
    assert json.loads(await policy.locator("details.raw pre").text_content() or "") == answer
    width = await page.evaluate(WIDEST)
    assert width[0] <= 360, width
    ARTIFACTS.mkdir(exist_ok=True)
    await page.locator("#policy").screenshot(path=str(ARTIFACTS / "admin-360-testers.png"))

    # A call the tool itself refuses names what is wrong; arguments that are not JSON too.
    await page.locator('#policy-test select[name="tool"]').select_option("sql_query")
    await page.locator("#policy-test button").click()
    await expect(policy.locator(".reading")).to_have_attribute("data-verdict", "refused")
    await expect(policy.locator(".verdict")).to_contain_text("sql_query is read-only")
    await page.locator('#policy-test textarea[name="args"]').fill("{not json")
    await page.locator("#policy-test button").click()
    await expect(policy).to_contain_text("参数不是合法 JSON / the arguments are not valid JSON")
    await page.context.close()


async def test_approve_with_a_grant_then_revoke_it_from_the_page(
    gateway: Gateway, browser: Browser, page_errors: list[str]
) -> None:
    url = base_url(gateway)
    page = await open_admin(browser, url, page_errors)
    await say(url, "ops3", "carol", "/sql DELETE FROM orders WHERE id = 5")
    card = page.locator("#pending-list .card")
    await card.locator('.approve-grant[data-scope="session"]').click()
    row = page.locator("#grants-list .grant-row")
    await expect(row).to_have_count(1)
    await expect(row).to_contain_text("carol @ webchat:ops3")
    await page.screenshot(path=str(ARTIFACTS / "admin-360-grant.png"), full_page=True)

    # Carol's next DELETE runs without a card.
    await say(url, "ops3", "carol", "/sql DELETE FROM orders WHERE id = 6")

    async def ran() -> bool:
        return not order_exists(gateway.settings.data_dir, 6)

    await eventually(ran)
    assert await gateway.confirmations.list_pending("webchat:ops3") == []

    await row.locator(".revoke-grant").click()
    await expect(page.locator("#grants-list .empty")).to_be_visible()
    await say(url, "ops3", "carol", "/sql DELETE FROM orders WHERE id = 7")
    await expect(page.locator("#pending-list .card")).to_have_count(1)
    await page.context.close()


async def test_edit_arguments_then_approve_runs_the_edited_call(
    gateway: Gateway, browser: Browser, page_errors: list[str]
) -> None:
    url = base_url(gateway)
    data_dir = gateway.settings.data_dir
    page = await open_admin(browser, url, page_errors)
    await say(url, "ops4", "dave", "/sql DELETE FROM orders WHERE id = 3")
    await expect(page.locator("#pending-list .card")).to_have_count(1)
    cid = await page.locator("#pending-list .card").get_attribute("data-id")
    assert cid
    card = page.locator(f'#pending-list .card[data-id="{cid}"]')
    await card.locator("details.edit summary").click()
    editor = card.locator(".edit-args")
    await expect(editor).to_have_value('{\n  "sql": "DELETE FROM orders WHERE id = 3"\n}')

    # Not JSON: said beside the editor, nothing sent.
    await editor.fill('{"sql": ')
    await card.locator(".approve-edited").click()
    await expect(card.locator(".edit-error")).to_contain_text("not valid JSON")
    # JSON the tool refuses: the server's answer, naming the field; the call still waits.
    await editor.fill('{"sql": 5}')
    await card.locator(".approve-edited").click()
    await expect(card.locator(".edit-error")).to_contain_text("arguments.sql")
    # Chromium logs the refused request (422) as a console error: expected here, once.
    refused = await eventually(
        lambda: asyncio.sleep(0, result=[e for e in page_errors if "status of 422" in e])
    )
    assert len(refused) == 1
    page_errors.remove(refused[0])
    assert (await gateway.confirmations.list_pending("webchat:ops4"))[0].id == cid
    # The editor and what was typed survive a refresh caused by another call's event.
    await say(url, "ops5", "erin", "/sql DELETE FROM orders WHERE id = 8")
    await expect(page.locator("#pending-list .card")).to_have_count(2)
    await expect(card.locator(".edit-args")).to_have_value('{"sql": 5}')
    width = await page.evaluate(WIDEST)
    assert width[0] <= 360, width
    await page.screenshot(path=str(ARTIFACTS / "admin-360-edit.png"), full_page=True)
    await card.screenshot(path=str(ARTIFACTS / "admin-360-edit-card.png"))  # docs/edits.md

    await editor.fill('{"sql": "DELETE FROM orders WHERE id = 4"}')
    await card.locator(".approve-edited").click()
    # The banner follows the edited call to its end (the row says it was edited).
    await expect(page.locator("#notice")).to_have_attribute("data-stage", "done")
    await expect(page.locator("#notice")).to_contain_text("DELETE: 1 行 / 1 row")
    row = page.locator(f'#history-list .row[data-id="{cid}"]')
    await expect(row).to_have_attribute("data-status", "approved")
    await expect(row.locator(".tag.edited")).to_be_visible()

    async def ran() -> bool:
        return not order_exists(data_dir, 4)

    await eventually(ran)
    assert order_exists(data_dir, 3)  # what was asked never ran

    # The web chat's card shows the edited statement, what was asked, and who edited it.
    chat = await page.context.new_page()
    await chat.goto(f"{url}/?session=ops4&user=dave")
    chat_card = chat.locator(f'.card[data-id="{cid}"]')
    await expect(chat_card.locator(".outcome")).to_contain_text("approved by oncall with edited")
    await expect(chat_card).to_have_attribute("data-stage", "done")
    await expect(chat_card).to_contain_text("DELETE FROM orders WHERE id = 4")
    await expect(chat_card).to_contain_text("修改前 Asked")
    await chat.close()

    # The details page: who edited, the arguments before, and the audit trail with both.
    await row.locator(".cid").click()
    await expect(page.locator(".detail")).to_contain_text("edited by")
    edited = page.locator('.audit .event[data-kind="edited"]')
    await expect(edited).to_contain_text("id = 3")
    await expect(edited).to_contain_text("id = 4")
    await expect(page.locator('.audit .event[data-kind="finished"]')).to_contain_text("succeeded")
    width = await page.evaluate(WIDEST)
    assert width[0] <= 360, width
    await page.screenshot(path=str(ARTIFACTS / "admin-360-edited-detail.png"), full_page=True)
    await page.context.close()


async def test_the_health_panel_shows_this_instance_alive_and_redraws_live(
    gateway: Gateway, browser: Browser, page_errors: list[str]
) -> None:
    page = await open_admin(browser, base_url(gateway), page_errors)
    me = gateway.confirmations.instance
    health = page.locator("#health-body")
    row = health.locator(f'.instance[data-id="{me.id}"]')
    await expect(row).to_have_attribute("data-alive", "true")
    await expect(row.locator(".state")).to_contain_text("alive")
    await expect(row.locator(".tag.this")).to_be_visible()
    await expect(row.locator(".seen")).to_contain_text("last seen")
    await expect(health.locator(".store")).to_have_attribute("data-ready", "true")
    await expect(health.locator(".channels")).to_contain_text("webchat")

    # Another replica starts: its heartbeat reaches the open page without a reload.
    now = time.time()
    other = Instance(id="other-7-abcdef", pid=7, host="other", started_at=now, seen_at=now)
    await gateway.store.heartbeat(other, lease=gateway.confirmations.lease)
    arrived = health.locator(f'.instance[data-id="{other.id}"]')
    await expect(arrived).to_have_attribute("data-alive", "true")
    await expect(arrived.locator(".tag.this")).to_have_count(0)
    await page.locator("#health").scroll_into_view_if_needed()
    width = await page.evaluate(WIDEST)
    assert width[0] <= 360, width
    await page.locator("#health").screenshot(path=str(ARTIFACTS / "admin-360-health.png"))
    await page.context.close()
