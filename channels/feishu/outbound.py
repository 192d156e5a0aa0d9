"""Reliable sends: per-chat pacing, retry with backoff, idempotency keys, dead letters."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from channels.feishu.api import ApiResult, FeishuApi, TokenError
from channels.platform import DeadLetters
from gateway.runtime import after_failure_retrying

log = structlog.get_logger(__name__)

# Feishu allows 5 messages per second to one user or group (shared by all bots in it).
CHAT_INTERVAL_SECONDS = 0.22
# A message id goes into the URL path of reply and patch calls (the SDK does not escape
# it): only ids shaped like Feishu's ("om_" + letters and digits) are used there.
MESSAGE_ID = re.compile(r"[A-Za-z0-9_\-]{1,128}")


@dataclass(frozen=True, slots=True)
class _About:
    """What a dead letter says about the message (the API call itself knows only its chat)."""

    chat_id: str
    kind: str
    text: str
    confirmation_id: str | None


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
        dead_letters: DeadLetters,
        max_attempts: int,
        backoff_initial: float,
        backoff_max: float,
    ) -> None:
        self.api = api
        self.pacer = ChatPacer()
        self.dead_letters = dead_letters
        self._max_attempts = max_attempts
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max

    async def _attempts(
        self, chat_id: str, call: Callable[[], Awaitable[ApiResult]]
    ) -> tuple[ApiResult, int]:
        attempts = 0

        async def once() -> ApiResult:
            nonlocal attempts
            attempts += 1
            await self.pacer.wait(chat_id)
            try:
                result = await call()
            except TokenError as exc:
                result = exc.result
            if not result.ok and result.retryable:
                log.warning(
                    "feishu.send_retry",
                    chat_id=chat_id,
                    status=result.status,
                    code=result.code,
                    error=result.msg,
                    attempt=attempts,
                )
                raise _Retry(result)
            return result

        try:
            result = await after_failure_retrying(
                once,
                attempts=self._max_attempts,
                initial=self._backoff_initial,
                maximum=self._backoff_max,
                retry_on=lambda exc: isinstance(exc, _Retry),
            )
        except _Retry as exc:
            result = exc.result
        return result, attempts

    def _dead_letter(self, op: str, about: _About, result: ApiResult, attempts: int) -> None:
        self.dead_letters.add(
            chat_id=about.chat_id,
            kind=about.kind,
            text=about.text,
            error=result.msg,
            attempts=attempts,
            confirmation_id=about.confirmation_id,
            op=op,
            status=result.status,
            code=result.code,
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
        receive_id_type: str = "chat_id",
    ) -> ApiResult:
        """Create (or reply with) one message; one uuid for all attempts, so no duplicates.

        ``receive_id_type="open_id"`` sends to a person's direct chat (``chat_id`` is then
        their open_id).
        """
        idem = str(uuid.uuid4())
        if reply_to and not MESSAGE_ID.fullmatch(reply_to):
            log.warning("feishu.bad_message_id", chat_id=chat_id, op="reply")
            reply_to = None

        async def call() -> ApiResult:
            if reply_to:
                return await self.api.reply(
                    message_id=reply_to, msg_type=msg_type, content=content, uuid=idem
                )
            return await self.api.create(
                chat_id=chat_id,
                msg_type=msg_type,
                content=content,
                uuid=idem,
                receive_id_type=receive_id_type,
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
            about = _About(chat_id, kind, text, confirmation_id)
            self._dead_letter("reply" if reply_to else "create", about, result, attempts)
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
        if not MESSAGE_ID.fullmatch(message_id):
            log.warning("feishu.bad_message_id", chat_id=chat_id, op="patch")
            return ApiResult(0, -1, "not a Feishu message id")

        async def call() -> ApiResult:
            return await self.api.patch(message_id=message_id, content=content)

        result, attempts = await self._attempts(chat_id, call)
        if not result.ok:
            self._dead_letter(
                "patch", _About(chat_id, kind, text, confirmation_id), result, attempts
            )
        return result
