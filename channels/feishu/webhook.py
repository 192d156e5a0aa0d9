"""Feishu events and card callbacks over HTTP, on the gateway's aiohttp server.

Verification is done here rather than by ``EventDispatcherHandler.do``: the SDK answers
every failure with HTTP 500 (Feishu then retries), reads headers from a case-sensitive
dict (lower-cased names, as proxies send them, crash it with a TypeError), checks neither
timestamp age nor nonce reuse, and is synchronous. The SDK's ``AESCipher`` decrypts;
``channels.feishu.inbound`` reads the verified body.

Webhook mode needs the Encrypt Key: the Verification Token travels inside every body, so a
request built from the token alone (a forged card click) would pass, and a captured one
could be replayed (issue 22). Every event and card callback must be encrypted, carry a
valid ``X-Lark-Signature`` over timestamp + nonce + encrypt_key + body, a timestamp inside
the replay window and a nonce not used before within it.

Order of checks: parse → decrypt → url_verification (token only, as Feishu does not sign
it) → signature → replay window → nonce → verification token → dispatch. Bad input is 400,
failed authentication 401; nothing unverified reaches the bus.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web
from lark_oapi.core.utils import AESCipher

from channels.feishu.inbound import (
    CardAction,
    MessageSink,
    card_action_from_event,
    message_from_event,
)
from channels.payloads import MalformedEvent
from channels.platform import UsedOnce, same_secret
from gateway.http.jsonapi import JsonInputError, parse_json
from gateway.runtime import ServiceUnavailable

log = structlog.get_logger(__name__)

CardHandler = Callable[[CardAction], Awaitable[dict[str, Any]]]


class _Reject(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class WebhookReceiver:
    """The request handler for the event and card callback URLs."""

    def __init__(
        self,
        *,
        encrypt_key: str,
        verification_token: str | None,
        replay_window_seconds: float,
        max_json_depth: int,
        on_message: MessageSink,
        on_card: CardHandler,
    ) -> None:
        if not encrypt_key:
            raise ValueError("Feishu webhook mode needs an encrypt_key")
        self._encrypt_key = encrypt_key
        self._max_depth = max_json_depth
        self._token = verification_token or None
        self._window = replay_window_seconds
        self._on_message = on_message
        self._on_card = on_card
        # Nonces seen inside the window; older ones fail the timestamp check anyway.
        self._nonces = UsedOnce(seconds=max(2 * replay_window_seconds, 1.0))
        self._cipher = AESCipher(encrypt_key)

    async def handle(self, request: web.Request) -> web.Response:
        try:
            return await self._handle(request)
        except _Reject as exc:
            log.warning(
                "feishu.webhook_rejected",
                status=exc.status,
                reason=exc.reason,
                remote=request.remote,
            )
            return web.json_response({"msg": exc.reason}, status=exc.status)

    def _decrypt(self, raw: bytes) -> dict[str, Any]:
        try:
            outer = parse_json(raw, max_depth=self._max_depth)
        except JsonInputError as exc:
            raise _Reject(400, f"body: {exc}") from exc
        if not isinstance(outer, dict):
            raise _Reject(400, "body is not a JSON object")
        encrypted = outer.get("encrypt")
        if not isinstance(encrypted, str):
            raise _Reject(400, "expected an encrypted body (set the Encrypt Key in Feishu)")
        try:
            decrypted = self._cipher.decrypt_str(encrypted)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _Reject(400, "cannot decrypt the body") from exc
        try:
            plain = parse_json(decrypted, max_depth=self._max_depth)
        except JsonInputError as exc:
            raise _Reject(400, f"decrypted body: {exc}") from exc
        if not isinstance(plain, dict):
            raise _Reject(400, "decrypted body is not a JSON object")
        return plain

    def _check_token(self, token: Any) -> None:
        if self._token is None:
            return
        if not isinstance(token, str) or not same_secret(token, self._token):
            raise _Reject(401, "invalid verification token")

    def _check_signature(self, request: web.Request, raw: bytes) -> None:
        """The one check of events and card callbacks: signed, fresh, and used once."""
        # aiohttp's headers are case-insensitive, unlike the SDK's RawRequest dict.
        ts = request.headers.get("X-Lark-Request-Timestamp", "")
        nonce = request.headers.get("X-Lark-Request-Nonce", "")
        sig = request.headers.get("X-Lark-Signature", "")
        if not (ts and nonce and sig):
            raise _Reject(401, "missing signature headers")
        signed = (ts + nonce + self._encrypt_key).encode("utf-8", "surrogatepass") + raw
        if not same_secret(sig, hashlib.sha256(signed).hexdigest()):
            raise _Reject(401, "bad signature")
        # Digits only: float() would take "nan", whose age compares as inside any window.
        if not (ts.isascii() and ts.isdigit()):
            raise _Reject(400, "bad timestamp")
        if abs(time.time() - int(ts)) > self._window:
            raise _Reject(401, "timestamp outside the replay window")
        # Only after the signature: a forger cannot use up Feishu's nonces.
        if not self._nonces.first_use(nonce):
            raise _Reject(401, "nonce already used")

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        payload = self._decrypt(raw)
        if payload.get("type") == "url_verification":
            self._check_token(payload.get("token"))
            return web.json_response({"challenge": payload.get("challenge", "")})
        self._check_signature(request, raw)
        header = payload.get("header")
        if not isinstance(header, dict):
            raise _Reject(400, "only event schema 2.0 is supported")
        self._check_token(header.get("token"))
        event_type = header.get("event_type")
        if event_type == "im.message.receive_v1":
            try:
                msg = message_from_event(payload)
            except MalformedEvent as exc:
                raise _Reject(400, str(exc)) from exc
            # Acknowledge once stored (invariant 9); the agent's work happens after this
            # response. Not stored: no 200, so Feishu redelivers it.
            try:
                await self._on_message(msg)
            except ServiceUnavailable:  # Redis down: one line, by the receiving task
                return web.json_response({"msg": "not stored, retry"}, status=503)
            except Exception:  # storing failed (logged): the redelivery is the retry
                log.exception("feishu.webhook_not_stored", message_id=msg.message_id)
                return web.json_response({"msg": "not stored, retry"}, status=503)
            return web.json_response({"msg": "success"})
        if event_type == "card.action.trigger":
            try:
                action = card_action_from_event(payload)
            except MalformedEvent as exc:
                raise _Reject(400, str(exc)) from exc
            return web.json_response(await self._on_card(action))
        log.debug("feishu.webhook_ignored", event_type=event_type)
        return web.json_response({"msg": "success"})
