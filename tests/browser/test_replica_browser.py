"""The admin page and the web chat page of one replica show what another replica did
(issue 13, item 5), in a real browser (Debian's Chromium through Playwright).

Two gateways (replicas A and B, ``gateway.app.build``, command agent) on one real Redis
under a key prefix of their own, each with its own data dir. The operator's admin page
and Alice's web chat page are open on A; calls are asked and decided through B.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import Browser, expect

from gateway.app import Gateway
from tests.browser.test_admin_browser import TOKEN, open_admin, say
from tests.browser.test_webchat_browser import ARTIFACTS, browser, open_room, page_errors
from tests.services import REDIS_URL, redis_prefix
from tests.webchat.support import base_url, make_settings, running_gateway

pytestmark = [pytest.mark.browser, pytest.mark.services]
__all__ = ["browser", "page_errors"]  # fixtures shared with the web chat's browser test


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[tuple[Gateway, Gateway]]:
    async with redis_prefix() as prefix:
        options = {
            "admin": {"token": TOKEN, "sse_heartbeat_seconds": 1},
            "confirmation": {"store": "redis", "redis_url": REDIS_URL, "redis_prefix": prefix},
        }
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        async with (
            running_gateway(make_settings(tmp_path / "a", **options)) as a,
            running_gateway(make_settings(tmp_path / "b", **options)) as b,
        ):
            yield a, b


async def decide_on(url: str, cid: str, decision: str) -> None:
    async with (
        aiohttp.ClientSession(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http,
        http.post(
            f"/api/confirmations/{cid}/decision", json={"decision": decision, "actor": "oncall"}
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()


async def test_a_s_pages_show_what_b_asked_and_decided_as_it_happens(
    replicas: tuple[Gateway, Gateway], browser: Browser, page_errors: list[str]
) -> None:
    a, b = replicas
    url_a, url_b = base_url(a), base_url(b)
    admin = await open_admin(browser, url_a, page_errors)
    await expect(admin.locator("#pending-list .empty")).to_be_visible()

    # Asked on B: A's admin page lists it live (only B's feed entry can tell it).
    await say(url_b, "ops-b", "bob", "/sql DELETE FROM orders WHERE id = 4")
    card = admin.locator("#pending-list .card")
    await expect(card).to_have_count(1)
    await expect(card.locator(".session")).to_have_text("webchat:ops-b")
    asked_on_b = await card.get_attribute("data-id")
    assert asked_on_b
    # Rejected on B: gone from A's pending list, in its history as rejected.
    await decide_on(url_b, asked_on_b, "reject")
    await expect(admin.locator("#pending-list .card")).to_have_count(0)
    row = admin.locator(f'#history-list .row[data-id="{asked_on_b}"]')
    await expect(row).to_have_attribute("data-status", "rejected")

    # Asked in Alice's room on A, approved on B: her card turns approved, then done with
    # the result, without a reload; A's admin page shows it decided.
    alice = await open_room(browser, url_a, "ops", "alice", page_errors)
    await alice.locator("#text").fill("/sql DELETE FROM orders WHERE id = 3")
    await alice.locator("#text").press("Enter")
    chat_card = alice.locator(".card")
    await expect(chat_card).to_have_attribute("data-status", "pending")
    cid = await chat_card.get_attribute("data-id")
    assert cid
    await expect(admin.locator(f'#pending-list .card[data-id="{cid}"]')).to_have_count(1)
    await decide_on(url_b, cid, "approve")
    await expect(chat_card).to_have_attribute("data-status", "approved")
    await expect(chat_card).to_have_attribute("data-stage", "done")
    await expect(chat_card.locator(".outcome")).to_contain_text("oncall 已批准，sql_modify 已执行")
    # The result is on her card: B, which took the approval, ran the call and said it.
    await expect(chat_card.locator(".outcome")).to_contain_text("DELETE: 1 行 / 1 row")
    await expect(admin.locator("#pending-list .card")).to_have_count(0)
    await expect(admin.locator(f'#history-list .row[data-id="{cid}"]')).to_have_attribute(
        "data-status", "approved"
    )
    await alice.screenshot(path=str(ARTIFACTS / "webchat-decided-on-another-replica.png"))
    await admin.context.close()
    await alice.context.close()
