"""The DingTalk channel: stream mode (default) or HTTP robot mode, cards, robot sends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

import structlog
from aiohttp import web

from channels.base import Channel, ChannelContext, follow_run_ends
from channels.dingtalk.api import DingTalkApi
from channels.dingtalk.cards import CardClick, card_params
from channels.dingtalk.inbound import (
    ChatbotEvent,
    arrival,
    parse_chatbot_message,
)
from channels.dingtalk.sender import CHANNEL, DingTalkSender
from channels.dingtalk.verify import RobotVerifier
from channels.payloads import MalformedEvent
from channels.platform import DeadLetters
from channels.receive import ReceiveRules, Verdict
from gateway import texts
from gateway.bus import InboundMessage, OutboundMessage, PublishResult
from gateway.confirm.model import Answer, DecideOutcome, GrantAsk
from gateway.http.jsonapi import JsonInputError, parse_json
from gateway.runtime import BackgroundTasks, ServiceUnavailable

log = structlog.get_logger(__name__)

# DingTalk waits ~3 s for a card callback's ack; answer before that, with or without
# the updated card (a later PUT brings the card up to date anyway).
CARD_ACK_TIMEOUT_SECONDS = 2.5


class DingTalkChannel(Channel):
    """DingTalk robot: receives chatbot messages and card clicks, sends replies and cards."""

    name: ClassVar[str] = CHANNEL

    def __init__(self, context: ChannelContext) -> None:
        settings = context.settings.channels.dingtalk
        if not settings.client_id or settings.client_secret is None:
            raise ValueError(
                "channels.dingtalk.client_id and client_secret are required: set "
                "GATEWAY_CHANNELS__DINGTALK__CLIENT_ID / __CLIENT_SECRET"
            )
        self._settings = settings
        self._bus = context.bus
        self._service = context.confirmations
        self._client_id = settings.client_id
        self._secret = settings.client_secret.get_secret_value()
        self._api = DingTalkApi(
            endpoint=settings.openapi_endpoint,
            client_id=self._client_id,
            client_secret=self._secret,
            timeout_seconds=settings.request_timeout_seconds,
            attempts=settings.send_attempts,
            retry_base_seconds=settings.retry_base_seconds,
            retry_max_seconds=settings.retry_max_seconds,
        )
        self.rules = ReceiveRules(
            channel=CHANNEL,
            allow_from=settings.allow_from,
            group_policy=settings.group_policy,
            max_message_age_seconds=settings.max_message_age_seconds,
        )
        self.dead_letters = DeadLetters(channel=CHANNEL, size=settings.dead_letter_size)
        self.sender = DingTalkSender(
            settings=settings,
            api=self._api,
            confirmations=context.confirmations,
            dead_letters=self.dead_letters,
            cards=settings.mode == "stream",
        )
        self._max_json_depth = context.settings.server.max_json_depth
        self._verifier = RobotVerifier(
            secret=self._secret, window_seconds=settings.signature_window_seconds
        )
        self._tasks = BackgroundTasks(CHANNEL)
        self._runner: Any = None  # StreamRunner, imported only in stream mode
        self._started = False
        # While started: calls that end running here update their cards (channels/base.py).
        self._unfollow: Callable[[], None] = lambda: None
        if context.http is not None:
            self.dead_letters.register(context.http)
        if settings.mode == "http":
            if context.http is None:
                raise ValueError(
                    'channels.dingtalk mode = "http" needs the gateway\'s HTTP server: '
                    'run `gateway serve`, or use mode = "stream"'
                )
            context.http.router.add_post(settings.webhook_path, self._webhook_handler)

    # ----------------------------------------------------------------- lifecycle

    @property
    def ready(self) -> bool:
        if not self._started:
            return False
        if self._runner is not None:
            return bool(self._runner.connected)
        return True

    def status(self) -> dict[str, Any]:
        reason = None
        if not self._started:
            reason = "not started"
        elif not self.ready:
            reason = "the stream connection to DingTalk is not open (see dingtalk.stream_open)"
        return {
            "name": self.name,
            "ready": self.ready,
            "reason": reason,
            "mode": self._settings.mode,
            "connected": bool(self._runner.connected) if self._runner is not None else None,
            "failed": len(self.dead_letters),
        }

    async def start(self) -> None:
        await self._api.start()
        try:
            if self._settings.mode == "stream":
                # Imported here: dingtalk_stream loads only when stream mode is in use.
                from channels.dingtalk.stream import StreamRunner

                self._runner = StreamRunner(
                    client_id=self._client_id,
                    client_secret=self._secret,
                    endpoint=self._settings.openapi_endpoint,
                    on_message=self._on_stream_message,
                    on_card=self._on_card_click,
                    reconnect_base_seconds=self._settings.reconnect_base_seconds,
                    reconnect_max_seconds=self._settings.reconnect_max_seconds,
                    http_timeout_seconds=self._settings.request_timeout_seconds,
                    card_ack_timeout_seconds=CARD_ACK_TIMEOUT_SECONDS,
                )
                await self._runner.start()
        except BaseException:
            await self._api.close()
            raise
        self._unfollow = follow_run_ends(CHANNEL, self._service, self._bus)
        self._started = True
        log.info("dingtalk.started", mode=self._settings.mode)

    async def stop(self) -> None:
        self._started = False
        self._unfollow()
        timeout = self._settings.stop_timeout_seconds
        if self._runner is not None:
            clean = await self._runner.stop(timeout)
            log.info("dingtalk.stream_stopped", clean=clean)
            self._runner = None
        await self._tasks.stop(timeout)
        await self._api.close()

    # ------------------------------------------------------------------- inbound

    async def _on_stream_message(self, event: ChatbotEvent) -> None:
        """On the gateway loop, for the stream thread: the ack goes out after this returns."""
        await self._accept(event)

    async def _accept(self, event: ChatbotEvent) -> None:
        """Receive a message; returns once it is stored (or dropped by the rules)."""
        # Its own task: a request or ack wait given up does not cancel a store half-way,
        # and stop() still ends it.
        await asyncio.shield(self._tasks.spawn(self._receive(event), name="dingtalk-receive"))

    async def _receive(self, event: ChatbotEvent) -> None:
        self.sender.remember(event)
        verdict = self.rules.judge(arrival(event))
        if verdict is Verdict.REFUSED:
            await self._reply(event, texts.NOT_ALLOWED)
        elif verdict is Verdict.ACCEPT and event.text is not None:
            result = await self._publish(event, event.text)
            log.info("dingtalk.received", msg_id=event.msg_id, result=str(result))
        elif verdict is Verdict.ACCEPT and not self._bus.is_duplicate(CHANNEL, event.msg_id):
            await self._reply(event, texts.DINGTALK_UNSUPPORTED_MESSAGE)

    async def _publish(self, event: ChatbotEvent, text: str) -> PublishResult:
        return await self._bus.publish_inbound(
            InboundMessage(
                channel=CHANNEL,
                chat_id=event.conversation_id,
                sender_id=event.sender_id,
                sender_name=event.sender_nick,
                text=text,
                message_id=event.msg_id,
                is_group=event.is_group,
                metadata={
                    "conversation_type": "2" if event.is_group else "1",
                    "sender_staff_id": event.sender_id,
                    "session_webhook": event.session_webhook,
                    "session_webhook_expires_at": event.session_webhook_expires_at,
                },
            )
        )

    async def _reply(self, event: ChatbotEvent, text: str) -> None:
        await self._bus.publish_outbound(
            OutboundMessage(channel=CHANNEL, chat_id=event.conversation_id, text=text)
        )

    async def _webhook_handler(self, request: web.Request) -> web.Response:
        """HTTP robot mode: DingTalk POSTs the chatbot message with timestamp + sign."""
        problem = self._verifier.problem(
            timestamp=request.headers.get("timestamp"), sign=request.headers.get("sign")
        )
        if problem is not None:
            log.warning("dingtalk.webhook_rejected", reason=problem, remote=request.remote)
            return web.json_response({"error": problem}, status=401)
        try:
            data = parse_json(await request.read(), max_depth=self._max_json_depth)
        except JsonInputError as exc:
            log.info("dingtalk.webhook_bad_body", error=str(exc), remote=request.remote)
            return web.json_response({"error": f"body: {exc}"}, status=400)
        try:
            event = parse_chatbot_message(data)
        except MalformedEvent as exc:  # signed, but not a message we can read
            log.warning("dingtalk.malformed_event", error=str(exc), remote=request.remote)
            return web.json_response({"error": str(exc)}, status=400)
        # Acknowledge once stored (invariant 9); the agent works after the response.
        try:
            await self._accept(event)
        except ServiceUnavailable:  # Redis down: one line, by the receiving task
            return web.json_response({"error": "not stored, retry"}, status=503)
        except Exception:  # not stored (logged): no 200, so DingTalk redelivers
            log.exception("dingtalk.webhook_not_stored", msg_id=event.msg_id)
            return web.json_response({"error": "not stored, retry"}, status=503)
        return web.json_response({})

    # ------------------------------------------------------------------- cards

    async def _on_card_click(self, click: CardClick) -> dict[str, Any]:
        """A card button click; the returned dict is the ack's ``response`` (new card)."""
        if click.confirmation_id is None:
            log.info("dingtalk.card_click_foreign", out_track_id=click.out_track_id)
            return {}
        if click.again and click.user_id:
            return await self._on_again_click(click, click.confirmation_id)
        if click.decision is None or not click.user_id:
            log.warning("dingtalk.card_click_unreadable", confirmation_id=click.confirmation_id)
            return {}
        minutes = click.grant_minutes
        result = await self._service.answer(
            Answer(
                confirmation_id=click.confirmation_id,
                decision=click.decision,
                actor=click.user_id,
                via="card",
                grant=None if minutes is None else GrantAsk("session", minutes),
            )
        )
        log.info(
            "dingtalk.card_click",
            confirmation_id=click.confirmation_id,
            outcome=str(result.outcome),
            actor=click.user_id,
        )
        response: dict[str, Any] = {
            # Only the clicker sees this line; everyone sees the public card data.
            "privateData": {click.user_id: {"cardParamMap": {"tips": result.message}}},
        }
        conf = result.confirmation
        if conf is not None and result.outcome is not DecideOutcome.FORBIDDEN:
            response["cardData"] = {"cardParamMap": card_params(conf)}
        if result.outcome in (DecideOutcome.FORBIDDEN, DecideOutcome.NOT_FOUND) and conf:
            # Private card data may not show on every client: say it in the chat too.
            await self._bus.publish_outbound(
                OutboundMessage(
                    channel=CHANNEL,
                    chat_id=conf.chat_id,
                    session_key=conf.session_key,
                    text=texts.to_person(click.user_id, result.message),
                )
            )
        return response

    async def _on_again_click(self, click: CardClick, cid: str) -> dict[str, Any]:
        """重新发起 / Ask again pressed: the service judges (only the requester, once); the
        clicker reads what came of it, the chat gets the new card, the first card the link."""
        result = await self._service.ask_again(cid, actor=click.user_id, via="card")
        log.info("dingtalk.card_again", confirmation_id=cid, done=result.done)
        response: dict[str, Any] = {
            "privateData": {click.user_id: {"cardParamMap": {"tips": result.message}}},
        }
        now = await self._service.get(cid)
        if result.done and now is not None:
            response["cardData"] = {"cardParamMap": card_params(now)}
        elif now is not None:
            # Private card data may not show on every client: say it in the chat too.
            await self._bus.publish_outbound(
                OutboundMessage(
                    channel=CHANNEL,
                    chat_id=now.chat_id,
                    session_key=now.session_key,
                    text=texts.to_person(click.user_id, result.message),
                )
            )
        return response

    # -------------------------------------------------------------------- send

    async def send(self, msg: OutboundMessage) -> None:
        await self.sender.send(msg)
