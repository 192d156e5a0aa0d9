"""Reading platform JSON: one shape check, with pydantic, where a channel reads an event.

Feishu and DingTalk sign or encrypt what they send, but a correctly signed event can still
have a field of the wrong type (a number where a list was expected: issue 27 found
``message.mentions`` as a number answered with HTTP 500). So every field a channel reads
is declared once, in a ``Shape`` (channels/feishu/events.py, channels/dingtalk/events.py):
lenient about fields the channel does not read (platforms add fields), strict about the
types of those it does (no coercion: ``5`` is not a string, ``"1"`` is not a number).
``read`` turns a mismatch into ``MalformedEvent`` naming the first wrong field, and the
channel answers it once: 400 on a webhook, dropped with one log line (and acknowledged,
as redelivering it would not fix it) on a long connection.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError


class Shape(BaseModel):
    """The part of a platform payload a channel reads."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class MalformedEvent(ValueError):
    """A platform payload whose shape is not what the channel reads; says where."""


S = TypeVar("S", bound=Shape)


def read(shape: type[S], data: object, *, what: str) -> S:
    """``data`` as ``shape``, or MalformedEvent naming the first wrong field (never its value:
    it may be large, or a person's text)."""
    try:
        return shape.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "the body"
        # Not "a valid dictionary or instance of <our class name>": say it as JSON.
        problem = "not a JSON object" if first["type"] == "model_type" else first["msg"]
        more = exc.error_count() - 1
        also = f" (and {more} more)" if more else ""
        raise MalformedEvent(f"{what}: {where}: {problem}{also}") from None
