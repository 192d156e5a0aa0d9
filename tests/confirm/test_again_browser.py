"""重新发起 / Ask again in a real browser (Debian's Chromium, Playwright) against
``gateway serve`` with a short timeout: the expired card shows the button to its
requester, disabled with the reason to another member; a click asks again (a second
card), and the first card then says where the call went. A screenshot at 360 px goes to
test-artifacts/webchat-card-ask-again.png."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from tests.browser.test_webchat_browser import (  # noqa: F401 - fixtures used by name
    ARTIFACTS,
    browser,
    open_room,
    page_errors,
)
from tests.webchat.support import ServeProcess, serve

pytestmark = pytest.mark.browser


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ServeProcess]:
    # A short deadline, so the card expires by itself (waited for on the page, never slept).
    with serve(tmp_path, GATEWAY_CONFIRMATION__TIMEOUT_SECONDS="3") as process:
        yield process


async def test_an_expired_card_is_asked_again_from_its_button(
    daemon: ServeProcess,
    browser: Browser,  # noqa: F811
    page_errors: list[str],  # noqa: F811
) -> None:
    alice = await open_room(browser, daemon.url, "ops", "alice", page_errors)
    await alice.set_viewport_size({"width": 360, "height": 900})
    bob = await open_room(browser, daemon.url, "ops", "bob", page_errors)
    await alice.locator("#text").fill("/sql DELETE FROM orders WHERE id = 3")
    await alice.locator("#text").press("Enter")

    card = alice.locator(".card").first
    await expect(card).to_have_attribute("data-status", "expired")
    cid = await card.get_attribute("data-id")
    assert cid
    again = card.locator(".again")
    await expect(again).to_be_visible()
    await expect(again).to_be_enabled()
    await expect(again).to_have_text("重新发起 Ask again")
    await card.screenshot(path=str(ARTIFACTS / "webchat-card-ask-again.png"))

    bob_card = bob.locator(f'.card[data-id="{cid}"]')
    await expect(bob_card).to_have_attribute("data-status", "expired")
    await expect(bob_card.locator(".again")).to_be_disabled()
    await expect(bob_card.locator(".again-why")).to_contain_text("only alice, who asked")

    await again.click()
    await expect(alice.locator(".card")).to_have_count(2)
    new_id = await alice.locator(".card").nth(1).get_attribute("data-id")
    assert new_id and new_id != cid
    await expect(card.locator(".went")).to_contain_text(new_id)
    await expect(card.locator(".again-row")).to_be_hidden()
    await expect(bob_card.locator(".went")).to_contain_text(new_id)
