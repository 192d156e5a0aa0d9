"""The redis backend of every storage port."""

from __future__ import annotations

from redis.asyncio import Redis


async def answering(client: Redis) -> Redis:
    """``client`` once the server has answered a PING, so a wrong URL fails at start-up;
    closed again when it does not."""
    try:
        await client.ping()
    except BaseException:
        await client.aclose()
        raise
    return client
