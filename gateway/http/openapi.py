"""Routes declared once: each with its handler, its pydantic request model and the types of
its answers. ``serve`` adds them to the aiohttp router and to the OpenAPI 3.1 document at
``/api/openapi.json``, so the document lists exactly the routes this server answers.

Request bodies and queries are the models the handlers validate with (gateway.http.jsonapi);
answers are the domain types in small envelopes (gateway.http.openapi_models); which routes
need the bearer token comes from the middleware's own rule (``needs_admin``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import JsonSchemaMode

from gateway.http.jsonapi import NAME_RULE, ChatHistoryQuery, ChatMessageBody, json_response
from gateway.http.openapi_models import Accepted, ChatHistory, Error
from gateway.http.server import needs_admin


@dataclass(frozen=True, slots=True)
class Reply:
    description: str
    model: Any = None  # a pydantic model or a domain dataclass; None: text (or any JSON)
    media: str = "application/json"


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    replies: Mapping[int, Reply]
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    path_params: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    description: str | None = None


ROUTES = web.AppKey("api_routes", list[Route])
ID = {"id": {"type": "string"}}
BAD = Reply("bad request: the error names the field", Error)
UNKNOWN_ID = Reply("unknown id", Error)


SESSION = {
    "session": {
        "type": "string",
        "minLength": 1,
        "maxLength": 64,
        "description": f"room name ({NAME_RULE}); the session key is webchat:<session>",
    }
}


def chat_routes(post: Handler, read: Handler) -> tuple[Route, ...]:
    """The web chat's JSON API (channels/webchat/rest.py), served by that channel."""
    path = "/api/chat/{session}/messages"
    return (
        Route("post", path, post, "say something in a web chat room",
              {202: Reply("accepted", Accepted), 400: BAD,
               413: Reply("text longer than webchat.max_text_length", Error)},
              body=ChatMessageBody, path_params=SESSION),
        Route("get", path, read, "read a room's history; long poll with wait",
              {200: Reply("messages after `after`", ChatHistory), 400: BAD},
              query=ChatHistoryQuery, path_params=SESSION),
    )  # fmt: skip


def serve(app: web.Application, routes: Iterable[Route]) -> None:
    """Add each route to the router and to the document (before the server starts)."""
    documented: list[Route] = app.setdefault(ROUTES, [])
    for route in routes:
        if route.method == "get":  # with HEAD, as aiohttp's add_get
            app.router.add_get(route.path, route.handler)
        else:
            app.router.add_route(route.method.upper(), route.path, route.handler)
        documented.append(route)


async def serve_document(request: web.Request) -> web.Response:
    routes: list[Route] = request.app[ROUTES]
    return json_response(openapi_document(routes))


def openapi_document(routes: Iterable[Route]) -> dict[str, Any]:
    """Built per call: small, and no module-level mutable state to share between apps."""
    routes = sorted(routes, key=lambda r: r.path)
    wanted: dict[tuple[Any, JsonSchemaMode], None] = {(Error, "serialization"): None}
    for route in routes:
        for model in (route.body, route.query):
            if model is not None:
                wanted[(model, "validation")] = None
        for reply in route.replies.values():
            if reply.model is not None:
                wanted[(reply.model, "serialization")] = None
    refs, definitions = TypeAdapter.json_schemas(
        [(key, key[1], TypeAdapter(key[0])) for key in wanted],
        ref_template="#/components/schemas/{model}",
    )
    schemas = definitions.get("$defs", {})
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
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


def _operation(route: Route, refs: Mapping[Any, Any], schemas: Mapping[str, Any]) -> dict[str, Any]:
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
        schema = refs[((route.body, "validation"), "validation")]
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": schema}}}
    op["responses"] = {}
    for status, reply in sorted(replies.items()):
        schema = refs[((reply.model, "serialization"), "serialization")] if reply.model else {}
        if reply.model is None and reply.media != "application/json":
            schema = {"type": "string"}
        content = {reply.media: {"schema": schema}}
        op["responses"][str(status)] = {"description": reply.description, "content": content}
    return op
