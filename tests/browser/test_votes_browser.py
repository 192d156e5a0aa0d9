"""A call that needs two approvers, in a real browser at phone width (360 px): after the
first approval every open page shows "1/2 已批准：carol", the voter's approve button is off,
the other approver's approves. Screenshot: webchat-card-votes.png (test-artifacts/; with
GATEWAY_UPDATE_SCREENSHOTS=1 also docs/images/, the README's).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from tests.browser.test_phone_width import check_fits, open_phone, shoot
from tests.browser.test_webchat_browser import browser, page_errors
from tests.webchat.support import ServeProcess, serve

pytestmark = pytest.mark.browser
__all__ = ["browser", "page_errors"]  # fixtures shared with the main browser test

TWO = json.dumps([{"name": "two-dbas", "tool": "sql_modify", "approvals": 2}])


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ServeProcess]:
    with serve(
        tmp_path,
        GATEWAY_POLICY__RULES=TWO,
        GATEWAY_CHANNELS__WEBCHAT__APPROVERS='["carol", "dave"]',
    ) as process:
        yield process


async def test_one_of_two_approvals_on_every_phone(
    daemon: ServeProcess, browser: Browser, page_errors: list[str]
) -> None:
    alice = await open_phone(browser, daemon.url, "dbas", "alice", page_errors)
    carol = await open_phone(browser, daemon.url, "dbas", "carol", page_errors)
    dave = await open_phone(browser, daemon.url, "dbas", "dave", page_errors)
    await alice.locator("#text").fill("/sql DELETE FROM orders WHERE id = 3")
    await alice.locator("#text").press("Enter")
    for page in (alice, carol, dave):
        card = page.locator(".card").first
        await expect(card).to_have_attribute("data-status", "pending")
        await expect(card.locator(".field-votes")).to_contain_text("0/2 已批准")

    await carol.locator(".card .approve").first.click()
    for page in (alice, carol, dave):
        card = page.locator(".card").first
        await expect(card.locator(".field-votes")).to_contain_text(
            "1/2 已批准：carol / approved 1 of 2: carol"
        )
        await expect(card).to_have_attribute("data-status", "pending")
    # Carol's own approve is off; the card stays within the phone's width.
    await expect(carol.locator(".card .approve").first).to_be_disabled()
    await expect(dave.locator(".card .approve").first).to_be_enabled()
    await check_fits(dave, dave.locator(".card").first)
    # The phone's screen as dave sees it: the tally, the time left and his buttons (the
    # card is taller than the screen, and a shot of the card alone slides under the
    # page's sticky header).
    await dave.locator(".card .reply-hint").first.scroll_into_view_if_needed()
    await shoot(dave, "webchat-card-votes.png")

    await dave.locator(".card .approve").first.click()
    card = alice.locator(".card").first
    await expect(card).to_have_attribute("data-stage", "done")
    await expect(card.locator(".outcome")).to_contain_text("carol, dave")
    for page in (alice, carol, dave):
        await page.context.close()
