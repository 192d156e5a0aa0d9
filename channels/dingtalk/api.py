"""The DingTalk OpenAPI calls the channel makes, on aiohttp in the gateway's loop.

The SDK's own helpers (``reply_text``, ``CardReplier``, ``get_access_token``) are
synchronous ``requests`` calls that would block the loop they run on, and the SDK
always generates its own ``outTrackId``; so every send is made here instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from channels.platform import CachedToken
from gateway.runtime import after_failure_retrying

log = structlog.get_logger(__name__)

TOKEN_PATH = "/v1.0/oauth2/accessToken"
GROUP_SEND_PATH = "/v1.0/robot/groupMessages/send"
OTO_SEND_PATH = "/v1.0/robot/oToMessages/batchSend"
CARD_CREATE_DELIVER_PATH = "/v1.0/card/instances/createAndDeliver"
CARD_UPDATE_PATH = "/v1.0/card/instances"
TOKEN_HEADER = "x-acs-dingtalk-access-token"

# Refresh the token this long before DingTalk says it expires (the SDK uses 5 min too).
TOKEN_EARLY_REFRESH_SECONDS = 300.0
# Session-webhook error codes that mean "too fast, try later" (robot send flow control).
_WEBHOOK_THROTTLED = {130101, 130102}


class DingTalkApiError(Exception):
    """A DingTalk call failed; ``retryable`` for 429 / 5xx / network errors."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        self.attempts = 1  # how many tries the failed call made


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, DingTalkApiError) and exc.retryable


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    data: dict[str, Any]


