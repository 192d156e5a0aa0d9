"""Undo in a real browser at phone width (360 px), against ``gateway serve``.

alice deletes order 4 and approves it; the card then says it is done and offers
撤销 Undo. Her tap says ``撤销 K7Q2`` in the chat, which asks for ``sql_undo`` with a card of
its own (held: the order is still gone); approved, order 4 is back. Screenshots go to
test-artifacts/; with GATEWAY_UPDATE_SCREENSHOTS=1 also to docs/images/ (the README's).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from tests.browser.test_phone_width import check_fits, open_phone, shoot
from tests.browser.test_webchat_browser import browser, page_errors
from tests.webchat.support import ServeProcess, order_exists, serve, wait_until

pytestmark = pytest.mark.browser
__all__ = ["browser", "page_errors"]  # fixtures shared with the main browser test


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ServeProcess]:
    with serve(tmp_path) as process:
        yield process


async def test_a_done_change_offers_undo_and_the_undo_is_held_then_restores(
    daemon: ServeProcess, browser: Browser, page_errors: list[str]
) -> None:
    data_dir = daemon.tmp_path / "data"
    alice = await open_phone(browser, daemon.url, "undo", "alice", page_errors)
    await alice.locator("#text").fill("/sql DELETE FROM orders WHERE id = 4")
    await alice.locator("#text").press("Enter")
    change = alice.locator(".card").first
    await expect(change).to_have_attribute("data-status", "pending")
    # Before anyone approves, the card says the change can be undone.
    await expect(change.locator(".field-undo")).to_contain_text("can be undone")
    await expect(change.locator(".undo")).to_be_hidden()
    await change.locator(".approve").click()
    await expect(change).to_have_attribute("data-stage", "done")
    wait_until(lambda: not order_exists(data_dir, 4))
    undo_button = change.locator(".undo")
    await expect(undo_button).to_be_visible()
    await expect(undo_button).to_have_text("撤销 Undo")
    box = await undo_button.bounding_box()
    assert box is not None and box["height"] >= 32, f"tap target too small: {box}"
    await check_fits(alice, change)
    await shoot(change, "webchat-card-undo.png")

    await undo_button.click()
    undo = alice.locator(".card").nth(1)
    await expect(undo).to_have_attribute("data-status", "pending")
    await expect(undo.locator(".summary")).to_contain_text("undo")
    await expect(undo.locator(".field-tool")).to_contain_text("sql_undo")
    assert not order_exists(data_dir, 4)  # held: nothing restored before approval
    await check_fits(alice, undo)
    await shoot(undo, "webchat-card-undo-asked.png")
    await undo.locator(".approve").click()
    await expect(undo).to_have_attribute("data-stage", "done")
    wait_until(lambda: order_exists(data_dir, 4))
    await alice.context.close()
