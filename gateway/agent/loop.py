"""The agent loop: one turn at a time per session, many sessions at once."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

import structlog

from gateway.bus import InboundMessage, MessageBus, OutboundMessage
from gateway.tools.runner import TurnContext

log = structlog.get_logger(__name__)


class Agent(Protocol):
    """Answers one inbound message; may call tools through its ToolRunner."""

    async def handle(self, msg: InboundMessage, turn: TurnContext) -> None: ...


class AgentLoop:
    """Takes messages off the bus and runs turns.

    Each session has its own queue and worker task, so a confirmation pending in one chat
    never blocks another, and a session's messages are answered in order.
    """

    def __init__(
        self,
        *,
        bus: MessageBus,
        agent: Agent,
        approvers_by_channel: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.bus = bus
        self.agent = agent
        self._approvers = dict(approvers_by_channel or {})
        self._queues: dict[str, asyncio.Queue[InboundMessage]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._intake: asyncio.Task[None] | None = None

    def turn_for(self, msg: InboundMessage) -> TurnContext:
        async def say(text: str) -> None:
            await self.bus.publish_outbound(
                OutboundMessage(
                    channel=msg.channel,
                    chat_id=msg.chat_id,
                    session_key=msg.session_key,
                    text=text,
                    reply_to=msg.message_id,
                    metadata=msg.metadata,
                )
            )

        return TurnContext(
            session_key=msg.session_key,
            channel=msg.channel,
            chat_id=msg.chat_id,
            sender_id=msg.sender_id,
            is_group=msg.is_group,
            say=say,
            metadata=msg.metadata,
            approvers=self._approvers.get(msg.channel, ()),
        )

    async def start(self) -> None:
        if self._intake is None:
            self._intake = asyncio.create_task(self._run_intake(), name="agent-intake")
            self._intake.add_done_callback(_log_crash)

    async def _run_intake(self) -> None:
        while True:
            msg = await self.bus.consume_inbound()
            if msg.from_bot:
                continue  # the bot's own echo: never a turn
            queue = self._queues.setdefault(msg.session_key, asyncio.Queue())
            queue.put_nowait(msg)
            if msg.session_key not in self._workers:
                task = asyncio.create_task(
                    self._run_session(msg.session_key, queue), name=f"session-{msg.session_key}"
                )
                self._workers[msg.session_key] = task
                task.add_done_callback(_log_crash)

    async def _run_session(self, session_key: str, queue: asyncio.Queue[InboundMessage]) -> None:
        try:
            while not queue.empty():
                msg = queue.get_nowait()
                with structlog.contextvars.bound_contextvars(session=session_key):
                    try:
                        await self.agent.handle(msg, self.turn_for(msg))
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:
                        log.exception("agent.turn_failed")
                        await self.turn_for(msg).say(f"⚠️ 处理失败 / failed: {type(exc).__name__}")
        finally:
            self._workers.pop(session_key, None)
            if queue.empty():
                self._queues.pop(session_key, None)
            else:
                # A message arrived as we were leaving: keep serving it.
                task = asyncio.create_task(
                    self._run_session(session_key, queue), name=f"session-{session_key}"
                )
                self._workers[session_key] = task
                task.add_done_callback(_log_crash)

    async def stop_intake(self) -> None:
        if self._intake is not None:
            self._intake.cancel()
            await asyncio.gather(self._intake, return_exceptions=True)
            self._intake = None

    async def wait_idle(self, timeout: float) -> bool:
        """Wait for running turns to finish; True when all did in time."""
        workers = list(self._workers.values())
        if not workers:
            return True
        _, pending = await asyncio.wait(workers, timeout=timeout)
        return not pending

    async def stop(self, timeout: float = 5.0) -> None:
        await self.stop_intake()
        if not await self.wait_idle(timeout):
            for task in list(self._workers.values()):
                task.cancel()
            await asyncio.gather(*self._workers.values(), return_exceptions=True)


def _log_crash(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("agent.task_crashed", task=task.get_name(), exc_info=task.exception())
