"""Grants an approver shapes, on a real ``gateway serve`` subprocess (the web chat and the
admin API): single use, pinned to the scope; pinned to the exact arguments; and the
lengths the API refuses. What a user notices: the next such call runs without asking
exactly as far as the shape says, and no further.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.webchat.support import ServeProcess, eventually, order_exists, serve

TOKEN = "grant-shape-serve-token-abcdef"
ROOM = "/api/chat/shapes/messages"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[ServeProcess]:
    with serve(tmp_path, GATEWAY_ADMIN__TOKEN=TOKEN) as process:
        yield process


async def test_single_use_and_pinned_arguments_cover_exactly_their_shape(
    daemon: ServeProcess,
) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(base_url=daemon.url, headers=headers) as http:

        async def say(text: str) -> None:
            async with http.post(ROOM, json={"user": "alice", "text": text}) as resp:
                assert resp.status == 202

        async def room() -> list[dict[str, Any]]:
            async with http.get(f"{ROOM}?after=0") as resp:
                messages: list[dict[str, Any]] = (await resp.json())["messages"]
            return messages

        async def asked(n: int) -> str:
            """The id of the n-th confirmation asked in the room, once it is there."""

            async def probe() -> str | None:
                cards = [m for m in await room() if m["kind"] == "confirmation"]
                return cards[n - 1]["confirmation"]["id"] if len(cards) >= n else None

            return await eventually(probe, timeout=15)

        async def approve(cid: str, grant: dict[str, Any]) -> dict[str, Any]:
            async with http.post(
                f"/api/confirmations/{cid}/decision",
                json={"decision": "approve", "actor": "bob", "grant": grant},
            ) as resp:
                assert resp.status == 200, await resp.text()
                answer: dict[str, Any] = await resp.json()
            return answer

        async def deleted(order_id: int) -> None:
            async def gone() -> bool:
                return not order_exists(daemon.data_dir, order_id)

            await eventually(gone, timeout=15)

        # A length a shaped grant may not have is refused before anything is decided.
        await say("/sql DELETE FROM orders WHERE id = 3")
        first = await asked(1)
        async with http.post(
            f"/api/confirmations/{first}/decision",
            json={"decision": "approve", "actor": "bob",
                  "grant": {"scope": "session", "minutes": 600, "single_use": True}},
        ) as resp:  # fmt: skip
            assert resp.status == 400
            assert "5 to 480 minutes" in await resp.text()

        # Single use, pinned to the scope (DELETE on orders): the next one runs unasked...
        answer = await approve(first, {"scope": "session", "minutes": 480, "single_use": True})
        assert answer["grant"]["single_use"] is True
        await deleted(3)
        await say("/sql DELETE FROM orders WHERE id = 4")
        await deleted(4)
        assert any("✅ 已按 bob 的授权" in m["text"] for m in await room())
        # ... and only the next one: the one after is asked again.
        await say("/sql DELETE FROM orders WHERE id = 5")
        second = await asked(2)
        async with http.get("/api/grants") as resp:
            assert (await resp.json())["grants"] == []  # used up

        # Pinned to exactly these arguments, for an hour: another row is still asked.
        answer = await approve(second, {"scope": "session", "minutes": 60, "pin": "args"})
        assert answer["grant"]["args_key"] is not None
        await deleted(5)
        await say("/sql DELETE FROM orders WHERE id = 6")
        third = await asked(3)
        assert third not in (first, second)
        assert order_exists(daemon.data_dir, 6)
        async with http.get("/admin/part/grants") as resp:
            page = await resp.text()
        assert 'class="tag pinned-args"' in page
    assert daemon.stop() == 0
    assert daemon.error_lines() == []
