"""The Feishu long connection: lark-oapi's ws client, run on the gateway's own loop.

What lark-oapi 1.7.5's ``lark.ws.Client`` does that a daemon cannot live with, and what
this module does instead (the frame protocol, chunk reassembly and ping frames stay the
SDK's):

* ``start()`` runs on a loop captured at import (``lark_oapi.ws.client.loop``), blocks
  forever and has no ``stop()`` (PR #128); several clients race on that loop (#119).
  ``start()`` is never called here. ``_connect`` and ``_receive_message_loop`` — the only
  other users of the module loop — are replaced by versions that use the running loop,
  so the module global is never touched.
* Endpoint discovery is a blocking ``requests.post`` with no timeout (#169: a hung
  reconnect leaves the bot silent for days). Here it is an aiohttp POST with a timeout,
  cancellable on stop. With that replaced nothing on the receive path blocks, so the
  client runs on the gateway's loop: no thread of its own, and no hop to another thread
  and back for every event (bench/ingest_nanobot.py; it was most of an event's CPU).
* ``_connect`` returns early with its lock still held when already connected. The
  replacement holds the lock in ``async with``.
* On a lost connection the SDK reconnects on its own schedule (``ReconnectInterval``
  defaults to 120 s). Here the SDK's reconnect is off and a supervisor reconnects on the
  gateway's one backoff policy, starting afresh after each good connection.
* ``_handle_data_frame`` hands the event to the SDK's synchronous dispatcher and acks
  when it returns; an event type nobody registered is answered with code 500, so Feishu
  sends it again. Here the frame's JSON goes to ``LongConnection._event``, which reads
  it (``channels.feishu.inbound``) and is awaited before the ack: a message is
  acknowledged only once it is stored (invariant 9), a card click with its answer, other
  event types at once. ``type=card`` frames are dispatched too; 1.7.5 drops them without
  dispatch or ack (#126; Feishu then shows error 200340 to the clicker).
* The SDK's ``_ping_loop`` logs through the deprecated ``Logger.warn`` and never ends;
  our ping loop stops with the connection.

Stopping: ``stop()`` cancels the supervisor, which closes the socket (bounded) on its way
out and cancels the frames in flight (those are not acknowledged: Feishu redelivers them).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlparse

import aiohttp
import structlog
import websockets
from lark_oapi.core.enum import LogLevel
from lark_oapi.core.json import JSON
from lark_oapi.ws import client as ws_client
from lark_oapi.ws.const import (
    GEN_ENDPOINT_URI,
    HEADER_BIZ_RT,
    HEADER_MESSAGE_ID,
    HEADER_SEQ,
    HEADER_SUM,
    HEADER_TYPE,
    INTERNAL_ERROR,
    OK,
    SYSTEM_BUSY,
)
from lark_oapi.ws.enum import MessageType
from lark_oapi.ws.exception import ClientException, ServerException
from lark_oapi.ws.model import EndpointResp
from websockets.exceptions import ConnectionClosedOK, InvalidHandshake

from channels.feishu.api import resolve_domain
from channels.feishu.inbound import (
    CardAction,
    MessageSink,
    card_action_from_event,
    message_from_event,
)
from channels.payloads import MalformedEvent
from channels.platform import until_it_works
from gateway.http.jsonapi import DEFAULT_MAX_JSON_DEPTH, JsonInputError, parse_json
from gateway.runtime import BackgroundTasks

log = structlog.get_logger(__name__)

# An event's JSON -> what to answer Feishu with (None: a bare acknowledgement).
EventHandler = Callable[[Mapping[str, Any]], Awaitable[Any]]
CardHandler = Callable[[CardAction], Awaitable[dict[str, Any]]]
# Frames a handler is dispatched for; others (ping, pong) are not data.
_DISPATCHED = frozenset({MessageType.EVENT.value, MessageType.CARD.value})


def _frame_event(payload: bytes) -> Mapping[str, Any] | None:
    """A DATA frame's event; None (logged) when it is not a JSON object: acknowledged, as a
    redelivery would be as malformed."""
    try:
        event = parse_json(payload, max_depth=DEFAULT_MAX_JSON_DEPTH)
    except JsonInputError as exc:
        log.warning("feishu.malformed_event", error=f"frame payload: {exc}")
        return None
    if not isinstance(event, dict):
        log.warning("feishu.malformed_event", error="frame payload: not a JSON object")
        return None
    return event


class FeishuWsClient(ws_client.Client):  # type: ignore[misc]
    """``lark.ws.Client`` with the daemon-hostile parts replaced (see the module docstring)."""

    def __init__(
        self,
        *,
        app_id: str,
        app_secret: str,
        domain: str,
        on_event: EventHandler,
        connect_timeout: float,
    ) -> None:
        super().__init__(
            app_id,
            app_secret,
            log_level=LogLevel.WARNING,
            domain=resolve_domain(domain),
            auto_reconnect=False,
        )
        self._connect_timeout = connect_timeout
        self._conn: Any = None  # set by the SDK's constructor too; typed for mypy
        # This connection's receive loop and the frames it handles.
        self._tasks = BackgroundTasks("feishu.ws")
        self.lost = asyncio.Event()
        self._on_event = on_event

    async def _discover(self) -> str:
        """``POST /callback/ws/endpoint``: the socket URL and the server's timing config."""
        timeout = aiohttp.ClientTimeout(total=self._connect_timeout)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(
                self._domain + GEN_ENDPOINT_URI,
                json={"AppID": self._app_id, "AppSecret": self._app_secret},
                headers={"locale": "zh"},
            ) as resp,
        ):
            raw = await resp.text()
            if resp.status != 200:
                raise ServerException(resp.status, "endpoint discovery failed")
        answer = JSON.unmarshal(raw, EndpointResp)
        if answer.code in (SYSTEM_BUSY, INTERNAL_ERROR):
            raise ServerException(answer.code, answer.msg or "system busy")
        if answer.code != OK or answer.data is None or not answer.data.URL:
            # Wrong app id / secret, app not allowed to use the long connection, ...
            raise ClientException(answer.code, answer.msg or "no endpoint")
        if answer.data.ClientConfig is not None:
            self._configure(answer.data.ClientConfig)
        return str(answer.data.URL)

    async def _connect(self) -> None:
        async with self._lock:
            if self._conn is not None:
                return
            url = ws_client.build_connection_url(await self._discover(), self._connection_host)
            query = parse_qs(urlparse(url).query)
            try:
                conn = await websockets.connect(
                    url,
                    open_timeout=self._connect_timeout,
                    **ws_client._ws_connect_kwargs(self._connection_headers),
                )
            except InvalidHandshake as exc:
                ws_client._parse_ws_conn_exception(exc)
                raise
            self._conn = conn
            self._conn_url = url
            self._conn_id = query["device_id"][0]
            self._service_id = query["service_id"][0]
            self.lost = asyncio.Event()
            self._tasks.spawn(self._receive_message_loop(), name="feishu-ws-receive")

    async def _receive_message_loop(self) -> None:
        conn = self._conn
        try:
            while conn is not None:
                frame = await conn.recv()
                self._tasks.spawn(self._handle_message(frame), name="feishu-ws-frame")
        except asyncio.CancelledError:
            raise
        except ConnectionClosedOK as exc:  # a clean close: ours on stop, or Feishu's
            log.info("feishu.ws_closed", code=exc.rcvd.code if exc.rcvd else None)
        except Exception as exc:  # any other receive error means the socket is gone
            log.warning("feishu.ws_receive_ended", error=f"{type(exc).__name__}: {exc}")
        finally:
            self.lost.set()

    async def _handle_data_frame(self, frame: Any) -> None:
        # lark-oapi 1.7.5's own, but the event is awaited before the ack, and type=card
        # frames are dispatched too (see the module docstring).
        headers = {h.key: h.value for h in frame.headers}
        payload = frame.payload
        parts = int(headers.get(HEADER_SUM) or 1)
        if parts > 1:
            message_id, part = headers.get(HEADER_MESSAGE_ID, ""), int(headers.get(HEADER_SEQ) or 0)
            payload = self._combine(message_id, parts, part, payload)
            if payload is None:
                return  # more parts to come
        if headers.get(HEADER_TYPE) not in _DISPATCHED:
            return
        started = time.monotonic()
        # What lark-oapi's ws.model.Response marshals to (its encoder deep-copies the
        # object first: as much CPU as the rest of the answer).
        answer: dict[str, Any] = {"code": HTTPStatus.OK.value}
        event = _frame_event(payload)
        try:
            result = await self._on_event(event) if event is not None else None
            if result is not None:
                body = json.dumps(result, ensure_ascii=False).encode()
                answer["data"] = base64.b64encode(body).decode()
        except Exception as exc:  # not handled: code 500, and Feishu delivers it again
            log.warning("feishu.ws_event_failed", error=f"{type(exc).__name__}: {exc}")
            answer = {"code": HTTPStatus.INTERNAL_SERVER_ERROR.value}
        took = frame.headers.add()
        took.key, took.value = HEADER_BIZ_RT, str(int((time.monotonic() - started) * 1000))
        frame.payload = json.dumps(answer).encode()
        await self._write_message(frame.SerializeToString())

    async def ping(self) -> None:
        if self._conn is not None and self._service_id:
            await self._write_message(
                ws_client._new_ping_frame(int(self._service_id)).SerializeToString()
            )

    @property
    def ping_interval(self) -> float:
        return float(self._ping_interval or 120)

    async def close(self, *, within: float) -> None:
        """Close the socket and end this connection's tasks, within ``within`` seconds."""
        with contextlib.suppress(Exception):
            # websockets waits up to its close_timeout for the peer's close frame.
            await asyncio.wait_for(self._disconnect(), within)
        await self._tasks.cancel()


