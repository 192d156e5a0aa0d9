"""The execution ledger across real processes (issue 12): kill -9, SIGTERM, a dead owner.

Real ``gateway serve`` subprocesses on one SQLite data dir, the loopback OpenAI fake as
the model, and a plugin tool that appends a line to a file (to count its runs) and then
sleeps.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gateway.confirm.model import Confirmation, ExecState, Instance, Status, ToolCall
from gateway.storage.sqlite.confirmations import SqliteConfirmationStore
from tests.fakes.openai_server import FakeOpenAI, text, tool_calls
from tests.webchat.support import ServeProcess, wait_until

ROOM = "ledger"
PLUGIN = '''
import os
import time

from gateway.tools.base import tool


@tool(requires_confirmation=True)
def slow_write(seconds: float) -> str:
    """Append a line to the runs file, then sleep."""
    with open(os.environ["SLOW_RUNS_FILE"], "a", encoding="utf-8") as f:
        f.write("run\\n")
    time.sleep(seconds)
    return f"slept {seconds}"
'''


@pytest.fixture
def fake_llm(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    with FakeOpenAI() as server:
        yield server


def _env(tmp_path: Path, fake: FakeOpenAI | None) -> dict[str, str]:
    (tmp_path / "slow_tools.py").write_text(PLUGIN, encoding="utf-8")
    env = {
        "PYTHONPATH": str(tmp_path),
        "SLOW_RUNS_FILE": str(tmp_path / "runs.txt"),
        "GATEWAY_CONFIRMATION__STORE": "sqlite",
        "GATEWAY_CONFIRMATION__LEASE_SECONDS": "3",
        "GATEWAY_TOOLS__PLUGINS": '["slow_tools"]',
    }
    if fake is not None:
        env.update(
            GATEWAY_LLM__BASE_URL=fake.base_url,
            GATEWAY_LLM__API_KEY=fake.api_key,
            GATEWAY_LLM__MODEL="fake-model",
        )
    return env


def _runs(tmp_path: Path) -> int:
    path = tmp_path / "runs.txt"
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def _request(url: str, method: str = "GET", body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def _chat(serve: ServeProcess, text_: str) -> None:
    _request(f"{serve.url}/api/chat/{ROOM}/messages", "POST", {"user": "alice", "text": text_})


def _lines(serve: ServeProcess) -> list[str]:
    """The room's lines of text (a card's updates say how the call ended too)."""
    messages = _request(f"{serve.url}/api/chat/{ROOM}/messages")["messages"]
    return [m["text"] for m in messages if m["kind"] == "text"]


def _pending_id(serve: ServeProcess) -> str:
    found: list[str] = []

    def asked() -> bool:
        items = _request(f"{serve.url}/api/confirmations?status=pending")["confirmations"]
        found[:] = [c["id"] for c in items]
        return bool(found)

    wait_until(asked, timeout=20)
    return found[0]


def _record(data_dir: Path, cid: str) -> Confirmation:
    async def read() -> Confirmation:
        store = await SqliteConfirmationStore.open(data_dir / "confirmations.db")
        try:
            record = await store.get(cid)
        finally:
            await store.close()
        assert record is not None
        return record

    return asyncio.run(read())


def _approve_and_wait_for_run(serve: ServeProcess, tmp_path: Path) -> str:
    _chat(serve, "睡一会 / sleep a while")
    cid = _pending_id(serve)
    _request(
        f"{serve.url}/api/confirmations/{cid}/decision",
        "POST",
        {"decision": "approve", "actor": "alice"},
    )
    wait_until(lambda: _runs(tmp_path) == 1, timeout=20)
    return cid


def test_kill_9_while_a_call_runs_is_reported_interrupted_after_restart(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(tool_calls(("slow_write", {"seconds": 60})), text("done"))
    first = ServeProcess(tmp_path=tmp_path, env=_env(tmp_path, fake_llm))
    first.start()
    try:
        cid = _approve_and_wait_for_run(first, tmp_path)
        assert first.proc is not None
        first.proc.send_signal(signal.SIGKILL)
        assert first.proc.wait(20) == -signal.SIGKILL
    finally:
        first.stop()
    assert _record(first.data_dir, cid).execution.state is ExecState.RUNNING

    second = ServeProcess(tmp_path=tmp_path, env=_env(tmp_path, fake_llm))
    second.start()
    try:
        wait_until(
            lambda: _record(second.data_dir, cid).execution.state is ExecState.INTERRUPTED,
            timeout=30,
        )
        wait_until(lambda: any("中断" in line for line in _lines(second)), timeout=10)
        told = [line for line in _lines(second) if "中断" in line]
        assert len(told) == 1 and "may or may not have taken effect" in told[0]
        events = _request(f"{second.url}/api/confirmations/{cid}/events")
        kinds = [e["kind"] for e in events["events"]]
        assert kinds[-1] == "interrupted" and kinds.count("started") == 1
        assert _runs(tmp_path) == 1
        assert second.error_lines() == []
    finally:
        second.stop()


def test_sigterm_lets_a_running_call_finish_and_exits_0(
    tmp_path: Path, fake_llm: FakeOpenAI
) -> None:
    fake_llm.script(tool_calls(("slow_write", {"seconds": 3})), text("done"))
    serve = ServeProcess(tmp_path=tmp_path, env=_env(tmp_path, fake_llm))
    serve.start()
    try:
        cid = _approve_and_wait_for_run(serve, tmp_path)
        assert serve.proc is not None
        serve.proc.send_signal(signal.SIGTERM)
        assert serve.proc.wait(30) == 0
    finally:
        serve.stop()
    record = _record(serve.data_dir, cid)
    assert record.execution.state is ExecState.SUCCEEDED
    assert record.execution.result == "slept 3.0"
    assert _runs(tmp_path) == 1


def test_an_approved_call_of_a_dead_owner_runs_once_in_the_adopter(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    now = time.time()
    dead = Instance(id="gone-1-abcdef", pid=1, host="gone", started_at=now - 100, seen_at=now - 60)
    left = Confirmation(
        id="K7Q2",
        session_key=f"webchat:{ROOM}",
        channel="webchat",
        chat_id=ROOM,
        requester="alice",
        is_group=False,
        tool_call=ToolCall("slow_write", {"seconds": 0.1}, "call_1"),
        summary="slow_write",
        created_at=now - 30,
        expires_at=now + 270,
        owner=dead.id,
    )

    async def leave() -> None:
        store = await SqliteConfirmationStore.open(data_dir / "confirmations.db")
        try:
            await store.create(left)
            await store.heartbeat(dead, lease=3)
            await store.finish(
                left.id, Status.APPROVED, by="alice", via="text", reason=None, now=now - 20
            )
        finally:
            await store.close()

    asyncio.run(leave())
    serve = ServeProcess(tmp_path=tmp_path, env=_env(tmp_path, None))
    serve.start()
    try:
        wait_until(
            lambda: _record(data_dir, left.id).execution.state is ExecState.SUCCEEDED,
            timeout=20,
        )
        record = _record(data_dir, left.id)
        assert record.owner != dead.id and record.execution.attempts == 1
        assert _runs(tmp_path) == 1
    finally:
        assert serve.stop() == 0
    assert _runs(tmp_path) == 1
