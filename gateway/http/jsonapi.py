"""Request bodies and queries of the JSON APIs as pydantic models, and errors that name the field.

A client mistake is a 4xx with ``{"error": "...", "field": "..."}``, never a 5xx, and is
logged at info level at most: it is the client's problem, not an operator's. The same
models describe the API in ``/api/openapi.json`` (gateway.http.openapi).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from gateway.confirm.grants import SHAPED_MINUTES
from gateway.confirm.model import Status
from gateway.storage.confirmations import StoreUnavailableError

log = structlog.get_logger(__name__)

Model = TypeVar("Model", bound=BaseModel)

# Set by gateway.http.server from server.max_json_depth; read by read_json_object.
MAX_JSON_DEPTH = web.AppKey("max_json_depth", int)
DEFAULT_MAX_JSON_DEPTH = 64

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


def _dumps(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate has no UTF-8: only its escape is valid
        return json.dumps(value)
    return text


def json_response(
    body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A JSON answer in UTF-8 as it reads (aiohttp's default escapes every non-ASCII
    character: "\\u786e\\u8ba4" where "确认" should be, unreadable in curl; issue 26)."""
    return web.json_response(body, status=status, headers=headers, dumps=_dumps)


def error_response(status: int, message: str, *, field: str | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return json_response(body, status=status)


def one_line(text: object, limit: int = 300) -> str:
    """Text for a log line or an error message: whitespace runs collapsed, length capped."""
    return " ".join(str(text).split())[:limit]


def check_name(value: object, field: str) -> str:
    """A room or user name, or ApiError 400 saying what is allowed."""
    if not isinstance(value, str):
        raise ApiError(400, f"{field} must be a string ({NAME_RULE})", field=field)
    if not NAME_PATTERN.fullmatch(value):
        raise ApiError(400, f"{field} is invalid: use {NAME_RULE}", field=field)
    return value


# ---------------------------------------------------------------------- models


class JsonBody(BaseModel):
    """A request body: JSON types as sent (no "5" for 5), unknown fields ignored."""

    model_config = ConfigDict(strict=True, extra="ignore")


class QueryParams(BaseModel):
    """Query parameters: strings from the URL, converted (``limit=5`` is 5)."""

    model_config = ConfigDict(extra="ignore")


MAX_WORDS = 500
Word = Annotated[str, Field(max_length=64)]
WordList = Annotated[list[Word], Field(max_length=MAX_WORDS)]


class GrantBody(JsonBody):
    """Don't ask again: this session's calls of the tool by the requester, or this exact call;
    shaped (docs/grants.md): pinned to the exact arguments, or for one call only."""

    scope: Literal["session", "call"]
    minutes: int = Field(
        ge=1,
        le=30 * 24 * 60,
        description="session: at most 1440; pinned to the arguments or single use: 5 to 480",
    )
    pin: Literal["scope", "args"] = Field(
        default="scope",
        description=(
            "scope: calls on the same scope (SQL: the same statement kinds and tables); "
            "args: only calls with exactly these arguments"
        ),
    )
    single_use: bool = Field(default=False, description="covers the next such call only")

    @model_validator(mode="after")
    def _shaped_length(self) -> GrantBody:
        # One rule with GrantBook.give, which refuses the same: said here before deciding.
        low, high = SHAPED_MINUTES
        if (self.pin == "args" or self.single_use) and not low <= self.minutes <= high:
            raise ValueError(
                f"a grant pinned to its arguments or for one use lasts {low} to {high} minutes"
            )
        return self


class RevokeBody(JsonBody):
    actor: str | None = Field(default=None, max_length=128)


class DecisionBody(JsonBody):
    """Approve or reject a pending confirmation as the operator (via=admin)."""

    grant: GrantBody | None = Field(
        default=None, description="with approve: also skip asking for such calls for a while"
    )

    decision: Literal["approve", "reject"]
    actor: str | None = Field(
        default=None,
        max_length=128,
        description=(
            "the person deciding, recorded as the decider; four-eyes compares it with the "
            "requester. Required unless the login proxy's header or the /admin login names "
            "the person (those win)"
        ),
    )
    reason: str | None = Field(default=None, max_length=1000)
    arguments: dict[str, Any] | None = Field(
        default=None,
        description=(
            "with approve: run the call with these arguments instead (all of them, as the "
            "tool takes them); checked against the tool's schema and the policy again"
        ),
    )


class KeywordsBody(JsonBody):
    """Both word lists, replaced together. A misspelt field is an error, not ignored: a PUT
    of ``{"confrim": [...]}`` must not read as "no change"."""

    model_config = ConfigDict(strict=True, extra="forbid")

    confirm: WordList
    cancel: WordList


class KeywordBody(JsonBody):
    """One word to add to the list named in the path."""

    model_config = ConfigDict(strict=True, extra="forbid")

    word: Annotated[str, Field(min_length=1, max_length=64)]


class ChatMessageBody(JsonBody):
    """Say something in a web chat room."""

    user: str = Field(min_length=1, max_length=64, description=f"the sender: {NAME_RULE}")
    text: str = Field(description="what they say; at most webchat.max_text_length characters")

    @field_validator("user")
    @classmethod
    def _name(cls, value: str) -> str:
        # Not a JSON Schema "pattern": its \w is ASCII-only, while names are in any script.
        if not NAME_PATTERN.fullmatch(value):
            raise ValueError(f"use {NAME_RULE}")
        return value


class ConfirmationQuery(QueryParams):
    status: Status | None = None
    session: str | None = Field(
        default=None, max_length=256, description="a session key, e.g. webchat:lobby"
    )
    tool: str | None = Field(default=None, max_length=128, description="a tool name")
    person: str | None = Field(
        default=None, max_length=128, description="who asked for the call or decided it"
    )
    limit: int = Field(default=200, ge=1, le=1000)
    cursor: str | None = Field(
        default=None, max_length=64, description="next_cursor of the previous page"
    )


class ReplyTestBody(JsonBody):
    """A chat reply to read with the keywords in force, as the gateway would."""

    text: str = Field(max_length=4000)


class PolicyTestBody(JsonBody):
    """A tool call to put through the policy without running it."""

    tool: str = Field(min_length=1, max_length=128)
    args: dict[str, Any] = Field(default_factory=dict)


class ChatHistoryQuery(QueryParams):
    after: int = Field(default=0, ge=0, description="only messages with seq greater than this")
    wait: float = Field(default=0, ge=0, description="seconds to wait for a message (capped)")
    user: str | None = Field(
        default=None, max_length=64, description="add can_decide for this user to confirmations"
    )


# ---------------------------------------------------------------------- parsing

# A JSON string (closed or not) or a bracket: brackets inside strings are skipped.
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)


