"""Logs carry the session and confirmation id and never secrets; serve stops on SIGTERM."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog

from config.settings import Settings
from gateway.app import Gateway
from gateway.bus import InboundMessage, OutboundKind
from gateway.logs import configure_logging
from tests.core.test_gateway_flow import RecordingChannel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("info", "json", stream)
    yield stream
    logging.getLogger().handlers.clear()
    structlog.reset_defaults()


async def test_turn_logs_carry_session_and_confirmation_id(
    make_settings: Callable[..., Settings], json_logs: io.StringIO
) -> None:
    gw = Gateway(make_settings(), serve_http=False)
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
        await rec.next(contains="DELETE: 1 rows")
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
