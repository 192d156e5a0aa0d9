"""The agent loop: one turn at a time per session, many sessions at once.

A turn that asks for a decision ends there (its call is stored with the turn's
continuation). Whatever ends that call, in this process, hands the record to ``resume``:
the one path that goes on from it — claim, run, record (gateway/tools/runner.settle), then
the turn again — under the same per-member order as new messages.

Going on is stored before it starts: ``resume`` puts a message that resumes the call
(``InboundMessage.resumes``, its id the call's) in the inbox, and the turn goes on when
that message comes off the bus, taken once the turn says something or ends, like a
person's message. A process that dies before then leaves it in its inbox: the replica
that adopts its messages, or its next start, goes on with the turn, on this same path.
Two processes going on from one record store one message: the turn goes on once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import structlog

from gateway import texts
from gateway.bus import InboundMessage, MessageBus, OutboundMessage, PublishResult
from gateway.confirm.events import ConfirmationEvent
from gateway.confirm.model import Confirmation
from gateway.confirm.service import ConfirmationService
from gateway.runtime import BackgroundTasks, KeyedSerial
from gateway.tools.executor import Say
from gateway.tools.runner import TurnContext

# (message, True when its turn starts / False when it ends)
TurnListener = Callable[[InboundMessage, bool], None]

log = structlog.get_logger(__name__)


class Agent(Protocol):
    """Answers one inbound message; may call tools through its ToolRunner."""

    async def handle(self, msg: InboundMessage, turn: TurnContext) -> None: ...

    async def resume(self, confirmation: Confirmation, say: Say) -> None:
        """Go on from a call this agent asked for, once it has ended (run it if approved)."""
        ...


class AgentLoop:
    """Takes messages off the bus and runs turns.

    Each message becomes a turn of its own, run one at a time per session — per member in
    a group chat: a confirmation pending in one chat never blocks another, one member's
    pending call never delays another member's answer (invariant 10), and each person's
    messages are answered in the order they arrived. A resumed turn takes its place in
    that order; with ``on_other_message = "keep_pending"`` a member's new message waits
    while their own call waits for a decision (read from the store: on any replica).
    """

    def __init__(
        self,
        *,
        bus: MessageBus,
        agent: Agent,
        confirmations: ConfirmationService,
        approvers_by_channel: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.bus = bus
        self.agent = agent
        self.confirmations = confirmations
        self._approvers = dict(approvers_by_channel or {})
        self._sessions = KeyedSerial()
        self._turns = BackgroundTasks("agent-turns")
        self._intake = BackgroundTasks("agent-intake")
        self._turn_listeners: list[TurnListener] = []
        self._resuming: Counter[str] = Counter()  # resumed turns scheduled, per serial key
        self._resuming_ids: dict[str, str] = {}  # the calls counted there, to their key
        self._stopping = False
        self._ended = asyncio.Event()  # a call or a resumed turn ended: parked turns look again
        confirmations.subscribe(self._on_confirmation)
        confirmations.on_settled(self.resume)

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
            if msg.resumes is not None:
                self._start_resume(msg)
            elif not self._stopping:
                self._turns.spawn(self._turn(msg), name=f"turn-{msg.session_key}")

    def resume(self, confirmation: Confirmation) -> None:
        """Go on from an ended call, in its member's turn order (the service calls this for
        every record this process ended, and adoption for approved calls left unclaimed):
        stored first, then gone on with as it comes off the bus (module doc)."""
        msg = resume_message(confirmation)
        # Counted now: a member's next message waits for it, though it is not stored yet.
        self._count_resuming(confirmation.id, serial_key(msg))
        self._turns.spawn(self._store_resume(msg), name=f"resume-{confirmation.id}")

    async def _store_resume(self, msg: InboundMessage) -> None:
        try:
            result = await self.bus.publish_inbound(msg)
        except Exception as exc:  # not stored (the store is down): told, never silent
            log.exception("agent.resume_not_stored", confirmation_id=msg.resumes)
            await self._say_to(msg, texts.turn_failed(exc))
            self._resumed(msg)
            return
        if result is PublishResult.DUPLICATE:  # stored already: it goes on from there
            self._resumed(msg)

    def _start_resume(self, msg: InboundMessage) -> None:
        """Go on with the turn a resume message names, in its member's turn order."""
        self._count_resuming(msg.resumes or "", serial_key(msg))
        self._turns.spawn(self._resume(msg), name=f"resume-{msg.resumes}")

    async def _resume(self, msg: InboundMessage) -> None:
        taken = False

        async def say(text: str) -> None:
            nonlocal taken
            if not taken:  # the turn shows something: a crash from here does not redo it
                taken = True
                await self.bus.mark_taken(msg)
            await self._say_to(msg, text)

        try:
            async with self._sessions.hold(serial_key(msg)):
                with structlog.contextvars.bound_contextvars(session=msg.session_key):
                    try:
                        confirmation = await self.confirmations.store.get(msg.resumes or "")
                        if confirmation is not None:
                            await self.agent.resume(confirmation, say)
                        else:
                            log.warning("agent.resume_unknown", confirmation_id=msg.resumes)
                    except Exception as exc:  # told to the chat, never lost
                        log.exception("agent.resume_failed", confirmation_id=msg.resumes)
                        await say(texts.turn_failed(exc))
                    if not taken:
                        taken = True
                        await self.bus.mark_taken(msg)
        finally:
            self._resumed(msg)

    async def _say_to(self, msg: InboundMessage, text: str) -> None:
        await self.bus.publish_outbound(
            OutboundMessage(
                channel=msg.channel, chat_id=msg.chat_id, session_key=msg.session_key, text=text
            )
        )

    def _count_resuming(self, confirmation_id: str, key: str) -> None:
        if confirmation_id not in self._resuming_ids:
            self._resuming_ids[confirmation_id] = key
            self._resuming[key] += 1

    def _resumed(self, msg: InboundMessage) -> None:
        key = self._resuming_ids.pop(msg.resumes or "", None)
        if key is not None:
            self._resuming[key] -= 1
            if not self._resuming[key]:
                del self._resuming[key]
        self._signal_ended()

    def _on_confirmation(self, event: ConfirmationEvent) -> None:
        if event.kind != "requested":
            self._signal_ended()

    def _signal_ended(self) -> None:
        """Wake those waiting now; a later wait takes the next event."""
        self._ended.set()
        self._ended = asyncio.Event()

    async def _after_parked(self, msg: InboundMessage) -> None:
        """Wait while the sender's own turn is parked on a call and the configured answer
        to other messages is to keep it pending, and while a resumed turn of theirs runs."""
        key = serial_key(msg)
        keep = self.confirmations.settings.on_other_message == "keep_pending"
        while True:
            ended = self._ended  # taken before the look: an end during it is not missed
            parked = keep and any(
                c.requester == msg.sender_id and c.continuation is not None
                for c in await self.confirmations.list_pending(msg.session_key)
            )
            if not parked and not self._resuming.get(key):
                return
            # Another replica may end it: its events reach here too (remote listeners);
            # the store is read again after a while all the same.
            try:
                async with asyncio.timeout(self.confirmations.lease / 3):
                    await ended.wait()
            except TimeoutError:
                pass

    async def _turn(self, msg: InboundMessage) -> None:
        await self._after_parked(msg)
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
                    await turn.say(texts.turn_failed(exc))
                finally:
                    self._tell(msg, False)
                await take()

    async def stop_intake(self) -> None:
        """No new message starts a turn from here on (each stays stored: the next start, or
        the replica that adopts this one's messages, answers it); calls that end while the
        gateway stops still go on (a cancelled call's turn stops and keeps its history)."""
        self._stopping = True

    async def wait_idle(self, timeout: float) -> bool:
        """Wait for running turns to finish; True when all did in time."""
        return await self._turns.drain(timeout)

    async def stop(self, timeout: float = 5.0) -> None:
        await self.stop_intake()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        await self._turns.drain(timeout)
        await self._intake.cancel()
        # What the intake had not taken yet: the turns that go on from calls ended by now.
        while not self.bus.inbound.empty():
            msg = self.bus.inbound.get_nowait()
            if msg.resumes is not None:
                self._start_resume(msg)
        await self._turns.stop(max(0.0, deadline - loop.time()))


async def _nothing() -> None:
    return


def resume_message(confirmation: Confirmation) -> InboundMessage:
    """What the inbox stores for ``confirmation``'s waiting turn to go on (one per call)."""
    c = confirmation
    return InboundMessage(
        channel=c.channel,
        chat_id=c.chat_id,
        sender_id=c.requester,
        text="",
        message_id=f"resume:{c.id}",
        is_group=c.is_group,
        session_key=c.session_key,
        resumes=c.id,
    )


def serial_key(msg: InboundMessage) -> str:
    """Whose turns run one at a time: the session, or in a group one member of it."""
    return _serial_key(msg.session_key, msg.sender_id, msg.is_group)


def _serial_key(session_key: str, sender: str, is_group: bool) -> str:
    if is_group:
        return f"{session_key}\x00{sender}"
    return session_key
