"""Which backend each storage port uses, opened: the one place that chooses.

``[confirmation] store`` picks the backend for every port together — the confirmations and
their audit trail, grants, the model's conversations, the web chat's rooms, the durable
inbox and the admin page's sessions — so what one replica writes, the others read:

- ``memory``: everything in the process (tests, the demo).
- ``sqlite``: ``confirmations.db`` (confirmations, grants, conversations, web chat rooms)
  and ``inbox.db`` in the data dir; admin sessions in memory (one process owns the data dir).
- ``redis``: keys under ``redis_prefix`` on the confirmation store's one bounded client.

A store handed to ``build`` (tests) decides for the ports beside it: a memory store keeps
them all in memory.
"""

from __future__ import annotations

from config.checks import masked_url
from config.settings import ConfigError, Settings
from gateway.http.jsonapi import one_line
from gateway.http.sessions import MemorySessionStore, SessionStore
from gateway.storage.confirmations import ConfirmationStore
from gateway.storage.conversations import ConversationStore, MemoryConversationStore
from gateway.storage.grants import GrantStore, MemoryGrantStore
from gateway.storage.inbox import Inbox, MemoryInbox
from gateway.storage.memory.confirmations import MemoryConfirmationStore
from gateway.storage.rooms import MemoryRoomStore, RoomBounds, RoomStore
from gateway.storage.undo import MemoryUndoStore, UndoStore


async def open_store(settings: Settings) -> ConfirmationStore:
    """The configured confirmation store, opened; ConfigError when its server is unusable."""
    kind = settings.confirmation.store
    if kind == "memory":
        return MemoryConfirmationStore()
    if kind == "sqlite":
        from gateway.storage.sqlite.confirmations import SqliteConfirmationStore

        settings.data_dir.mkdir(parents=True, exist_ok=True)
        return await SqliteConfirmationStore.open(settings.data_dir / "confirmations.db")
    from redis.exceptions import RedisError

    from gateway.storage.redis.confirmations import RedisConfirmationStore

    url = settings.confirmation.redis_url
    try:
        return await RedisConfirmationStore.from_url(
            url,
            prefix=settings.confirmation.redis_prefix,
            finished_ttl_seconds=settings.confirmation.redis_finished_ttl_seconds,
            max_connections=settings.confirmation.redis_max_connections,
            pool_timeout_seconds=settings.confirmation.redis_pool_timeout_seconds,
        )
    except (RedisError, OSError, ValueError) as exc:  # ValueError: a malformed URL
        raise ConfigError(
            f"confirmation.store is redis, and Redis at {masked_url(url)} cannot be used "
            f"({one_line(exc) or type(exc).__name__}): start it, or set "
            "GATEWAY_CONFIRMATION__REDIS_URL (or [confirmation] redis_url)"
        ) from exc


async def open_inbox(settings: Settings, store: ConfirmationStore, owner: str) -> Inbox:
    """The inbox that goes with the confirmation store, its messages owned by ``owner``.

    SQLite: ``inbox.db`` in the data dir. Redis: a stream beside the store's keys, on the
    store's client (a store handed to ``build`` without one: memory). Otherwise a memory
    inbox: nothing survives the process anyway. Never SQLite beside Redis: replicas may
    share a data dir, and each would take the others' messages for a past run's.
    """
    kind = settings.confirmation.store
    if kind == "sqlite":
        from gateway.storage.sqlite.inbox import SqliteInbox

        return await SqliteInbox.open(settings.data_dir / "inbox.db", owner=owner)
    client = getattr(store, "client", None)
    if kind == "redis" and client is not None:
        from gateway.storage.redis.inbox import RedisInbox

        return await RedisInbox.open(
            client,
            prefix=settings.confirmation.redis_prefix,
            owner=owner,
            claim_idle_seconds=settings.confirmation.lease_seconds,
        )
    return MemoryInbox(owner=owner)


