"""The composition root: builds every part from Settings, starts and stops them in order."""

from __future__ import annotations

import asyncio
import importlib
import signal
import time
from collections.abc import Callable
from typing import Any, TextIO

import structlog

from channels.base import Channel, ChannelContext
from channels.console import ConsoleChannel
from channels.manager import ChannelManager
from config.keywords import KeywordStore
from config.settings import ConfigError, Settings, channel_warnings, check_channel_settings
from gateway import texts
from gateway.agent.commands import CommandAgent
from gateway.agent.loop import Agent, AgentLoop
from gateway.bus import MessageBus, OutboundMessage
from gateway.confirm.model import Confirmation
from gateway.confirm.service import ConfirmationService
from gateway.confirm.store import ConfirmationStore, MemoryConfirmationStore
from gateway.http import HttpServer
from gateway.metrics import Metrics
from gateway.tools.base import PluginError, ToolRegistry
from gateway.tools.policy import Policy
from gateway.tools.runner import ToolRunner
from gateway.tools.sql import SqlDatabase, SqlModifyTool, SqlQueryTool

log = structlog.get_logger(__name__)

# Platform channels are imported only when enabled: `import lark_oapi` alone costs seconds.
PLATFORM_CHANNELS = {"feishu": "channels.feishu", "dingtalk": "channels.dingtalk"}


async def build_store(settings: Settings) -> ConfirmationStore:
    kind = settings.confirmation.store
    if kind == "memory":
        return MemoryConfirmationStore()
    if kind == "sqlite":
        from gateway.confirm.sqlite_store import SqliteConfirmationStore

        settings.data_dir.mkdir(parents=True, exist_ok=True)
        return await SqliteConfirmationStore.open(settings.data_dir / "confirmations.db")
    from gateway.confirm.redis_store import RedisConfirmationStore

    return await RedisConfirmationStore.from_url(
        settings.confirmation.redis_url,
        prefix=settings.confirmation.redis_prefix,
        finished_ttl_seconds=settings.confirmation.redis_finished_ttl_seconds,
    )


