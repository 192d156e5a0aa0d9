"""structlog setup: readable on a terminal, JSON otherwise; context from contextvars.

Every line logged inside a turn carries ``session`` (bound by the agent loop, or passed
on the line) and, while a confirmation is being asked, ``confirmation_id``. Our lines go
through the standard library's logging, as structlog documents, so one handler renders
them and third-party lines alike, and a broken stream never breaks the caller.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

_SECRET_KEYS = re.compile(r"secret|token|password|api_key|authorization|encrypt_key", re.I)
# Chatty libraries: their INFO lines are noise for an operator.
_QUIET = ("aiohttp.access", "sqlglot", "httpx", "Lark", "dingtalk_stream")


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Belt and braces: a value logged under a secret-looking key is never printed."""
    for key, value in event.items():
        if value and key != "event" and _SECRET_KEYS.search(key):
            event[key] = "***"
    return event


def configure_logging(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Route our lines and third-party lines to ``stream`` (stderr); may be called again."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    stream = stream or sys.stderr
    console = fmt == "console" or (fmt == "auto" and stream.isatty())
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=stream.isatty())
        if console
        else structlog.processors.JSONRenderer()
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _redact,
    ]
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *([] if console else [structlog.processors.format_exc_info]),
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, numeric))
