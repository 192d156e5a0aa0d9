"""The OpenAPI 3 description of the admin and web chat REST API (served at /api/openapi.json)."""

from __future__ import annotations

from typing import Any

from gateway.confirm.model import Status


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


# No "pattern": JSON Schema's \w is ASCII-only, while names may be in any script.
NAME = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "description": "1-64 letters (any script), digits, '.', '_', '-' or '@'",
}


def openapi_document() -> dict[str, Any]:
    """Built per call: small, and no module-level mutable state to share between apps."""
    confirmation = {
        "type": "object",
        "required": ["id", "session_key", "channel", "chat_id", "requester", "status"],
        "properties": {
            "id": {"type": "string", "example": "K7Q2"},
            "session_key": {"type": "string", "example": "webchat:lobby"},
            "channel": {"type": "string"},
            "chat_id": {"type": "string"},
            "requester": {"type": "string"},
            "is_group": {"type": "boolean"},
            "tool_call": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "args": {"type": "object"},
                    "call_id": {"type": "string"},
                },
            },
            "summary": {"type": "string"},
            "details": {
                "type": "object",
                "description": "tool-specific; SQL: statement, kind, tables, rows_affected",
            },
            "risk": {"type": "string", "enum": ["low", "medium", "high", "critical"]},
            "approvers": {"type": "array", "items": {"type": "string"}},
            "four_eyes": {"type": "boolean"},
            "created_at": {"type": "number", "description": "Unix time, seconds"},
            "expires_at": {"type": "number"},
            "status": {"type": "string", "enum": [s.value for s in Status]},
            "decided_by": {"type": ["string", "null"]},
            "decided_at": {"type": ["number", "null"]},
            "decided_via": {"type": ["string", "null"], "example": "web"},
            "reason": {"type": ["string", "null"]},
            "feedback": {"type": "boolean"},
            "prompt_refs": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    }
    decision_result = {
        "type": "object",
        "properties": {
            "outcome": {
                "type": "string",
                "enum": ["decided", "already_decided", "not_found", "forbidden", "expired"],
            },
            "message": {"type": "string"},
            "confirmation": {"oneOf": [_ref("Confirmation"), {"type": "null"}]},
            "error": {"type": "string"},
        },
    }
    chat_message = {
        "type": "object",
        "properties": {
            "seq": {"type": "integer"},
            "kind": {"type": "string", "enum": ["text", "confirmation", "confirmation_update"]},
            "text": {"type": "string"},
            "confirmation": {"oneOf": [_ref("Confirmation"), {"type": "null"}]},
            "at": {"type": "number"},
            "user": {
                "type": ["string", "null"],
                "description": "who wrote it; null for the gateway",
            },
            "message_id": {"type": ["string", "null"]},
            "can_decide": {
                "type": "object",
                "description": "only with ?user= and a confirmation: may that user decide",
            },
        },
    }
    keywords = {
        "type": "object",
        "required": ["confirm", "cancel"],
        "properties": {
            "confirm": {"type": "array", "items": {"type": "string", "maxLength": 64}},
            "cancel": {"type": "array", "items": {"type": "string", "maxLength": 64}},
        },
    }
    session_param = {
        "name": "session",
        "in": "path",
        "required": True,
        "schema": NAME,
        "description": "room name; the session key is webchat:<session>",
    }
    id_param = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
    secured: list[dict[str, list[str]]] = [{"bearer": []}]
    unauthorized = _error("missing or wrong bearer token")
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
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {"error": {"type": "string"}, "field": {"type": "string"}},
                },
                "Confirmation": confirmation,
                "DecisionResult": decision_result,
                "ChatMessage": chat_message,
                "Keywords": keywords,
            },
        },
        "paths": {
            "/healthz": {
                "get": {
                    "summary": "process is alive",
                    "responses": {"200": _json({"type": "object"}, "alive")},
                }
            },
            "/readyz": {
                "get": {
                    "summary": "all channels started",
                    "responses": {
                        "200": _json({"type": "object"}, "ready"),
                        "503": _json({"type": "object"}, "not ready; channels say why"),
                    },
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics",
                    "security": secured,
                    "responses": {
                        "200": {
                            "description": "text exposition format",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                        "401": unauthorized,
                    },
                }
            },
            "/api/confirmations": {
                "get": {
                    "summary": "list confirmations, newest first",
                    "security": secured,
                    "parameters": [
                        {
                            "name": "status",
                            "in": "query",
                            "schema": {"type": "string", "enum": [s.value for s in Status]},
                        },
                        {
                            "name": "session",
                            "in": "query",
                            "description": "a session key, e.g. webchat:lobby",
                            "schema": {"type": "string", "maxLength": 256},
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                        },
                    ],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "confirmations": {
                                        "type": "array",
                                        "items": _ref("Confirmation"),
                                    }
                                },
                            },
                            "the confirmations",
                        ),
                        "400": _error("bad query parameter"),
                        "401": unauthorized,
                    },
                }
            },
            "/api/confirmations/{id}": {
                "get": {
                    "summary": "one confirmation",
                    "security": secured,
                    "parameters": [id_param],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {"confirmation": _ref("Confirmation")},
                            },
                            "the record",
                        ),
                        "401": unauthorized,
                        "404": _error("unknown id"),
                    },
                }
            },
            "/api/confirmations/{id}/decision": {
                "post": {
                    "summary": "approve or reject as the operator (via=admin)",
                    "security": secured,
                    "parameters": [id_param],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["decision"],
                                    "properties": {
                                        "decision": {
                                            "type": "string",
                                            "enum": ["approve", "reject"],
                                        },
                                        "actor": {
                                            "type": "string",
                                            "maxLength": 128,
                                            "default": "admin",
                                        },
                                        "reason": {"type": "string", "maxLength": 1000},
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "200": _json(_ref("DecisionResult"), "decided; the final record"),
                        "400": _error("bad body"),
                        "401": unauthorized,
                        "404": _json(_ref("DecisionResult"), "unknown id"),
                        "409": _json(
                            _ref("DecisionResult"), "already decided or expired; the record"
                        ),
                    },
                }
            },
            "/api/events": {
                "get": {
                    "summary": "server-sent events: confirmation.requested, confirmation.resolved",
                    "description": (
                        "Each event's data is JSON: id, status, actor, via, reason, "
                        "session_key, tool and the whole confirmation."
                    ),
                    "security": secured,
                    "responses": {
                        "200": {
                            "description": "an event stream",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        "401": unauthorized,
                    },
                }
            },
            "/api/keywords": {
                "get": {
                    "summary": "the confirm/cancel words in force",
                    "security": secured,
                    "responses": {"200": _json(_ref("Keywords"), "words"), "401": unauthorized},
                },
                "put": {
                    "summary": "replace both lists: validated, written to the file, applied now",
                    "security": secured,
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": _ref("Keywords")}},
                    },
                    "responses": {
                        "200": _json(_ref("Keywords"), "the new words"),
                        "400": _error("bad body"),
                        "401": unauthorized,
                        "422": _error("invalid word lists (empty, or a word in both)"),
                    },
                },
            },
            "/api/chat/{session}/messages": {
                "post": {
                    "summary": "say something in a web chat room",
                    "parameters": [session_param],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["user", "text"],
                                    "properties": {
                                        "user": NAME,
                                        "text": {"type": "string", "minLength": 1},
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "202": _json(
                            {"type": "object", "properties": {"message_id": {"type": "string"}}},
                            "accepted",
                        ),
                        "400": _error("bad body or name"),
                        "413": _error("text longer than webchat.max_text_length"),
                    },
                },
                "get": {
                    "summary": "read a room's history; long poll with wait",
                    "parameters": [
                        session_param,
                        {
                            "name": "after",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 0},
                            "description": "only messages with seq greater than this",
                        },
                        {
                            "name": "wait",
                            "in": "query",
                            "schema": {"type": "number", "minimum": 0},
                            "description": "seconds to wait for a new message (capped)",
                        },
                        {
                            "name": "user",
                            "in": "query",
                            "schema": NAME,
                            "description": "add can_decide for this user to confirmations",
                        },
                    ],
                    "responses": {
                        "200": _json(
                            {
                                "type": "object",
                                "properties": {
                                    "messages": {"type": "array", "items": _ref("ChatMessage")},
                                    "last_seq": {"type": "integer"},
                                },
                            },
                            "messages after `after`",
                        ),
                        "400": _error("bad parameter"),
                    },
                },
            },
        },
    }
