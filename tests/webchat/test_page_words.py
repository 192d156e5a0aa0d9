"""The web chat page's words come from gateway/texts: the page and its script hold none."""

from __future__ import annotations

import json
import re
from pathlib import Path

import aiohttp

from gateway import texts
from tests.webchat.test_rest import DELETE_3, say, wait_for_kind

PAGE_DIR = Path(__file__).resolve().parents[2] / "channels" / "webchat"
CJK = re.compile(r"[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]")


def test_the_page_and_its_script_hold_no_chinese_of_their_own() -> None:
    for path in (PAGE_DIR / "page.html", PAGE_DIR / "static" / "app.js"):
        found = CJK.findall(path.read_text(encoding="utf-8"))
        assert found == [], f"{path.name}: words belong in gateway/texts ({''.join(found)})"


async def test_the_served_page_carries_the_texts(http: aiohttp.ClientSession) -> None:
    async with http.get("/") as resp:
        assert resp.status == 200
        page = await resp.text()
    for zh, en in texts.WEBCHAT_LABELS.values():
        assert zh in page
        assert en in page
    script = re.search(r'<script id="texts" type="application/json">(.*?)</script>', page, re.S)
    assert script is not None
    assert json.loads(script.group(1)) == texts.WEBCHAT_SCRIPT


async def test_a_card_frame_carries_its_words(http: aiohttp.ClientSession) -> None:
    await say(http, "words", "alice", DELETE_3)
    msg = await wait_for_kind(http, "words", "confirmation")
    card = msg["card"]
    labels = [f["label"] for f in card["fields"]]
    assert texts.FIELD_STATEMENT in labels
    assert texts.FIELD_ROWS in labels
    assert card["outcome"] is None
