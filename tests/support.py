"""Helpers shared by end-to-end tests that drive a real Gateway."""

from __future__ import annotations

import asyncio
import sqlite3
import time

from config.settings import Settings
from gateway.app import Gateway
from gateway.confirm.model import Confirmation, Status


async def wait_pending(gw: Gateway, count: int = 1, *, within: float = 5.0) -> list[Confirmation]:
    """Poll the real confirmation service until ``count`` confirmations are pending."""
    assert gw.confirmations is not None
    deadline = time.monotonic() + within
    while True:
        found = await gw.confirmations.list(status=Status.PENDING)
        if len(found) >= count:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"expected {count} pending confirmation(s), found {found}")
        await asyncio.sleep(0.02)


async def wait_status(
    gw: Gateway, confirmation_id: str, status: Status, *, within: float = 5.0
) -> Confirmation:
    """Poll until the confirmation reaches ``status``."""
    assert gw.confirmations is not None
    deadline = time.monotonic() + within
    while True:
        found = await gw.confirmations.get(confirmation_id)
        if found is not None and found.status is status:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{confirmation_id} did not become {status}: {found}")
        await asyncio.sleep(0.02)


def order_ids(settings: Settings) -> list[int]:
    """Ids left in the demo database's orders table."""
    with sqlite3.connect(settings.data_dir / "demo.db") as conn:
        return [row[0] for row in conn.execute("SELECT id FROM orders ORDER BY id")]
