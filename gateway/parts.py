"""The parts ``build`` assembles, and the checks made before any of them is opened.

Kept apart from app.py so the composition root reads as the order of assembly: check,
lock the data dir, open the stores, make the agent and channels, wire them.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from typing import TextIO

import structlog

from channels.base import Channel, ChannelContext
from channels.console import ConsoleChannel
from config.checks import (
    check_channel_settings,
    data_dir_problem,
    masked_url,
    sql_url_problem,
)
from config.settings import ConfigError, Settings
from gateway import extras
from gateway.agent.commands import CommandAgent
from gateway.agent.loop import Agent
from gateway.bus import MessageBus, OutboundMessage
from gateway.confirm.memory_store import MemoryConfirmationStore
from gateway.confirm.model import Confirmation
from gateway.confirm.replicas import OrphanHandler
from gateway.confirm.service import ConfirmationService
from gateway.confirm.store import ConfirmationStore
from gateway.data_lock import DataDirLock
from gateway.http.jsonapi import one_line
from gateway.http.server import admin_token_problem
from gateway.inbox import Inbox, MemoryInbox
from gateway.metrics import Metrics
from gateway.storage.conversations import ConversationStore, MemoryConversationStore
from gateway.tools.base import ToolRegistry
from gateway.tools.runner import ToolOutcome, ToolRunner
from gateway.tools.sql import SqlDatabase

log = structlog.get_logger(__name__)

# Platform channels are imported only when enabled: `import lark_oapi` alone costs seconds.
PLATFORM_CHANNELS = {"feishu": "channels.feishu", "dingtalk": "channels.dingtalk"}


def check_settings(settings: Settings, *, serve_http: bool = True) -> list[str]:
    """What stops ``build`` before it opens anything, one fix-it sentence each.

    ``gateway check-config`` prints the same list.
    """
    problems = check_channel_settings(settings)
    if serve_http:
        token = settings.admin.token.get_secret_value() if settings.admin.token else None
        problem = admin_token_problem(settings.server.host, token, settings.server.allowed_hosts)
        if problem is not None:
            problems.append(problem)
    for problem in (sql_url_problem(settings.tools.sql.url), data_dir_problem(settings.data_dir)):
        if problem is not None:
            problems.append(problem)
    problems.extend(extras.missing(settings))
    return problems


def lock_data_dir(settings: Settings) -> DataDirLock | None:
    """With the SQLite store, take the data dir for this process (DataDirInUse otherwise).

    Only SQLite: its confirmations, inbox and audit log in the data dir have one owner.
    With Redis several replicas are normal and may share a data dir: what they keep
    there is the demo SQL database (SQLite locks its own writes), and the keyword file
    (each reads it); their inbox is in Redis (open_inbox).
    """
    if settings.confirmation.store != "sqlite":
        return None
    return DataDirLock.acquire(settings.data_dir)


async def open_store(settings: Settings) -> ConfirmationStore:
    """The configured confirmation store, opened; ConfigError when its server is unusable."""
    kind = settings.confirmation.store
    if kind == "memory":
        return MemoryConfirmationStore()
    if kind == "sqlite":
        from gateway.confirm.sqlite_store import SqliteConfirmationStore

        settings.data_dir.mkdir(parents=True, exist_ok=True)
        return await SqliteConfirmationStore.open(settings.data_dir / "confirmations.db")
    from redis.exceptions import RedisError

    from gateway.confirm.redis_store import RedisConfirmationStore

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
        from gateway.sqlite_inbox import SqliteInbox

        return await SqliteInbox.open(settings.data_dir / "inbox.db", owner=owner)
    client = getattr(store, "client", None)
    if kind == "redis" and client is not None:
        from gateway.redis_inbox import RedisInbox

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
        from gateway.storage.sqlite_conversations import SqliteConversationStore

        return await SqliteConversationStore.open(settings.data_dir / "confirmations.db", **bounds)
    client = getattr(store, "client", None)
    if kind == "redis" and client is not None:
        from gateway.storage.redis_conversations import RedisConversationStore

        return RedisConversationStore(client, prefix=settings.confirmation.redis_prefix, **bounds)
    return MemoryConversationStore(**bounds)


def build_agent(
    settings: Settings,
    runner: ToolRunner,
    registry: ToolRegistry,
    confirmations: ConfirmationService,
    bus: MessageBus,
    sql_db: SqlDatabase,
    metrics: Metrics,
    conversations: ConversationStore,
) -> Agent:
    if settings.llm.configured:
        from gateway.agent.model_agent import build_model_agent

        return build_model_agent(
            settings=settings,
            runner=runner,
            registry=registry,
            confirmations=confirmations,
            bus=bus,
            on_model_request=metrics.on_model_request,
            conversations=conversations,
        )
    return CommandAgent(runner=runner, confirmations=confirmations, sql_dialect=sql_db.dialect)


def build_channels(
    settings: Settings,
    context: ChannelContext,
    console: bool,
    console_streams: tuple[TextIO, TextIO] | None,
    stopped: asyncio.Event,
) -> list[Channel]:
    built: list[Channel] = []
    if console:
        built.append(
            ConsoleChannel(
                bus=context.bus,
                user=settings.channels.console.user,
                stdin=console_streams[0] if console_streams else None,
                stdout=console_streams[1] if console_streams else None,
                on_eof=stopped.set,
                history_file=settings.data_dir / "chat_history",
            )
        )
    if context.http is not None and settings.channels.webchat.enabled:
        from channels.webchat import create_channel as create_webchat

        built.append(create_webchat(context))
    for name, module_name in PLATFORM_CHANNELS.items():
        if getattr(settings.channels, name).enabled:
            module = importlib.import_module(module_name)
            built.append(module.create_channel(context))
    return built


async def close_agent(agent: Agent) -> None:
    # The model agent holds an HTTP client (connection pool) that must be closed.
    aclose: Callable[[], Awaitable[None]] | None = getattr(agent, "aclose", None)
    if aclose is not None:
        await aclose()


def orphan_runner(runner: ToolRunner, bus: MessageBus, agent: Agent) -> OrphanHandler:
    """Run an approved call whose waiting turn is gone; its turn goes on when it can.

    With a stored model continuation the result goes back to the model, whose answer is
    posted; otherwise the chat gets the result line.
    """

    async def run(confirmation: Confirmation) -> None:
        async def say(text: str) -> None:
            await bus.publish_outbound(
                OutboundMessage(
                    channel=confirmation.channel,
                    chat_id=confirmation.chat_id,
                    text=text,
                    session_key=confirmation.session_key,
                )
            )

        resume: Resume | None = getattr(agent, "resume", None)
        if confirmation.continuation is None:
            resume = None
        outcome = await runner.run_orphan(confirmation, say, report=resume is None)
        if resume is not None and outcome.status != "elsewhere":
            await resume(confirmation, outcome, say)

    return run


Resume = Callable[[Confirmation, ToolOutcome, Callable[[str], Awaitable[None]]], Awaitable[None]]
