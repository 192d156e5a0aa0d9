"""The composition root: ``build(settings)`` makes every part, ``Gateway`` runs them.

Below them, what ``build`` assembles from: the checks made before anything is opened
(``check_settings``, which ``gateway check-config`` prints too), the data dir's lock, the
stores and inbox the settings name, the agent and the channels.

Build, then start: ``build`` returns a complete ``Gateway`` (nothing set "later"); a
failure while building closes what was already opened. ``start()`` / ``stop()`` (or
``async with``) only run it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any, TextIO

import structlog

from channels.base import Channel, ChannelContext
from channels.console import ConsoleChannel
from channels.manager import ChannelManager
from config.checks import (
    channel_warnings,
    check_channel_settings,
    data_dir_problem,
    nudge_warnings,
    open_file_warnings,
    sql_url_problem,
)
from config.keywords import KeywordStore
from config.settings import ConfigError, Settings
from gateway import extras
from gateway.agent.commands import CommandAgent
from gateway.agent.loop import Agent, AgentLoop
from gateway.bus import MessageBus
from gateway.confirm.grants import GrantBook
from gateway.confirm.ledger import new_instance
from gateway.confirm.retention import Retention
from gateway.confirm.service import ConfirmationService
from gateway.data_lock import DataDirLock
from gateway.http.admin import AdminApi
from gateway.http.grants_api import GrantsApi
from gateway.http.instances import InstancesApi
from gateway.http.page import AdminPage
from gateway.http.server import HttpServer, admin_token_problem
from gateway.http.sessions import AdminSessions, LoginLimiter
from gateway.metrics import Metrics
from gateway.stop_budget import OUTBOUND_DRAIN_SECONDS, SLOW_STOP_STEP_SECONDS, TURN_STOP_SECONDS
from gateway.storage.backends import (
    open_conversations,
    open_grant_store,
    open_inbox,
    open_rooms,
    open_session_store,
    open_store,
    open_undo_store,
)
from gateway.storage.confirmations import ConfirmationStore
from gateway.storage.conversations import ConversationStore
from gateway.storage.inbox import Inbox
from gateway.storage.rooms import RoomStore
from gateway.storage.undo import UndoStore
from gateway.tools.base import PluginError, ToolRegistry
from gateway.tools.edits import CallEditor
from gateway.tools.executor import Executor
from gateway.tools.policy import Policy
from gateway.tools.runner import ToolRunner
from gateway.tools.sql import SqlDatabase, SqlModifyTool, SqlQueryTool
from gateway.tools.sql_undo import SqlUndoTool, UndoBook

log = structlog.get_logger(__name__)


class Gateway:
    """One gateway process, fully built. Use as ``async with await build(settings) as gw:``."""

    def __init__(
        self,
        *,
        settings: Settings,
        bus: MessageBus,
        metrics: Metrics,
        store: ConfirmationStore,
        keywords: KeywordStore,
        confirmations: ConfirmationService,
        sql_db: SqlDatabase,
        registry: ToolRegistry,
        executor: Executor,
        runner: ToolRunner,
        agent: Agent,
        loop: AgentLoop,
        channels: ChannelManager,
        http: HttpServer | None,
        stopped: asyncio.Event,
        retention: Retention,
        conversations: ConversationStore,
        rooms: RoomStore,
        data_lock: DataDirLock | None = None,
        undo: UndoStore | None = None,
    ) -> None:
        self.settings = settings
        self.bus = bus
        self.metrics = metrics
        self.store = store
        self.keywords = keywords
        self.confirmations = confirmations
        self.sql_db = sql_db
        self.registry = registry
        self.executor = executor
        self.runner = runner
        self.agent = agent
        self.loop = loop
        self.channels = channels
        self.http = http  # None when built with serve_http=False (the terminal chat)
        self.stopped = stopped
        self.retention = retention
        self.conversations = conversations
        self.rooms = rooms  # the web chat's
        self.undo = undo  # SQL changes' undo snapshots (docs/undo.md)
        self.data_lock = data_lock  # held from build to the end of stop (SQLite store)
        self._started = False
        self._stopping = False

    @property
    def ready(self) -> bool:
        return self._started and self.channels.ready

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start every part, in order; on failure, stop what was started and re-raise."""
        if self._stopping:
            raise RuntimeError("this Gateway was stopped: build() a new one to start again")
        try:
            if self.settings.keywords.watch:
                await self.keywords.start_watching()
            # A killed gateway may have left 100,000 pending calls: they are adopted in the
            # background while this one already serves (docs/performance.md).
            await self.confirmations.recover(background=True)
            await self.bus.start()  # replays the inbox: before channels bring new messages
            await self.channels.start()
            await self.loop.start()
            if self.http is not None:
                await self.http.start()
            self.retention.start()
        except BaseException:
            await self.stop()
            raise
        self._started = True
        log.info(
            "gateway.started",
            channels=list(self.channels.channels),
            agent=type(self.agent).__name__,
            data_dir=str(self.settings.data_dir),
            keywords_file=str(self.keywords.path),
        )

    def request_stop(self) -> None:
        self.stopped.set()

    async def stop(self) -> None:
        """Intake stops; pending confirmations are cancelled (chats told); running calls
        get ``confirmation.stop_timeout_seconds`` to finish, the rest are reported
        interrupted (chats told); the instance leaves the store; outbound drains. The
        longest this takes is gateway.stop_budget's figure.

        Idempotent: a failed start() already stopped what it had started.
        """
        if self._stopping:
            return
        self._stopping = True
        steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("intake", self.loop.stop_intake),
            ("retention", self.retention.stop),
            ("pending calls", self.confirmations.stop_asking),
            (
                "running calls",
                lambda: self.executor.stop(self.settings.confirmation.stop_timeout_seconds),
            ),
            ("turns", lambda: self.loop.stop(timeout=TURN_STOP_SECONDS)),
            ("confirmations", self.confirmations.close),
            ("agent", lambda: close_agent(self.agent)),
            ("channels", lambda: self.channels.stop(drain_timeout=OUTBOUND_DRAIN_SECONDS)),
            ("http", self.http.stop if self.http is not None else _nothing),
            ("keywords", self.keywords.stop_watching),
            ("bus", self.bus.stop),
            ("grants", self.confirmations.grants.store.close),
            ("conversations", self.conversations.close),
            ("rooms", self.rooms.close),
            ("undo", self.undo.close if self.undo is not None else _nothing),
            # Last of the stores: with Redis the others share its client, which this closes.
            ("store", self.store.close),
            ("sql", self.sql_db.close),
        ]
        loop = asyncio.get_running_loop()
        for name, step in steps:
            # A slow stop says where it stands, before a supervisor's kill cuts it short.
            slow = loop.call_later(
                SLOW_STOP_STEP_SECONDS,
                functools.partial(
                    log.info, "gateway.stop_waiting", step=name, seconds=SLOW_STOP_STEP_SECONDS
                ),
            )
            try:
                await step()
            finally:
                slow.cancel()
        if self.data_lock is not None:
            self.data_lock.release()  # last: the store is closed, the next owner may come
        self._started = False
        self.stopped.set()


