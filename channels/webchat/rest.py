"""The web chat's REST API for scripts: post a message, read the history (long poll)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import structlog
from aiohttp import web

from channels.webchat.limits import OverLimit, SlowDown
from gateway import texts
from gateway.bus import SenderIdentity
from gateway.http.identity import client_address, identity_of
from gateway.http.jsonapi import ApiError, json_response, read_json_object, required_string
from gateway.logs import RateLimitedLine

if TYPE_CHECKING:
    from channels.webchat.host import ChatHost

log = structlog.get_logger(__name__)


class ChatRest:
    """``POST`` / ``GET /api/chat/{session}/messages``."""

    def __init__(self, channel: ChatHost) -> None:
        self.channel = channel

    async def post_message(self, request: web.Request) -> web.Response:
        channel = self.channel
        room = channel.room_from(request)
        data = await read_json_object(request)
        user, identity = channel.sender(request, data.get("user"))
        # The body is already bounded by the server's client_max_size; the limit is checked
        # on the trimmed text, so the status is 413 however the text is padded.
        raw = required_string(data, "text", max_length=1 << 20)
        text = channel.check_text(raw)
        try:
            entry = await channel.accept(
                room, user, text, identity, address=client_address(request)
            )
        except SlowDown as exc:
            return slow_down_response(exc, user=user)
        # seq: a script long-polls after it for the answer, without reading its own message
        # back first (one request less per message: bench/ingest.py).
        return json_response({"message_id": entry.message_id, "seq": entry.seq}, status=202)

    async def get_messages(self, request: web.Request) -> web.Response:
        channel = self.channel
        room = channel.room_from(request)
        after = int_param(request, "after", default=0)
        wait = min(
            _float_param(request, "wait", default=0.0), channel.settings.max_long_poll_seconds
        )
        user_param = request.query.get("user")
        user, identity = None, identity_of(request).of(request)
        if user_param is not None or identity is SenderIdentity.VERIFIED:
            user, identity = channel.sender(request, user_param)
        if wait > 0:
            # A waiting poll holds its connection (a file descriptor): bounded (issue 22).
            try:
                with channel.long_polls.hold(client_address(request)):
                    entries = await room.wait_after(after, wait)
            except OverLimit as exc:
                return over_limit_response(
                    exc, what="long_poll", request=request, log_line=channel.refused_log
                )
        else:
            entries = room.after(after)
        messages = []
        for e in entries:
            item = channel.message_frame(e, user, identity)
            del item["type"]
            messages.append(item)
        return json_response({"messages": messages, "last_seq": room.last_seq})


def slow_down_response(exc: SlowDown, *, user: str) -> web.Response:
    """429 with Retry-After, and the same polite words the page shows."""
    log.info("webchat.rate_limited", user=user, retry_after=exc.retry_after)
    return json_response(
        {"error": texts.WEBCHAT_SLOW_DOWN.format(limit=exc.limit, seconds=exc.retry_after)},
        status=429,
        headers={"Retry-After": str(exc.retry_after)},
    )


def over_limit_response(
    exc: OverLimit, *, what: str, request: web.Request, log_line: RateLimitedLine
) -> web.Response:
    """A connection refused before it opens: 429 or 503, the words and the cap's setting.

    Logged at most once a minute with a count: a flood must not flood the log instead.
    """
    log_line.hit(
        connection=what, setting=exc.setting, limit=exc.limit, client=client_address(request)
    )
    return json_response(
        {
            "error": texts.WEBCHAT_TOO_MANY_CONNECTIONS.format(
                limit=exc.limit, setting=exc.setting
            ),
            "limit": exc.setting,
        },
        status=exc.status,
        headers={"Retry-After": "5"},
    )


def int_param(request: web.Request, name: str, *, default: int) -> int:
    """A whole number 0 or more from the query string, or ApiError 400 naming it."""
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ApiError(400, f"{name} must be a whole number", field=name) from exc
    if value < 0:
        raise ApiError(400, f"{name} must not be negative", field=name)
    return value


def _float_param(request: web.Request, name: str, *, default: float) -> float:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ApiError(400, f"{name} must be a number of seconds", field=name) from exc
    if not math.isfinite(value) or value < 0:
        raise ApiError(400, f"{name} must be a number of seconds, 0 or more", field=name)
    return value
