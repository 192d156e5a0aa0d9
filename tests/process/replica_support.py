"""Replicas as real ``gateway serve`` processes on one Redis (issue 13), for the process
tests beside this file and bench/replicas_load.py.

Each replica has its own directory (data dir, keywords file, inbox) and web chat; they
share the Redis store under one prefix, the loopback OpenAI fake as their model, and a
plugin tool, ``gated_write``, that appends its name to a runs file (to count its runs) and
then waits until a gate file for that name exists (to hold a call mid-run), and the same
tool promised idempotent, ``gated_put``.
"""

from __future__ import annotations

import asyncio
import re
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from tests.admin.test_api import read_event
from tests.fakes.openai_server import Answer, FakeOpenAI, text, tool_calls
from tests.webchat.support import ServeProcess, eventually

PLUGIN = '''
import os
import time
from pathlib import Path

from gateway.tools.base import tool


@tool(requires_confirmation=True)
def gated_write(name: str) -> str:
    """Append name to the runs file, then wait until the gate file for name exists."""
    runs = Path(os.environ["REPLICA_RUNS_DIR"])
    with open(runs / "runs.txt", "a", encoding="utf-8") as f:
        f.write(name + "\\n")
    while not (runs / f"gate-{name}").exists():
        time.sleep(0.02)
    return f"wrote {name}"


@tool(requires_confirmation=True, idempotent=True)
def gated_put(name: str) -> str:
    """gated_write, promised idempotent: a call whose run was cut off may run once more."""
    return gated_write(name)
'''

_ASKED = re.compile(r"\b(write|put) (\S+)")


def respond(body: dict[str, Any]) -> Answer:
    """The model: "write NAME" asks for ``gated_write(NAME)``, "put NAME" for
    ``gated_put(NAME)``; a tool result ends the turn."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return text(f"done: {last['content']}")
    found = _ASKED.search(str(last.get("content") or ""))
    verb, name = found.groups() if found else ("write", "unnamed")
    return tool_calls((f"gated_{verb}", {"name": name}))


def script_model(fake: FakeOpenAI, requests: int) -> None:
    fake.script(*[respond] * requests)


@dataclass
class Replica:
    """One ``gateway serve`` of the set; ``url`` is its HTTP server."""

    name: str
    process: ServeProcess

    @property
    def url(self) -> str:
        return self.process.url

    def kill_9(self) -> None:
        proc = self.process.proc
        assert proc is not None
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(20) == -signal.SIGKILL

    def freeze(self) -> None:
        """SIGSTOP: alive to the kernel, silent to everyone else."""
        assert self.process.proc is not None
        self.process.proc.send_signal(signal.SIGSTOP)

    def stop(self) -> int | None:
        return self.process.stop()

    def errors(self) -> list[str]:
        return self.process.error_lines()


class ReplicaSet:
    """Replicas of one bot sharing ``redis_url`` under ``prefix``; runs counted in ``runs``.

    ``up`` holds each name's running process; ``replicas`` every process ever started.
    """

    def __init__(
        self,
        root: Path,
        *,
        redis_url: str,
        prefix: str,
        fake: FakeOpenAI,
        lease: float,
        **settings: str,
    ) -> None:
        self.root = root
        self.runs = root / "runs"
        self.runs.mkdir(parents=True, exist_ok=True)
        (root / "replica_tools.py").write_text(PLUGIN, encoding="utf-8")
        self.env = {
            "PYTHONPATH": str(root),
            "REPLICA_RUNS_DIR": str(self.runs),
            "GATEWAY_CONFIRMATION__STORE": "redis",
            "GATEWAY_CONFIRMATION__REDIS_URL": redis_url,
            "GATEWAY_CONFIRMATION__REDIS_PREFIX": prefix,
            "GATEWAY_CONFIRMATION__LEASE_SECONDS": f"{lease:g}",
            "GATEWAY_TOOLS__PLUGINS": '["replica_tools"]',
            "GATEWAY_LLM__BASE_URL": fake.base_url,
            "GATEWAY_LLM__API_KEY": fake.api_key,
            "GATEWAY_LLM__MODEL": "fake-model",
            **settings,
        }
        self.replicas: list[Replica] = []
        self.up: dict[str, Replica] = {}

    def start(self, name: str) -> Replica:
        """Start replica ``name``; a name started again (a restart) reuses its home."""
        home = self.root / name
        home.mkdir(exist_ok=True)
        replica = Replica(name, ServeProcess(tmp_path=home, env=self.env))
        self.replicas.append(replica)
        replica.process.start(timeout=60)
        self.up[name] = replica
        return replica

    def kill_9(self, name: str) -> None:
        self.up.pop(name).kill_9()

    def sigterm(self, name: str) -> int | None:
        """Stop replica ``name`` as a supervisor does; its exit status."""
        return self.up.pop(name).stop()

    def stop(self) -> None:
        self.up.clear()
        for replica in self.replicas:
            replica.stop()

    def save_logs(self, into: Path) -> None:
        """Each process's log as ``<name>-<n>.log`` (n: the order they were started in)."""
        for n, replica in enumerate(self.replicas):
            text_ = "".join(replica.process.lines)
            (into / f"{replica.name}-{n}.log").write_text(text_, encoding="utf-8")

    def open_gate(self, name: str) -> None:
        (self.runs / f"gate-{name}").touch()

    def runs_of(self) -> list[str]:
        path = self.runs / "runs.txt"
        return path.read_text(encoding="utf-8").split() if path.exists() else []


