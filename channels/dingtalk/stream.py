"""DingTalk stream mode: the dingtalk-stream SDK client, run in a thread of its own.

Why a thread: the SDK's client owns its loop's behaviour (blocking ``requests`` for
the connection ticket, its own task accounting and reconnect sleeps). Running it on a
private loop keeps any stall there away from the gateway's loop, and the gateway's
own work (the bus, the confirmation service, our aiohttp sends) never runs on the
SDK's loop. The two meet in two places only:

* a chatbot message is handed to the gateway loop with ``call_soon_threadsafe`` and
  acknowledged at once, before the agent works (DingTalk redelivers unacked messages);
* a card click is decided on the gateway loop while the SDK waits (bounded) for the
  result, because the ack itself carries the updated card.

This module imports ``dingtalk_stream``; only ``channels.dingtalk.channel`` imports
this module, and only when the channel is enabled in stream mode.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import dingtalk_stream
import structlog
from dingtalk_stream import card_replier as _sdk_card_replier
from dingtalk_stream import chatbot as _sdk_chatbot
from dingtalk_stream import stream as _sdk_stream
from dingtalk_stream import utils as _sdk_utils

log = structlog.get_logger(__name__)

OPEN_CONNECTION_PATH = "/v1.0/gateway/connections/open"

MessageSink = Callable[[dict[str, Any]], None]
CardSink = Callable[[dict[str, Any]], Coroutine[Any, Any, dict[str, Any]]]


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
    """The SDK client with a log line per connection attempt (never the secret)."""

    def open_connection(self) -> Any:
        result = super().open_connection()
        log.info("dingtalk.stream_open", ok=bool(result))
        return result


class _ChatbotHandler(dingtalk_stream.ChatbotHandler):  # type: ignore[misc]
    def __init__(self, runner: StreamRunner) -> None:
        super().__init__()
        self._runner = runner

    async def process(self, callback: Any) -> tuple[int, str]:
        # Ack first: the gateway processes the message on its own loop.
        self._runner.hand_over(callback.data)
        return dingtalk_stream.AckMessage.STATUS_OK, "OK"


class _CardHandler(dingtalk_stream.CallbackHandler):  # type: ignore[misc]
    def __init__(self, runner: StreamRunner) -> None:
        super().__init__()
        self._runner = runner

    async def process(self, callback: Any) -> tuple[int, dict[str, Any]]:
        response = await self._runner.decide_click(callback.data)
        return dingtalk_stream.AckMessage.STATUS_OK, response


class StreamRunner:
    """Runs one ``DingTalkStreamClient`` on a private loop in a daemon thread."""

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
        self._gateway_loop: asyncio.AbstractEventLoop | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: _Client | None = None
        self._main_task: asyncio.Task[None] | None = None
        self._stopping = threading.Event()
        self._finished: asyncio.Future[None] | None = None

    # ------------------------------------------------------------ gateway side

    async def start(self) -> None:
        self._gateway_loop = asyncio.get_running_loop()
        self._finished = self._gateway_loop.create_future()
        configure_sdk_endpoint(self._endpoint)
        self._thread = threading.Thread(target=self._run, name="dingtalk-stream", daemon=True)
        self._thread.start()

    @property
    def connected(self) -> bool:
        client = self._client
        thread = self._thread
        return bool(
            thread is not None and thread.is_alive() and client and client.websocket is not None
        )

    async def stop(self, within: float) -> bool:
        """Stop the client and its thread; True when it ended within ``within`` seconds."""
        self._stopping.set()
        finished = self._finished
        loop = self._loop
        if finished is None:
            return True
        if loop is not None and not loop.is_closed():
            # RuntimeError: the private loop closed between the check and the call.
            with contextlib.suppress(RuntimeError):
                asyncio.run_coroutine_threadsafe(self._stop_client(within / 2), loop)
        try:
            await asyncio.wait_for(asyncio.shield(finished), within)
        except TimeoutError:
            log.warning("dingtalk.stream_stop_timeout", within=within)
            return False
        return True

    # ------------------------------------------------------------- SDK thread

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            self._main_task = loop.create_task(self._main())
            loop.run_until_complete(self._main_task)
        except asyncio.CancelledError:
            log.info("dingtalk.stream_cancelled")  # stop() had to cancel a stuck start()
        except BaseException:  # the thread must report its end, whatever ends it
            log.exception("dingtalk.stream_thread_failed")
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()
                self._signal_finished()

    def _signal_finished(self) -> None:
        gateway_loop, finished = self._gateway_loop, self._finished
        if gateway_loop is None or finished is None or gateway_loop.is_closed():
            return

        def _done() -> None:
            if not finished.done():
                finished.set_result(None)

        # RuntimeError: the gateway loop is already closed, so nobody is waiting.
        with contextlib.suppress(RuntimeError):
            gateway_loop.call_soon_threadsafe(_done)

    def _build_client(self) -> _Client:
        client = _Client(
            dingtalk_stream.Credential(self._client_id, self._client_secret),
            # Our logger, so the SDK does not attach its own stderr handler at INFO.
            logger=logging.getLogger("dingtalk_stream.client"),
            # Bounded close handshake, so stop() cannot hang on a silent server.
            websocket_connect_options={"close_timeout": 2, "open_timeout": self._http_timeout},
        )
        # 0.24.4b1 reads these as self.X, so per-instance values override its defaults
        # (1 s .. 60 s exponential, 10 s HTTP timeout) without touching the class.
        client.RECONNECT_BASE_DELAY_SECONDS = self._reconnect_base
        client.RECONNECT_MAX_DELAY_SECONDS = self._reconnect_max
        client.RECONNECT_JITTER_SECONDS = min(1.0, self._reconnect_base)
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
        delay = self._reconnect_base
        while not self._stopping.is_set():
            try:
                # Returns only after stop(); reconnects with backoff inside.
                await client.start()
            except asyncio.CancelledError:
                raise
            except Exception:  # an SDK bug must not end stream mode for good
                log.exception("dingtalk.stream_client_crashed", retry_in=delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._reconnect_max)
            else:
                delay = self._reconnect_base

    async def _stop_client(self, grace: float) -> None:
        client, task = self._client, self._main_task
        if client is not None:
            try:
                await asyncio.wait_for(client.stop(), grace)
            except Exception:  # incl. TimeoutError; cancelling the task below still ends it
                log.warning("dingtalk.stream_stop_unclean")
        if task is not None and not task.done():
            done, _ = await asyncio.wait({task}, timeout=grace)
            if not done:
                # start() is stuck (e.g. waiting on the connection POST): cancel it.
                task.cancel()

    def hand_over(self, data: dict[str, Any]) -> None:
        """Called on the SDK loop: pass a chatbot message to the gateway loop."""
        loop = self._gateway_loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._on_message, data)

    async def decide_click(self, data: dict[str, Any]) -> dict[str, Any]:
        """Called on the SDK loop: decide a card click on the gateway loop, bounded."""
        loop = self._gateway_loop
        if loop is None or loop.is_closed():
            return {}
        future: concurrent.futures.Future[dict[str, Any]] = asyncio.run_coroutine_threadsafe(
            self._on_card(data), loop
        )
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
