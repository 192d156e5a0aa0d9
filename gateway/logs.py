"""structlog setup: readable on a terminal, JSON otherwise; context from contextvars.

Every line logged inside a turn carries ``session`` (bound by the agent loop, or passed
on the line) and, while a confirmation is being asked, ``confirmation_id``.

Speed (docs/performance.md): a confirmation round trip writes two lines, so a line must be
cheap. Our own lines take structlog's native path with loggers cached on first use; to
let ``configure_logging`` (and ``structlog.testing.capture_logs``) still change what
cached loggers do, they all share ONE processor list, changed in place, and ONE output
whose stream is swapped; the level is a processor, not a wrapper class. JSON is encoded
with orjson. Third-party stdlib loggers are rendered the same way through
``ProcessorFormatter``.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import re
import sys
import threading
import time
from collections.abc import MutableMapping
from typing import Any, TextIO

import orjson
import structlog

_SECRET_KEYS = re.compile(r"(secret|token|password|api_key|authorization|encrypt_key)", re.I)
# Key -> whether it looks secret. Keys are names from our code, so this stays small; it is
# bounded anyway in case something logs with keys taken from input.
_secret_key_memo: dict[str, bool] = {}

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}
_threshold = logging.INFO


def _is_secret_key(key: str) -> bool:
    secret = _secret_key_memo.get(key)
    if secret is None:
        if len(_secret_key_memo) > 1024:
            _secret_key_memo.clear()
        secret = _secret_key_memo[key] = key != "event" and bool(_SECRET_KEYS.search(key))
    return secret


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Belt and braces: a value logged under a secret-looking key is never printed."""
    memo = _secret_key_memo
    for key in event:
        secret = memo.get(key)
        if (secret or (secret is None and _is_secret_key(key))) and event[key]:
            event[key] = "***"
    return event


def _drop_below_level(_: Any, method: str, event: MutableMapping[str, Any]) -> Any:
    if _LEVELS.get(method, logging.INFO) < _threshold:
        raise structlog.DropEvent
    return event


# (whole second, its ISO text): formatting the date once per second, not once per line.
_second: tuple[int, str] = (-1, "")


def _timestamp(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """``timestamp`` in ISO 8601 UTC with microseconds, like TimeStamper(fmt="iso", utc=True)."""
    global _second
    now = time.time()
    whole = int(now)
    if whole != _second[0]:
        _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
    event["timestamp"] = f"{_second[1]}.{int((now - whole) * 1_000_000):06d}Z"
    return event


def _orjson_dumps(obj: Any, default: Any = None, **_: Any) -> str:
    return orjson.dumps(obj, default=default, option=orjson.OPT_NON_STR_KEYS).decode()


class _Output:
    """The one logger behind every bound logger, and behind stdlib's handler too.

    On an event loop's thread, lines are collected and written together when the loop
    finishes its current pass (one write system call per pass instead of one per line: a
    confirmation round trip writes two lines, docs/performance.md). Errors, and lines from
    threads without a running loop (channel SDK threads, the CLI), are written at once,
    with whatever was collected before them, so the order of lines is kept.
    """

    def __init__(self) -> None:
        self.stream: TextIO | None = None  # None: whatever sys.stderr is when writing
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._flush_loop: asyncio.AbstractEventLoop | None = None  # the pass that will write

    def _loop_pass_flush(self) -> None:
        with self._lock:
            self._write_pending()

    def _write_pending(self) -> None:
        if self._pending:
            text = "\n".join(self._pending) + "\n"
            self._pending.clear()
            stream = self.stream or sys.stderr
            try:
                stream.write(text)
                stream.flush()
            except (OSError, ValueError):
                # A closed or broken stream must not take the caller (or the event loop's
                # pass) down with it; the lines are lost, as with a failing StreamHandler.
                pass

    def msg(self, message: str) -> None:
        """Write at the end of this loop pass, or now when there is no running loop."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.now(message)
            return
        with self._lock:
            if self._pending and self._flush_loop is not loop:
                # Collected on a loop that ended before its next pass: out with them now.
                self._write_pending()
            first = not self._pending
            self._pending.append(message)
            if first:
                self._flush_loop = loop
        if first:
            try:
                loop.call_soon(self._loop_pass_flush)
            except RuntimeError:  # the loop is closing: no later pass
                self.flush()

    def now(self, message: str) -> None:
        """Write ``message`` (after anything collected) before returning."""
        with self._lock:
            self._pending.append(message)
            self._write_pending()

    def flush(self) -> None:
        with self._lock:
            self._write_pending()

    log = debug = info = warn = warning = failure = msg
    error = critical = exception = fatal = err = now


class _OutputHandler(logging.Handler):
    """stdlib records (third-party loggers) through the same output, so order is kept."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        if record.levelno >= logging.ERROR:
            _OUTPUT.now(line)
        else:
            _OUTPUT.msg(line)


_OUTPUT = _Output()
atexit.register(_OUTPUT.flush)


# Cached loggers hold this very list: configure_logging changes it in place.
_PROCESSORS: list[Any] = []


def _output_factory(*_: Any) -> _Output:
    return _OUTPUT


def configure_logging(level: str = "info", fmt: str = "auto", stream: TextIO | None = None) -> None:
    """Configure our lines and third-party stdlib lines; may be called again at any time.

    Without ``stream``, lines go to whatever ``sys.stderr`` is at the time of writing.
    """
    global _threshold
    tty = (stream or sys.stderr).isatty()
    use_console = fmt == "console" or (fmt == "auto" and tty)
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=tty)
        if use_console
        else structlog.processors.JSONRenderer(serializer=_orjson_dumps)
    )
    tail: list[Any] = [] if use_console else [structlog.processors.format_exc_info]
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        _timestamp,
        _redact,
    ]
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    _threshold = numeric
    _OUTPUT.flush()  # what was logged so far goes to the stream it was logged for
    _OUTPUT.stream = stream
    _PROCESSORS[:] = [
        _drop_below_level,
        *shared,
        structlog.processors.StackInfoRenderer(),
        *tail,
        renderer,
    ]
    structlog.configure(
        processors=_PROCESSORS,
        # Every level reaches the processors, where _drop_below_level applies the current
        # threshold: a wrapper class fixed at one level would stay in cached loggers.
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=_output_factory,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *tail, renderer],
    )
    handler = _OutputHandler()
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    # Chatty libraries: their INFO lines are noise for an operator.
    for name in ("aiohttp.access", "sqlglot", "httpx", "Lark", "dingtalk_stream"):
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
