"""What the Feishu channel sends for each outbound message: text, post, or a card.

Confirmation prompts are interactive cards whose buttons decide; an update patches the
card for everyone in the chat. When a card cannot be sent, the text prompt (which carries
the id and the reply words) goes instead, so a typed reply always works.
"""

from __future__ import annotations

import structlog
from cachetools import TTLCache

from channels.base import ChannelSendError
from channels.feishu import render
from channels.feishu.outbound import Outbox
from gateway.bus import OutboundKind, OutboundMessage
from gateway.confirm.model import Confirmation
from gateway.confirm.service import ConfirmationService

log = structlog.get_logger(__name__)

# Where the prompt card's message id is kept on the confirmation record.
PROMPT_REF = "feishu_message_id"


class FeishuSender:
    """Sends one ``OutboundMessage`` through the ``Outbox`` (which retries and dead-letters)."""

    def __init__(self, *, outbox: Outbox, confirmations: ConfirmationService) -> None:
        self.outbox = outbox
        self._service = confirmations
        # Confirmation id -> prompt card message id, for updates racing the stored ref.
        self._cards: TTLCache[str, str] = TTLCache(maxsize=10_000, ttl=24 * 3600)

    def remember_card(self, confirmation_id: str, message_id: str) -> None:
        self._cards[confirmation_id] = message_id

    async def send(self, msg: OutboundMessage) -> None:
        conf = msg.confirmation
        if msg.kind is OutboundKind.CONFIRMATION and conf is not None:
            await self._send_card(msg, conf)
        elif msg.kind is OutboundKind.CONFIRMATION_UPDATE and conf is not None:
            await self._update_card(msg, conf)
        else:
            await self._send_text(msg)

    async def _send_text(self, msg: OutboundMessage) -> None:
        msg_type, content = render.message_content(msg.text)
        result = await self.outbox.send(
            chat_id=msg.chat_id,
            msg_type=msg_type,
            content=content,
            kind=msg.kind.value,
            text=msg.text,
            reply_to=msg.reply_to,
            confirmation_id=msg.confirmation.id if msg.confirmation else None,
        )
        if not result.ok:
            # Already retried and dead-lettered here; the manager only counts it.
            raise ChannelSendError(
                f"feishu send failed: HTTP {result.status}, code {result.code}: {result.msg}",
                retryable=False,
            )

    async def _send_card(self, msg: OutboundMessage, conf: Confirmation) -> None:
        result = await self.outbox.send(
            chat_id=msg.chat_id,
            msg_type="interactive",
            content=render.card_content(conf),
            kind=msg.kind.value,
            text=msg.text,
            reply_to=msg.reply_to,
            confirmation_id=conf.id,
            dead_letter=False,
        )
        if not result.ok or not result.message_id:
            # The text prompt carries the id and the reply words: a typed reply still works.
            log.warning("feishu.card_fallback_to_text", code=result.code, error=result.msg)
            await self._send_text(msg)
            return
        self._cards[conf.id] = result.message_id
        await self._service.set_prompt_ref(conf.id, PROMPT_REF, result.message_id)
        current = await self._service.get(conf.id)
        if current is not None and current.status.is_terminal:
            # Decided (or expired) while the card was on its way: show the outcome.
            await self._patch_card(msg.chat_id, result.message_id, current, msg.text)

    async def _update_card(self, msg: OutboundMessage, conf: Confirmation) -> None:
        message_id = self._cards.get(conf.id) or conf.prompt_refs.get(PROMPT_REF)
        if not message_id:
            await self._send_text(msg)
            return
        await self._patch_card(msg.chat_id, message_id, conf, msg.text)
        if conf.decided_via != "card":
            # A typed reply, the admin API or the timeout decided: say so in the chat flow
            # too, not only in a card that may have scrolled out of sight.
            await self._send_text(msg)

    async def _patch_card(
        self, chat_id: str, message_id: str, conf: Confirmation, text: str
    ) -> None:
        result = await self.outbox.patch(
            chat_id=chat_id,
            message_id=message_id,
            content=render.card_content(conf),
            kind=OutboundKind.CONFIRMATION_UPDATE.value,
            text=text,
            confirmation_id=conf.id,
        )
        if not result.ok:
            raise ChannelSendError(
                f"feishu card patch failed: code {result.code}: {result.msg}", retryable=False
            )
