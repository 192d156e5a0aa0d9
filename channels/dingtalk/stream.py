"""DingTalk stream mode: the dingtalk-stream SDK client, on an ``SdkThread`` of its own.

Why a thread: the SDK's client owns its loop's behaviour (blocking ``requests`` for the
connection ticket, its own task accounting and reconnect sleeps). On a private loop any
stall there stays away from the gateway's loop, and the gateway's own work (the bus, the
confirmation service, our aiohttp sends) never runs on the SDK's loop. They meet in two
places only:

* a chatbot message is handed to the gateway loop and acknowledged once it is stored,
  before the agent works (DingTalk redelivers unacknowledged messages);
* a card click is decided on the gateway loop while the SDK waits (bounded) for the
  result, because the ack itself carries the updated card.

Reconnecting is the SDK's (``start()`` loops until cancelled), with its delay taken from
the gateway's one backoff policy; should ``start()`` itself crash, the same policy
restarts it.

This module imports ``dingtalk_stream``; only ``channels.dingtalk.channel`` imports it,
and only when the channel is enabled in stream mode.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import dingtalk_stream
import structlog
from dingtalk_stream import card_replier as _sdk_card_replier
from dingtalk_stream import chatbot as _sdk_chatbot
from dingtalk_stream import stream as _sdk_stream
from dingtalk_stream import utils as _sdk_utils
from tenacity import AsyncRetrying, RetryCallState
from tenacity.wait import wait_base

from channels.dingtalk.cards import CardClick, parse_card_callback
from channels.dingtalk.inbound import ChatbotEvent, parse_chatbot_message
from channels.payloads import MalformedEvent
from channels.platform import SdkThread, until_it_works
from gateway.runtime import ServiceUnavailable, backoff

log = structlog.get_logger(__name__)

OPEN_CONNECTION_PATH = "/v1.0/gateway/connections/open"

MessageSink = Callable[[ChatbotEvent], Coroutine[Any, Any, None]]
CardSink = Callable[[CardClick], Coroutine[Any, Any, dict[str, Any]]]


def configure_sdk_endpoint(endpoint: str) -> None:
    """Point the SDK at ``endpoint`` (default https://api.dingtalk.com).

    The SDK reads DINGTALK_OPENAPI_ENDPOINT from the environment at import time into
    module globals, and ``OPEN_CONNECTION_API`` is a class attribute computed at class
    definition and read as ``DingTalkStreamClient.OPEN_CONNECTION_API`` (not via self),
    so both must be overwritten here. They are the SDK's globals, not ours: one
    DingTalk channel per process is supported.
    """
    endpoint = endpoint.rstrip("/")
    for module in (_sdk_stream, _sdk_utils, _sdk_chatbot, _sdk_card_replier):
        module.DINGTALK_OPENAPI_ENDPOINT = endpoint
    dingtalk_stream.DingTalkStreamClient.OPEN_CONNECTION_API = endpoint + OPEN_CONNECTION_PATH


class _Client(dingtalk_stream.DingTalkStreamClient):  # type: ignore[misc]
    """The SDK client, reconnecting on the gateway's backoff policy."""

    def __init__(self, *args: Any, reconnect_wait: wait_base, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._reconnect_wait = reconnect_wait

    def _reconnect_delay(self, attempt: int) -> float:
        # 0.24.4b1 asks this before each reconnect (attempt 0 first): the policy's wait
        # for that attempt, instead of the SDK's own exponential schedule.
        state = RetryCallState(AsyncRetrying(), None, (), {})
        state.attempt_number = attempt + 1
        return float(self._reconnect_wait(state))

    def open_connection(self) -> Any:
        result = super().open_connection()
        log.info("dingtalk.stream_open", ok=bool(result))  # never the secret
        return result


class _ChatbotHandler(dingtalk_stream.ChatbotHandler):  # type: ignore[misc]
    def __init__(self, runner: StreamRunner) -> None:
        super().__init__()
        self._runner = runner

    async def process(self, callback: Any) -> tuple[int, str]:
        try:
            event = parse_chatbot_message(callback.data)
        except MalformedEvent as exc:
            # Acknowledged: a redelivery would be as malformed (the SDK caches only OK
            # acks, so anything else would bring it back to this line again).
            log.warning("dingtalk.malformed_event", error=str(exc))
            return dingtalk_stream.AckMessage.STATUS_OK, "malformed, dropped"
        # Ack once stored (invariant 9): the agent works on the gateway's loop after it.
        if not await self._runner.hand_over(event):
            return dingtalk_stream.AckMessage.STATUS_SYSTEM_EXCEPTION, "not stored"
        return dingtalk_stream.AckMessage.STATUS_OK, "OK"


class _CardHandler(dingtalk_stream.CallbackHandler):  # type: ignore[misc]
    def __init__(self, runner: StreamRunner) -> None:
        super().__init__()
        self._runner = runner

    async def process(self, callback: Any) -> tuple[int, dict[str, Any]]:
        try:
            click = parse_card_callback(callback.data)
        except MalformedEvent as exc:  # acknowledged without a card, as above
            log.warning("dingtalk.malformed_event", error=str(exc))
            return dingtalk_stream.AckMessage.STATUS_OK, {}
        response = await self._runner.decide_click(click)
        return dingtalk_stream.AckMessage.STATUS_OK, response


class StreamRunner:
    """Runs one ``DingTalkStreamClient`` on an ``SdkThread``."""

    def __init__(
        self,
        *,
        client_id: str,
        client_secret: str,
        endpoint: str,
        on_message: MessageSink,
        on_card: CardSink,
        reconnect_base_seconds: float,
        reconnect_max_seconds: float,
        http_timeout_seconds: float,
        card_ack_timeout_seconds: float,
    ) -> None:
        self._client_id = client_id
        self._client_secret = client_secret
        self._endpoint = endpoint
        self._on_message = on_message
        self._on_card = on_card
        self._reconnect_base = reconnect_base_seconds
        self._reconnect_max = reconnect_max_seconds
        self._http_timeout = http_timeout_seconds
        self._card_ack_timeout = card_ack_timeout_seconds
        self._client: _Client | None = None
        self.thread = SdkThread(name="dingtalk-stream")

    # ------------------------------------------------------------ gateway side

    async def start(self) -> None:
        configure_sdk_endpoint(self._endpoint)
        await self.thread.start(self._main)

    @property
    def connected(self) -> bool:
        client = self._client
        return bool(self.thread.alive and client is not None and client.websocket is not None)

    async def stop(self, within: float) -> bool:
        """Stop the client and its thread; True when it ended within ``within`` seconds."""
        return await self.thread.stop(within)

    # ------------------------------------------------------------- SDK thread

    def _build_client(self) -> _Client:
        client = _Client(
            dingtalk_stream.Credential(self._client_id, self._client_secret),
            # Our logger, so the SDK does not attach its own stderr handler at INFO.
            logger=logging.getLogger("dingtalk_stream.client"),
            # Bounded close handshake, so stop() cannot hang on a silent server.
            websocket_connect_options={"close_timeout": 2, "open_timeout": self._http_timeout},
            reconnect_wait=backoff(initial=self._reconnect_base, maximum=self._reconnect_max),
        )
        # 0.24.4b1 reads this as self.X: the per-instance value overrides its 10 s default.
        client.HTTP_TIMEOUT_SECONDS = self._http_timeout
        client.register_callback_handler(
            dingtalk_stream.ChatbotMessage.TOPIC, _ChatbotHandler(self)
        )
        client.register_callback_handler(
            dingtalk_stream.CallbackHandler.TOPIC_CARD_CALLBACK, _CardHandler(self)
        )
        return client

    async def _main(self) -> None:
        client = self._build_client()
        self._client = client

        # start() reconnects by itself and returns only when stopped; an SDK bug that
        # ends it must not end stream mode for good.
        await until_it_works(
            client.start,
            event="dingtalk.stream_client_crashed",
            initial=self._reconnect_base,
            maximum=self._reconnect_max,
        )

    async def hand_over(self, event: ChatbotEvent) -> bool:
        """Called on the SDK loop: receive a chatbot message on the gateway loop.

        True once it is stored (or dropped by the receive rules); False when it was not,
        and DingTalk is to redeliver it.
        """
        try:
            future = self.thread.run_on_gateway(self._on_message(event))
        except RuntimeError:  # the gateway is shutting down
            log.warning("dingtalk.message_after_shutdown", msg_id=event.msg_id)
            return False
        try:
            await asyncio.wrap_future(future)
        except ServiceUnavailable:  # Redis down: one line, by the receiving task
            return False
        except Exception:  # not stored (logged here): the failure ack makes DingTalk resend
            log.exception("dingtalk.message_not_stored", msg_id=event.msg_id)
            return False
        return True

    async def decide_click(self, click: CardClick) -> dict[str, Any]:
        """Called on the SDK loop: decide a card click on the gateway loop, bounded."""
        try:
            future = self.thread.run_on_gateway(self._on_card(click))
        except RuntimeError:  # the gateway is shutting down
            return {}
        wrapped = asyncio.wrap_future(future)
        # asyncio.wait does not cancel on timeout: a decision already under way must
        # finish on the gateway loop even when the ack has to go without the new card.
        done, _ = await asyncio.wait({wrapped}, timeout=self._card_ack_timeout)
        if not done:
            log.warning("dingtalk.card_ack_without_update", timeout=self._card_ack_timeout)
            return {}
        try:
            return wrapped.result()
        except Exception:  # the ack must still go out; the error is logged
            log.exception("dingtalk.card_callback_failed")
            return {}