class LongConnection:
    """Runs ``FeishuWsClient`` on the gateway's loop; reconnects; stops within a bound."""

    def __init__(
        self,
        *,
        app_id: str,
        app_secret: str,
        domain: str,
        on_message: MessageSink,
        on_card: CardHandler,
        backoff_initial: float = 0.5,
        backoff_max: float = 60.0,
        connect_timeout: float = 10.0,
        stop_timeout: float = 5.0,
    ) -> None:
        self._on_message = on_message
        self._on_card = on_card
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._stop_timeout = stop_timeout
        self.client = FeishuWsClient(
            app_id=app_id,
            app_secret=app_secret,
            domain=domain,
            on_event=self._event,
            connect_timeout=connect_timeout,
        )
        self._supervisor = BackgroundTasks("feishu.ws.supervisor")
        self.connected = False
        self.connections = 0

    async def _event(self, payload: Mapping[str, Any]) -> Any:
        """One event or callback from Feishu: what to answer it with, once handled."""
        header = payload.get("header")
        kind = header.get("event_type") if isinstance(header, Mapping) else None
        if kind == "im.message.receive_v1":
            try:
                msg = message_from_event(payload)
            except MalformedEvent as exc:  # acknowledged: a redelivery is as malformed
                log.warning("feishu.malformed_event", error=str(exc))
                return None
            # Acknowledged once the message is stored (code 500 when that fails, and
            # Feishu redelivers; also after ~3 s without an ack).
            await self._on_message(msg)
            return None
        if kind == "card.action.trigger":
            try:
                action = card_action_from_event(payload)
            except MalformedEvent as exc:  # acknowledged without a card: as above
                log.warning("feishu.malformed_event", error=str(exc))
                return None
            return await self._on_card(action)
        log.debug("feishu.ws_event_ignored", event_type=kind)
        return None

    # ---- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        if not self._supervisor:
            self._supervisor.spawn(self._supervise(), name="feishu-ws")

    async def stop(self) -> None:
        try:
            # The supervisor closes the socket on its way out (bounded, see _supervise).
            await asyncio.wait_for(self._supervisor.cancel(), self._stop_timeout)
        except TimeoutError:
            log.warning("feishu.ws_stop_timeout", seconds=self._stop_timeout)
        else:
            log.info("feishu.ws_stopped")

    # ---- the connection -----------------------------------------------------------------

    async def _ping_loop(self) -> None:
        while True:
            await asyncio.sleep(self.client.ping_interval)
            try:
                await self.client.ping()
            except Exception as exc:  # a failed ping shows up as a lost socket
                log.debug("feishu.ws_ping_failed", error=str(exc))

    async def _supervise(self) -> None:
        """Connect, serve until the socket is lost, reconnect; until cancelled by stop()."""
        pinger = BackgroundTasks("feishu.ws.ping")
        try:
            while True:
                # A fresh policy per connection: the backoff starts small again after a
                # good one. Wrong credentials (ClientException) are retried too: an admin
                # may fix the app in Feishu's console while the gateway keeps running.
                await until_it_works(
                    self.client._connect,
                    event="feishu.ws_connect_failed",
                    initial=self._backoff_initial,
                    maximum=self._backoff_max,
                )
                self.connections += 1
                self.connected = True
                log.info("feishu.ws_connected", connections=self.connections)
                pinger.spawn(self._ping_loop(), name="feishu-ws-ping")
                try:
                    await self.client.lost.wait()
                finally:
                    self.connected = False
                    await pinger.cancel()
                await self.client.close(within=2.0)
                log.warning("feishu.ws_lost")
        finally:
            # Also when stop() cancels a connect half-way: no socket or task is left over.
            await self.client.close(within=2.0)
