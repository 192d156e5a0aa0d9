"""The DingTalk channel: stream mode (default) or HTTP robot mode, cards, robot sends."""

from __future__ import annotations

import asyncio
import hmac
import time
from collections import deque
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import structlog
from aiohttp import web
from cachetools import TTLCache

from channels.base import Channel, ChannelContext, ChannelSendError
from channels.dingtalk.api import DingTalkApi, DingTalkApiError
from channels.dingtalk.cards import (
    STANDARD_TEMPLATE_ID,
    card_params,
    out_track_id,
    parse_card_callback,
)
from channels.dingtalk.inbound import ChatbotEvent, parse_chatbot_message, verify_robot_request
from gateway import texts
from gateway.bus import InboundMessage, OutboundKind, OutboundMessage
from gateway.confirm.model import Confirmation, Status
from gateway.confirm.service import DecideOutcome

log = structlog.get_logger(__name__)

CHANNEL = "dingtalk"
FAILED_PATH = "/api/channels/dingtalk/failed"
# Key under Confirmation.prompt_refs that marks a delivered card.
CARD_REF = "dingtalk_card"
# DingTalk waits ~3 s for a card callback's ack; answer before that, with or without
# the updated card (a later PUT brings the card up to date anyway).
CARD_ACK_TIMEOUT_SECONDS = 2.5
# Treat a session webhook as expired this long before DingTalk says it is.
WEBHOOK_EXPIRY_MARGIN_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class _Route:
    """Where replies to one conversation go."""

    is_group: bool
    staff_id: str | None  # the other person, for 1:1 OpenAPI sends and IM_ROBOT cards
    webhook: str | None
    webhook_expires_at: float | None


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
        self._robot_code = settings.robot_code or settings.client_id
        self._api = DingTalkApi(
            endpoint=settings.openapi_endpoint,
            client_id=self._client_id,
            client_secret=self._secret,
            timeout_seconds=settings.request_timeout_seconds,
            attempts=settings.send_attempts,
            retry_base_seconds=settings.retry_base_seconds,
            retry_max_seconds=settings.retry_max_seconds,
        )
        # Latest reply route per conversation; a webhook lives ~90 min, so 2 h is plenty.
        self._routes: TTLCache[str, _Route] = TTLCache(maxsize=50_000, ttl=7200)
        self._failed: deque[dict[str, Any]] = deque(maxlen=settings.dead_letter_size)
        self._refused: TTLCache[str, bool] = TTLCache(maxsize=10_000, ttl=24 * 3600)
        admin = context.settings.admin.token
        self._admin_token = admin.get_secret_value() if admin else None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._runner: Any = None  # StreamRunner, imported only in stream mode
        self._started = False
        if context.http is not None:
            context.http.router.add_get(FAILED_PATH, self._failed_handler)
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
        return {
            "name": self.name,
            "ready": self.ready,
            "mode": self._settings.mode,
            "connected": bool(self._runner.connected) if self._runner is not None else None,
            "failed": len(self._failed),
        }

    @property
    def failed(self) -> list[dict[str, Any]]:
        """Sends that failed after every retry (newest last)."""
        return list(self._failed)

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
        self._started = True
        log.info("dingtalk.started", mode=self._settings.mode)

    async def stop(self) -> None:
        self._started = False
        timeout = self._settings.stop_timeout_seconds
        if self._runner is not None:
            clean = await self._runner.stop(timeout)
            log.info("dingtalk.stream_stopped", clean=clean)
            self._runner = None
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        await self._api.close()

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("dingtalk.task_failed", task=task.get_name(), exc_info=task.exception())

    # ------------------------------------------------------------------- inbound

    def _on_stream_message(self, data: dict[str, Any]) -> None:
        """On the gateway loop, called from the stream thread after the ack went out."""
        self._spawn(self._receive(data), name="dingtalk-receive")

    async def _receive(self, data: Mapping[str, Any]) -> None:
        event = parse_chatbot_message(data)
        if event is None:
            log.warning("dingtalk.unreadable_message", keys=sorted(data)[:20])
            return
        self._remember_route(event)
        bound = structlog.contextvars.bound_contextvars(
            msg_id=event.msg_id, conversation=event.conversation_id
        )
        with bound:
            max_age = self._settings.max_message_age_seconds
            if max_age and event.created_at and time.time() - event.created_at > max_age:
                # A burst redelivered after an outage: answering hours-old messages confuses.
                log.info("dingtalk.too_old_skipped", age=round(time.time() - event.created_at))
                return
            if event.is_group and not event.is_in_at_list and self._settings.group_policy != "open":
                # DingTalk only pushes @-mentions unless the bot may read the whole group;
                # with the default policy other group chatter is not for the bot.
                log.debug("dingtalk.group_message_ignored")
                return
            allow = self._settings.allow_from
            # Like Feishu: empty means nobody, "*" everyone; a bot that answers the whole
            # company must be configured so on purpose.
            if "*" not in allow and event.sender_id not in allow:
                if event.sender_id not in self._refused:
                    # Told once, not on every message: a refused person is not spammed.
                    self._refused[event.sender_id] = True
                    log.warning(
                        "dingtalk.sender_refused",
                        sender=event.sender_id,
                        hint="add this staff id to channels.dingtalk.allow_from (or '*')",
                    )
                    await self._reply(event, texts.DINGTALK_NOT_ALLOWED)
                return
            if event.text is None:
                await self._reply(event, texts.DINGTALK_UNSUPPORTED_MESSAGE)
                return
            msg = InboundMessage(
                channel=CHANNEL,
                chat_id=event.conversation_id,
                sender_id=event.sender_id,
                sender_name=event.sender_nick,
                text=event.text,
                message_id=event.msg_id,
                is_group=event.is_group,
                metadata={
                    "conversation_type": "2" if event.is_group else "1",
                    "sender_staff_id": event.sender_id,
                    "session_webhook": event.session_webhook,
                    "session_webhook_expires_at": event.session_webhook_expires_at,
                },
            )
            result = await self._bus.publish_inbound(msg)
            log.info("dingtalk.received", result=str(result), group=event.is_group)

    async def _reply(self, event: ChatbotEvent, text: str) -> None:
        await self._bus.publish_outbound(
            OutboundMessage(channel=CHANNEL, chat_id=event.conversation_id, text=text)
        )

    def _remember_route(self, event: ChatbotEvent) -> None:
        self._routes[event.conversation_id] = _Route(
            is_group=event.is_group,
            staff_id=None if event.is_group else event.sender_id,
            webhook=event.session_webhook,
            webhook_expires_at=event.session_webhook_expires_at,
        )

    async def _webhook_handler(self, request: web.Request) -> web.Response:
        """HTTP robot mode: DingTalk POSTs the chatbot message with timestamp + sign."""
        problem = verify_robot_request(
            timestamp=request.headers.get("timestamp"),
            sign=request.headers.get("sign"),
            secret=self._secret,
            window_seconds=self._settings.signature_window_seconds,
        )
        if problem is not None:
            log.warning("dingtalk.webhook_rejected", reason=problem, remote=request.remote)
            return web.json_response({"error": problem}, status=401)
        try:
            data = await request.json()
        except ValueError:
            return web.json_response({"error": "body is not JSON"}, status=400)
        if not isinstance(data, dict):
            return web.json_response({"error": "body is not a JSON object"}, status=400)
        # Acknowledge now; the agent's work happens after the response is sent.
        self._spawn(self._receive(data), name="dingtalk-webhook-receive")
        return web.json_response({})

    # ------------------------------------------------------------------- cards

    async def _on_card_click(self, data: dict[str, Any]) -> dict[str, Any]:
        """A card button click; the returned dict is the ack's ``response`` (new card)."""
        click = parse_card_callback(data)
        if click.confirmation_id is None:
            log.info("dingtalk.card_click_foreign", out_track_id=click.out_track_id)
            return {}
        if click.decision is None or not click.user_id:
            log.warning("dingtalk.card_click_unreadable", confirmation_id=click.confirmation_id)
            return {}
        result = await self._service.decide(
            click.confirmation_id, click.decision, actor=click.user_id, via="card"
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
                    text=f"{click.user_id}: {result.message}",
                )
            )
        return response

    # -------------------------------------------------------------------- send

    async def send(self, msg: OutboundMessage) -> None:
        try:
            if msg.kind is OutboundKind.CONFIRMATION and msg.confirmation is not None:
                await self._send_confirmation(msg, msg.confirmation)
            elif msg.kind is OutboundKind.CONFIRMATION_UPDATE and msg.confirmation is not None:
                await self._send_update(msg, msg.confirmation)
            else:
                await self._send_text(msg.chat_id, msg.text, msg.metadata, None)
        except DingTalkApiError as exc:
            entry = {
                "at": time.time(),
                "chat_id": msg.chat_id,
                "kind": str(msg.kind),
                "text": msg.text[:500],
                "confirmation_id": msg.confirmation.id if msg.confirmation else None,
                "error": str(exc),
            }
            self._failed.append(entry)
            log.error(
                "dingtalk.send_failed", chat_id=msg.chat_id, kind=str(msg.kind), error=str(exc)
            )
            # Retried with backoff already (per call, in DingTalkApi): the manager must
            # not multiply the attempts.
            raise ChannelSendError(str(exc), retryable=False) from exc

    def _route_for(
        self, chat_id: str, metadata: Mapping[str, Any], conf: Confirmation | None
    ) -> _Route:
        known = self._routes.get(chat_id)
        webhook = metadata.get("session_webhook")
        if webhook:
            ctype = metadata.get("conversation_type")
            is_group = ctype == "2" if ctype else (known.is_group if known else False)
            expires = metadata.get("session_webhook_expires_at")
            route = _Route(
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
                return _Route(
                    route.is_group, route.staff_id, known.webhook, known.webhook_expires_at
                )
            return route
        if known is not None:
            return known
        if conf is not None:
            return _Route(
                is_group=conf.is_group,
                staff_id=None if conf.is_group else conf.requester,
                webhook=None,
                webhook_expires_at=None,
            )
        return _Route(is_group=False, staff_id=None, webhook=None, webhook_expires_at=None)

    @staticmethod
    def _webhook_usable(route: _Route) -> bool:
        if not route.webhook or route.webhook_expires_at is None:
            return False
        return route.webhook_expires_at - time.time() > WEBHOOK_EXPIRY_MARGIN_SECONDS

    async def _send_text(
        self,
        chat_id: str,
        text: str,
        metadata: Mapping[str, Any],
        conf: Confirmation | None,
        *,
        markdown_title: str | None = None,
    ) -> None:
        route = self._route_for(chat_id, metadata, conf)
        if markdown_title is not None:
            # DingTalk markdown joins single newlines; a blank line keeps them apart.
            body = "\n\n".join(line for line in text.splitlines() if line.strip())
            hook_payload: dict[str, Any] = {
                "msgtype": "markdown",
                "markdown": {"title": markdown_title, "text": body},
            }
            msg_key, msg_param = "sampleMarkdown", {"title": markdown_title, "text": body}
        else:
            hook_payload = {"msgtype": "text", "text": {"content": text}}
            msg_key, msg_param = "sampleText", {"content": text}
        if self._webhook_usable(route):
            assert route.webhook is not None
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

    async def _send_confirmation(self, msg: OutboundMessage, conf: Confirmation) -> None:
        if self._settings.mode == "http":
            # Card clicks arrive on the stream connection, which HTTP mode does not open:
            # a card would have dead buttons. The text prompt always works.
            await self._send_text(
                msg.chat_id, msg.text, msg.metadata, conf, markdown_title=f"需要确认 [{conf.id}]"
            )
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
            await self._send_text(
                msg.chat_id, msg.text, msg.metadata, conf, markdown_title=f"需要确认 [{conf.id}]"
            )
            return
        await self._service.set_prompt_ref(conf.id, CARD_REF, track)
        # The typed reply always works, also where cards do not render.
        await self._send_text(msg.chat_id, texts.reply_hint(conf), msg.metadata, conf)

    async def _send_update(self, msg: OutboundMessage, conf: Confirmation) -> None:
        track = conf.prompt_refs.get(CARD_REF)
        card_updated = False
        if track:
            try:
                await self._api.update_card(track, card_params(conf))
                card_updated = True
            except DingTalkApiError as exc:
                log.warning("dingtalk.card_update_failed", confirmation_id=conf.id, error=str(exc))
        if card_updated and conf.decided_via == "card" and conf.status is not Status.PENDING:
            # The clicker's ack already showed the result on the card: no extra message.
            return
        await self._send_text(msg.chat_id, msg.text, msg.metadata, conf)

    # --------------------------------------------------------------------- admin

    async def _failed_handler(self, request: web.Request) -> web.Response:
        if self._admin_token is not None:
            given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(given.encode(), self._admin_token.encode()):
                return web.json_response({"error": "admin token required"}, status=401)
        return web.json_response({"channel": CHANNEL, "failed": list(self._failed)})
