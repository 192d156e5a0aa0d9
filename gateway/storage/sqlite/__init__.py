"""The sqlite backend of every storage port."""

from __future__ import annotations

from pathlib import Path

import aiosqlite


async def connect(path: Path, schema: str, *, busy_timeout_ms: int) -> aiosqlite.Connection:
    """An aiosqlite connection to ``path`` in WAL mode, durable commits, ``schema`` applied;
    closed again when any of that fails (the small ports: grants, undo snapshots)."""
    conn = await aiosqlite.connect(str(path), isolation_level=None)
    try:
        await conn.execute("PRAGMA journal_mode = WAL")
        await conn.execute("PRAGMA synchronous = FULL")
        await conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        await conn.executescript(schema)
    except BaseException:
        await conn.close()
        raise
    return conn
