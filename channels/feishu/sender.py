"""What the Feishu channel sends for each outbound message: text, post, or a card.

Confirmation prompts are interactive cards whose buttons decide; an update patches the
card for everyone in the chat. When a card cannot be sent, the text prompt (which carries
the id and the reply words) goes instead, so a typed reply always works.

A four-eyes or critical call also goes to each of the channel's approvers in their direct
chat (by open_id, gateway/confirm/views.py); every copy's message id is kept on the
record, and when the call ends every copy is patched to its final state.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog
from cachetools import TTLCache

from channels.base import ChannelSendError
from channels.feishu import render
from channels.feishu.inbound import CHANNEL
from channels.feishu.outbound import Outbox
from gateway import texts
from gateway.bus import OutboundKind, OutboundMessage
from gateway.confirm.model import Confirmation
from gateway.confirm.service import ConfirmationService
from gateway.confirm.views import (
    TEXT_COPY,
    direct_copies,
    direct_recipients,
    dm_ref,
    escalation_copies,
    escalation_recipients,
    escalation_ref,
    mentions_here,
)
from gateway.texts import approvers as approver_texts

log = structlog.get_logger(__name__)

# Where the prompt card's message id is kept on the confirmation record.
PROMPT_REF = "feishu_message_id"
# The chat's earlier cards of the same call (its prompt shown again after a restart).
EARLIER_REF = "feishu_earlier:"


class FeishuSender:
    """Sends one ``OutboundMessage`` through the ``Outbox`` (which retries and dead-letters)."""

    def __init__(
        self,
        *,
        outbox: Outbox,
        confirmations: ConfirmationService,
        approvers: Sequence[str] = (),
        escalation_chat: str | None = None,
    ) -> None:
        self.outbox = outbox
        self._service = confirmations
        # open_ids whose direct chat gets a copy of four-eyes and critical prompts.
        self._approvers = tuple(approvers)
        # The chat_id that also gets a copy of an escalated call (nudges.py).
        self._escalation_chat = escalation_chat
        # Confirmation id -> {ref key: message id} of its cards, for updates racing the
        # stored refs (a click can arrive before the ref is written).
        self._cards: TTLCache[str, dict[str, str]] = TTLCache(maxsize=10_000, ttl=24 * 3600)

    def remember_card(self, confirmation_id: str, message_id: str) -> None:
        """A card of this confirmation was clicked: it is one of its copies."""
        cards = self._cards.setdefault(confirmation_id, {})
        if message_id not in cards.values():
            cards[f"clicked:{message_id}"] = message_id

    async def send(self, msg: OutboundMessage) -> None:
        conf = msg.confirmation
        if msg.kind is OutboundKind.CONFIRMATION and conf is not None:
            await self._send_card(msg, conf)
            await self._send_direct_copies(msg, conf)
        elif msg.kind is OutboundKind.CONFIRMATION_UPDATE and conf is not None:
            await self._update_cards(msg, conf)
        elif msg.kind is OutboundKind.ESCALATION and conf is not None:
            await self._escalate(msg, conf)
        elif msg.mentions:
            await self._send_mentioning(msg)
        else:
            await self._send_text(msg)

    async def _send_mentioning(self, msg: OutboundMessage) -> None:
        """A reminder: its text as written, under a line of real @-mentions."""
        mentions = mentions_here(msg.mentions, msg.confirmation, self._approvers)
        msg_type, content = render.mention_content(msg.text, mentions)
        result = await self.outbox.send(
            chat_id=msg.chat_id,
            msg_type=msg_type,
            content=content,
            kind=msg.kind.value,
            text=msg.text,
            confirmation_id=msg.confirmation.id if msg.confirmation else None,
        )
        if not result.ok:
            raise ChannelSendError(
                f"feishu send failed: HTTP {result.status}, code {result.code}: {result.msg}",
                retryable=False,
            )

    async def _escalate(self, msg: OutboundMessage, conf: Confirmation) -> None:
        """An escalated call: the chat that asked is told; every approver gets a copy in
        their direct chat (four-eyes or not), the escalation chat one too."""
        await self._text_to(msg.chat_id, msg.text, msg)
        failed = []
        for open_id in escalation_recipients(conf, self._approvers):
            key = dm_ref(CHANNEL, open_id)
            if key in conf.prompt_refs:
                continue  # a four-eyes call's copy is there already
            try:
                await self._send_direct_copy(msg, conf, open_id, key)
            except ChannelSendError as exc:  # one approver unreachable: the others still are
                log.warning("feishu.direct_copy_failed", confirmation_id=conf.id, error=str(exc))
                failed.append(open_id)
        chat = self._escalation_chat
        if chat and chat != conf.chat_id:
            await self._send_escalation_copy(msg, conf, chat)
        if failed:
            raise ChannelSendError(
                f"feishu: no copy reached {len(failed)} approver(s)", retryable=False
            )

    async def _send_escalation_copy(
        self, msg: OutboundMessage, conf: Confirmation, chat: str
    ) -> None:
        key = escalation_ref(CHANNEL, chat)
        result = await self.outbox.send(
            chat_id=chat,
            msg_type="interactive",
            content=render.card_content(conf, direct=True),
            kind=msg.kind.value,
            text=msg.text,
            confirmation_id=conf.id,
            dead_letter=False,
        )
        if result.ok and result.message_id:
            await self._keep_copy(conf, key, result.message_id, chat, direct=True)
            log.info("feishu.escalation_copy_sent", confirmation_id=conf.id, chat_id=chat)
            return
        log.warning("feishu.escalation_card_fallback_to_text", code=result.code, error=result.msg)
        await self._text_to(chat, approver_texts.direct_prompt(conf, self._service.clock()), msg)
        await self._service.set_prompt_ref(conf.id, key, TEXT_COPY)

    async def _send_text(self, msg: OutboundMessage) -> None:
        await self._text_to(msg.chat_id, msg.text, msg, reply_to=msg.reply_to)

    async def _text_to(
        self,
        receiver: str,
        text: str,
        msg: OutboundMessage,
        *,
        reply_to: str | None = None,
        receive_id_type: str = "chat_id",
    ) -> str | None:
        # Only the agent's replies may be Markdown; a prompt or an outcome carries values
        # from the request (table names, reasons, names) and is shown as written.
        plain = msg.kind is not OutboundKind.TEXT
        msg_type, content = (render.plain_content if plain else render.message_content)(text)
        result = await self.outbox.send(
            chat_id=receiver,
            msg_type=msg_type,
            content=content,
            kind=msg.kind.value,
            text=text,
            reply_to=reply_to,
            confirmation_id=msg.confirmation.id if msg.confirmation else None,
            receive_id_type=receive_id_type,
        )
        if not result.ok:
            # Already retried and dead-lettered here; the manager only counts it.
            raise ChannelSendError(
                f"feishu send failed: HTTP {result.status}, code {result.code}: {result.msg}",
                retryable=False,
            )
        return result.message_id

    def _remember(self, conf: Confirmation, key: str, message_id: str) -> None:
        self._cards.setdefault(conf.id, {})[key] = message_id

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
        earlier = conf.prompt_refs.get(PROMPT_REF)
        if earlier and earlier != result.message_id:
            # Shown again (after a restart): the earlier card stays a copy to patch too.
            await self._service.set_prompt_ref(conf.id, f"{EARLIER_REF}{earlier}", earlier)
        await self._keep_copy(conf, PROMPT_REF, result.message_id, msg.chat_id)

    async def _keep_copy(
        self, conf: Confirmation, key: str, message_id: str, chat_id: str, *, direct: bool = False
    ) -> None:
        """Store a card copy's message id; if the call ended meanwhile, show the outcome."""
        self._remember(conf, key, message_id)
        await self._service.set_prompt_ref(conf.id, key, message_id)
        current = await self._service.get(conf.id)
        if current is not None and current.status.is_terminal:
            # Decided (or expired) while the card was on its way: show the outcome.
            ok = await self._patch_card(chat_id, message_id, current, direct=direct)
            if not ok:
                raise ChannelSendError("feishu card patch failed", retryable=False)

    async def _send_direct_copies(self, msg: OutboundMessage, conf: Confirmation) -> None:
        """The copies in approvers' direct chats (four-eyes and critical calls only)."""
        failed = []
        for open_id in direct_recipients(conf, self._approvers):
            key = dm_ref(CHANNEL, open_id)
            if key in conf.prompt_refs:
                continue  # a prompt shown again after a restart: that copy still works
            try:
                await self._send_direct_copy(msg, conf, open_id, key)
            except ChannelSendError as exc:  # one approver unreachable: the others still are
                log.warning("feishu.direct_copy_failed", confirmation_id=conf.id, error=str(exc))
                failed.append(open_id)
        if failed:
            raise ChannelSendError(
                f"feishu: no copy reached {len(failed)} approver(s)", retryable=False
            )

    async def _send_direct_copy(
        self, msg: OutboundMessage, conf: Confirmation, open_id: str, key: str
    ) -> None:
        result = await self.outbox.send(
            chat_id=open_id,
            msg_type="interactive",
            content=render.card_content(conf, direct=True),
            kind=msg.kind.value,
            text=msg.text,
            confirmation_id=conf.id,
            dead_letter=False,
            receive_id_type="open_id",
        )
        if result.ok and result.message_id:
            await self._keep_copy(conf, key, result.message_id, open_id, direct=True)
            log.info("feishu.direct_copy_sent", confirmation_id=conf.id, approver=open_id)
            return
        log.warning("feishu.direct_card_fallback_to_text", code=result.code, error=result.msg)
        text = approver_texts.direct_prompt(conf, self._service.clock())
        await self._text_to(open_id, text, msg, receive_id_type="open_id")
        await self._service.set_prompt_ref(conf.id, key, TEXT_COPY)

    async def _update_cards(self, msg: OutboundMessage, conf: Confirmation) -> None:
        """Bring every copy of the prompt to the record's stage: the chat's card, the cards
        in approvers' direct chats (text copies get the outcome as a new message)."""
        cards = {**self._cards.get(conf.id, {}), **conf.prompt_refs}
        failed = 0
        group = cards.get(PROMPT_REF)
        if group:
            failed += not await self._patch_card(msg.chat_id, group, conf)
        if not msg.copies_only and (not group or conf.decided_via != "card"):
            # A typed reply, the admin API or the timeout decided: say so in the chat flow
            # too, not only in a card that may have scrolled out of sight.
            await self._send_text(msg)
        for open_id, ref in direct_copies(cards, CHANNEL).items():
            if ref == TEXT_COPY:
                try:
                    await self._text_to(open_id, msg.text, msg, receive_id_type="open_id")
                except ChannelSendError:  # dead-lettered; the other copies still go
                    failed += 1
            else:
                failed += not await self._patch_card(open_id, ref, conf, direct=True)
        for chat, ref in escalation_copies(cards, CHANNEL).items():
            if ref == TEXT_COPY:
                try:
                    await self._text_to(chat, msg.text, msg)
                except ChannelSendError:  # dead-lettered; the other copies still go
                    failed += 1
            else:
                failed += not await self._patch_card(chat, ref, conf, direct=True)
        for key, message_id in cards.items():
            if key.startswith(EARLIER_REF) or (
                key.startswith("clicked:") and message_id not in conf.prompt_refs.values()
            ):
                failed += not await self._patch_card(msg.chat_id, message_id, conf)
        if failed:
            raise ChannelSendError(f"feishu: {failed} card patch(es) failed", retryable=False)

    async def _patch_card(
        self, chat_id: str, message_id: str, conf: Confirmation, *, direct: bool = False
    ) -> bool:
        """Patch one card copy; False when it failed (after retries; dead-lettered)."""
        result = await self.outbox.patch(
            chat_id=chat_id,
            message_id=message_id,
            content=render.card_content(conf, direct=direct),
            kind=OutboundKind.CONFIRMATION_UPDATE.value,
            text=texts.outcome(conf),
            confirmation_id=conf.id,
        )
        if not result.ok:
            log.warning(
                "feishu.card_patch_failed",
                confirmation_id=conf.id,
                code=result.code,
                error=result.msg,
            )
        return result.ok
