"""Reliable sends: per-chat pacing, retry with backoff, idempotency keys, a dead-letter list."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)
from tenacity.wait import wait_base

from channels.feishu.api import ApiResult, FeishuApi, TokenError

log = structlog.get_logger(__name__)

# Feishu allows 5 messages per second to one user or group (shared by all bots in it).
CHAT_INTERVAL_SECONDS = 0.22


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedSend:
    """A message that could not be delivered after every retry (``/api/channels/feishu/failed``)."""

    at: float
    chat_id: str
    op: str  # "create" | "reply" | "patch"
    kind: str  # the outbound kind: text | confirmation | confirmation_update
    status: int
    code: int
    error: str
    attempts: int
    text: str
    confirmation_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def backoff(base: float, cap: float) -> wait_base:
    """Exponential backoff from ``base`` up to ``cap`` seconds, plus up to ``base`` of jitter."""
    # wait_exponential + wait_random take the same arguments in tenacity 8 and 9
    # (9 renamed wait_exponential_jitter's ``initial`` and warns on the old name).
    return wait_exponential(multiplier=base, max=cap) + wait_random(0, base)


class _Retry(Exception):
    def __init__(self, result: ApiResult) -> None:
        super().__init__(result.msg)
        self.result = result


class ChatPacer:
    """Spaces calls to one chat at least ``interval`` apart (a reservation per call)."""

    def __init__(self, *, interval: float = CHAT_INTERVAL_SECONDS) -> None:
        self._interval = interval
        self._next: dict[str, float] = {}

    async def wait(self, chat_id: str) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        slot = max(now, self._next.get(chat_id, 0.0))
        self._next[chat_id] = slot + self._interval
        if len(self._next) > 1024:
            # Forget chats whose slot has passed, so the map stays small in a long run.
            self._next = {k: v for k, v in self._next.items() if v > now}
        if slot > now:
            await asyncio.sleep(slot - now)


class Outbox:
    """Sends through ``FeishuApi`` with pacing and retries; records what finally fails."""

    def __init__(
        self,
        *,
        api: FeishuApi,
        max_attempts: int = 5,
        backoff_initial: float = 0.5,
        backoff_max: float = 8.0,
        dead_letters: int = 200,
    ) -> None:
        self.api = api
        self.pacer = ChatPacer()
        self._max_attempts = max_attempts
        self._backoff = backoff(backoff_initial, backoff_max)
        self.failed: deque[FailedSend] = deque(maxlen=dead_letters)

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _Retry) and exc.result.invalid_token:
            return 0.0  # the token was dropped; a fresh one is fetched at once
        return float(self._backoff(state))

    async def _attempts(
        self, chat_id: str, call: Callable[[], Awaitable[ApiResult]]
    ) -> tuple[ApiResult, int]:
        attempts = 0
        result = ApiResult(0, -1, "not sent")
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self._max_attempts),
                wait=self._wait,
                retry=retry_if_exception_type(_Retry),
                reraise=True,
            ):
                with attempt:
                    attempts += 1
                    await self.pacer.wait(chat_id)
                    try:
                        result = await call()
                    except TokenError as exc:
                        result = exc.result
                    if not result.ok and (result.retryable or result.status == 0):
                        log.warning(
                            "feishu.send_retry",
                            chat_id=chat_id,
                            status=result.status,
                            code=result.code,
                            error=result.msg,
                            attempt=attempts,
                        )
                        raise _Retry(result)
        except _Retry as exc:
            result = exc.result
        return result, attempts

    def _dead_letter(
        self,
        *,
        op: str,
        chat_id: str,
        kind: str,
        text: str,
        result: ApiResult,
        attempts: int,
        confirmation_id: str | None,
    ) -> None:
        entry = FailedSend(
            at=time.time(),
            chat_id=chat_id,
            op=op,
            kind=kind,
            status=result.status,
            code=result.code,
            error=result.msg,
            attempts=attempts,
            text=text[:500],
            confirmation_id=confirmation_id,
        )
        self.failed.append(entry)
        log.error(
            "feishu.send_failed",
            chat_id=chat_id,
            op=op,
            kind=kind,
            status=result.status,
            code=result.code,
            error=result.msg,
            attempts=attempts,
            confirmation_id=confirmation_id,
        )

    async def send(
        self,
        *,
        chat_id: str,
        msg_type: str,
        content: str,
        kind: str,
        text: str,
        reply_to: str | None = None,
        confirmation_id: str | None = None,
        dead_letter: bool = True,
    ) -> ApiResult:
        """Create (or reply with) one message; one uuid for all attempts, so no duplicates."""
        idem = str(uuid.uuid4())
        op = "reply" if reply_to else "create"

        async def call() -> ApiResult:
            if reply_to:
                return await self.api.reply(
                    message_id=reply_to, msg_type=msg_type, content=content, uuid=idem
                )
            return await self.api.create(
                chat_id=chat_id, msg_type=msg_type, content=content, uuid=idem
            )

        result, attempts = await self._attempts(chat_id, call)
        if not result.ok and reply_to and result.status != 0 and not result.retryable:
            # The message replied to may be gone (recalled, or older than reply allows):
            # a plain message in the chat still reaches the person.
            log.info("feishu.reply_fallback", chat_id=chat_id, code=result.code)
            return await self.send(
                chat_id=chat_id,
                msg_type=msg_type,
                content=content,
                kind=kind,
                text=text,
                confirmation_id=confirmation_id,
                dead_letter=dead_letter,
            )
        if not result.ok and dead_letter:
            self._dead_letter(
                op=op,
                chat_id=chat_id,
                kind=kind,
                text=text,
                result=result,
                attempts=attempts,
                confirmation_id=confirmation_id,
            )
        return result

    async def patch(
        self,
        *,
        chat_id: str,
        message_id: str,
        content: str,
        kind: str,
        text: str,
        confirmation_id: str | None = None,
    ) -> ApiResult:
        async def call() -> ApiResult:
            return await self.api.patch(message_id=message_id, content=content)

        result, attempts = await self._attempts(chat_id, call)
        if not result.ok:
            self._dead_letter(
                op="patch",
                chat_id=chat_id,
                kind=kind,
                text=text,
                result=result,
                attempts=attempts,
                confirmation_id=confirmation_id,
            )
        return result
