"""The web chat card's grant shape at phone width (360 px) in a real browser against a
real ``gateway serve``: the reader opens "自定授权 / a grant of your shape", picks the next
call only, pinned to the exact arguments, and approves; the grant is exactly that, and
the card still fits the screen. Screenshot in test-artifacts/ (docs/images/ with
GATEWAY_UPDATE_SCREENSHOTS=1).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import Browser, expect

from tests.browser.test_phone_width import check_fits, open_phone, shoot
from tests.browser.test_webchat_browser import browser, page_errors
from tests.webchat.support import ServeProcess, serve

pytestmark = pytest.mark.browser
__all__ = ["browser", "page_errors"]  # fixtures shared with the main browser test


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ServeProcess]:
    with serve(tmp_path) as process:
        yield process


async def test_a_grant_of_the_readers_shape_from_the_card(
    daemon: ServeProcess, browser: Browser, page_errors: list[str]
) -> None:
    alice = await open_phone(browser, daemon.url, "shape", "alice", page_errors)
    await alice.locator("#text").fill("/sql UPDATE orders SET status = 2 WHERE id = 2")
    await alice.locator("#text").press("Enter")
    card = alice.locator(".card")
    await expect(card).to_have_attribute("data-status", "pending")
    shape = card.locator(".grant-shape")
    await expect(shape).to_be_visible()
    await shape.locator("summary").click()
    await shape.locator(".grant-length").select_option("once")
    await shape.locator(".grant-pin").select_option("args")
    await check_fits(alice, card)
    await shoot(card, "webchat-card-grant-shape.png")
    await shape.locator(".approve-shaped").click()
    await expect(card).to_have_attribute("data-status", "approved")
    await expect(shape).to_be_hidden()
    await expect(alice.locator(".msg.bot .bubble", has_text="🔓 alice")).to_contain_text("once")
    async with aiohttp.ClientSession() as http, http.get(f"{daemon.url}/api/grants") as resp:
        [grant] = (await resp.json())["grants"]
    assert grant["single_use"] is True and grant["args_key"] is not None
    await alice.context.close()
