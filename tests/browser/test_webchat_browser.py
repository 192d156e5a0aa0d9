"""A real browser (Debian's Chromium, driven by Playwright) against ``gateway serve``.

Two people in one room: alice asks for a DELETE, sees the card, bob sees the same card
with his buttons disabled; alice clicks 确认, both cards turn approved, the row is gone,
and an SSE subscriber saw requested then resolved. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from tests.admin.test_api import read_event
from tests.webchat.support import REPO, ServeProcess, eventually, order_exists, serve

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = REPO / "test-artifacts"
TIMEOUT_MS = 15_000


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ServeProcess]:
    with serve(tmp_path) as process:
        yield process


@pytest.fixture
def page_errors() -> Iterator[list[str]]:
    """Script errors, failed loads and CSP violations seen by any page of the test."""
    errors: list[str] = []
    yield errors
    assert errors == []


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (never a downloaded one)")
    ARTIFACTS.mkdir(exist_ok=True)
    # Busy CI machines (two cores, shared): give the page more than Playwright's 5 s.
    expect.set_options(timeout=TIMEOUT_MS)
    async with async_playwright() as p:
        chromium = await p.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            await chromium.close()


async def open_room(browser: Browser, url: str, room: str, user: str, errors: list[str]) -> Page:
    context = await browser.new_context(viewport={"width": 480, "height": 900}, locale="zh-CN")
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    # Script errors and CSP violations would otherwise only show in a console nobody reads.
    page.on("pageerror", lambda exc: errors.append(f"{user}: {exc}"))
    page.on(
        "console",
        lambda msg: errors.append(f"{user}: {msg.text}") if msg.type == "error" else None,
    )
    await page.goto(f"{url}/?session={room}&user={user}")
    await expect(page.locator("#conn.on")).to_be_visible()
    await expect(page.locator("#text")).to_be_enabled()
    return page


async def test_two_people_one_card_approved_in_the_browser(
    daemon: ServeProcess, browser: Browser, page_errors: list[str]
) -> None:
    alice = await open_room(browser, daemon.url, "ops", "alice", page_errors)
    bob = await open_room(browser, daemon.url, "ops", "bob", page_errors)
    async with (
        aiohttp.ClientSession(base_url=daemon.url) as http,
        http.get("/api/events") as events,
    ):
        await alice.locator("#text").fill("/sql DELETE FROM orders WHERE id = 3")
        await alice.locator("#text").press("Enter")

        card = alice.locator(".card")
        await expect(card).to_have_attribute("data-status", "pending")
        await expect(card.locator(".statement")).to_have_text("DELETE FROM orders WHERE id = 3")
        await expect(card.locator("dd.field-rows-affected")).to_have_text("1")
        await expect(card.locator(".risk")).to_contain_text("medium")
        await expect(card.locator(".countdown")).to_contain_text(re.compile(r"Time left: \d+:\d\d"))
        await expect(card.locator(".approve")).to_be_enabled()
        await expect(card.locator(".reply-hint")).to_be_visible()
        cid = await card.get_attribute("data-id")
        assert cid
        await expect(card.locator(".card-id")).to_have_text(cid)
        await card.screenshot(path=str(ARTIFACTS / "webchat-card-pending.png"))

        # Bob is in the room and sees the same card live, but may not decide it.
        bob_card = bob.locator(f'.card[data-id="{cid}"]')
        await expect(bob_card).to_have_attribute("data-status", "pending")
        await expect(bob_card.locator(".approve")).to_be_disabled()
        await expect(bob_card.locator(".reject")).to_be_disabled()
        await expect(bob_card.locator(".why")).to_contain_text("only the requester")
        await expect(bob_card.locator(".reply-hint")).to_be_hidden()
        await expect(bob.locator(".msg.theirs .bubble").first).to_have_text(
            "/sql DELETE FROM orders WHERE id = 3"
        )
        await bob.screenshot(path=str(ARTIFACTS / "webchat-bob-view.png"))

        requested = await read_event(events)
        await card.locator(".approve").click()

        for page in (alice, bob):
            done = page.locator(f'.card[data-id="{cid}"]')
            await expect(done).to_have_attribute("data-status", "approved")
            # The card itself goes on to how the run ended (issue 26), with its result.
            await expect(done).to_have_attribute("data-stage", "done")
            await expect(done.locator(".outcome")).to_contain_text(
                "alice 已批准，sql_modify 已执行"
            )
            await expect(done.locator(".approve")).to_be_hidden()
        await expect(alice.locator(".msg.bot .bubble").last).to_contain_text("1 行 / 1 row")
        await card.screenshot(path=str(ARTIFACTS / "webchat-card-approved.png"))
        await alice.screenshot(path=str(ARTIFACTS / "webchat-alice-after.png"))
        resolved = await read_event(events)

    assert requested["event"] == "confirmation.requested"
    assert requested["data"]["id"] == cid
    assert resolved["event"] == "confirmation.resolved"
    assert resolved["data"]["id"] == cid
    assert resolved["data"]["actor"] == "alice"
    assert resolved["data"]["via"] == "web"

    async def row_gone() -> bool:
        return not order_exists(daemon.data_dir, 3)

    await eventually(row_gone)
    await alice.context.close()
    await bob.context.close()


async def test_reject_with_a_reason_and_a_late_joiner_sees_the_outcome(
    daemon: ServeProcess, browser: Browser, page_errors: list[str]
) -> None:
    alice = await open_room(browser, daemon.url, "ops2", "alice", page_errors)
    await alice.locator("#text").fill("/sql DELETE FROM orders WHERE id = 4")
    await alice.locator("#send").click()
    card = alice.locator(".card")
    await expect(card).to_have_attribute("data-status", "pending")
    await card.locator(".reason").fill("wrong order")
    await card.locator(".reject").click()
    await expect(card).to_have_attribute("data-status", "rejected")
    await expect(card.locator(".outcome")).to_contain_text("wrong order")

    # Someone opening the shared link later sees the card as it ended, not as it began.
    carol = await open_room(browser, daemon.url, "ops2", "carol", page_errors)
    late = carol.locator(".card")
    await expect(late).to_have_attribute("data-status", "rejected")
    await expect(late.locator(".outcome")).to_contain_text("rejected by alice")
    await late.screenshot(path=str(ARTIFACTS / "webchat-card-rejected.png"))
    assert order_exists(daemon.data_dir, 4)
    await alice.context.close()
    await carol.context.close()


async def test_the_grant_button_lets_the_same_call_run_unasked(
    daemon: ServeProcess, browser: Browser, page_errors: list[str]
) -> None:
    alice = await open_room(browser, daemon.url, "ops3", "alice", page_errors)
    bob = await open_room(browser, daemon.url, "ops3", "bob", page_errors)
    await alice.locator("#text").fill("/sql DELETE FROM orders WHERE id = 5")
    await alice.locator("#text").press("Enter")
    card = alice.locator(".card")
    await expect(card).to_have_attribute("data-status", "pending")
    grant = card.locator(".approve-grant")
    await expect(grant).to_be_enabled()
    await expect(grant).to_contain_text("skip asking for 30 min")
    # Bob may not approve: no grant button for him.
    await expect(bob.locator(".card .approve-grant")).to_be_hidden()
    await card.screenshot(path=str(ARTIFACTS / "webchat-card-grant.png"))

    await grant.click()
    await expect(card).to_have_attribute("data-status", "approved")
    await expect(card.locator(".approve-grant")).to_be_hidden()
    told = alice.locator(".msg.bot .bubble", has_text="🔓 alice")
    await expect(told).to_contain_text("run without asking until")
    async with aiohttp.ClientSession(base_url=daemon.url) as http, http.get("/api/grants") as resp:
        grants = (await resp.json())["grants"]
    assert [(g["scope"], g["granted_by"], g["granted_via"], g["session_key"]) for g in grants] == [
        ("session", "alice", "web", "webchat:ops3")
    ]

    # The same call again: no card; the room reads whose grant let it run, until when.
    await alice.locator("#text").fill("/sql DELETE FROM orders WHERE id = 5")
    await alice.locator("#text").press("Enter")
    for page in (alice, bob):
        used = page.locator(".msg.bot .bubble", has_text="✅ 已按 alice 的授权")
        await expect(used).to_contain_text("without asking: alice's grant until")
        await expect(page.locator(".card")).to_have_count(1)
    await alice.screenshot(path=str(ARTIFACTS / "webchat-grant-used.png"))
    assert not order_exists(daemon.data_dir, 5)
    await alice.context.close()
    await bob.context.close()
