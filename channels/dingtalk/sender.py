"""What the DingTalk channel sends, and where: session webhook first, robot OpenAPI after.

A reply goes through the asking message's ``sessionWebhook`` while it is valid (no token,
~90 min) and allowed (``webhooks.py``); otherwise through the robot OpenAPI (group or
one-to-one). Confirmation prompts
are interactive cards whose clicks arrive on the stream; updates rewrite the card.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from cachetools import TTLCache

from channels.base import ChannelSendError
from channels.dingtalk.api import DingTalkApi, DingTalkApiError
from channels.dingtalk.cards import (
    STANDARD_TEMPLATE_ID,
    card_params,
    out_track_id,
    prompt_markdown,
)
from channels.dingtalk.inbound import ChatbotEvent
from channels.dingtalk.webhooks import WebhookRule
from channels.platform import DeadLetters
from config.channel_settings import DingTalkSettings
from gateway import texts
from gateway.bus import OutboundKind, OutboundMessage
from gateway.confirm.model import Confirmation, Status
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

CHANNEL = "dingtalk"
# Key under Confirmation.prompt_refs that marks a delivered card.
CARD_REF = "dingtalk_card"
# Treat a session webhook as expired this long before DingTalk says it is.
WEBHOOK_EXPIRY_MARGIN_SECONDS = 60.0


def robot_message(text: str, markdown_title: str | None) -> tuple[str, dict[str, str]]:
    """The robot API's (msgKey, msgParam): plain text, or markdown under a title.

    With a title ``text`` is markdown already, its values escaped (cards.prompt_markdown).
    """
    if markdown_title is None:
        return "sampleText", {"content": text}
    return "sampleMarkdown", {"title": markdown_title, "text": text}


@dataclass(frozen=True, slots=True)
class Route:
    """Where replies to one conversation go."""

    is_group: bool
    staff_id: str | None  # the other person, for 1:1 OpenAPI sends and IM_ROBOT cards
    webhook: str | None
    webhook_expires_at: float | None

    @property
    def webhook_usable(self) -> bool:
        if not self.webhook or self.webhook_expires_at is None:
            return False
        return self.webhook_expires_at - time.time() > WEBHOOK_EXPIRY_MARGIN_SECONDS


class DingTalkSender:
    """Sends one ``OutboundMessage``; what fails after every retry goes to ``dead_letters``."""

    def __init__(
        self,
        *,
        settings: DingTalkSettings,
        api: DingTalkApi,
        confirmations: ConfirmationService,
        dead_letters: DeadLetters,
        cards: bool,
    ) -> None:
        self._settings = settings
        self._api = api
        self._service = confirmations
        self._robot_code = settings.robot_code or settings.client_id or ""
        self.dead_letters = dead_letters
        # Card clicks arrive on the stream connection, which HTTP mode does not open:
        # there a card would have dead buttons, so the text prompt is sent instead.
        self._cards = cards
        self._webhooks = WebhookRule(hosts=settings.webhook_hosts, schemes=settings.webhook_schemes)
        # Latest reply route per conversation; a webhook lives ~90 min, so 2 h is plenty.
        self._routes: TTLCache[str, Route] = TTLCache(maxsize=50_000, ttl=7200)

    def remember(self, event: ChatbotEvent) -> None:
        """Keep where replies to the event's conversation go."""
        self._routes[event.conversation_id] = Route(
            is_group=event.is_group,
            staff_id=None if event.is_group else event.sender_id,
            webhook=event.session_webhook,
            webhook_expires_at=event.session_webhook_expires_at,
        )

    async def send(self, msg: OutboundMessage) -> None:
        try:
            if msg.kind is OutboundKind.CONFIRMATION and msg.confirmation is not None:
                await self._send_confirmation(msg, msg.confirmation)
                await self._send_direct_copies(msg, msg.confirmation)
            elif msg.kind is OutboundKind.CONFIRMATION_UPDATE and msg.confirmation is not None:
                await self._send_update(msg, msg.confirmation)
            elif msg.kind is OutboundKind.ESCALATION and msg.confirmation is not None:
                await self._escalate(msg, msg.confirmation)
            else:
                mentions = mentions_here(msg.mentions, msg.confirmation, self._settings.approvers)
                await self._send_text(msg.chat_id, msg.text, msg.metadata, None, mentions=mentions)
        except DingTalkApiError as exc:
            self.dead_letters.add(
                chat_id=msg.chat_id,
                kind=msg.kind.value,
                text=msg.text,
                error=str(exc),
                attempts=exc.attempts,
                confirmation_id=msg.confirmation.id if msg.confirmation else None,
            )
            # Retried with backoff already (per call, in DingTalkApi): the manager must
            # not multiply the attempts.
            raise ChannelSendError(str(exc), retryable=False) from exc

    def _route_for(
        self, chat_id: str, metadata: Mapping[str, Any], conf: Confirmation | None
    ) -> Route:
        known = self._routes.get(chat_id)
        webhook = metadata.get("session_webhook")
        if webhook:
            ctype = metadata.get("conversation_type")
            is_group = ctype == "2" if ctype else (known.is_group if known else False)
            expires = metadata.get("session_webhook_expires_at")
            route = Route(
                is_group=is_group,
                staff_id=metadata.get("sender_staff_id") if not is_group else None,
                webhook=str(webhook),
                webhook_expires_at=float(expires) if expires is not None else None,
            )
            # A newer webhook from the route cache wins over the message's own.
            if (
                known
                and known.webhook
                and (known.webhook_expires_at or 0) > (route.webhook_expires_at or 0)
            ):
                return Route(
                    route.is_group, route.staff_id, known.webhook, known.webhook_expires_at
                )
            return route
        if known is not None:
            return known
        if conf is not None:
            return Route(
                is_group=conf.is_group,
                staff_id=None if conf.is_group else conf.requester,
                webhook=None,
                webhook_expires_at=None,
            )
        return Route(is_group=False, staff_id=None, webhook=None, webhook_expires_at=None)

    async def _send_text(
        self,
        chat_id: str,
        text: str,
        metadata: Mapping[str, Any],
        conf: Confirmation | None,
        *,
        markdown_title: str | None = None,
        mentions: Sequence[str] = (),
    ) -> None:
        route = self._route_for(chat_id, metadata, conf)
        if mentions:
            # DingTalk highlights and notifies "@<staff id>" in the text of a message whose
            # ``at.atUserIds`` lists that id (session webhook). The robot OpenAPI has no
            # ``at``: there the line reads as names only.
            text = " ".join(f"@{m}" for m in mentions) + "\n" + text
        msg_key, msg_param = robot_message(text, markdown_title)
        hook_payload: dict[str, Any]
        if markdown_title is not None:
            hook_payload = {"msgtype": "markdown", "markdown": msg_param}
        else:
            hook_payload = {"msgtype": "text", "text": msg_param}
        if mentions:
            hook_payload["at"] = {"atUserIds": list(mentions), "isAtAll": False}
        if (
            route.webhook is not None
            and route.webhook_usable
            and self._webhooks.allows(route.webhook)
        ):
            try:
                await self._api.send_session_webhook(route.webhook, hook_payload)
                return
            except DingTalkApiError as exc:
                # The robot OpenAPI is independent of the webhook: try it before giving up.
                log.warning("dingtalk.webhook_send_failed", chat_id=chat_id, error=str(exc))
        if route.is_group:
            await self._api.send_group(
                robot_code=self._robot_code,
                conversation_id=chat_id,
                msg_key=msg_key,
                msg_param=msg_param,
            )
        elif route.staff_id:
            await self._api.send_one_to_one(
                robot_code=self._robot_code,
                user_ids=[route.staff_id],
                msg_key=msg_key,
                msg_param=msg_param,
            )
        else:
            raise DingTalkApiError(f"no way to reach conversation {chat_id}: no webhook, no user")

    async def _send_text_prompt(self, msg: OutboundMessage, conf: Confirmation) -> None:
        await self._send_text(
            msg.chat_id,
            prompt_markdown(conf, as_text=True),
            msg.metadata,
            conf,
            markdown_title=texts.confirmation_title(conf),
        )

    async def _send_confirmation(self, msg: OutboundMessage, conf: Confirmation) -> None:
        if not self._cards:
            await self._send_text_prompt(msg, conf)
            return
        route = self._route_for(msg.chat_id, msg.metadata, conf)
        track = out_track_id(conf.id)
        body: dict[str, Any] = {
            "cardTemplateId": self._settings.card_template_id or STANDARD_TEMPLATE_ID,
            "outTrackId": track,
            "cardData": {"cardParamMap": card_params(conf)},
            "callbackType": "STREAM",
            "userIdType": 1,
            # An approval card forwarded elsewhere would only confuse: no forwarding.
            "imGroupOpenSpaceModel": {"supportForward": False},
            "imRobotOpenSpaceModel": {"supportForward": False},
        }
        if route.is_group:
            body["openSpaceId"] = f"dtv1.card//IM_GROUP.{msg.chat_id}"
            body["imGroupOpenDeliverModel"] = {"robotCode": self._robot_code}
        else:
            staff = route.staff_id or conf.requester
            body["openSpaceId"] = f"dtv1.card//IM_ROBOT.{staff}"
            body["imRobotOpenDeliverModel"] = {
                "spaceType": "IM_ROBOT",
                "robotCode": self._robot_code,
            }
        try:
            await self._api.create_and_deliver_card(body)
        except DingTalkApiError as exc:
            log.warning("dingtalk.card_failed", confirmation_id=conf.id, error=str(exc))
            await self._send_text_prompt(msg, conf)
            return
        await self._keep_card(conf, CARD_REF, track)
        # The typed reply always works, also where cards do not render.
        await self._send_text(msg.chat_id, texts.reply_hint(conf), msg.metadata, conf)

    async def _keep_card(self, conf: Confirmation, key: str, track: str) -> None:
        """Store a card copy's outTrackId; if the call ended meanwhile, show the outcome."""
        await self._service.set_prompt_ref(conf.id, key, track)
        current = await self._service.get(conf.id)
        if current is not None and current.status.is_terminal:
            await self._update_card(current, track)

    # ------------------------------------------------- approvers' direct chats

    async def _send_direct_copies(
        self, msg: OutboundMessage, conf: Confirmation, to: list[str] | None = None
    ) -> None:
        """Four-eyes and critical calls (or ``to``, an escalation's): a copy in each
        approver's one-to-one chat with the robot (a card with its own outTrackId, or the
        prompt as text through ``oToMessages/batchSend``); each copy's ref is stored on the
        record."""
        staff = (
            [
                s
                for s in direct_recipients(conf, self._settings.approvers)
                if dm_ref(CHANNEL, s) not in conf.prompt_refs  # a restart's repost: still works
            ]
            if to is None
            else to
        )
        if not staff:
            return
        as_text = staff
        if self._cards:
            as_text = []
            for staff_id in staff:
                try:
                    await self._send_direct_card(conf, staff_id)
                except DingTalkApiError as exc:
                    log.warning(
                        "dingtalk.direct_card_failed", confirmation_id=conf.id, error=str(exc)
                    )
                    as_text.append(staff_id)
            carded = [s for s in staff if s not in as_text]
            if carded:  # the typed reply always works, also where cards do not render
                await self._send_direct_text(carded, approver_texts.direct_reply_hint(conf))
        if as_text:
            prompt = prompt_markdown(conf, direct=True, as_text=True)
            await self._send_direct_text(as_text, prompt, title=texts.confirmation_title(conf))
            for staff_id in as_text:
                await self._service.set_prompt_ref(conf.id, dm_ref(CHANNEL, staff_id), TEXT_COPY)
        log.info("dingtalk.direct_copies_sent", confirmation_id=conf.id, approvers=len(staff))

    async def _send_direct_card(self, conf: Confirmation, staff_id: str) -> None:
        track = out_track_id(conf.id, direct_to=staff_id)
        await self._api.create_and_deliver_card(
            {
                "cardTemplateId": self._settings.card_template_id or STANDARD_TEMPLATE_ID,
                "outTrackId": track,
                "cardData": {"cardParamMap": card_params(conf, direct=True)},
                "callbackType": "STREAM",
                "userIdType": 1,
                "imRobotOpenSpaceModel": {"supportForward": False},
                "openSpaceId": f"dtv1.card//IM_ROBOT.{staff_id}",
                "imRobotOpenDeliverModel": {"spaceType": "IM_ROBOT", "robotCode": self._robot_code},
            }
        )
        await self._keep_card(conf, dm_ref(CHANNEL, staff_id), track)

    async def _send_direct_text(
        self, staff: list[str], text: str, *, title: str | None = None
    ) -> None:
        """One ``oToMessages/batchSend`` per 20 approvers (DingTalk's limit per call)."""
        msg_key, param = robot_message(text, title)
        for start in range(0, len(staff), 20):
            await self._api.send_one_to_one(
                robot_code=self._robot_code,
                user_ids=staff[start : start + 20],
                msg_key=msg_key,
                msg_param=param,
            )

    # ---------------------------------------------------------------- escalation

    async def _escalate(self, msg: OutboundMessage, conf: Confirmation) -> None:
        """An escalated call: the chat that asked is told; every approver gets a copy in
        their one-to-one chat (four-eyes or not), the escalation chat one too."""
        await self._send_text(msg.chat_id, msg.text, msg.metadata, conf)
        staff = [
            s
            for s in escalation_recipients(conf, self._settings.approvers)
            if dm_ref(CHANNEL, s) not in conf.prompt_refs  # a four-eyes call's copy is there
        ]
        await self._send_direct_copies(msg, conf, staff)
        chat = self._settings.escalation_chat
        if chat and chat != conf.chat_id:
            await self._send_escalation_copy(conf, chat)

    async def _send_escalation_copy(self, conf: Confirmation, chat: str) -> None:
        """A card in the escalation group (its own outTrackId), or the prompt as text."""
        key = escalation_ref(CHANNEL, chat)
        if self._cards:
            track = out_track_id(conf.id, direct_to=key)
            try:
                await self._api.create_and_deliver_card(
                    {
                        "cardTemplateId": self._settings.card_template_id or STANDARD_TEMPLATE_ID,
                        "outTrackId": track,
                        "cardData": {"cardParamMap": card_params(conf, direct=True)},
                        "callbackType": "STREAM",
                        "userIdType": 1,
                        "imGroupOpenSpaceModel": {"supportForward": False},
                        "openSpaceId": f"dtv1.card//IM_GROUP.{chat}",
                        "imGroupOpenDeliverModel": {"robotCode": self._robot_code},
                    }
                )
            except DingTalkApiError as exc:
                log.warning(
                    "dingtalk.escalation_card_failed", confirmation_id=conf.id, error=str(exc)
                )
            else:
                await self._keep_card(conf, key, track)
                await self._send_group_text(chat, approver_texts.direct_reply_hint(conf))
                return
        prompt = prompt_markdown(conf, direct=True, as_text=True)
        await self._send_group_text(chat, prompt, title=texts.confirmation_title(conf))
        await self._service.set_prompt_ref(conf.id, key, TEXT_COPY)

    async def _send_group_text(self, chat: str, text: str, *, title: str | None = None) -> None:
        msg_key, param = robot_message(text, title)
        await self._api.send_group(
            robot_code=self._robot_code, conversation_id=chat, msg_key=msg_key, msg_param=param
        )

    # ---------------------------------------------------------------- updates

    async def _send_update(self, msg: OutboundMessage, conf: Confirmation) -> None:
        """Every copy to the record's state: the chat's card, each approver's card (text
        copies get the outcome as a new message), then the outcome in the chat."""
        track = conf.prompt_refs.get(CARD_REF)
        card_updated = False
        if track:
            card_updated = await self._update_card(conf, track)
        copies = direct_copies(conf.prompt_refs, CHANNEL)
        for ref in copies.values():
            if ref != TEXT_COPY:
                await self._update_card(conf, ref)
        told = [staff_id for staff_id, ref in copies.items() if ref == TEXT_COPY]
        if told:
            await self._send_direct_text(told, msg.text)
        for chat, ref in escalation_copies(conf.prompt_refs, CHANNEL).items():
            if ref == TEXT_COPY:
                await self._send_group_text(chat, msg.text)
            else:
                await self._update_card(conf, ref)
        if msg.copies_only:
            return  # the chat hears it from the turn
        if card_updated and conf.decided_via == "card" and conf.status is not Status.PENDING:
            # The clicker's ack already showed the result on the card: no extra message.
            return
        await self._send_text(msg.chat_id, msg.text, msg.metadata, conf)

    async def _update_card(self, conf: Confirmation, track: str) -> bool:
        try:
            await self._api.update_card(track, card_params(conf))
        except DingTalkApiError as exc:
            log.warning(
                "dingtalk.card_update_failed",
                confirmation_id=conf.id,
                out_track_id=track,
                error=str(exc),
            )
            return False
        return True