async def open_conversations(settings: Settings, store: ConfirmationStore) -> ConversationStore:
    """The model's conversations, beside the confirmations: a table in the SQLite file, keys
    under the Redis prefix on the store's client; in memory with a memory store (tests
    hand ``build`` one)."""
    bounds = {
        "max_messages": settings.llm.max_history_messages,
        "max_sessions": settings.llm.max_sessions,
    }
    kind = settings.confirmation.store
    if kind == "sqlite" and not isinstance(store, MemoryConfirmationStore):
        from gateway.storage.sqlite.conversations import SqliteConversationStore

        return await SqliteConversationStore.open(settings.data_dir / "confirmations.db", **bounds)
    client = getattr(store, "client", None)
    if kind == "redis" and client is not None:
        from gateway.storage.redis.conversations import RedisConversationStore

        return RedisConversationStore(client, prefix=settings.confirmation.redis_prefix, **bounds)
    return MemoryConversationStore(**bounds)


async def open_rooms(settings: Settings, store: ConfirmationStore) -> RoomStore:
    """The web chat's rooms, beside the confirmations as the conversations are: a table in
    the SQLite file, keys under the Redis prefix on the store's client (following their
    feed until closed); in memory with a memory store."""
    webchat = settings.channels.webchat
    bounds = RoomBounds(
        history_size=webchat.history_size,
        room_bytes=webchat.history_bytes_per_room,
        total_bytes=webchat.history_bytes_total,
        max_rooms=webchat.max_sessions,
    )
    kind = settings.confirmation.store
    if kind == "sqlite" and not isinstance(store, MemoryConfirmationStore):
        from gateway.storage.sqlite.rooms import SqliteRoomStore

        return await SqliteRoomStore.open(settings.data_dir / "confirmations.db", bounds)
    client = getattr(store, "client", None)
    if kind == "redis" and client is not None:
        from gateway.storage.redis.rooms import RedisRoomStore

        return await RedisRoomStore.open(client, bounds, prefix=settings.confirmation.redis_prefix)
    return MemoryRoomStore(bounds)


async def open_grant_store(settings: Settings, confirmations: ConfirmationStore) -> GrantStore:
    """Grants live beside the confirmations: the same SQLite file, the same Redis.

    In memory when the confirmations are (tests hand ``build`` a memory store).
    """
    kind = settings.confirmation.store
    if isinstance(confirmations, MemoryConfirmationStore):
        return MemoryGrantStore()
    if kind == "sqlite":
        from gateway.storage.sqlite.grants import SqliteGrantStore

        return await SqliteGrantStore.open(settings.data_dir / "confirmations.db")
    if kind == "redis":
        from gateway.storage.redis.confirmations import RedisConfirmationStore
        from gateway.storage.redis.grants import RedisGrantStore

        c = settings.confirmation
        if isinstance(confirmations, RedisConfirmationStore):
            # The confirmations' client: one bounded pool per replica. A client of its own
            # had redis-py's pool, past redis_max_connections: at 500 concurrent chats it
            # raised MaxConnectionsError and no grant was read (issue 13).
            return RedisGrantStore(confirmations.client, prefix=c.redis_prefix)
        return await RedisGrantStore.from_url(c.redis_url, prefix=c.redis_prefix)
    return MemoryGrantStore()


async def open_undo_store(settings: Settings, confirmations: ConfirmationStore) -> UndoStore:
    """Undo snapshots live beside the confirmations (docs/undo.md): a table in the SQLite
    file, keys under the Redis prefix on the store's client; in memory with a memory store."""
    kind = settings.confirmation.store
    if kind == "sqlite" and not isinstance(confirmations, MemoryConfirmationStore):
        from gateway.storage.sqlite.undo import SqliteUndoStore

        return await SqliteUndoStore.open(settings.data_dir / "confirmations.db")
    client = getattr(confirmations, "client", None)
    if kind == "redis" and client is not None:
        from gateway.storage.redis.undo import RedisUndoStore

        return RedisUndoStore(client, prefix=settings.confirmation.redis_prefix)
    return MemoryUndoStore()


def open_session_store(settings: Settings, confirmations: ConfirmationStore) -> SessionStore:
    """Sessions beside the confirmations when those are shared (Redis), else in memory."""
    limit = settings.admin.max_sessions
    if settings.confirmation.store == "redis":
        from gateway.storage.redis.confirmations import RedisConfirmationStore

        if isinstance(confirmations, RedisConfirmationStore):
            from gateway.storage.redis.sessions import RedisSessionStore

            prefix = settings.confirmation.redis_prefix
            return RedisSessionStore(confirmations.client, prefix=prefix, limit=limit)
    return MemorySessionStore(limit=limit)
