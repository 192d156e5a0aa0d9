"""A reminder in the web chat at phone width (360 px), from a real ``gateway serve`` whose
reminder comes 2 s after a call is asked: the line names the requester, the call's id and
the time left, inside the screen. Its screenshot goes to test-artifacts/ and, with
GATEWAY_UPDATE_SCREENSHOTS=1, to docs/images/ (the README's).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from tests.browser.test_phone_width import check_fits, open_phone, shoot
from tests.browser.test_webchat_browser import browser, page_errors
from tests.webchat.support import ServeProcess, serve

pytestmark = pytest.mark.browser
__all__ = ["browser", "page_errors"]  # fixtures shared with the main browser test


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ServeProcess]:
    with serve(
        tmp_path,
        GATEWAY_CONFIRMATION__TIMEOUT_SECONDS="300",
        GATEWAY_CONFIRMATION__REMIND_BEFORE_SECONDS="298",
    ) as process:
        yield process


async def test_a_reminder_is_readable_at_phone_width(
    daemon: ServeProcess, browser: Browser, page_errors: list[str]
) -> None:
    alice = await open_phone(browser, daemon.url, "remind", "alice", page_errors)
    await alice.locator("#text").fill("/sql DELETE FROM orders WHERE id = 3")
    await alice.locator("#text").press("Enter")
    card = alice.locator(".card")
    await expect(card).to_have_attribute("data-status", "pending")
    cid = await card.get_attribute("data-id")
    reminder = alice.locator(".msg.bot .bubble", has_text="⏰")
    await expect(reminder).to_contain_text("@alice")
    await expect(reminder).to_contain_text(f"[{cid}]")
    await expect(reminder).to_contain_text("仍在等待确认 / still waiting for a decision")
    await expect(reminder).to_contain_text("剩余 Time left: 4:5")  # 4:5x of 5 min
    await reminder.scroll_into_view_if_needed()
    await check_fits(alice, reminder)
    await shoot(alice, "webchat-phone-reminder.png")
    # Still pending and decidable from the card.
    await card.locator(".approve").click()
    await expect(card).to_have_attribute("data-status", "approved")
    await alice.context.close()
