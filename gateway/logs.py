"""structlog setup: readable on a terminal, JSON otherwise; context from contextvars.

Every line logged inside a turn carries ``session`` (bound by the agent loop) and, while
a confirmation is being asked, ``confirmation_id``.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import structlog

_SECRET_KEYS = re.compile(r"(secret|token|password|api_key|authorization|encrypt_key)", re.I)


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Belt and braces: a value logged under a secret-looking key is never printed."""
    for key in list(event):
        if key != "event" and _SECRET_KEYS.search(key) and event[key]:
            event[key] = "***"
    return event


def configure_logging(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Our own lines take structlog's native path (the stdlib path costs ~3x per line, see
    docs/performance.md); third-party stdlib loggers are rendered the same way."""
    stream = stream or sys.stderr
    use_console = fmt == "console" or (fmt == "auto" and stream.isatty())
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=stream.isatty())
        if use_console
        else structlog.processors.JSONRenderer(ensure_ascii=False)
    )
    tail: list[Any] = [] if use_console else [structlog.processors.format_exc_info]
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _redact,
    ]
    numeric = logging.getLevelName(level.upper())
    structlog.configure(
        processors=[*shared, structlog.processors.StackInfoRenderer(), *tail, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.WriteLoggerFactory(file=stream),
        # Not cached: tests and `gateway chat` reconfigure after modules have logged.
        cache_logger_on_first_use=False,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail, renderer],
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    # Chatty libraries: their INFO lines are noise for an operator.
    for name in ("aiohttp.access", "sqlglot", "httpx", "Lark", "dingtalk_stream"):
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
