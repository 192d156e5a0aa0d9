"""A loopback OpenAI-compatible chat-completions server with scripted answers.

It runs aiohttp in its own thread and event loop, so the gateway under test (and the real
``openai`` SDK inside it) never shares a loop with it. ``POST /v1/chat/completions``
answers with the next scripted ``Answer`` and records every request (headers and JSON
body), so tests can assert what the model was sent. It checks the bearer key and the
model name like the real services do (401 / 404 with OpenAI-shaped error bodies).

Script answers with ``text(...)``, ``tool_calls(...)``, ``error(...)`` or ``hold()``
(never answers until ``release()`` or shutdown: a slow model). When the script runs
out the server answers 500 ``script exhausted`` so a test that expected fewer calls fails
loudly instead of hanging.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway.http.server import stop_runner


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    status: int

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    def tool_results(self) -> dict[str, str]:
        """tool_call_id -> content of every tool message in the request."""
        return {
            m["tool_call_id"]: m.get("content") or ""
            for m in self.messages
            if m.get("role") == "tool"
        }


@dataclass(frozen=True, slots=True)
class Answer:
    """One scripted reply. ``hold`` waits for ``release()`` (or shutdown) before answering."""

    status: int = 200
    content: str | None = None
    calls: tuple[tuple[str, dict[str, Any] | str], ...] = ()
    error_type: str = "invalid_request_error"
    error_code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    hold: bool = False


def text(content: str) -> Answer:
    return Answer(content=content)


def tool_calls(*calls: tuple[str, dict[str, Any] | str], content: str | None = None) -> Answer:
    """Calls as (name, args); args may be a raw string to send malformed JSON."""
    return Answer(content=content, calls=tuple(calls))


def error(
    status: int,
    message: str = "error",
    *,
    error_type: str = "server_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    return Answer(
        status=status,
        content=message,
        error_type=error_type,
        error_code=code,
        headers=headers or {},
    )


def hold() -> Answer:
    return Answer(hold=True)


Responder = Callable[[dict[str, Any]], Answer]


class FakeOpenAI:
    """Use as ``with FakeOpenAI() as fake:``; point ``[llm] base_url`` at ``fake.base_url``."""

    def __init__(self, *, api_key: str = "sk-test", models: tuple[str, ...] = ("fake-model",)):
        self.api_key = api_key
        self.models = set(models)
        self._lock = threading.Lock()
        self._script: list[Answer | Responder] = []
        self._requests: list[RecordedRequest] = []
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._release: asyncio.Event | None = None
        self.port = 0

    # ------------------------------------------------------------------ test API

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *answers: Answer | Responder) -> None:
        """Append answers, used in order, one per request."""
        with self._lock:
            self._script.extend(answers)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    async def wait_requests(self, count: int, *, within: float = 10.0) -> list[RecordedRequest]:
        """Wait (polling) until at least ``count`` requests were received."""
        deadline = time.monotonic() + within
        while True:
            got = self.requests
            if len(got) >= count:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"expected {count} model requests, got {len(got)}")
            await asyncio.sleep(0.01)

    def release(self) -> None:
        """Let held answers go."""
        loop, event = self._loop, self._release
        if loop is not None and event is not None:
            loop.call_soon_threadsafe(event.set)

    # ------------------------------------------------------------------ server

    async def _completions(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = {}
        headers = {k.lower(): v for k, v in request.headers.items()}
        answer: Answer | None = None
        if headers.get("authorization") != f"Bearer {self.api_key}":
            answer = error(
                401,
                "Incorrect API key provided.",
                error_type="invalid_request_error",
                code="invalid_api_key",
            )
        elif body.get("model") not in self.models:
            answer = error(
                404,
                f"The model `{body.get('model')}` does not exist or you do not have access to it.",
                error_type="invalid_request_error",
                code="model_not_found",
            )
        else:
            with self._lock:
                step = self._script.pop(0) if self._script else None
            if step is None:
                answer = error(500, "script exhausted: the test did not expect this request")
            else:
                answer = step if isinstance(step, Answer) else step(body)
        with self._lock:
            self._requests.append(
                RecordedRequest(request.path, headers, body, 200 if answer.hold else answer.status)
            )
        if answer.hold:
            assert self._release is not None
            await self._release.wait()
            return web.json_response(
                self._completion(body, Answer(content="(released)")), status=200
            )
        if answer.status != 200:
            payload = {
                "error": {
                    "message": answer.content or "error",
                    "type": answer.error_type,
                    "param": None,
                    "code": answer.error_code,
                }
            }
            return web.json_response(payload, status=answer.status, headers=answer.headers)
        return web.json_response(self._completion(body, answer))

    def _completion(self, body: dict[str, Any], answer: Answer) -> dict[str, Any]:
        n = next(self._ids)
        message: dict[str, Any] = {"role": "assistant", "content": answer.content}
        if answer.calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{n}_{i}",
                    "type": "function",
                    "function": {
                        "name": name,
                        "arguments": args
                        if isinstance(args, str)
                        else json.dumps(args, ensure_ascii=False),
                    },
                }
                for i, (name, args) in enumerate(answer.calls)
            ]
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if answer.calls else "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }

    async def _start(self) -> None:
        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def _stop(self) -> None:
        if self._release is not None:
            self._release.set()
        if self._runner is not None:
            await stop_runner(self._runner)

    def _run(self, ready: Future[None]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._start())
        except BaseException as exc:
            ready.set_exception(exc)
            loop.close()
            return
        ready.set_result(None)
        loop.run_forever()
        loop.run_until_complete(self._stop())
        loop.close()

    def __enter__(self) -> FakeOpenAI:
        ready: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        ready.result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
