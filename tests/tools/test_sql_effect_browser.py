"""The web chat card with its preview rows (issue 24) at phone width (360 px), in headless
Chromium against ``gateway serve``: the rows that would go, in a table inside the card,
nothing wider than the screen, the buttons still on it. The screenshot goes to
test-artifacts/; with GATEWAY_UPDATE_SCREENSHOTS=1 also to docs/images/ (the README's).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from tests.browser.test_phone_width import PHONE, check_fits, open_phone, shoot
from tests.browser.test_webchat_browser import browser, page_errors
from tests.webchat.support import ServeProcess, serve

pytestmark = pytest.mark.browser
__all__ = ["browser", "page_errors"]  # fixtures shared with the main browser tests


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ServeProcess]:
    with serve(tmp_path) as process:
        yield process


async def test_the_card_shows_the_rows_that_would_go_at_phone_width(
    daemon: ServeProcess, browser: Browser, page_errors: list[str]
) -> None:
    alice = await open_phone(browser, daemon.url, "preview", "alice", page_errors)
    await alice.locator("#text").fill("/sql DELETE FROM orders WHERE status = 1")
    await alice.locator("#text").press("Enter")
    card = alice.locator(".card").first
    await expect(card).to_have_attribute("data-status", "pending")
    effect = card.locator(".effects .effect")
    await expect(effect.locator(".effect-caption")).to_have_text(
        "DELETE orders：将删除 3 行 / deletes 3 rows"
    )
    await expect(effect.locator("th")).to_have_text(["id", "customer", "amount", "status"])
    await expect(effect.locator("tbody tr td:nth-child(2)")).to_have_text(["Bob", "Carol", "Frank"])
    await expect(card.locator(".approve")).to_be_visible()
    await check_fits(alice, card)
    # Taller than the log of a 740 px phone: a taller screen of the same width shows it all.
    await alice.set_viewport_size({"width": PHONE["width"], "height": 1100})
    await check_fits(alice, card)
    await shoot(card, "webchat-card-preview-rows.png")

    # An UPDATE shows each row's change, before → after, as the database computes it.
    await alice.locator("#text").fill("/sql UPDATE orders SET status = status + 1 WHERE id < 3")
    await alice.locator("#text").press("Enter")
    second = alice.locator(".card").nth(1)
    await expect(second).to_have_attribute("data-status", "pending")
    cells = second.locator(".effect-rows tbody td")
    await expect(cells).to_have_text(["1", "0 → 1", "2", "1 → 2"])
    await alice.context.close()
