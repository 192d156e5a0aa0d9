"""The agent loop: one turn at a time per session, many sessions at once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import structlog

from gateway.bus import InboundMessage, MessageBus, OutboundMessage
from gateway.runtime import BackgroundTasks, KeyedSerial
from gateway.tools.runner import TurnContext

# (message, True when its turn starts / False when it ends)
TurnListener = Callable[[InboundMessage, bool], None]

log = structlog.get_logger(__name__)


class Agent(Protocol):
    """Answers one inbound message; may call tools through its ToolRunner."""

    async def handle(self, msg: InboundMessage, turn: TurnContext) -> None: ...


class AgentLoop:
    """Takes messages off the bus and runs turns.

    Each message becomes a turn of its own, run one at a time per session — per member in
    a group chat: a confirmation pending in one chat never blocks another, one member's
    pending call never delays another member's answer (invariant 10), and each person's
    messages are answered in the order they arrived.
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
        self._sessions = KeyedSerial()
        self._turns = BackgroundTasks("agent-turns")
        self._intake = BackgroundTasks("agent-intake")
        self._turn_listeners: list[TurnListener] = []

    def on_turn(self, listener: TurnListener) -> None:
        """Called with (message, True) when its turn starts and (message, False) when it
        ends: the terminal chat shows "thinking…" in between."""
        self._turn_listeners.append(listener)

    def _tell(self, msg: InboundMessage, running: bool) -> None:
        for listener in self._turn_listeners:
            listener(msg, running)

    def turn_for(
        self, msg: InboundMessage, before_effect: Callable[[], Awaitable[None]] | None = None
    ) -> TurnContext:
        effect = before_effect or _nothing

        async def say(text: str) -> None:
            await effect()
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
            before_effect=effect,
        )

    async def start(self) -> None:
        if not self._intake:
            self._intake.spawn(self._run_intake(), name="agent-intake")

    async def _run_intake(self) -> None:
        while True:
            msg = await self.bus.consume_inbound()
            if msg.from_bot:
                continue  # the bot's own echo: never a turn
            # Spawned in arrival order; each waits for its session's turn before it.
            self._turns.spawn(self._turn(msg), name=f"turn-{msg.session_key}")

    async def _turn(self, msg: InboundMessage) -> None:
        async with self._sessions.hold(serial_key(msg)):
            # Taken before the turn's first effect (a line said, a tool call) or at its end:
            # a crash from then on does not process the message again (its tool calls may
            # have run); one before, while the model thinks, does (invariant 9). A turn cut
            # off by shutdown before any effect is taken up again, here or by a replica.
            taken = False

            async def take() -> None:
                nonlocal taken
                if not taken:
                    taken = True
                    await self.bus.mark_taken(msg)

            turn = self.turn_for(msg, take)
            with structlog.contextvars.bound_contextvars(session=msg.session_key):
                self._tell(msg, True)
                try:
                    await self.agent.handle(msg, turn)
                except Exception as exc:  # a failed turn is told to the chat, never lost
                    log.exception("agent.turn_failed")
                    await turn.say(f"⚠️ 处理失败 / failed: {type(exc).__name__}")
                finally:
                    self._tell(msg, False)
                await take()

    async def stop_intake(self) -> None:
        await self._intake.cancel()

    async def wait_idle(self, timeout: float) -> bool:
        """Wait for running turns to finish; True when all did in time."""
        return await self._turns.drain(timeout)

    async def stop(self, timeout: float = 5.0) -> None:
        await self.stop_intake()
        await self._turns.stop(timeout)


async def _nothing() -> None:
    return


def serial_key(msg: InboundMessage) -> str:
    """Whose turns run one at a time: the session, or in a group one member of it."""
    if msg.is_group:
        return f"{msg.session_key}\x00{msg.sender_id}"
    return msg.session_key
