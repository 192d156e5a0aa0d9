"""The admin API edits the keyword file in place: one word at a time with a clear answer
when it is already there; unknown fields in a PUT are refused (issue 16)."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from config.keywords import SHIPPED_KEYWORDS_FILE
from gateway.app import Gateway


def comments(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.startswith("#")]


async def test_add_one_word_keeps_the_file_and_says_when_it_exists(
    gateway: Gateway, admin: aiohttp.ClientSession
) -> None:
    path = gateway.keywords.path
    async with admin.post("/api/keywords/confirm", json={"word": "搞定"}) as resp:
        assert resp.status == 200
        assert (await resp.json())["confirm"][-1] == "搞定"
    assert "搞定" in gateway.keywords.words.confirm
    assert comments(path) == comments(SHIPPED_KEYWORDS_FILE)
    before = path.read_bytes()
    async with admin.post("/api/keywords/confirm", json={"word": "搞定"}) as resp:
        assert resp.status == 409
        assert (await resp.json())["error"] == "'搞定' is already in the confirm list"
    async with admin.post("/api/keywords/cancel", json={"word": "ok"}) as resp:
        assert resp.status == 422
        assert "both lists: ok" in (await resp.json())["error"]
    async with admin.post("/api/keywords/maybe", json={"word": "x"}) as resp:
        assert resp.status == 404
    async with admin.post("/api/keywords/cancel", json={"word": "x", "list": "y"}) as resp:
        assert resp.status == 400
    assert path.read_bytes() == before


async def test_put_refuses_unknown_fields(gateway: Gateway, admin: aiohttp.ClientSession) -> None:
    path = gateway.keywords.path
    before = path.read_bytes()
    body = {"confirm": ["ok"], "cancel": ["no"], "confrim": ["yes"]}
    async with admin.put("/api/keywords", json=body) as resp:
        assert resp.status == 400
        answer = await resp.json()
    assert answer == {
        "error": "confrim is not a field of this request (expected confirm, cancel)",
        "field": "confrim",
    }
    assert path.read_bytes() == before


async def test_put_keeps_comments(gateway: Gateway, admin: aiohttp.ClientSession) -> None:
    async with admin.put("/api/keywords", json={"confirm": ["ok", "行"], "cancel": ["no"]}) as r:
        assert r.status == 200
    assert comments(gateway.keywords.path) == comments(SHIPPED_KEYWORDS_FILE)
    assert gateway.keywords.words.confirm == ("ok", "行")


async def test_words_are_validated_as_replies_are_read(
    gateway: Gateway, admin: aiohttp.ClientSession
) -> None:
    """Issue 22: ``ok.`` beside the cancel word ``ok``, or ``请`` as a confirm word, were
    accepted; a reply ``ok`` then cancelled and a bare ``请`` confirmed."""
    path = gateway.keywords.path
    before = path.read_bytes()
    async with admin.post("/api/keywords/cancel", json={"word": "ok."}) as resp:
        assert resp.status == 422
        assert "both lists: ok" in (await resp.json())["error"]
    async with admin.post("/api/keywords/confirm", json={"word": "请"}) as resp:
        assert resp.status == 422
        assert "'请' is a filler" in (await resp.json())["error"]
    body = {"confirm": ["ok", "请"], "cancel": ["no"]}
    async with admin.put("/api/keywords", json=body) as resp:
        assert resp.status == 422
        assert "'请'" in (await resp.json())["error"]
    assert path.read_bytes() == before
    async with admin.post("/api/replies/test", json={"text": "ok"}) as resp:
        assert (await resp.json())["intent"] == "confirm"
    async with admin.post("/api/replies/test", json={"text": "请"}) as resp:
        assert (await resp.json())["intent"] == "none"