class JsonInputError(ValueError):
    """Input that is not JSON this server accepts; the message says why, for the client
    ("JSON nested deeper than 64 levels")."""


def parse_json(raw: bytes | str, *, max_depth: int) -> Any:
    """Parse untrusted JSON: nesting at most ``max_depth``, text that is valid Unicode.

    ``json.loads`` recurses once per level: 100,000 ``[`` raised RecursionError (a 500).
    The depth is counted first, without recursion. A lone surrogate (``"\\ud800"``) parses
    but cannot be encoded again: stored in a room it broke every WebSocket that replayed it.
    NaN and Infinity are Python's extension, not JSON: refused too.
    """
    if isinstance(raw, bytes):
        try:
            raw = raw.decode(json.detect_encoding(raw))
        except UnicodeDecodeError as exc:
            raise JsonInputError(f"not valid UTF-8 (byte {exc.start})") from exc
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(raw):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > max_depth:
                raise JsonInputError(f"JSON nested deeper than {max_depth} levels")
        elif token in ("]", "}"):
            depth -= 1
    try:
        value = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise JsonInputError(f"not valid JSON: {exc}") from exc
    _check_text(value)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _check_text(value: Any) -> None:
    """Every string and key encodes as UTF-8 (no lone surrogates); walked without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item)  # the keys
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                bad = item[exc.start]
                raise JsonInputError(
                    f"a string has a lone surrogate (\\u{ord(bad):04x}), which is not valid "
                    "Unicode: send the character itself or a complete surrogate pair"
                ) from exc


# ---------------------------------------------------------------------- reading


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
    except HttpProcessingError as exc:  # a broken chunked encoding, a short body
        raise ApiError(400, f"request body is malformed: {one_line(exc.message)}") from exc
    if not raw:
        raise ApiError(400, "request body is empty: send a JSON object")
    max_depth = request.config_dict.get(MAX_JSON_DEPTH, DEFAULT_MAX_JSON_DEPTH)
    try:
        data = parse_json(raw, max_depth=max_depth)
    except JsonInputError as exc:
        raise ApiError(400, f"request body: {exc}") from exc
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object")
    return data


def required_string(data: Mapping[str, Any], field: str, *, max_length: int) -> str:
    """A string field of a hand-read body (the web chat's), or ApiError 400 naming it."""
    value = data.get(field)
    if field not in data:
        raise ApiError(400, f"{field} is required", field=field)
    if not isinstance(value, str):
        raise ApiError(400, f"{field} must be a string", field=field)
    if len(value) > max_length:
        raise ApiError(
            400, f"{field} is too long ({len(value)} > {max_length} characters)", field=field
        )
    return value


async def read_body(request: web.Request, model: type[Model]) -> Model:
    """The request body as ``model``, or ApiError 4xx naming the first bad field."""
    return validate(model, await read_json_object(request))


def read_query(request: web.Request, model: type[Model]) -> Model:
    """The query string as ``model``; an empty value (``?status=``) counts as absent."""
    return validate(model, {k: v for k, v in request.query.items() if v != ""})


def validate(model: type[Model], data: Mapping[str, Any]) -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False, include_input=False)[0]
        field = str(error["loc"][0]) if error["loc"] else None
        message = describe(error)
        if error["type"] == "extra_forbidden":
            known = ", ".join(model.model_fields)
            message = f"{field} is not a field of this request (expected {known})"
        raise ApiError(400, message, field=field) from exc


