"""The web chat at phone width (360 px): the join header folds once joined, a new card
arrives with its top in view; nothing wider than the screen, every field and button inside
the card, tap targets large enough, text not shrunk. Screenshots of each state go to
test-artifacts/; with GATEWAY_UPDATE_SCREENSHOTS=1 also to docs/images/ (the README's).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Locator, Page, expect

from tests.browser.test_webchat_browser import ARTIFACTS, TIMEOUT_MS, browser, page_errors
from tests.webchat.support import REPO, ServeProcess, serve

pytestmark = pytest.mark.browser
__all__ = ["browser", "page_errors"]  # fixtures shared with the main browser test

PHONE = {"width": 360, "height": 740}
DOC_IMAGES = REPO / "docs" / "images"
LONG_UPDATE = (
    "/sql UPDATE orders SET status = 2, customer = 'a-customer-with-a-rather-long-name' "
    "WHERE id = 2"
)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ServeProcess]:
    with serve(tmp_path) as process:
        yield process


async def open_phone(browser: Browser, url: str, room: str, user: str, errors: list[str]) -> Page:
    context = await browser.new_context(
        viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True, locale="zh-CN"
    )
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    page.on("pageerror", lambda exc: errors.append(f"{user}: {exc}"))
    await page.goto(f"{url}/?session={room}&user={user}")
    await expect(page.locator("#conn.on")).to_be_visible()
    return page


async def check_fits(page: Page, card: Locator) -> None:
    """The page does not scroll sideways and every part of the card is on the screen."""
    overflow = await page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow} px wider than the phone"
    outside = await card.evaluate(
        """(card) => {
            const width = window.innerWidth;
            return [...card.querySelectorAll('*')]
                .filter((el) => el.offsetParent !== null)
                .map((el) => [el.className || el.tagName, el.getBoundingClientRect()])
                .filter(([, r]) => r.width > 0 && (r.left < 0 || r.right > width + 0.5))
                .map(([name, r]) => `${name}: ${Math.round(r.left)}..${Math.round(r.right)}`);
        }"""
    )
    assert outside == [], f"outside the 360 px screen: {outside}"
    smallest = await card.evaluate(
        """(card) => Math.min(...[...card.querySelectorAll('*')]
            .filter((el) => el.offsetParent !== null && el.textContent.trim())
            .map((el) => parseFloat(getComputedStyle(el).fontSize)))"""
    )
    assert smallest >= 11, f"text as small as {smallest} px is not readable on a phone"


async def shoot(what: Locator | Page, name: str) -> None:
    """A picture of ``what``; a card taller than the chat log is shot whole (the page made
    taller, the width kept at the phone's), else the log's edge cuts its buttons off."""
    page = what.page if isinstance(what, Locator) else None
    box = await what.bounding_box() if isinstance(what, Locator) else None
    if page is not None and box is not None and box["height"] > PHONE["height"] / 2:
        await page.set_viewport_size({"width": PHONE["width"], "height": int(box["height"]) + 400})
        await what.scroll_into_view_if_needed()
    ARTIFACTS.mkdir(exist_ok=True)
    await what.screenshot(path=str(ARTIFACTS / name))
    if os.environ.get("GATEWAY_UPDATE_SCREENSHOTS") == "1":
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        await what.screenshot(path=str(DOC_IMAGES / name))
    if page is not None:
        await page.set_viewport_size(PHONE)


async def test_card_is_readable_at_phone_width(
    daemon: ServeProcess, browser: Browser, page_errors: list[str]
) -> None:
    alice = await open_phone(browser, daemon.url, "phone", "alice", page_errors)
    await alice.locator("#text").fill(LONG_UPDATE)
    await alice.locator("#text").press("Enter")
    card = alice.locator(".card").first
    await expect(card).to_have_attribute("data-status", "pending")
    await expect(card.locator(".reply-hint")).to_be_visible()
    await check_fits(alice, card)
    for button in (card.locator(".approve"), card.locator(".reject")):
        await expect(button).to_be_visible()
        box = await button.bounding_box()
        assert box is not None and box["height"] >= 32, f"tap target too small: {box}"
    await shoot(card, "webchat-card-pending.png")

    await card.locator(".approve").click()
    await expect(card).to_have_attribute("data-status", "approved")
    # Approved, it runs; the card then says how the run ended, with the result.
    await expect(card).to_have_attribute("data-stage", "done")
    await expect(card.locator(".outcome")).to_contain_text("done: UPDATE: 1 行 / 1 row")
    await expect(alice.locator(".msg.bot .bubble").last).to_contain_text("1 行 / 1 row")
    await check_fits(alice, card)
    await shoot(card, "webchat-card-done.png")

    await alice.locator("#text").fill("/sql DELETE FROM orders WHERE id = 4")
    await alice.locator("#text").press("Enter")
    second = alice.locator(".card").nth(1)
    await expect(second).to_have_attribute("data-status", "pending")
    await second.locator(".reason").fill("wrong order")
    await second.locator(".reject").click()
    await expect(second).to_have_attribute("data-status", "rejected")
    await expect(second.locator(".outcome")).to_contain_text(
        "rejected by alice; sql_modify did not run · 原因 Reason: wrong order"
    )
    await check_fits(alice, second)
    await shoot(second, "webchat-card-rejected.png")
    await alice.context.close()


async def test_a_new_card_arrives_with_its_top_in_view_under_a_folded_header(
    daemon: ServeProcess, browser: Browser, page_errors: list[str]
) -> None:
    """Issue 26: at 360 px a new card scrolled in showing only its buttons; its header, risk
    and row count were above the fold, under a 215 px page header."""
    alice = await open_phone(browser, daemon.url, "fold", "alice", page_errors)
    # Joined: the name and room form folds away; "change" brings it back.
    await expect(alice.locator("#join")).to_be_hidden()
    await expect(alice.locator("#change")).to_be_visible()
    header = await alice.locator("#bar").bounding_box()
    assert header is not None and header["height"] < 120, header
    for _ in range(3):  # some chat first: the log scrolls
        await alice.locator("#text").fill("/help")
        await alice.locator("#text").press("Enter")
    await expect(alice.locator(".msg.bot")).to_have_count(3)

    await alice.locator("#text").fill(LONG_UPDATE)
    await alice.locator("#text").press("Enter")
    card = alice.locator(".card")
    await expect(card).to_have_attribute("data-status", "pending")
    # The case that matters: the card is taller than the chat log it arrives in.
    log, tall = await alice.locator("#log").bounding_box(), await card.bounding_box()
    assert log is not None and tall is not None and tall["height"] > log["height"] * 0.9
    for part in (".card-head", ".risk", ".summary", ".field-rows-affected"):
        await expect(card.locator(part)).to_be_in_viewport(ratio=1)
    await expect(card.locator(".summary")).to_contain_text("1 行 / 1 row")
    await shoot(alice, "webchat-phone-new-card.png")

    await alice.locator("#change").click()
    await expect(alice.locator("#join")).to_be_visible()
    await expect(alice.locator("#user")).to_be_focused()
    await alice.locator("#join-button").click()  # nothing changed: folds again
    await expect(alice.locator("#join")).to_be_hidden()
    await alice.context.close()
