"""/metrics counts pending records with one ``store.count``, never by loading them.

At 100,000 pending the old scrape loaded every record to count them: 2.6 s, the event
loop blocked for 2.3 s of it (issue 12).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from gateway.app import build
from gateway.confirm.model import Confirmation, Status, ToolCall
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from tests.admin.conftest import TOKEN
from tests.webchat.support import base_url, make_settings


class CountingStore(MemoryConfirmationStore):
    """The real memory store, counting the calls that read many records."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    async def count(self, status: Status) -> int:
        self.calls["count"] += 1
        return await super().count(status)

    async def list(self, **kwargs: Any) -> list[Confirmation]:
        self.calls["list"] += 1
        return await super().list(**kwargs)

    async def page(self, **kwargs: Any) -> tuple[list[Confirmation], str | None]:
        self.calls["page"] += 1
        return await super().page(**kwargs)


def pending(n: int) -> Confirmation:
    return Confirmation(
        id=f"P{n}X",
        session_key=f"webchat:r{n}",
        channel="webchat",
        chat_id=f"r{n}",
        requester="alice",
        is_group=False,
        tool_call=ToolCall("sql_modify", {"statement": "DELETE FROM orders"}, f"c{n}"),
        summary="DELETE on orders",
        created_at=1_000.0 + n,
        expires_at=4_000_000_000.0,
    )


async def test_the_scrape_counts_with_one_indexed_call(tmp_path: Path) -> None:
    store = CountingStore()
    gateway = await build(make_settings(tmp_path, admin={"token": TOKEN}), store=store)
    async with gateway:
        # Written straight into the store: as if another process, or a restart, left them.
        for n in range(3):
            await store.create(pending(n))
        store.calls.clear()
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            aiohttp.ClientSession(base_url=base_url(gateway), headers=headers) as http,
            http.get("/metrics") as resp,
        ):
            assert resp.status == 200
            text = await resp.text()
        scrape = Counter(store.calls)  # before stop, which lists pending ones to cancel them
    assert "gateway_pending_confirmations 3.0" in text
    assert scrape == Counter({"count": 1})
