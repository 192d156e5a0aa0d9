"""Small helpers for the JSON HTTP APIs (admin and web chat): errors that name the problem.

A client mistake is a 4xx with ``{"error": "...", "field": "..."}``, never a 5xx, and is
logged at info level at most: it is the client's problem, not an operator's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import structlog
from aiohttp import web

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Room and user names: letters (any script), digits, and a few separators. No spaces,
# colons or slashes, so they are safe in session keys, URLs and logs.
NAME_PATTERN = re.compile(r"^[\w.@\-]{1,64}$")
NAME_RULE = "1-64 letters, digits, '.', '_', '-' or '@'"


class ApiError(Exception):
    """A client error to answer as JSON."""

    def __init__(self, status: int, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field


def error_response(status: int, message: str, *, field: str | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return web.json_response(body, status=status)


def check_name(value: object, field: str) -> str:
    """A room or user name, or ApiError 400 saying what is allowed."""
    if not isinstance(value, str):
        raise ApiError(400, f"{field} must be a string ({NAME_RULE})", field=field)
    if not NAME_PATTERN.fullmatch(value):
        raise ApiError(400, f"{field} is invalid: use {NAME_RULE}", field=field)
    return value


async def read_json_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object, or ApiError 400/413/415.

    Only ``application/json`` is read: a browser sends that cross-origin only after a CORS
    preflight, which this server never grants, so another site's page cannot post here.
    """
    ctype = request.content_type
    if ctype != "application/json" and not ctype.endswith("+json"):
        raise ApiError(415, f"Content-Type must be application/json (got {ctype or 'none'})")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise ApiError(413, "request body too large") from exc
    if not raw:
        raise ApiError(400, "request body is empty: send a JSON object")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object")
    return data


def optional_string(
    data: dict[str, Any], field: str, *, max_length: int, default: str | None = None
) -> str | None:
    value = data.get(field, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ApiError(400, f"{field} must be a string", field=field)
    if len(value) > max_length:
        raise ApiError(
            400, f"{field} is too long ({len(value)} > {max_length} characters)", field=field
        )
    return value


def required_string(data: dict[str, Any], field: str, *, max_length: int) -> str:
    if field not in data:
        raise ApiError(400, f"{field} is required", field=field)
    value = optional_string(data, field, max_length=max_length)
    if value is None:
        raise ApiError(400, f"{field} must be a string", field=field)
    return value


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Under /api/: ApiError and aiohttp's own 4xx (unknown route, wrong method, body too
    large) become JSON errors, so scripts always get something they can parse."""
    try:
        return await handler(request)
    except ApiError as exc:
        log.info("http.client_error", path=request.path, status=exc.status, error=exc.message)
        return error_response(exc.status, exc.message, field=exc.field)
    except web.HTTPException as exc:
        if not request.path.startswith("/api/") or exc.status < 400:
            raise
        message = exc.reason
        if exc.status == 404:
            message = f"no such endpoint: {request.method} {request.path}"
        elif exc.status == 405:
            message = f"method {request.method} not allowed on {request.path}"
        log.info("http.client_error", path=request.path, status=exc.status, error=message)
        return web.json_response({"error": message}, status=exc.status, headers=_allow(exc))


@web.middleware
async def same_origin(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse browser requests from other sites that change something or open a socket.

    WebSockets and form-like POSTs are not covered by CORS: without this, any page a
    user visits could drive a gateway on their machine (cross-site WebSocket hijacking).
    Requests without an Origin header (curl, scripts, the CLI) are not browsers: allowed.
    """
    origin = request.headers.get("Origin")
    changes = request.method not in ("GET", "HEAD", "OPTIONS") or request.path == "/ws"
    if origin and changes and urlsplit(origin).netloc.lower() != request.host.lower():
        log.info("http.cross_origin_refused", path=request.path, origin=origin[:200])
        return error_response(403, "cross-origin request refused: open the gateway's own page")
    return await handler(request)


def install_middlewares(app: web.Application) -> None:
    """Add this module's middlewares once (the admin API and the web chat both ask)."""
    for middleware in (same_origin, json_errors):
        if middleware not in app.middlewares:
            app.middlewares.append(middleware)


def _allow(exc: web.HTTPException) -> dict[str, str]:
    allow = exc.headers.get("Allow")
    return {"Allow": allow} if allow else {}