class DingTalkApi:
    """Access token cache, robot sends and card instances, with retry and backoff."""

    def __init__(
        self,
        *,
        endpoint: str,
        client_id: str,
        client_secret: str,
        timeout_seconds: float,
        attempts: int,
        retry_base_seconds: float,
        retry_max_seconds: float,
    ) -> None:
        self._endpoint = endpoint.rstrip("/")
        self._client_id = client_id
        self._client_secret = client_secret
        self._timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._attempts = max(1, attempts)
        self._retry_base = retry_base_seconds
        self._retry_max = retry_max_seconds
        self._session: aiohttp.ClientSession | None = None
        self.token = CachedToken(
            fetch=self._fetch_token, refresh_early_seconds=TOKEN_EARLY_REFRESH_SECONDS
        )

    async def start(self) -> None:
        if self._session is None:
            # trust_env: honour HTTP(S)_PROXY / NO_PROXY like the SDK's requests and
            # websockets calls do, so both paths leave the host the same way.
            self._session = aiohttp.ClientSession(timeout=self._timeout, trust_env=True)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("DingTalkApi.start() was not called")
        return self._session

    async def _fetch_token(self) -> tuple[str, float]:
        body = {"appKey": self._client_id, "appSecret": self._client_secret}
        answer = self._checked("POST", TOKEN_PATH, await self._send("POST", TOKEN_PATH, body))
        token = str(answer.get("accessToken") or "")
        if not token:
            raise DingTalkApiError("no accessToken in the token response")
        return token, float(answer.get("expireIn") or 7200)

    # --------------------------------------------------------------------- core

    async def _send(
        self, method: str, url: str, body: Mapping[str, Any], token: str | None = None
    ) -> _Answer:
        if url.startswith("/"):
            url = self._endpoint + url
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token is not None:
            headers[TOKEN_HEADER] = token
        try:
            async with self._http.request(
                method, url, data=json.dumps(body, ensure_ascii=False), headers=headers
            ) as resp:
                raw = await resp.text()
                status = resp.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DingTalkApiError(f"{method} {_path(url)}: {exc!r}", retryable=True) from exc
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {"raw": raw[:200]}
        return _Answer(status, data if isinstance(data, dict) else {"value": data})

    @staticmethod
    def _checked(method: str, url: str, answer: _Answer) -> dict[str, Any]:
        where, status = f"{method} {_path(url)}", answer.status
        if status == 429 or status >= 500:
            raise DingTalkApiError(
                f"{where}: {status} {answer.data}", status=status, retryable=True
            )
        if status >= 400:
            raise DingTalkApiError(f"{where}: {status} {answer.data}", status=status)
        return answer.data

    async def _once(
        self, method: str, url: str, body: Mapping[str, Any], *, auth: bool
    ) -> dict[str, Any]:
        if not auth:
            return self._checked(method, url, await self._send(method, url, body))

        async def with_token(token: str) -> _Answer:
            return await self._send(method, url, body, token)

        # 401: a token revoked or expired early is fetched again at once.
        answer = await self.token.call(with_token, refused=lambda a: a.status == 401)
        return self._checked(method, url, answer)

    async def call(
        self, method: str, url: str, body: Mapping[str, Any], *, auth: bool = True
    ) -> dict[str, Any]:
        """One API call (a path on the endpoint, or a full URL), retried on 429 / 5xx."""
        tries = 0

        async def once() -> dict[str, Any]:
            nonlocal tries
            tries += 1
            if tries > 1:
                log.info("dingtalk.api_retry", method=method, path=_path(url), attempt=tries)
            return await self._once(method, url, body, auth=auth)

        try:
            return await after_failure_retrying(
                once,
                attempts=self._attempts,
                initial=self._retry_base,
                maximum=self._retry_max,
                retry_on=_is_retryable,
            )
        except DingTalkApiError as exc:
            exc.attempts = tries
            raise

    # -------------------------------------------------------------------- sends

    async def send_session_webhook(self, url: str, payload: Mapping[str, Any]) -> None:
        """Reply through a message's sessionWebhook (no token needed while it is valid)."""
        data = await self.call("POST", url, payload, auth=False)
        code = data.get("errcode", 0)
        if code not in (0, "0", None):
            raise DingTalkApiError(
                f"session webhook errcode {code}: {data.get('errmsg')}",
                retryable=code in _WEBHOOK_THROTTLED,
            )

    async def send_group(
        self, *, robot_code: str, conversation_id: str, msg_key: str, msg_param: Mapping[str, Any]
    ) -> None:
        await self.call(
            "POST",
            GROUP_SEND_PATH,
            {
                "robotCode": robot_code,
                "openConversationId": conversation_id,
                "msgKey": msg_key,
                "msgParam": json.dumps(msg_param, ensure_ascii=False),
            },
        )

    async def send_one_to_one(
        self, *, robot_code: str, user_ids: list[str], msg_key: str, msg_param: Mapping[str, Any]
    ) -> None:
        data = await self.call(
            "POST",
            OTO_SEND_PATH,
            {
                "robotCode": robot_code,
                "userIds": user_ids[:20],
                "msgKey": msg_key,
                "msgParam": json.dumps(msg_param, ensure_ascii=False),
            },
        )
        throttled = data.get("flowControlledStaffIdList") or []
        if throttled:
            raise DingTalkApiError(f"flow-controlled for {throttled}", retryable=False)

    async def create_and_deliver_card(self, body: Mapping[str, Any]) -> dict[str, Any]:
        data = await self.call("POST", CARD_CREATE_DELIVER_PATH, body)
        if data.get("success") is False:
            raise DingTalkApiError(f"card createAndDeliver failed: {data}")
        return data

    async def update_card(self, out_track_id: str, params: Mapping[str, str]) -> None:
        data = await self.call(
            "PUT",
            CARD_UPDATE_PATH,
            {
                "outTrackId": out_track_id,
                "cardData": {"cardParamMap": dict(params)},
                "cardUpdateOptions": {"updateCardDataByKey": True},
            },
        )
        if data.get("success") is False:
            raise DingTalkApiError(f"card update failed: {data}")


def _path(url: str) -> str:
    # Log paths, never query strings: a session webhook URL carries its session token.
    return url.split("?", 1)[0]
