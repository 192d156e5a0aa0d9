"""A real bus + confirmation service + memory store, driven the way channels drive them."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

from config.keywords import load_keywords
from config.settings import DEFAULT_KEYWORDS_FILE, ConfirmationSettings
from gateway.bus import InboundMessage, MessageBus, OutboundKind, OutboundMessage, PublishResult
from gateway.confirm.events import ConfirmationEvent, EventKind
from gateway.confirm.model import Answer, Confirmation, DecideResult, Decision, ToolCall
from gateway.confirm.service import ConfirmationService
from gateway.storage.confirmations import ConfirmationStore
from gateway.storage.memory.confirmations import MemoryConfirmationStore

CHANNEL = "test"


class Harness:
    def __init__(
        self,
        *,
        timeout: float = 300.0,  # the default; a loaded CI machine must not expire a test's call
        approvers: tuple[str, ...] = (),
        on_other: str = "reject_with_feedback",
        store: ConfirmationStore | None = None,
        clock: Callable[[], float] | None = None,
        max_pending: int = 1000,
        settings: dict[str, Any] | None = None,  # more [confirmation] settings
    ) -> None:
        self.bus = MessageBus()
        self.store = store or MemoryConfirmationStore()
        kwargs: dict[str, Any] = {"clock": clock} if clock else {}
        self.service = ConfirmationService(
            store=self.store,
            bus=self.bus,
            settings=ConfirmationSettings(
                timeout_seconds=timeout,
                approvers=list(approvers),
                on_other_message=on_other,  # type: ignore[arg-type]
                max_pending=max_pending,
                **(settings or {}),
            ),
            keywords=load_keywords(DEFAULT_KEYWORDS_FILE),
            **kwargs,
        )
        self._ids = itertools.count(1)
        self.tasks: list[asyncio.Task[Confirmation]] = []
        self.runs: list[asyncio.Future[Any]] = []  # what a test's own go-on started
        # Each ended record, as the service hands it to whoever goes on from it.
        self._ended: dict[str, asyncio.Future[Confirmation]] = {}
        self.service.on_settled(self._settled)

    def _settled(self, final: Confirmation) -> None:
        fut = self._ended.setdefault(final.id, asyncio.get_running_loop().create_future())
        if not fut.done():
            fut.set_result(final)

    async def decide(
        self,
        confirmation_id: str,
        decision: Decision,
        *,
        actor: str,
        via: str,
        reason: str | None = None,
    ) -> DecideResult:
        """A person's decision through the service's one entrance."""
        return await self.service.answer(
            Answer(
                confirmation_id=confirmation_id,
                decision=decision,
                actor=actor,
                via=via,
                reason=reason,
            )
        )

    async def ended(self, confirmation_id: str) -> Confirmation:
        """The record as it was when it ended (handed on to go on from it)."""
        fut = self._ended.setdefault(confirmation_id, asyncio.get_running_loop().create_future())
        return await fut

    async def ask(
        self,
        *,
        chat: str = "c1",
        requester: str = "alice",
        is_group: bool = False,
        four_eyes: bool = False,
        approvals: int = 0,
        timeout: float | None = None,
        tool: str = "sql_modify",
        model_turn: bool = True,
    ) -> tuple[asyncio.Task[Confirmation], Confirmation]:
        """Ask as a turn would; return a task for the ended record and the prompted record."""
        call = ToolCall(
            name=tool, args={"sql": "DELETE FROM t WHERE id = 1"}, call_id=f"call{next(self._ids)}"
        )
        asked = asyncio.create_task(
            self.service.request(
                session_key=f"{CHANNEL}:{chat}",
                channel=CHANNEL,
                chat_id=chat,
                requester=requester,
                is_group=is_group,
                tool_call=call,
                summary="DELETE t",
                details={"statement": "DELETE FROM t WHERE id = 1"},
                four_eyes=four_eyes,
                approvals=approvals,
                timeout=timeout,
                # A model turn goes on from the call's outcome; a command's does not.
                continuation={"kind": "model", "tool_call_id": call.call_id}
                if model_turn
                else None,
            )
        )
        prompt = await self.next_out(OutboundKind.CONFIRMATION)
        assert prompt.confirmation is not None
        await asked
        task = asyncio.create_task(self.ended(prompt.confirmation.id))
        self.tasks.append(task)
        return task, prompt.confirmation

    async def reply(
        self,
        text: str,
        *,
        sender: str = "alice",
        chat: str = "c1",
        is_group: bool = False,
        message_id: str | None = None,
        from_bot: bool = False,
    ) -> PublishResult:
        return await self.bus.publish_inbound(
            InboundMessage(
                channel=CHANNEL,
                chat_id=chat,
                sender_id=sender,
                text=text,
                is_group=is_group,
                message_id=message_id or f"m{next(self._ids)}",
                from_bot=from_bot,
            )
        )

    async def next_out(
        self, kind: OutboundKind | None = None, timeout: float = 5.0
    ) -> OutboundMessage:
        """The next outbound message (of ``kind``), skipping others."""
        async with asyncio.timeout(timeout):
            while True:
                msg = await self.bus.consume_outbound()
                if kind is None or msg.kind is kind:
                    return msg

    def drain(self) -> list[OutboundMessage]:
        out = []
        while not self.bus.outbound.empty():
            out.append(self.bus.outbound.get_nowait())
        return out

    def drain_inbound(self) -> list[InboundMessage]:
        out = []
        while not self.bus.inbound.empty():
            out.append(self.bus.inbound.get_nowait())
        return out

    def events(self, kind: EventKind) -> asyncio.Queue[Confirmation]:
        """The records of the service's ``kind`` events from now on, in order."""
        seen: asyncio.Queue[Confirmation] = asyncio.Queue()

        def listener(event: ConfirmationEvent) -> None:
            if event.kind == kind:
                seen.put_nowait(event.confirmation)

        self.service.subscribe(listener)
        return seen