async def _nothing() -> None:
    return


async def build(
    settings: Settings,
    *,
    console: bool = False,
    console_streams: tuple[TextIO, TextIO] | None = None,
    serve_http: bool = True,
    store: ConfirmationStore | None = None,
    inbox: Inbox | None = None,
    clock: Callable[[], float] = time.time,
) -> Gateway:
    """Every part of one gateway, wired; raises ConfigError saying what to fix.

    ``store`` and ``inbox`` replace the configured ones (tests); the Gateway closes them.
    """
    problems = check_settings(settings, serve_http=serve_http)
    if problems:
        raise ConfigError("\n".join(problems))
    for warning in [
        *channel_warnings(settings),
        *nudge_warnings(settings),
        *open_file_warnings(settings),
    ]:
        log.warning("config.warning", detail=warning)
    http = None
    if serve_http:
        token = settings.admin.token
        http = HttpServer(
            host=settings.server.host,
            port=settings.server.port,
            admin_token=token.get_secret_value() if token else None,
            allowed_host_names=settings.server.allowed_hosts,
            max_json_depth=settings.server.max_json_depth,
            trusted_user_header=settings.server.trusted_user_header,
            trusted_proxies=settings.server.trusted_proxies,
            accept_error_log_seconds=settings.server.accept_error_log_seconds,
        )
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    async with contextlib.AsyncExitStack() as opened:
        data_lock = None
        if store is None:
            data_lock = lock_data_dir(settings)
            if data_lock is not None:
                opened.callback(data_lock.release)
            store = await open_store(settings)
            for warning in await store.durability_warnings():
                log.warning("store.durability", problem=warning)
        opened.push_async_callback(store.close)
        instance = new_instance(clock)  # owner of its inbox messages and confirmations
        if inbox is None:
            inbox = await open_inbox(settings, store, instance.id)
        opened.push_async_callback(inbox.close)
        sql_db = SqlDatabase(
            settings.sql_url,
            max_rows=settings.tools.sql.max_rows,
            timeout_seconds=settings.tools.sql.statement_timeout_seconds,
            allowed_functions=settings.tools.sql.allowed_functions,
            drift_tolerance=settings.tools.sql.drift_tolerance,
        )
        opened.push_async_callback(sql_db.close)
        if settings.uses_demo_database:
            await sql_db.ensure_demo()
        registry = ToolRegistry([SqlQueryTool(sql_db)])

        bus = MessageBus(inbox=inbox)
        metrics = Metrics()
        keywords = KeywordStore.open(settings.keywords_file)
        grant_store = await open_grant_store(settings, store)
        opened.push_async_callback(grant_store.close)
        grants = GrantBook(grant_store, clock=clock)
        confirmations = ConfirmationService(
            store=store,
            bus=bus,
            settings=settings.confirmation,
            keywords=keywords,
            clock=clock,
            grants=grants,
            instance=instance,
        )
        undo_store = await open_undo_store(settings, store)
        opened.push_async_callback(undo_store.close)
        undo = UndoBook(
            store=undo_store,
            confirmations=store,
            audit=confirmations.audit,
            max_rows=settings.tools.sql.undo_max_rows,
            days=settings.tools.sql.undo_days,
            clock=clock,
            approvers=settings.confirmation.approvers,
        )
        registry.register(SqlModifyTool(sql_db, undo=undo))
        registry.register(SqlUndoTool(db=sql_db, book=undo))
        try:
            registry.load_plugins(settings.tools.plugins)
        except PluginError as exc:
            raise ConfigError(str(exc)) from exc
        confirmations.subscribe(metrics.on_confirmation)
        bus.add_inbound_listener(metrics.on_inbound)
        executor = Executor(registry=registry, confirmations=confirmations)
        runner = ToolRunner(
            registry=registry,
            policy=Policy(settings.policy),
            confirmations=confirmations,
            grants=grants,
            executor=executor,
            on_tool_run=metrics.on_tool_run,
        )
        conversations = await open_conversations(settings, store)
        opened.push_async_callback(conversations.close)
        rooms = await open_rooms(settings, store)
        opened.push_async_callback(rooms.close)
        agent = build_agent(
            settings, runner, registry, confirmations, bus, sql_db, metrics, conversations
        )
        opened.push_async_callback(close_agent, agent)
        loop = AgentLoop(
            bus=bus,
            agent=agent,
            confirmations=confirmations,
            approvers_by_channel={
                "feishu": tuple(settings.channels.feishu.approvers),
                "dingtalk": tuple(settings.channels.dingtalk.approvers),
                "webchat": tuple(settings.channels.webchat.approvers),
            },
        )

        stopped = asyncio.Event()
        channels = ChannelManager(bus=bus)
        channels.on_send_failure(metrics.on_send_failure)
        channels.on_sent(metrics.on_sent)
        if http is not None:
            AdminApi(
                confirmations=confirmations,
                editor=CallEditor(
                    registry=registry, policy=runner.policy, confirmations=confirmations
                ),
                store=store,
                keywords=keywords,
                metrics=metrics,
                settings=settings.admin,
                ready=lambda: channels.ready,
                channel_status=channels.status,
            ).register(http.app)
            GrantsApi(grants=grants, confirmations=confirmations).register(http.app)
            InstancesApi(confirmations=confirmations).register(http.app)
            AdminPage(
                confirmations=confirmations,
                keywords=keywords,
                registry=registry,
                policy=runner.policy,
                admin_token=http.admin_token,
                sessions=AdminSessions(
                    store=open_session_store(settings, store),
                    admin_token=http.admin_token,
                    seconds=settings.admin.session_hours * 3600,
                    clock=clock,
                ),
                limiter=LoginLimiter(
                    attempts=settings.admin.login_attempts_per_minute, clock=clock
                ),
                channel_status=channels.status,
                clock=clock,
            ).register(http.app)
        context = ChannelContext(
            settings=settings,
            bus=bus,
            confirmations=confirmations,
            http=http.app if http else None,
            metrics=metrics,
            rooms=rooms,
        )
        for channel in build_channels(settings, context, console, console_streams, stopped):
            channels.add(channel)
            if isinstance(channel, ConsoleChannel):
                loop.on_turn(channel.on_turn)  # "thinking…" in the terminal's prompt

        gateway = Gateway(
            settings=settings,
            bus=bus,
            metrics=metrics,
            store=store,
            keywords=keywords,
            confirmations=confirmations,
            sql_db=sql_db,
            registry=registry,
            executor=executor,
            runner=runner,
            agent=agent,
            loop=loop,
            channels=channels,
            http=http,
            stopped=stopped,
            retention=Retention(
                store=store,
                keep_days=settings.confirmation.retention_days,
                clock=clock,
                undo=undo_store,
            ),
            conversations=conversations,
            rooms=rooms,
            data_lock=data_lock,
            undo=undo_store,
        )
        opened.pop_all()
    return gateway


async def run_until_stopped(
    gateway: Gateway, *, on_started: Callable[[Gateway], Any] | None = None
) -> None:
    """Start, wait for SIGINT/SIGTERM (or console EOF), stop cleanly."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, gateway.request_stop)
    try:
        await gateway.start()
        if on_started is not None:
            on_started(gateway)
        await gateway.stopped.wait()
    finally:
        log.info("gateway.stopping")
        await gateway.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


# ------------------------------------------------------------------ the parts build assembles

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
