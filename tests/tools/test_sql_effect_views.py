"""The preview rows are shown everywhere a person decides (issue 24): the text prompt, the
web chat card, the Feishu and DingTalk cards, approvers' direct copies, the admin page's
pending list and detail page, and ``GET /api/confirmations/{id}`` as data.

One real gateway (web chat, admin API and page, the demo SQLite database) asks
``DELETE FROM orders WHERE status = 1`` (rows 2 Bob, 3 Carol, 6 Frank); each surface is
rendered from the record it stored.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from channels.dingtalk.cards import card_params, prompt_markdown
from channels.feishu.render import confirmation_card
from gateway import texts
from gateway.app import Gateway
from gateway.confirm.model import Confirmation, ToolCall
from gateway.confirm.views import effect_tables
from gateway.http import openapi_models as openapi
from gateway.texts import approvers as approver_texts
from tests.webchat.support import base_url, eventually, make_settings, running_gateway

TOKEN = "test-admin-token-0123456789"
DELETE = "/sql DELETE FROM orders WHERE status = 1"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
async def admin(tmp_path: Path) -> AsyncIterator[tuple[Gateway, aiohttp.ClientSession]]:
    settings = make_settings(tmp_path, admin={"token": TOKEN})
    async with running_gateway(settings) as gw:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with aiohttp.ClientSession(base_url=base_url(gw), headers=headers) as http:
            yield gw, http


async def asked(gw: Gateway, http: aiohttp.ClientSession, text: str = DELETE) -> Confirmation:
    async with http.post("/api/chat/room1/messages", json={"user": "alice", "text": text}) as r:
        assert r.status == 202

    async def pending() -> Confirmation | None:
        found = await gw.confirmations.store.list_pending("webchat:room1")
        return found[0] if found else None

    return await eventually(pending)


def shows_the_rows(text: str) -> None:
    """The caption with the total, and each row's customer."""
    assert "将删除 3 行 / deletes 3 rows" in text
    for name in ("Bob", "Carol", "Frank"):
        assert name in text


async def test_the_api_carries_the_preview_as_data(
    admin: tuple[Gateway, aiohttp.ClientSession],
) -> None:
    gw, http = admin
    c = await asked(gw, http)
    async with http.get(f"/api/confirmations/{c.id}") as resp:
        body = await resp.json()
    openapi.OneConfirmation.model_validate(body)  # the documented model still describes it
    [effect] = body["confirmation"]["details"]["effects"]
    assert (effect["kind"], effect["table"], effect["total"]) == ("DELETE", "orders", 3)
    assert effect["keys"] == [["2"], ["3"], ["6"]]
    assert [r["before"]["customer"] for r in effect["rows"]] == ["Bob", "Carol", "Frank"]


async def test_the_admin_pending_list_and_detail_page_show_the_rows(
    admin: tuple[Gateway, aiohttp.ClientSession],
) -> None:
    gw, http = admin
    c = await asked(gw, http)
    for path in ("/admin", f"/admin/confirmations/{c.id}"):
        async with http.get(path) as resp:
            assert resp.status == 200
            page = await resp.text()
        assert 'class="effect-rows"' in page, path
        shows_the_rows(page)
        assert "<td>Bob</td>" in page


async def test_the_web_chat_card_carries_the_tables(
    admin: tuple[Gateway, aiohttp.ClientSession],
) -> None:
    gw, http = admin
    await asked(gw, http)
    async with http.get("/api/chat/room1/messages") as resp:
        history = await resp.json()
    [card] = [m for m in history["messages"] if m.get("kind") == "confirmation"]
    words = card["card"]
    assert words["effects_label"] == texts.FIELD_PREVIEW
    [table] = words["effects"]
    assert table["caption"] == "DELETE orders：将删除 3 行 / deletes 3 rows"
    assert table["columns"] == ["id", "customer", "amount", "status"]
    assert [row[1] for row in table["rows"]] == ["Bob", "Carol", "Frank"]


async def test_text_prompts_and_platform_cards_show_the_rows(
    admin: tuple[Gateway, aiohttp.ClientSession],
) -> None:
    gw, http = admin
    c = await asked(gw, http)
    now = time.time()
    # The text prompt (console, plain text channels) and an approver's direct copy.
    for text in (texts.prompt(c, now), approver_texts.direct_prompt(c, now)):
        shows_the_rows(text)
        assert "id | customer | amount | status" in text
    # Feishu: the card, and an approver's direct copy of it.
    for card in (confirmation_card(c, now=now), confirmation_card(c, now=now, direct=True)):
        shows_the_rows(json.dumps(card, ensure_ascii=False))
    # DingTalk: the card's markdown (escaped) and its text form.
    markdown = prompt_markdown(c)
    shows_the_rows(markdown)
    assert "id \\| customer" in markdown
    shows_the_rows(json.dumps(card_params(c, now=now), ensure_ascii=False))


def record(effects: list[dict[str, Any]]) -> Confirmation:
    """A stored record of the shape the store keeps, with these effects."""
    now = time.time()
    return Confirmation(
        id="K7Q2",
        session_key="test:c1",
        channel="test",
        chat_id="c1",
        requester="alice",
        is_group=False,
        tool_call=ToolCall(name="sql_modify", args={"sql": "x"}, call_id="c"),
        summary="x",
        created_at=now,
        expires_at=now + 60,
        details={"effects": effects},
    )


def test_update_rows_read_before_and_after_and_notes_say_what_is_not_shown() -> None:
    update = {
        "statement": 0, "kind": "UPDATE", "table": "orders", "key": ["id"], "total": 12,
        "columns": ["id", "status"], "keys": None, "dropped_columns": [], "not_previewed": None,
        "rows": [{"key": ["1"], "before": {"status": "0"}, "after": {"status": None}}],
    }  # fmt: skip
    alter = {
        "statement": 1, "kind": "ALTER", "table": "orders", "key": ["id"], "total": 12,
        "columns": [], "rows": [], "keys": None, "dropped_columns": ["amount"],
        "not_previewed": None,
    }  # fmt: skip
    blind = {"statement": 2, "kind": "MERGE", "table": "t", "not_previewed": "cannot preview"}
    first, second, third = effect_tables(record([update, alter, blind]))
    assert first.caption == "UPDATE orders：将修改 12 行 / changes 12 rows"
    assert (first.columns, first.rows) == (("id", "status"), (("1", "0 → NULL"),))
    assert first.notes == ("仅显示前 1 行，共 12 行 / first 1 of 12 shown",)
    assert second.rows == () and second.notes == ("将删除的列 / columns that go: amount",)
    assert third.notes == ("cannot preview",)
    lines = texts.detail_lines(record([update]))
    assert "  1 | 0 → NULL" in lines
