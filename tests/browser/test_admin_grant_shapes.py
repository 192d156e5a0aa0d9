"""Shaping a grant on the /admin page in a real browser (Debian's Chromium through
Playwright) against a real gateway: the operator picks "next call only" pinned to the
exact arguments, approves, and the grant list shows it tagged; the same call again runs
unasked once, and then is asked again. A screenshot at 360 px goes to test-artifacts/.
"""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, expect

from gateway.app import Gateway
from tests.browser.test_admin_browser import WIDEST, gateway, open_admin, say
from tests.browser.test_webchat_browser import ARTIFACTS, browser, page_errors
from tests.webchat.support import base_url, eventually

pytestmark = pytest.mark.browser
__all__ = ["browser", "gateway", "page_errors"]  # fixtures shared with the other browser tests

ARCHIVE = "/sql UPDATE orders SET status = 9 WHERE id = 5"


async def test_a_single_use_grant_pinned_to_the_arguments_from_the_page(
    gateway: Gateway, browser: Browser, page_errors: list[str]
) -> None:
    url = base_url(gateway)
    page = await open_admin(browser, url, page_errors)
    await say(url, "ops9", "carol", ARCHIVE)
    cid = await page.locator("#pending-list .card").get_attribute("data-id")
    card = page.locator(f'#pending-list .card[data-id="{cid}"]')
    shape = card.locator("details.grant-shape")
    await shape.locator("summary").click()
    await shape.locator(".grant-length").select_option("once")
    await shape.locator(".grant-pin").select_option("args")
    # Another call's event redraws the list: the shape stays open, as it was chosen.
    await say(url, "ops8", "dave", "/sql DELETE FROM orders WHERE id = 8")
    await expect(page.locator("#pending-list .card")).to_have_count(2)
    await expect(shape).to_have_attribute("open", "")
    await expect(shape.locator(".grant-length")).to_have_value("once")
    await expect(shape.locator(".grant-pin")).to_have_value("args")
    widest = await page.evaluate(WIDEST)
    assert widest[0] <= 360, f"wider than the phone: {widest}"
    await page.screenshot(path=str(ARTIFACTS / "admin-360-grant-shape.png"), full_page=True)
    await shape.locator(".approve-shaped").click()
    row = page.locator("#grants-list .grant-row")
    await expect(row).to_have_count(1)
    await expect(row.locator(".single-use")).to_be_visible()
    await expect(row.locator(".pinned-args")).to_be_visible()
    [grant] = await gateway.confirmations.grants.live()
    assert grant.single_use and grant.args_key is not None and grant.granted_by == "oncall"

    # The same call again runs without asking, once: the grant is used up...
    await say(url, "ops9", "carol", ARCHIVE)

    async def used_up() -> bool:
        return await gateway.confirmations.grants.live() == []

    await eventually(used_up)
    await page.reload()  # the list is redrawn on decisions, not on a grant's use
    await expect(page.locator("#grants-list .empty")).to_be_visible()
    assert await gateway.confirmations.list_pending("webchat:ops9") == []
    # ... so the third time it is asked.
    await say(url, "ops9", "carol", ARCHIVE)
    asked = page.locator("#pending-list .card").filter(has_text="webchat:ops9")
    await expect(asked).to_have_count(1)
    await page.context.close()
