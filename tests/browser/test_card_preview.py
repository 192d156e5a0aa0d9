"""The Feishu confirmation card with its grant button, drawn from the JSON the channel
sends (tests/browser/card_preview.py) at phone width: every button on the screen and
labelled as texts.py says. The screenshot goes to test-artifacts/; with
GATEWAY_UPDATE_SCREENSHOTS=1 also to docs/images/ (docs/grants.md and the README show it).
"""

from __future__ import annotations

import time

import pytest
from playwright.async_api import Browser, expect

from channels.feishu.render import confirmation_card
from gateway import texts
from gateway.confirm.model import Confirmation, ToolCall
from tests.browser.card_preview import card_html
from tests.browser.test_phone_width import PHONE, shoot
from tests.browser.test_webchat_browser import TIMEOUT_MS, browser

pytestmark = pytest.mark.browser
__all__ = ["browser"]  # the fixture shared with the main browser test

CAPTION = "预览：由飞书卡片 JSON 绘制 / preview drawn from the Feishu card JSON"


def pending_delete() -> Confirmation:
    now = time.time()
    statement = "DELETE FROM orders WHERE status = 1"
    return Confirmation(
        id="K7Q2",
        session_key="feishu:oc_ops",
        channel="feishu",
        chat_id="oc_ops",
        requester="alice",
        is_group=True,
        tool_call=ToolCall(name="sql_modify", args={"sql": statement}, call_id="c1"),
        summary="DELETE orders，影响 3 行 / 3 rows",
        details={
            "statement": statement,
            "kind": "DELETE",
            "tables": ["orders"],
            "rows_affected": 3,
        },
        created_at=now,
        expires_at=now + 300,
    )


async def test_feishu_card_with_the_grant_button_fits_a_phone(browser: Browser) -> None:
    context = await browser.new_context(viewport=PHONE, device_scale_factor=2, locale="zh-CN")
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    await page.set_content(card_html(confirmation_card(pending_delete()), caption=CAPTION))
    buttons = page.locator(".btn")
    await expect(buttons).to_have_text(
        [texts.APPROVE_BUTTON, texts.REJECT_BUTTON, texts.GRANT_BUTTON]
    )
    width = PHONE["width"]
    for i in range(3):
        box = await buttons.nth(i).bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
    overflow = await page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0
    await shoot(page.locator("#shot"), "feishu-card-grant.png")
    await context.close()
