"""The web chat's card is HTML: values from the request are text there too (issue 22 item 9).

A table named like markup and a reason with tags, in Chromium against ``gateway serve``:
the card shows them as written and holds no element they would have made.
"""

from __future__ import annotations

import sqlite3

import pytest
from playwright.async_api import Browser, expect

from tests.browser.test_webchat_browser import browser, daemon, open_room, page_errors
from tests.webchat.support import ServeProcess

pytestmark = pytest.mark.browser
__all__ = ["browser", "daemon", "page_errors"]  # the fixtures shared with the main test

TABLE = "<img src=x onerror=document.title=1><at id=all></at>[x](http://evil)"
STATEMENT = f'DELETE FROM "{TABLE}" WHERE id = 1'
REASON = "<b>bold</b> [see](https://evil.test/page)"


async def test_names_statements_and_reasons_are_text_on_the_card(
    daemon: ServeProcess, browser: Browser, page_errors: list[str]
) -> None:
    with sqlite3.connect(daemon.data_dir / "demo.db") as db:
        db.execute(f'CREATE TABLE "{TABLE}" (id INTEGER PRIMARY KEY)')
        db.execute(f'INSERT INTO "{TABLE}" VALUES (1), (2)')
    alice = await open_room(browser, daemon.url, "markup", "alice", page_errors)
    await alice.locator("#text").fill(f"/sql {STATEMENT}")
    await alice.locator("#text").press("Enter")
    card = alice.locator(".card")
    await expect(card).to_have_attribute("data-status", "pending")
    await expect(card.locator(".statement")).to_have_text(STATEMENT)
    await expect(card.locator(".summary")).to_contain_text(TABLE)
    await card.locator(".reason").fill(REASON)
    await card.locator(".reject").click()
    await expect(card).to_have_attribute("data-status", "rejected")
    await expect(card.locator(".outcome")).to_contain_text(REASON)
    for tag in ("img", "at", "a", "b"):
        await expect(alice.locator(f"#log {tag}, .card {tag}")).to_have_count(0)
    assert await alice.title() != "1"
    await alice.context.close()
