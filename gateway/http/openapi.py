"""The OpenAPI 3.1 document served at /api/openapi.json, generated from pydantic models.

Request bodies and queries are the models the handlers validate with (gateway.http.jsonapi);
the answers are described by the models below; which routes need the bearer token comes
from the middleware's own rule (``needs_admin``). What is left by hand is a table of
routes: method, path, summary and the answers each can give.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from gateway.http.jsonapi import (
    NAME_RULE,
    ChatHistoryQuery,
    ChatMessageBody,
    ConfirmationQuery,
    DecisionBody,
    KeywordBody,
    KeywordsBody,
    PolicyTestBody,
    ReplyTestBody,
    RevokeBody,
)
from gateway.http.openapi_models import (
    Accepted,
    ChatHistory,
    ConfirmationEvents,
    ConfirmationList,
    DeadLetters,
    DecisionResult,
    Error,
    GrantList,
    Health,
    Instances,
    Keywords,
    OneConfirmation,
    OneGrant,
    PolicyAnswer,
    Readiness,
    ReplyReading,
)
from gateway.http.server import needs_admin

# ---------------------------------------------------------------------- routes


@dataclass(frozen=True, slots=True)
class Reply:
    description: str
    model: type[BaseModel] | None = None
    media: str = "application/json"


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    summary: str
    replies: Mapping[int, Reply]
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    path_params: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    description: str | None = None


# Where each (model, mode) is in components.schemas: {"$ref": ...}.
Refs = Mapping[tuple[Any, JsonSchemaMode], Any]
ID = {"id": {"type": "string"}}
SESSION = {
    "session": {
        "type": "string",
        "minLength": 1,
        "maxLength": 64,
        "description": f"room name ({NAME_RULE}); the session key is webchat:<session>",
    }
}
BAD = Reply("bad request: the error names the field", Error)
TEXT = "text/plain"

ROUTES = (
    Route("get", "/healthz", "process is alive", {200: Reply("alive", Health)}),
    Route(
        "get",
        "/readyz",
        "all channels started and the confirmation store reachable",
        {
            200: Reply("ready", Readiness),
            503: Reply("not ready; channels and store say why", Readiness),
        },
    ),
    Route(
        "get",
        "/api/instances",
        "this instance, every instance (replica) the store knows, alive or dead, and the store",
        {200: Reply("the instances and the store's readiness", Instances)},
        description=(
            "alive: the instance's heartbeat is younger than lease_seconds. A dead one is "
            "listed until a live one has taken over what it left. When the store is down, "
            "store.ready is false with the reason and instances is empty."
        ),
    ),
    Route(
        "get", "/metrics", "Prometheus metrics", {200: Reply("text exposition format", media=TEXT)}
    ),
    Route(
        "get",
        "/api/confirmations",
        "list confirmations, newest first",
        {200: Reply("the confirmations", ConfirmationList), 400: BAD},
        query=ConfirmationQuery,
    ),
    Route(
        "get",
        "/api/confirmations/{id}",
        "one confirmation",
        {200: Reply("the record", OneConfirmation), 404: Reply("unknown id", Error)},
        path_params=ID,
    ),
    Route(
        "get",
        "/api/confirmations/{id}/events",
        "the audit trail of one confirmation: every transition with its time",
        {
            200: Reply("the events, oldest first", ConfirmationEvents),
            404: Reply("unknown id", Error),
        },
        path_params=ID,
    ),
    Route(
        "post",
        "/api/confirmations/{id}/decision",
        "approve (optionally with edited arguments) or reject as a named person (via=admin)",
        {
            200: Reply("decided; the final record", DecisionResult),
            400: BAD,
            403: Reply(
                "four-eyes and the person deciding is the requester, or the edited call may "
                "not be approved (policy deny/manual); the record, still pending",
                DecisionResult,
            ),
            404: Reply("unknown id", DecisionResult),
            409: Reply("already decided or expired; the record", DecisionResult),
            422: Reply(
                "no person named (field actor: required unless the login proxy's header or "
                "the /admin login names one), or the edited arguments do not fit the tool "
                "(field names the first bad one, arguments.sql); the call still waits",
                Error,
            ),
        },
        body=DecisionBody,
        path_params=ID,
        description=(
            "With arguments (approve only) the call runs with them instead of the asked ones: "
            "they are checked against the tool's schema and its preview, then the policy "
            "again; the chat, the audit trail (an edited event with before and after) and "
            "the model are told. See docs/http-api.md."
        ),
    ),
    Route(
        "get",
        "/api/events",
        "server-sent events: confirmation.requested, .resolved, .executed (every replica's)",
        {200: Reply("an event stream", media="text/event-stream")},
        description=(
            "Each event's data is JSON: id, remote (made by another replica), status, actor, "
            "via, reason, session_key, tool and the whole confirmation."
        ),
    ),
    Route(
        "get", "/api/keywords", "the confirm/cancel words in force", {200: Reply("words", Keywords)}
    ),
    Route(
        "put",
        "/api/keywords",
        "replace both lists: validated, written to the file, applied now",
        {
            200: Reply("the new words", Keywords),
            400: BAD,
            422: Reply("invalid word lists (empty, or a word in both)", Error),
        },
        body=KeywordsBody,
    ),
    Route(
        "post",
        "/api/keywords/{list}",
        "add one word to the confirm or cancel list, keeping the file's comments and order",
        {
            200: Reply("the words now in force", Keywords),
            400: BAD,
            404: Reply("no such list (use confirm or cancel)", Error),
            409: Reply("the word is already in that list; nothing changed", Error),
            422: Reply("the word is in the other list", Error),
        },
        body=KeywordBody,
        path_params={"list": {"type": "string", "enum": ["confirm", "cancel"]}},
    ),
    Route("get", "/api/grants", "live grants, oldest first", {200: Reply("grants", GrantList)}),
    Route(
        "get",
        "/api/grants/{id}",
        "one grant and its audit trail (given, used, revoked)",
        {200: Reply("the grant", OneGrant), 404: Reply("unknown id", Error)},
        path_params=ID,
    ),
    Route(
        "post",
        "/api/grants/{id}/revoke",
        "end a grant now; its chat is told",
        {
            200: Reply("the revoked grant", OneGrant),
            404: Reply("unknown id", Error),
            409: Reply("already expired or revoked", Error),
        },
        body=RevokeBody,
        path_params=ID,
    ),
    Route(
        "post",
        "/api/replies/test",
        "how a chat reply would be read with the keywords in force",
        {200: Reply("the reading", ReplyReading), 400: BAD},
        body=ReplyTestBody,
    ),
    Route(
        "post",
        "/api/policy/test",
        "how the policy would decide a call (nothing runs); as `gateway policy test`",
        {
            200: Reply("the decision", PolicyAnswer),
            400: BAD,
            404: Reply("no such tool", Error),
            422: Reply("arguments the tool refuses", Error),
        },
        body=PolicyTestBody,
    ),
    *(
        Route(
            "get",
            f"/api/channels/{name}/failed",
            f"{name} messages that could not be delivered (when the channel is enabled)",
            {200: Reply("the dead letters, oldest first", DeadLetters)},
        )
        for name in ("feishu", "dingtalk")
    ),
    Route(
        "post",
        "/api/chat/{session}/messages",
        "say something in a web chat room",
        {
            202: Reply("accepted", Accepted),
            400: BAD,
            413: Reply("text longer than webchat.max_text_length", Error),
        },
        body=ChatMessageBody,
        path_params=SESSION,
    ),
    Route(
        "get",
        "/api/chat/{session}/messages",
        "read a room's history; long poll with wait",
        {200: Reply("messages after `after`", ChatHistory), 400: BAD},
        query=ChatHistoryQuery,
        path_params=SESSION,
    ),
)


# ---------------------------------------------------------------------- the document


def openapi_document() -> dict[str, Any]:
    """Built per call: small, and no module-level mutable state to share between apps."""
    wanted: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {(Error, "serialization"): None}
    for route in ROUTES:
        for model in (route.body, route.query):
            if model is not None:
                wanted[(model, "validation")] = None
        for reply in route.replies.values():
            if reply.model is not None:
                wanted[(reply.model, "serialization")] = None
    refs, definitions = models_json_schema(
        list(wanted), ref_template="#/components/schemas/{model}"
    )
    schemas = definitions.get("$defs", {})
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method] = _operation(route, refs, schemas)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "chat-gateway",
            "version": "1",
            "description": (
                "Admin and web chat API of the chat gateway. Admin routes need "
                "`Authorization: Bearer <token>` when [admin] token is set. Errors are "
                '`{"error": "...", "field": "..."}`.'
            ),
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas,
        },
        "paths": paths,
    }


def _operation(
    route: Route,
    refs: Refs,
    schemas: Mapping[str, Any],
) -> dict[str, Any]:
    replies = dict(route.replies)
    op: dict[str, Any] = {"summary": route.summary}
    if route.description:
        op["description"] = route.description
    if needs_admin(route.path):
        op["security"] = [{"bearer": []}]
        replies[401] = Reply("missing or wrong bearer token", Error)
    params = [
        {"name": name, "in": "path", "required": True, "schema": schema}
        for name, schema in route.path_params.items()
    ]
    if route.query is not None:
        query = schemas[route.query.__name__]
        required = set(query.get("required", ()))
        params += [
            {"name": name, "in": "query", "required": name in required, "schema": schema}
            for name, schema in query["properties"].items()
        ]
    if params:
        op["parameters"] = params
    if route.body is not None:
        schema = refs[(route.body, "validation")]
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
    op["responses"] = {
        str(status): _reply(reply, refs) for status, reply in sorted(replies.items())
    }
    return op


def _reply(reply: Reply, refs: Refs) -> Any:
    schema = {"type": "string"} if reply.model is None else refs[(reply.model, "serialization")]
    return {"description": reply.description, "content": {reply.media: {"schema": schema}}}