class Gateway:
    """One gateway process. Use as ``async with Gateway(settings) as gw:``."""

    def __init__(
        self,
        settings: Settings,
        *,
        console: bool = False,
        console_streams: tuple[TextIO, TextIO] | None = None,
        serve_http: bool = True,
        store: ConfirmationStore | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self._want_console = console
        self._console_streams = console_streams
        self._serve_http = serve_http
        self._given_store = store
        self.stopped = asyncio.Event()
        self._started = False
        self._stopping = False
        self.metrics = Metrics()
        self.bus = MessageBus()
        self.channels = ChannelManager(bus=self.bus)
        self.http: HttpServer | None = None
        self.sql_db: SqlDatabase | None = None
        self.store: ConfirmationStore | None = None
        self.keywords: KeywordStore | None = None
        self.confirmations: ConfirmationService | None = None
        self.registry = ToolRegistry()
        self.runner: ToolRunner | None = None
        self.agent: Agent | None = None
        self.loop: AgentLoop | None = None

    @property
    def ready(self) -> bool:
        return self._started and self.channels.ready

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ build

    def _build_channels(self, confirmations: ConfirmationService) -> None:
        s = self.settings
        if self._want_console:
            streams = self._console_streams
            self.channels.add(
                ConsoleChannel(
                    bus=self.bus,
                    user=s.channels.console.user,
                    stdin=streams[0] if streams else None,
                    stdout=streams[1] if streams else None,
                    on_eof=self.request_stop,
                )
            )
        context = ChannelContext(
            settings=s,
            bus=self.bus,
            confirmations=confirmations,
            http=self.http.app if self.http else None,
            metrics=self.metrics,
        )
        if self.http is not None and s.channels.webchat.enabled:
            from channels.webchat import create_channel as create_webchat

            self.channels.add(create_webchat(context))
        for name, module_name in PLATFORM_CHANNELS.items():
            if getattr(s.channels, name).enabled:
                module = importlib.import_module(module_name)
                channel: Channel = module.create_channel(context)
                self.channels.add(channel)

    def _build_agent(self, runner: ToolRunner, confirmations: ConfirmationService) -> Agent:
        if self.settings.llm.configured:
            from gateway.agent.model_agent import build_model_agent

            return build_model_agent(
                settings=self.settings,
                runner=runner,
                registry=self.registry,
                confirmations=confirmations,
                bus=self.bus,
            )
        dialect = self.sql_db.dialect if self.sql_db else "sqlite"
        return CommandAgent(runner=runner, confirmations=confirmations, sql_dialect=dialect)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Build and start everything; on failure, stop what was started and re-raise."""
        s = self.settings
        problems = check_channel_settings(s)
        if problems:
            raise ConfigError("\n".join(problems))
        for warning in channel_warnings(s):
            log.warning("config.warning", detail=warning)
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise
        self._started = True

    async def _start(self) -> None:
        s = self.settings
        s.data_dir.mkdir(parents=True, exist_ok=True)
        self.keywords = KeywordStore(s.keywords.file)
        self.store = self._given_store or await build_store(s)
        self.confirmations = ConfirmationService(
            store=self.store,
            bus=self.bus,
            settings=s.confirmation,
            keywords=self.keywords,
            clock=self.clock,
        )
        self.confirmations.subscribe(self.metrics.on_confirmation)
        self.bus.add_inbound_listener(self.metrics.on_inbound)
        self.channels.on_send_failure(self.metrics.on_send_failure)

        self.sql_db = SqlDatabase(
            s.sql_url,
            max_rows=s.tools.sql.max_rows,
            timeout_seconds=s.tools.sql.statement_timeout_seconds,
        )
        if s.uses_demo_database:
            await self.sql_db.ensure_demo()
        self.registry.register(SqlQueryTool(self.sql_db))
        self.registry.register(SqlModifyTool(self.sql_db))
        try:
            self.registry.load_plugins(s.tools.plugins)
        except PluginError as exc:
            raise ConfigError(str(exc)) from exc
        self.runner = ToolRunner(
            registry=self.registry, policy=Policy(s.policy), confirmations=self.confirmations
        )
        self.confirmations.set_orphan_handler(self._run_orphan)
        self.agent = self._build_agent(self.runner, self.confirmations)
        self.loop = AgentLoop(
            bus=self.bus,
            agent=self.agent,
            approvers_by_channel={
                "feishu": tuple(s.channels.feishu.approvers),
                "dingtalk": tuple(s.channels.dingtalk.approvers),
                "webchat": tuple(s.channels.webchat.approvers),
            },
        )

        if self._serve_http:
            token = s.admin.token.get_secret_value() if s.admin.token else None
            self.http = HttpServer(host=s.server.host, port=s.server.port, admin_token=token)
            self.http.check_exposure()
            from gateway.admin import setup_admin

            setup_admin(self.http.app, self)
        self._build_channels(self.confirmations)

        if s.keywords.watch:
            await self.keywords.start_watching()
        await self.confirmations.recover()
        await self.channels.start()
        await self.loop.start()
        if self.http is not None:
            await self.http.start()
        log.info(
            "gateway.started",
            channels=list(self.channels.channels),
            agent=type(self.agent).__name__,
        )

    async def _run_orphan(self, confirmation: Confirmation) -> None:
        assert self.runner is not None

        async def say(text: str) -> None:
            await self.bus.publish_outbound(
                OutboundMessage(
                    channel=confirmation.channel,
                    chat_id=confirmation.chat_id,
                    text=text,
                    session_key=confirmation.session_key,
                )
            )

        outcome = await self.runner.run_orphan(confirmation, say)
        if outcome.status == "ok":
            await say(texts.tool_result(confirmation.tool_call.name, outcome.output))
        elif outcome.status == "error":
            await say(texts.tool_failed(confirmation.tool_call.name, outcome.output))

    def request_stop(self) -> None:
        self.stopped.set()

    async def stop(self) -> None:
        """Intake stops; pending confirmations are cancelled (chats told); outbound drains.

        Idempotent: a failed start() already stopped what it had started.
        """
        if self._stopping:
            return
        self._stopping = True
        if self.loop is not None:
            await self.loop.stop_intake()
        if self.confirmations is not None:
            await self.confirmations.shutdown()
        if self.loop is not None:
            await self.loop.stop(timeout=5.0)
        # The model agent holds an HTTP client (connection pool) that must be closed.
        aclose = getattr(self.agent, "aclose", None)
        if aclose is not None:
            await aclose()
        await self.channels.stop(drain_timeout=5.0)
        if self.http is not None:
            await self.http.stop()
        if self.keywords is not None:
            await self.keywords.stop_watching()
        if self.store is not None:
            await self.store.close()
        if self.sql_db is not None:
            await self.sql_db.close()
        self._started = False
        self.stopped.set()


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
