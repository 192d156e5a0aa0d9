"""Parsing untrusted JSON in the channels: bounded nesting, text that is valid Unicode.

A stand-in with the signature of ``gateway.http.jsonapi.parse_json``, which the HTTP
hardening adds (with ``server.max_json_depth``); once that is on main, the channels import
it from there and this module goes.

Why: ``json.loads`` recurses once per nesting level, so 100,000 ``[`` raised
RecursionError (a 500, or a dead WebSocket handler). And a lone surrogate (``"\\ud800"``)
parses into a ``str`` that cannot be encoded again: kept in a web chat room, it broke every
socket that replayed the history.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from config.settings import Settings

# The default of server.max_json_depth.
DEFAULT_MAX_JSON_DEPTH = 64

# A JSON string (possibly unterminated), or one bracket. Brackets inside strings are skipped.
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
# A \u escape of a surrogate: only then can the parsed value hold a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def max_json_depth(settings: Settings) -> int:
    """``server.max_json_depth`` once the settings have it; its default until then."""
    return int(getattr(settings.server, "max_json_depth", DEFAULT_MAX_JSON_DEPTH))


class JsonInputError(ValueError):
    """Input that is not JSON we accept; the message says why, for the client."""


class JsonTooDeep(JsonInputError):
    """JSON, but nested deeper than allowed."""


class JsonNotText(JsonInputError):
    """JSON, but a string in it is not text (a lone surrogate)."""


def parse_json(raw: bytes | str, *, max_depth: int) -> Any:
    """``json.loads`` for input from outside: nesting at most ``max_depth`` levels, no lone
    surrogates, never RecursionError. Raises JsonInputError saying what is wrong."""
    if isinstance(raw, bytes):
        try:
            raw = raw.decode(json.detect_encoding(raw))
        except UnicodeDecodeError as exc:
            raise JsonInputError(f"not valid UTF-8 (at byte {exc.start})") from exc
    depth = 0
    for found in _STRING_OR_BRACKET.finditer(raw):
        token = found.group()
        if token in ("[", "{"):
            depth += 1
            if depth > max_depth:
                raise JsonTooDeep(f"JSON nested deeper than {max_depth} levels")
        elif token in ("]", "}"):
            depth -= 1
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise JsonInputError(f"not valid JSON: {exc}") from exc
    if _SURROGATE_ESCAPE.search(raw):
        _refuse_lone_surrogates(value)
    return value


def _refuse_lone_surrogates(value: Any) -> None:
    """Every string (keys too) must encode as UTF-8; walked without recursion."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise JsonNotText(
                    f"a string holds a lone surrogate (\\u{ord(item[exc.start]):04x}), which is"
                    " not text: send the character itself, or a complete surrogate pair"
                ) from exc
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
