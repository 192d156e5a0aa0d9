"""The Feishu (Lark) channel: receive over the long connection or a webhook, send through
the IM API, confirmation prompts as interactive cards whose buttons decide.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

import structlog

from channels.base import Channel, ChannelContext, follow_run_ends
from channels.feishu import render
from channels.feishu.api import FeishuApi, TokenError
from channels.feishu.inbound import (
    CHANNEL,
    CardAction,
    FeishuMessage,
    arrival,
    message_text,
    to_inbound,
)
from channels.feishu.outbound import Outbox
from channels.feishu.sender import FeishuSender
from channels.feishu.webhook import WebhookReceiver
from channels.feishu.ws import LongConnection
from channels.platform import DeadLetters, until_it_works
from channels.receive import ReceiveRules, Verdict
from config.checks import FEISHU_WEBHOOK_NEEDS_ENCRYPT_KEY
from config.settings import ConfigError
from gateway import texts
from gateway.bus import OutboundMessage
from gateway.confirm.model import Answer, DecideOutcome, Decision, GrantAsk
from gateway.confirm.views import undo_click
from gateway.runtime import BackgroundTasks
from gateway.texts.undo import UNDO_ASKED_TOAST, UNDO_NOT_OFFERED

log = structlog.get_logger(__name__)

# Feishu shows an error to the clicker when a card callback is not answered within 3 s.
CARD_BUDGET_SECONDS = 2.5


class _NotYet(Exception):
    """The bot identity call did not succeed (yet)."""


def _credentials_refused(exc: TokenError) -> str:
    return (
        f"Feishu refused channels.feishu.app_id / app_secret (code {exc.result.code}:"
        f" {exc.result.msg}): copy both from the app's Credentials page into"
        " GATEWAY_CHANNELS__FEISHU__APP_ID / GATEWAY_CHANNELS__FEISHU__APP_SECRET (for a"
        ' Lark app also set [channels.feishu] domain = "lark")'
    )


_TOASTS = {
    DecideOutcome.DECIDED: "success",
    DecideOutcome.VOTED: "success",
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
        secret = settings.app_secret.get_secret_value() if settings.app_secret else ""
        self._app_id = settings.app_id or ""
        self._app_secret = secret
        self.api = FeishuApi(
            app_id=self._app_id,
            app_secret=secret,
            domain=settings.domain,
            timeout=settings.request_timeout_seconds,
        )
        self.dead_letters = DeadLetters(channel=CHANNEL, size=settings.dead_letter_size)
        self.outbox = Outbox(
            api=self.api,
            dead_letters=self.dead_letters,
            max_attempts=settings.retry_attempts,
            backoff_initial=settings.retry_base_seconds,
            backoff_max=settings.retry_max_seconds,
        )
        self.sender = FeishuSender(
            outbox=self.outbox,
            confirmations=context.confirmations,
            approvers=settings.approvers,
            escalation_chat=settings.escalation_chat,
        )
        self.rules = ReceiveRules(
            channel=CHANNEL,
            allow_from=settings.allow_from,
            group_policy=settings.group_policy,
            max_message_age_seconds=settings.max_message_age_seconds,
        )
        self.bot_open_id: str | None = None
        self._tasks = BackgroundTasks(CHANNEL)
        self._ws: LongConnection | None = None
        self._webhook: WebhookReceiver | None = None
        self._started = False
        # While started: calls that end running here update their cards (channels/base.py).
        self._unfollow: Callable[[], None] = lambda: None
        # Why the API cannot be used right now (no token, no answer); None when it can.
        self._api_problem: str | None = None
        if settings.mode == "webhook":
            if not settings.encrypt_key:  # also a start-up problem (config/checks.py)
                raise ConfigError(FEISHU_WEBHOOK_NEEDS_ENCRYPT_KEY)
            token = (
                settings.verification_token.get_secret_value()
                if settings.verification_token
                else None
            )
            self._webhook = WebhookReceiver(
                encrypt_key=settings.encrypt_key.get_secret_value(),
                verification_token=token,
                replay_window_seconds=settings.replay_window_seconds,
                max_json_depth=context.settings.server.max_json_depth,
                on_message=self._accept,
                on_card=self.handle_card_action,
            )
        if context.http is not None:
            # Routes go on before the server starts (aiohttp freezes the router then).
            self.dead_letters.register(context.http)
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
        """Start receiving. Wrong credentials are a ConfigError; an unreachable API is not.

        When Feishu cannot be reached (network down, Feishu answering 5xx), the channel
        starts anyway, is not ready (``/readyz`` says why) and keeps trying on the one
        backoff policy; sends retry on their own, and go out once the API is back.
        A failed start stops what it started (the API client's connections too).
        """
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        try:
            await self._learn_identity()
        except _NotYet as exc:
            refused = exc.__cause__
            if isinstance(refused, TokenError) and refused.credentials_refused:
                raise ConfigError(_credentials_refused(refused)) from exc
            log.warning(
                "feishu.not_ready_at_start",
                reason=str(exc),
                hint="the channel starts anyway and keeps trying",
            )
            # Groups in "mention" mode need the bot's open_id; keep trying in the background.
            self._tasks.spawn(
                until_it_works(
                    self._learn_identity,
                    event="feishu.bot_identity_failed",
                    initial=self._settings.reconnect_base_seconds,
                    maximum=self._settings.reconnect_max_seconds,
                ),
                name="feishu-bot-identity",
            )
        if self._settings.mode == "ws":
            self._ws = LongConnection(
                app_id=self._app_id,
                app_secret=self._app_secret,
                domain=self._settings.domain,
                on_message=self._accept,
                on_card=self.handle_card_action,
                backoff_initial=self._settings.reconnect_base_seconds,
                backoff_max=self._settings.reconnect_max_seconds,
                connect_timeout=self._settings.request_timeout_seconds,
                stop_timeout=self._settings.stop_timeout_seconds,
            )
            await self._ws.start()
        self._unfollow = follow_run_ends(CHANNEL, self._service, self._bus)
        self._started = True
        log.info("feishu.started", mode=self._settings.mode, bot_open_id=self.bot_open_id)

    async def stop(self) -> None:
        self._started = False
        self._unfollow()
        if self._ws is not None:
            await self._ws.stop()
            self._ws = None
        await self._tasks.cancel()
        await self.api.aclose()
        log.info("feishu.stopped")

    @property
    def ready(self) -> bool:
        return self._not_ready_because() is None

    def _not_ready_because(self) -> str | None:
        if not self._started:
            return "not started"
        if self._api_problem is not None:
            return self._api_problem
        if self._ws is not None and not self._ws.connected:
            return "the long connection to Feishu is not open (see feishu.ws_connect_failed)"
        return None

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ready": self.ready,
            "reason": self._not_ready_because(),
            "mode": self._settings.mode,
            "bot_open_id": self.bot_open_id,
            "connections": self._ws.connections if self._ws is not None else None,
            "failed": len(self.dead_letters),
        }

    async def _learn_identity(self) -> None:
        """The bot's open_id from ``/open-apis/bot/v3/info``, or _NotYet saying why not."""
        try:
            result = await self.api.bot_info()
        except TokenError as exc:
            self._api_problem = f"Feishu API unavailable: {exc}"
            raise _NotYet(self._api_problem) from exc
        if result.status == 0 or result.status >= 500:
            self._api_problem = f"Feishu API unavailable: HTTP {result.status}: {result.msg}"
            raise _NotYet(self._api_problem)
        self._api_problem = None
        bot = result.body.get("bot") if result.ok and isinstance(result.body, dict) else None
        if not (isinstance(bot, dict) and bot.get("open_id")):
            raise _NotYet(
                f"bot info: HTTP {result.status}, code {result.code}: {result.msg} (check that"
                " the app has the bot capability)"
            )
        self.bot_open_id = str(bot["open_id"])

    # ------------------------------------------------------------------ receiving

    async def _accept(self, msg: FeishuMessage) -> None:
        """Receive ``msg``; returns once it is stored (or dropped by the rules).

        Both transports acknowledge Feishu when this returns, and answer an error when it
        raises (not stored: Feishu redelivers, also when no answer came within ~3 s).
        """
        # Its own task: a webhook request or a connection given up does not cancel a store
        # half-way through, and stop() still ends it.
        await asyncio.shield(
            self._tasks.spawn(self._receive(msg), name=f"feishu-in-{msg.message_id}")
        )

    async def _receive(self, msg: FeishuMessage) -> None:
        verdict = self.rules.judge(arrival(msg, bot_open_id=self.bot_open_id))
        if verdict is Verdict.REFUSED:
            await self._reply(msg, texts.NOT_ALLOWED)
        elif verdict is Verdict.ACCEPT:
            text = message_text(msg, bot_open_id=self.bot_open_id)
            if text is not None:
                await self._bus.publish_inbound(to_inbound(msg, text))
            elif not self._bus.is_duplicate(CHANNEL, msg.message_id):
                await self._reply(msg, texts.FEISHU_UNSUPPORTED_MESSAGE)

    async def _reply(self, msg: FeishuMessage, text: str) -> None:
        await self._bus.publish_outbound(
            OutboundMessage(
                channel=CHANNEL, chat_id=msg.chat_id, text=text, reply_to=msg.message_id
            )
        )

    # ------------------------------------------------------------------ card clicks

    async def handle_card_action(self, action: CardAction) -> dict[str, Any]:
        """A button click: decide, answer with a toast and the card as it now is."""
        cid = action.value.get("confirmation_id")
        if action.value.get(render.UNDO) is True and isinstance(cid, str):
            return await self._undo_click(cid, action)
        if action.value.get(render.AGAIN) is True and isinstance(cid, str):
            return await self._ask_again(cid, action)
        raw_decision = action.value.get("decision")
        # Values come from the card JSON as clicked: any JSON at all, not only strings.
        decision = next((d for d in Decision if d.value == raw_decision), None)
        if not isinstance(cid, str) or decision is None:
            log.warning("feishu.card_unknown_action", value=str(dict(action.value))[:200])
            return render.callback_response(toast=texts.FEISHU_CARD_UNKNOWN, kind="error")
        minutes = action.value.get(render.GRANT_MINUTES)
        decide = self._tasks.spawn(
            self._service.answer(
                Answer(
                    confirmation_id=cid,
                    decision=decision,
                    actor=action.operator_open_id,
                    via="card",
                    # Only a whole number from our own grant button asks for a grant.
                    grant=GrantAsk("session", minutes) if type(minutes) is int else None,
                )
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
            self.sender.remember_card(conf.id, action.open_message_id)
        # A refused click changes nothing, the card included.
        card = (
            render.confirmation_card(conf)
            if conf is not None and result.outcome is not DecideOutcome.FORBIDDEN
            else None
        )
        return render.callback_response(
            toast=result.message, kind=_TOASTS.get(result.outcome, "info"), card=card
        )

    async def _undo_click(self, cid: str, action: CardAction) -> dict[str, Any]:
        """撤销 Undo: said in the chat for the clicker, as if typed (views.undo_click)."""
        record = await self._service.get(cid)
        msg = undo_click(record, action.operator_open_id) if record is not None else None
        if msg is None or not action.operator_open_id:
            return render.callback_response(toast=UNDO_NOT_OFFERED, kind="error")
        await self._bus.publish_inbound(msg)
        return render.callback_response(toast=UNDO_ASKED_TOAST, kind="info")

    async def _ask_again(self, cid: str, action: CardAction) -> dict[str, Any]:
        """重新发起 / Ask again pressed on an ended card: the service judges (only the
        requester, once); the toast says what came of it, the new card follows in the chat."""
        again = self._tasks.spawn(
            self._service.ask_again(cid, actor=action.operator_open_id, via="card"),
            name=f"feishu-again-{cid}",
        )
        try:
            result = await asyncio.wait_for(asyncio.shield(again), CARD_BUDGET_SECONDS)
        except TimeoutError:
            return render.callback_response(toast=texts.FEISHU_CARD_WORKING, kind="info")
        except Exception:  # the clicker gets an answer; the task logs the error
            return render.callback_response(toast=texts.FEISHU_CARD_UNAVAILABLE, kind="error")
        log.info("feishu.card_again", confirmation_id=cid, done=result.done)
        if not result.done:
            return render.callback_response(toast=result.message, kind="warning")
        now = await self._service.get(cid)
        card = render.confirmation_card(now) if now is not None else None
        return render.callback_response(toast=result.message, kind="success", card=card)

    # ------------------------------------------------------------------ sending

    async def send(self, msg: OutboundMessage) -> None:
        await self.sender.send(msg)
