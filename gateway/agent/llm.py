"""An OpenAI-compatible chat model (OpenAI, DeepSeek, Qwen/DashScope, Moonshot, vLLM, Ollama).

One non-streaming ``chat.completions`` call per step, with the tool registry's function
schemas. Retries (429, 5xx, timeouts, connection errors) are ours, on the gateway's one
retry policy (``gateway.runtime``), waiting longer when the server's Retry-After asks
for it. The SDK's own retries are switched off, so ``llm.max_retries`` is the real
count. Errors a person cannot fix by waiting (bad key, unknown model) are not retried and
become ``LlmError`` with one sentence for the chat.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import openai
import structlog
from openai import AsyncOpenAI
from tenacity import RetryCallState

from config.settings import LlmSettings
from gateway import texts
from gateway.runtime import backoff, retrying

# (model, "ok" or the error kind, seconds including retries): how the metrics see a request.
ModelRequestObserver = Callable[[str, str, float], None]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ModelToolCall:
    id: str
    name: str
    arguments: str  # JSON text as the model wrote it; may be malformed


@dataclass(frozen=True, slots=True)
class ModelReply:
    content: str | None
    tool_calls: tuple[ModelToolCall, ...] = ()
    finish_reason: str | None = None

    def as_message(self) -> dict[str, Any]:
        """The assistant message to keep in the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        return message


class LlmError(Exception):
    """The model could not answer. ``chat_text`` is what the person is told."""

    def __init__(self, chat_text: str, *, kind: str, status: int | None = None) -> None:
        super().__init__(f"{kind} (status {status})" if status else kind)
        self.chat_text = chat_text
        self.kind = kind
        self.status = status


def _retryable(exc: BaseException) -> bool:
    # APITimeoutError is an APIConnectionError; InternalServerError is any 5xx.
    return isinstance(
        exc, openai.RateLimitError | openai.InternalServerError | openai.APIConnectionError
    )


def _as_llm_error(exc: Exception) -> LlmError:
    if isinstance(exc, openai.APITimeoutError):
        return LlmError(texts.MODEL_TIMEOUT, kind="timeout")
    if isinstance(exc, openai.APIConnectionError):
        return LlmError(texts.MODEL_UNREACHABLE, kind="connection")
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return LlmError(texts.MODEL_AUTH_FAILED, kind="auth", status=exc.status_code)
    if isinstance(exc, openai.NotFoundError):
        return LlmError(texts.MODEL_NOT_FOUND, kind="not_found", status=exc.status_code)
    if isinstance(exc, openai.RateLimitError | openai.InternalServerError):
        return LlmError(texts.MODEL_UNAVAILABLE, kind="unavailable", status=exc.status_code)
    if isinstance(exc, openai.APIStatusError):
        return LlmError(texts.MODEL_BAD_REQUEST, kind="refused", status=exc.status_code)
    return LlmError(texts.MODEL_BAD_REQUEST, kind=type(exc).__name__)


class ChatModel:
    """The model client. One per gateway; safe to share between sessions."""

    def __init__(
        self,
        settings: LlmSettings,
        *,
        client: AsyncOpenAI | None = None,
        on_request: ModelRequestObserver | None = None,
    ) -> None:
        self._on_request = on_request
        if not settings.model:
            raise ValueError("llm.model is not set")
        self.settings = settings
        self.model: str = settings.model
        key = settings.api_key.get_secret_value() if settings.api_key else ""
        self.client = client or AsyncOpenAI(
            # Local servers (Ollama, vLLM) need no key, but the SDK insists on one.
            api_key=key or "not-needed",
            base_url=settings.base_url,
            timeout=settings.timeout_seconds,
            max_retries=0,
        )
        self._backoff = backoff(
            initial=settings.retry_base_seconds, maximum=settings.retry_max_seconds
        )

    async def aclose(self) -> None:
        await self.client.close()

    def _wait(self, state: RetryCallState) -> float:
        """The policy's backoff, or the server's Retry-After when it asks for longer."""
        wait = float(self._backoff(state))
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, openai.APIStatusError):
            after = exc.response.headers.get("retry-after", "")
            with contextlib.suppress(ValueError):
                wait = max(wait, float(after))
        return min(wait, self.settings.retry_max_seconds)

    def _before_sleep(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning(
            "llm.retry",
            attempt=state.attempt_number,
            error=type(exc).__name__,
            status=getattr(exc, "status_code", None),
        )

    def _observe(self, result: str, started: float) -> None:
        if self._on_request is not None:
            self._on_request(self.model, result, time.monotonic() - started)

    async def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> ModelReply:
        """One model step. Raises ``LlmError`` (already logged) when it cannot answer."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "temperature": self.settings.temperature,
        }
        if tools:
            kwargs["tools"] = list(tools)
        started = time.monotonic()
        try:
            policy = retrying(
                attempts=self.settings.max_retries + 1,
                initial=self.settings.retry_base_seconds,
                maximum=self.settings.retry_max_seconds,
                retry_on=_retryable,
                before_sleep=self._before_sleep,
            )
            # Retry-After on top of the policy's backoff (never shorter than the backoff).
            async for attempt in policy.copy(wait=self._wait):
                with attempt:
                    response = await self.client.chat.completions.create(**kwargs)
        except openai.OpenAIError as exc:
            error = _as_llm_error(exc)
            self._observe(error.kind, started)
            # The SDK's message can quote a masked key: log the kind and status only.
            log.error(
                "llm.failed",
                kind=error.kind,
                status=error.status,
                model=self.model,
                base_url=str(self.client.base_url),
                error=type(exc).__name__,
            )
            raise error from exc
        self._observe("ok" if response.choices else "no_choices", started)
        if not response.choices:
            log.error("llm.failed", kind="no_choices", model=self.model)
            raise LlmError(texts.MODEL_EMPTY_REPLY, kind="no_choices")
        choice = response.choices[0]
        calls = []
        for tc in choice.message.tool_calls or ():
            function = getattr(tc, "function", None)
            if function is None:
                continue  # a non-function (custom) tool call: we offer none
            calls.append(
                ModelToolCall(
                    # Some local servers send no id; the tool result must still name one.
                    id=tc.id or f"call_{uuid.uuid4().hex[:16]}",
                    name=function.name,
                    arguments=function.arguments or "{}",
                )
            )
        return ModelReply(
            content=choice.message.content,
            tool_calls=tuple(calls),
            finish_reason=choice.finish_reason,
        )


def parse_arguments(arguments: str) -> dict[str, Any]:
    """The model's JSON arguments as a dict; ValueError with a readable reason otherwise."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"arguments are not valid JSON ({exc.msg} at {exc.pos})") from exc
    if not isinstance(value, dict):
        raise ValueError("arguments must be a JSON object")
    return value
