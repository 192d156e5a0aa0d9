"""Logs carry the session and confirmation id and never secrets; serve stops on SIGTERM."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog

from config.settings import Settings
from gateway.app import build
from gateway.bus import InboundMessage, OutboundKind
from gateway.logs import RateLimitedLine, configure_logging
from tests.core.test_gateway_flow import RecordingChannel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    yield stream
    configure_logging("info", "json")  # back to stderr


async def test_turn_logs_carry_session_and_confirmation_id(
    make_settings: Callable[..., Settings], json_logs: io.StringIO
) -> None:
    gw = await build(make_settings(), serve_http=False)
    rec = RecordingChannel()
    gw.channels.add(rec)
    async with gw:
        await gw.bus.publish_inbound(
            InboundMessage(
                channel="rec",
                chat_id="c1",
                sender_id="alice",
                text="/sql DELETE FROM orders WHERE id = 1",
                message_id="a",
            )
        )
        prompt = await rec.next(OutboundKind.CONFIRMATION)
        await gw.bus.publish_inbound(
            InboundMessage(
                channel="rec", chat_id="c1", sender_id="alice", text="确认", message_id="b"
            )
        )
        await rec.next(contains="DELETE: 1 行 / 1 row")
    lines = [json.loads(line) for line in json_logs.getvalue().splitlines() if line.startswith("{")]
    turn_lines = [e for e in lines if e["event"].startswith(("tool.", "confirm.requested"))]
    assert turn_lines
    assert all(e.get("session") == "rec:c1" for e in turn_lines), turn_lines
    requested = [e for e in lines if e["event"] == "confirm.requested"]
    assert requested[0]["confirmation_id"] == prompt.confirmation.id  # type: ignore[union-attr]


def test_secret_looking_fields_are_redacted(json_logs: io.StringIO) -> None:
    structlog.get_logger("t").info("login", app_secret="hunter2", api_key="sk-123", user="bob")
    out = json_logs.getvalue()
    assert "hunter2" not in out
    assert "sk-123" not in out
    line = json.loads(out.splitlines()[-1])
    assert line["user"] == "bob"
    assert line["app_secret"] == line["api_key"] == "***"


def test_a_rate_limited_line_is_written_once_per_interval_with_a_count(
    json_logs: io.StringIO,
) -> None:
    now = [0.0]
    line = RateLimitedLine("disk.full", interval=60.0, clock=lambda: now[0])
    for _ in range(1000):
        line.hit(path="/x")
    now[0] += 59.0
    line.hit(path="/x")
    now[0] += 1.0
    line.hit(path="/y")
    lines = [json.loads(x) for x in json_logs.getvalue().splitlines()]
    assert [(x["event"], x["count"], x["path"], x["level"]) for x in lines] == [
        ("disk.full", 1, "/x", "warning"),
        ("disk.full", 1001, "/y", "warning"),
    ]


def _events(stream: io.StringIO) -> list[str]:
    return [json.loads(line)["event"] for line in stream.getvalue().splitlines()]


def test_our_lines_and_third_party_lines_share_one_stream_in_order(
    json_logs: io.StringIO,
) -> None:
    log = structlog.get_logger("t")
    log.info("before")
    logging.getLogger("some.library").warning("third-party line")
    log.error("boom")
    assert _events(json_logs) == ["before", "third-party line", "boom"]
    third_party = json.loads(json_logs.getvalue().splitlines()[1])
    assert third_party["level"] == "warning"
    assert third_party["logger"] == "some.library"


def test_lines_from_a_thread_are_written(json_logs: io.StringIO) -> None:
    def work() -> None:
        structlog.get_logger("sdk").info("from a thread")

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert _events(json_logs) == ["from a thread"]


def test_console_format_is_for_people() -> None:
    stream = io.StringIO()
    configure_logging("info", "console", stream)
    try:
        structlog.get_logger("t").info("hello", user="bob", api_key="sk-123")
    finally:
        configure_logging("info", "json")
    out = stream.getvalue()
    assert "hello" in out and "user=bob" in out
    assert "sk-123" not in out
    assert not out.startswith("{")


def test_a_broken_log_stream_never_breaks_the_caller() -> None:
    broken = io.StringIO()
    configure_logging("info", "json", broken)
    broken.close()
    log = structlog.get_logger("t")

    def turn() -> str:
        log.info("lost")
        log.error("lost too")
        return "carried on"

    try:
        assert turn() == "carried on"
    finally:
        configure_logging("info", "json")


def test_reconfiguring_reaches_loggers_already_in_use() -> None:
    log = structlog.get_logger("cached")
    first, second = io.StringIO(), io.StringIO()
    configure_logging("info", "json", first)
    log.info("to the first stream")
    configure_logging("warning", "json", second)
    log.info("dropped below warning")
    log.warning("to the second stream")
    configure_logging("info", "json")
    assert _events(first) == ["to the first stream"]
    assert _events(second) == ["to the second stream"]


def test_serve_prints_url_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    env.update(PYTHONPATH=str(ROOT), GATEWAY_DATA_DIR=str(tmp_path / "data"))
    with subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert "http://127.0.0.1:" in line, line
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