# What a person reads for pydantic's error types: "<field> <phrase>".
PHRASES = {
    "missing": "is required",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "literal_error": "must be {expected}",
    "enum": "must be {expected}",
    "string_too_short": "is too short (at least {min_length} characters)",
    "string_too_long": "is too long (at most {max_length} characters)",
    "too_long": "has too many items (at most {max_length})",
    "greater_than_equal": "must be at least {ge}",
    "less_than_equal": "must be at most {le}",
    "value_error": "is invalid: {error}",
}


def describe(error: ErrorDetails) -> str:
    """``confirm[1] must be a string``, ``decision must be approve or reject``, ..."""
    loc = error["loc"]
    where = str(loc[0]) if loc else "body"
    where += "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc[1:])
    ctx = {k: str(v) for k, v in (error.get("ctx") or {}).items()}
    if "expected" in ctx:  # "'approve' or 'reject'" reads better without the quotes
        ctx["expected"] = ctx["expected"].replace("'", "")
    phrase = PHRASES.get(error["type"])
    if phrase is None:
        return f"{where}: {error['msg']}"
    return f"{where} {phrase.format(**ctx)}"


# ---------------------------------------------------------------------- middleware


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Under /api/: ApiError and aiohttp's own 4xx (unknown route, wrong method, body too
    large) become JSON errors, so scripts always get something they can parse."""
    try:
        return await handler(request)
    except ApiError as exc:
        log.info("http.client_error", path=request.path, status=exc.status, error=exc.message)
        return error_response(exc.status, exc.message, field=exc.field)
    except StoreUnavailableError as exc:
        # Redis down or its pool exhausted (issue 13): a clear 503 to retry, not a 500.
        log.warning("http.store_unavailable", path=request.path, error=str(exc))
        response = error_response(503, f"the confirmation store is unavailable: {exc}")
        response.headers["Retry-After"] = "5"
        return response
    except web.HTTPException as exc:
        if not request.path.startswith("/api/") or exc.status < 400:
            raise
        message = exc.reason
        if exc.status == 404:
            message = f"no such endpoint: {request.method} {request.path}"
        elif exc.status == 405:
            message = f"method {request.method} not allowed on {request.path}"
        log.info("http.client_error", path=request.path, status=exc.status, error=message)
        allow = exc.headers.get("Allow")
        headers = {"Allow": allow} if allow else {}
        return json_response({"error": message}, status=exc.status, headers=headers)
