"""The Feishu (Lark) channel: receive over the long connection or a webhook, send through
the IM API, confirmation prompts as interactive cards whose buttons decide.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections.abc import Coroutine
from typing import Any, ClassVar

import structlog
from aiohttp import web
from cachetools import TTLCache
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_never,
)

from channels.base import Channel, ChannelContext, ChannelSendError
from channels.feishu import render
from channels.feishu.api import ApiResult, FeishuApi
from channels.feishu.inbound import (
    CHANNEL,
    CardAction,
    FeishuMessage,
    ReceiveRules,
    Verdict,
    to_inbound,
)
from channels.feishu.outbound import Outbox, backoff
from channels.feishu.webhook import WebhookReceiver
from channels.feishu.ws import LongConnection
from config.settings import ConfigError
from gateway import texts
from gateway.bus import OutboundKind, OutboundMessage
from gateway.confirm.model import Confirmation, Decision
from gateway.confirm.service import DecideOutcome

log = structlog.get_logger(__name__)

# Feishu shows an error to the clicker when a card callback is not answered within 3 s.
CARD_BUDGET_SECONDS = 2.5
# Where the prompt card's message id is kept on the confirmation record.
PROMPT_REF = "feishu_message_id"
FAILED_PATH = "/api/channels/feishu/failed"
# Feishu redelivers unacknowledged events for up to ~7 h: remember ids a little longer.
DEDUPE_SECONDS = 8 * 3600


class _NotYet(Exception):
    """The bot identity call did not succeed (yet)."""


_TOASTS = {
    DecideOutcome.DECIDED: "success",
    DecideOutcome.ALREADY_DECIDED: "info",
    DecideOutcome.EXPIRED: "warning",
    DecideOutcome.FORBIDDEN: "warning",
    DecideOutcome.NOT_FOUND: "error",
}


class FeishuChannel(Channel):
    """Feishu / Lark bot. Built by ``create_channel`` only when the channel is enabled."""

    name: ClassVar[str] = CHANNEL

    def __init__(self, *, context: ChannelContext) -> None:
        settings = context.settings.channels.feishu
        self._settings = settings
        self._bus = context.bus
        self._service = context.confirmations
        admin = context.settings.admin.token
        # An empty token is no token (as in the admin API).
        self._admin_token = (admin.get_secret_value() if admin else None) or None
        secret = settings.app_secret.get_secret_value() if settings.app_secret else ""
        self._app_id = settings.app_id or ""
        self._app_secret = secret
        self.api = FeishuApi(
            app_id=self._app_id,
            app_secret=secret,
            domain=settings.domain,
            timeout=settings.request_timeout_seconds,
        )
        self.outbox = Outbox(
            api=self.api,
            max_attempts=settings.retry_attempts,
            backoff_initial=settings.retry_base_seconds,
            backoff_max=settings.retry_max_seconds,
        )
        self.rules = ReceiveRules(
            allow_from=tuple(settings.allow_from),
            group_policy=settings.group_policy,
            max_message_age_seconds=settings.max_message_age_seconds,
        )
        self.bot_open_id: str | None = None
        self._seen: TTLCache[str, bool] = TTLCache(maxsize=100_000, ttl=DEDUPE_SECONDS)
        self._refused: TTLCache[str, bool] = TTLCache(maxsize=10_000, ttl=24 * 3600)
        # Confirmation id -> prompt card message id, for updates racing the stored ref.
        self._cards: TTLCache[str, str] = TTLCache(maxsize=10_000, ttl=24 * 3600)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ws: LongConnection | None = None
        self._webhook: WebhookReceiver | None = None
        self._started = False
        if settings.mode == "webhook":
            encrypt = settings.encrypt_key.get_secret_value() if settings.encrypt_key else None
            token = (
                settings.verification_token.get_secret_value()
                if settings.verification_token
                else None
            )
            self._webhook = WebhookReceiver(
                encrypt_key=encrypt,
                verification_token=token,
                replay_window_seconds=settings.replay_window_seconds,
                on_message=self._accept,
                on_card=self.handle_card_action,
            )
        if context.http is not None:
            # Routes go on before the server starts (aiohttp freezes the router then).
            context.http.router.add_get(FAILED_PATH, self._failed_route)
            if self._webhook is not None:
                paths = dict.fromkeys((settings.webhook_path, settings.card_webhook_path))
                for path in paths:
                    context.http.router.add_post(path, self._webhook.handle)
        elif self._webhook is not None:
            raise ConfigError(
                "channels.feishu mode = webhook needs the gateway's HTTP server, which is off"
            )

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if not await self._fetch_bot_identity(attempts=3):
            # Groups in "mention" mode need the bot's open_id; keep trying in the background.
            self._spawn(self._fetch_bot_identity(attempts=None), name="feishu-bot-identity")
        if self._settings.mode == "ws":
            self._ws = LongConnection(
                app_id=self._app_id,
                app_secret=self._app_secret,
                domain=self._settings.domain,
                on_message=self._accept_from_thread,
                on_card=self._card_from_thread,
                backoff_initial=self._settings.reconnect_base_seconds,
                backoff_max=self._settings.reconnect_max_seconds,
                connect_timeout=self._settings.request_timeout_seconds,
                stop_timeout=self._settings.stop_timeout_seconds,
            )
            self._ws.start()
        self._started = True
        log.info("feishu.started", mode=self._settings.mode, bot_open_id=self.bot_open_id)

    async def stop(self) -> None:
        self._started = False
        if self._ws is not None:
            await self._ws.stop()
            self._ws = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        log.info("feishu.stopped")

    @property
    def ready(self) -> bool:
        if not self._started:
            return False
        return self._ws.connected if self._ws is not None else True

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ready": self.ready,
            "mode": self._settings.mode,
            "bot_open_id": self.bot_open_id,
            "connections": self._ws.connections if self._ws is not None else None,
            "failed": len(self.outbox.failed),
        }

    def _spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("feishu.task_failed", task=task.get_name(), exc_info=task.exception())

    async def _fetch_bot_identity(self, *, attempts: int | None) -> bool:
        """The bot's open_id from ``/open-apis/bot/v3/info``; ``attempts=None``: until it works."""
        result = ApiResult(0, -1, "not tried")
        with contextlib.suppress(_NotYet):
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(attempts) if attempts else stop_never,
                wait=backoff(0.5, 30),
                retry=retry_if_exception_type(_NotYet),
                reraise=True,
            ):
                with attempt:
                    result = await self.api.bot_info()
                    if not result.ok:
                        raise _NotYet
        bot = result.body.get("bot") if result.ok and isinstance(result.body, dict) else None
        if isinstance(bot, dict) and bot.get("open_id"):
            self.bot_open_id = str(bot["open_id"])
            return True
        log.error(
            "feishu.bot_identity_failed",
            status=result.status,
            code=result.code,
            error=result.msg,
            hint="check app_id/app_secret and that the app has the bot capability",
        )
        return False

    # ------------------------------------------------------------------ receiving

    def _accept_from_thread(self, msg: FeishuMessage) -> None:
        """Called on the long-connection thread: hand over to the gateway's loop."""
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._accept, msg)
        except RuntimeError:  # the gateway's loop is closed: we are shutting down
            log.warning("feishu.message_after_shutdown", message_id=msg.message_id)

    def _accept(self, msg: FeishuMessage) -> None:
        self._spawn(self._receive(msg), name=f"feishu-in-{msg.message_id}")

    async def _receive(self, msg: FeishuMessage) -> None:
        if msg.message_id:
            if msg.message_id in self._seen:
                # Delivery is at-least-once (redelivery after a late ack, a reconnect burst).
                log.info("feishu.duplicate_dropped", message_id=msg.message_id)
                return
            self._seen[msg.message_id] = True
        verdict, text = self.rules.judge(msg, bot_open_id=self.bot_open_id, now=time.time())
        if verdict is Verdict.ACCEPT and text is not None:
            await self._bus.publish_inbound(to_inbound(msg, text))
        elif verdict is Verdict.NOT_ALLOWED:
            if msg.sender_open_id not in self._refused:
                self._refused[msg.sender_open_id] = True
                log.warning(
                    "feishu.sender_refused",
                    open_id=msg.sender_open_id,
                    chat_id=msg.chat_id,
                    hint="add this open_id to channels.feishu.allow_from (or '*')",
                )
        elif verdict is Verdict.UNSUPPORTED:
            await self._bus.publish_outbound(
                OutboundMessage(
                    channel=CHANNEL,
                    chat_id=msg.chat_id,
                    text=texts.FEISHU_UNSUPPORTED_MESSAGE,
                    reply_to=msg.message_id,
                )
            )
        elif verdict is Verdict.TOO_OLD:
            log.info("feishu.too_old_skipped", message_id=msg.message_id, chat_id=msg.chat_id)
        else:
            log.debug("feishu.skipped", verdict=verdict.value, message_id=msg.message_id)

    # ------------------------------------------------------------------ card clicks

    def _card_from_thread(self, action: CardAction) -> dict[str, Any]:
        """Called on the long-connection thread; blocks it at most the callback budget."""
        loop = self._loop
        if loop is None:
            return render.callback_response(toast=texts.FEISHU_CARD_UNAVAILABLE, kind="error")
        try:
            future = asyncio.run_coroutine_threadsafe(self.handle_card_action(action), loop)
            return future.result(timeout=CARD_BUDGET_SECONDS + 0.3)
        except TimeoutError:
            return render.callback_response(toast=texts.FEISHU_CARD_WORKING, kind="info")
        except RuntimeError:  # the gateway's loop is closed
            return render.callback_response(toast=texts.FEISHU_CARD_UNAVAILABLE, kind="error")

    async def handle_card_action(self, action: CardAction) -> dict[str, Any]:
        """A button click: decide, answer with a toast and the card as it now is."""
        cid = action.value.get("confirmation_id")
        raw_decision = action.value.get("decision")
        if not isinstance(cid, str) or raw_decision not in {d.value for d in Decision}:
            log.warning("feishu.card_unknown_action", value=dict(action.value))
            return render.callback_response(toast=texts.FEISHU_CARD_UNKNOWN, kind="error")
        decide = self._spawn(
            self._service.decide(
                cid, Decision(raw_decision), actor=action.operator_open_id, via="card"
            ),
            name=f"feishu-decide-{cid}",
        )
        try:
            # shield: a slow store must not turn into a half-made decision.
            result = await asyncio.wait_for(asyncio.shield(decide), CARD_BUDGET_SECONDS)
        except TimeoutError:
            return render.callback_response(toast=texts.FEISHU_CARD_WORKING, kind="info")
        except Exception:  # the clicker gets an answer; the task logs the error
            return render.callback_response(toast=texts.FEISHU_CARD_UNAVAILABLE, kind="error")
        log.info(
            "feishu.card_decision",
            confirmation_id=cid,
            actor=action.operator_open_id,
            outcome=result.outcome.value,
        )
        conf = result.confirmation
        if conf is not None and action.open_message_id:
            self._cards[conf.id] = action.open_message_id
        # A refused click changes nothing, the card included.
        card = (
            render.confirmation_card(conf)
            if conf is not None and result.outcome is not DecideOutcome.FORBIDDEN
            else None
        )
        return render.callback_response(
            toast=result.message, kind=_TOASTS.get(result.outcome, "info"), card=card
        )

    # ------------------------------------------------------------------ sending

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

    # ------------------------------------------------------------------ admin

    async def _failed_route(self, request: web.Request) -> web.Response:
        # The same rule as the admin API: a bearer token when [admin] token is set.
        if self._admin_token is not None:
            scheme, _, given = request.headers.get("Authorization", "").partition(" ")
            ok = scheme.lower() == "bearer" and hmac.compare_digest(
                given.strip().encode(), self._admin_token.encode()
            )
            if not ok:
                return web.json_response(
                    {"error": "missing or wrong bearer token: send Authorization: Bearer ..."},
                    status=401,
                    headers={"WWW-Authenticate": 'Bearer realm="gateway"'},
                )
        return web.json_response({"failed": [f.to_dict() for f in self.outbox.failed]})
