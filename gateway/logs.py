"""structlog setup: readable on a terminal, JSON otherwise; context from contextvars.

Lines logged inside a turn carry ``session`` (bound by the agent loop); lines about a
confirmation carry ``confirmation_id``. Third-party stdlib lines are rendered the same way
through ``ProcessorFormatter`` and written to the same output.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
import time
from collections.abc import Callable, MutableMapping
from typing import Any, TextIO

import orjson
import structlog

_SECRET_KEY = re.compile("secret|token|password|api_key|authorization|encrypt_key", re.I)
# Chatty libraries: their INFO lines are noise for an operator.
_QUIET = ("aiohttp.access", "sqlglot", "httpx", "Lark", "dingtalk_stream")


# Keys are names in our code and the libraries': a few hundred at most. Remembered: the
# search per key was about 3 % of a round trip's instructions in bench/confirm_roundtrip.py.
@functools.lru_cache(maxsize=1024)
def _secret(key: str) -> bool:
    return key != "event" and _SECRET_KEY.search(key) is not None


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Belt and braces: a value logged under a secret-looking key is never printed."""
    for key, value in event.items():
        if value and _secret(key):
            event[key] = "***"
    return event


# One strftime per second, not datetime's isoformat per line: that was ~3 % of a round
# trip's instructions in bench/confirm_roundtrip.py (two lines each).
@functools.lru_cache(maxsize=1)
def _utc_second(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def _timestamp(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """``timestamp`` in ISO 8601, UTC, with microseconds: ``2026-11-23T14:37:44.123456Z``."""
    now = time.time()
    second = int(now)
    event["timestamp"] = f"{_utc_second(second)}.{int((now - second) * 1e6):06d}Z"
    return event


def _orjson(obj: Any, **kw: Any) -> str:
    return orjson.dumps(obj, default=kw.get("default")).decode()


class _Output(logging.Handler):
    """Where every line goes: structlog's (``msg``) and third-party stdlib records (``emit``).

    A closed or broken stream loses the line, never the caller: a log call that raised
    inside a decision would leave it half done. Without a stream, lines go to whatever
    ``sys.stderr`` is when they are written.
    """

    def __init__(self, stream: TextIO | None) -> None:
        super().__init__()
        self._stream = stream

    def msg(self, message: str) -> None:
        stream = self._stream or sys.stderr
        try:
            with self.lock:  # type: ignore[union-attr]  # created by Handler.__init__
                stream.write(message + "\n")
                stream.flush()
        except (OSError, ValueError):
            pass

    debug = info = warning = warn = error = critical = exception = fatal = log = msg

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.msg(self.format(record))
        except Exception:  # logging's own rule: a bad record never breaks the caller
            self.handleError(record)


def configure_logging(
    level: str = "info", fmt: str = "auto", stream: TextIO | None = None, *, cache: bool = False
) -> None:
    """Configure our lines and third-party stdlib lines; may be called again at any time.

    ``cache``: each logger keeps the configuration it first logs with, for a process that
    configures once (``gateway serve``, ``chat``); a bound logger per line was ~3 % of a
    round trip in bench/confirm_roundtrip.py. Left off, loggers already in use follow a
    later call (and tests' ``structlog.testing.capture_logs``).
    """
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    tty = (stream or sys.stderr).isatty()
    console = fmt == "console" or (fmt == "auto" and tty)
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=tty)
        if console
        # orjson, as structlog's docs advise: with the stdlib encoder a confirmation round
        # trip costs about 9 % more CPU (bench/confirm_roundtrip.py).
        else structlog.processors.JSONRenderer(serializer=_orjson)
    )
    exc_info: list[Any] = [] if console else [structlog.processors.format_exc_info]
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _timestamp,
        _redact,
    ]
    output = _Output(stream)
    structlog.configure(
        processors=[*shared, structlog.processors.StackInfoRenderer(), *exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=lambda *_: output,
        cache_logger_on_first_use=cache,
    )
    output.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [output]
    root.setLevel(numeric)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, numeric))


class RateLimitedLine:
    """One log line per ``interval`` seconds for something that can happen a thousand times
    a second, saying how often it did: ``count`` since the line before.

    The first time is logged at once; later ones within the interval are only counted, and
    the next one after it logs the count. Out of file descriptors, asyncio reported each
    failed accept with a traceback: ~19 MB of log in 30 s (issue 22).
    """

    def __init__(
        self,
        event: str,
        *,
        interval: float,
        level: str = "warning",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.event = event
        self.interval = interval
        self._level = logging.getLevelName(level.upper())
        self._clock = clock
        self._count = 0
        self._last: float | None = None

    def hit(self, **fields: Any) -> None:
        """Count one occurrence; log it with ``fields`` when the interval has passed."""
        self._count += 1
        now = self._clock()
        if self._last is not None and now - self._last < self.interval:
            return
        structlog.get_logger(__name__).log(self._level, self.event, count=self._count, **fields)
        self._count = 0
        self._last = now