# ---------------------------------------------------------------------- HTTP


async def say(http: aiohttp.ClientSession, room: str, text_: str, user: str = "alice") -> None:
    async with http.post(f"/api/chat/{room}/messages", json={"user": user, "text": text_}) as r:
        assert r.status == 202, await r.text()


async def chat_lines(http: aiohttp.ClientSession, room: str) -> list[dict[str, Any]]:
    async with http.get(f"/api/chat/{room}/messages") as resp:
        assert resp.status == 200, await resp.text()
        return list((await resp.json())["messages"])


async def decide(
    http: aiohttp.ClientSession, cid: str, decision: str = "approve", actor: str = "alice"
) -> dict[str, Any]:
    async with http.post(
        f"/api/confirmations/{cid}/decision", json={"decision": decision, "actor": actor}
    ) as resp:
        assert resp.status == 200, await resp.text()
        body: dict[str, Any] = await resp.json()
        return body


async def record(http: aiohttp.ClientSession, cid: str) -> dict[str, Any]:
    async with http.get(f"/api/confirmations/{cid}") as resp:
        assert resp.status == 200, await resp.text()
        found: dict[str, Any] = (await resp.json())["confirmation"]
        return found


async def trail(http: aiohttp.ClientSession, cid: str) -> list[str]:
    """The kinds of the audit trail's events, oldest first."""
    async with http.get(f"/api/confirmations/{cid}/events") as resp:
        assert resp.status == 200, await resp.text()
        return [e["kind"] for e in (await resp.json())["events"]]


async def next_event(
    sse: aiohttp.ClientResponse, kind: str, *, timeout: float, cid: str | None = None
) -> dict[str, Any]:
    """The next ``confirmation.<kind>`` SSE event (for ``cid``), within ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        left = deadline - loop.time()
        if left <= 0:
            raise AssertionError(f"no confirmation.{kind} event for {cid} within {timeout} s")
        try:
            event = await read_event(sse, timeout=left)
        except TimeoutError:
            continue
        if event["event"] == f"confirmation.{kind}" and cid in (None, event["data"]["id"]):
            return event


async def pending_id(http: aiohttp.ClientSession, room: str, timeout: float = 30.0) -> str:
    """The id on the room's pending confirmation card, once it is shown."""

    async def probe() -> str | None:
        for m in await chat_lines(http, room):
            c = m.get("confirmation")
            if m["kind"] == "confirmation" and c and c["status"] == "pending":
                return str(c["id"])
        return None

    return await eventually(probe, timeout=timeout)
