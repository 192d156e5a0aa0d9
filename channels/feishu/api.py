"""The Feishu open API calls the channel makes, through lark-oapi's async methods.

Why the tenant token is handled here and not by the SDK: lark-oapi 1.7.5 fetches it with a
blocking ``requests`` call even inside its ``a*`` coroutines (that would stall the
gateway's loop), caches it in a process-global class attribute shared by every client,
and never drops it when the API answers "invalid token" (99991663). So the client is built
with ``enable_set_token(True)`` and every call carries the token from a ``CachedToken``
per channel instance, fetched asynchronously (``Transport.aexecute``) and fetched again
at once when Feishu answers with an invalid-token code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import lark_oapi as lark
import structlog
from lark_oapi.api.im.v1 import (
    CreateMessageRequest,
    CreateMessageRequestBody,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.const import FEISHU_DOMAIN, LARK_DOMAIN
from lark_oapi.core.enum import AccessTokenType, HttpMethod
from lark_oapi.core.http import Transport
from lark_oapi.core.model import BaseRequest, RequestOption
from lark_oapi.core.token.create_self_tenant_token_request import CreateSelfTenantTokenRequest
from lark_oapi.core.token.create_token_request_body import CreateTokenRequestBody

from channels.platform import CachedToken
from config.settings import ConfigError

log = structlog.get_logger(__name__)

# Feishu's "access token invalid / expired" family: refresh the token and try again.
INVALID_TOKEN_CODES = frozenset(
    {99991661, 99991663, 99991664, 99991665, 99991666, 99991667, 99991668}
)
# Rate limits: app frequency (99991400), the SDK's own list (99991402, 11020, 11021), and
# per-chat / per-tenant send limits (11232, 230020). Sources disagree on some of these;
# retrying a rate limit with backoff is harmless, so the union is used.
RATE_LIMIT_CODES = frozenset({99991400, 99991402, 11020, 11021, 11232, 230020})
# Refresh a little before Feishu's expiry, as the SDK does (it uses 10 minutes).
TOKEN_EARLY_REFRESH_SECONDS = 600


def resolve_domain(domain: str) -> str:
    """``feishu`` | ``lark`` | an origin URL (tests use http://127.0.0.1:PORT)."""
    if domain == "feishu":
        return str(FEISHU_DOMAIN)
    if domain == "lark":
        return str(LARK_DOMAIN)
    return domain.rstrip("/")


@dataclass(frozen=True, slots=True)
class ApiResult:
    """What one API call came back with. ``status`` 0 means no HTTP answer at all."""

    status: int
    code: int
    msg: str
    message_id: str | None = None
    body: Any = None

    @property
    def ok(self) -> bool:
        return self.code == 0 and 200 <= self.status < 300

    @property
    def invalid_token(self) -> bool:
        return self.code in INVALID_TOKEN_CODES

    @property
    def retryable(self) -> bool:
        """Worth another try after a pause: rate limits, server errors and no answer at all.

        (An invalid token is not: it is fetched again at once, see ``FeishuApi._call``.)
        """
        return self.status in (0, 429) or self.status >= 500 or self.code in RATE_LIMIT_CODES


class TokenError(Exception):
    """The tenant token could not be obtained."""

    def __init__(self, result: ApiResult) -> None:
        super().__init__(f"tenant token: HTTP {result.status}, code {result.code}: {result.msg}")
        self.result = result

    @property
    def credentials_refused(self) -> bool:
        """Feishu answered, and said no to this app id and secret (not an outage).

        Feishu answers HTTP 200 with a code of its own here (10014 "app id not exists" /
        "app secret invalid", 10003 "invalid param"); no answer, a 5xx, a 429 or a rate
        limit code is a platform problem that goes away by itself.
        """
        r = self.result
        answered = 0 < r.status < 500 and r.status != 429
        return answered and r.code not in (0, -1) and r.code not in RATE_LIMIT_CODES


async def fetch_tenant_token(config: Any) -> tuple[str, float]:
    """``POST /open-apis/auth/v3/tenant_access_token/internal``: (token, seconds valid)."""
    req = (
        CreateSelfTenantTokenRequest.builder()
        .request_body(
            CreateTokenRequestBody.builder()
            .app_id(config.app_id)
            .app_secret(config.app_secret)
            .build()
        )
        .build()
    )
    try:
        raw = await Transport.aexecute(config, req)
    except Exception as exc:  # httpx raises many types; all mean "no answer"
        raise TokenError(ApiResult(0, -1, f"{type(exc).__name__}: {exc}")) from exc
    try:
        body = json.loads(raw.content or b"{}")
    except ValueError:
        body = {}
    code = int(body.get("code", -1))
    token = body.get("tenant_access_token")
    if code != 0 or not token:
        raise TokenError(ApiResult(raw.status_code or 0, code, str(body.get("msg", ""))))
    expire = float(body.get("expire") or 7200)
    log.info("feishu.token_refreshed", expires_in=expire)
    return str(token), expire


class FeishuApi:
    """Typed wrappers over the SDK's async IM calls, each returning an ``ApiResult``."""

    def __init__(self, *, app_id: str, app_secret: str, domain: str, timeout: float = 10.0) -> None:
        try:
            self.client: Any = (
                lark.Client.builder()
                .app_id(app_id)
                .app_secret(app_secret)
                .domain(resolve_domain(domain))
                .timeout(timeout)
                # Tokens come from TenantToken (see the module docstring).
                .enable_set_token(True)
                .log_level(lark.LogLevel.WARNING)
                .build()
            )
        except ValueError as exc:
            # lark-oapi 1.7.5 accepts only https origins (http for loopback tests).
            raise ConfigError(
                f"channels.feishu.domain {domain!r} is not usable ({exc}): use feishu, lark "
                "or an https origin; set GATEWAY_CHANNELS__FEISHU__DOMAIN or "
                "[channels.feishu] domain"
            ) from exc
        config = self.client.config
        self.token = CachedToken(
            fetch=lambda: fetch_tenant_token(config),
            refresh_early_seconds=TOKEN_EARLY_REFRESH_SECONDS,
        )

    async def _call(self, method: str, req: Any) -> ApiResult:
        """One API call; a token Feishu calls invalid is fetched again and the call repeated."""

        async def with_token(token: str) -> ApiResult:
            return await self._call_with(method, req, token)

        return await self.token.call(with_token, refused=lambda result: result.invalid_token)

    async def _call_with(self, method: str, req: Any, token: str) -> ApiResult:
        option = RequestOption.builder().tenant_access_token(token).build()
        try:
            if method == "raw":
                resp = await self.client.arequest(req, option)
            else:
                resp = await getattr(self.client.im.v1.message, method)(req, option)
        except ValueError as exc:
            # A non-JSON body (a proxy's 429/502 page) fails the SDK's unmarshal.
            return ApiResult(0, -1, f"unreadable response: {exc}")
        except Exception as exc:  # httpx errors: timeouts, refused, reset
            return ApiResult(0, -1, f"{type(exc).__name__}: {exc}")
        raw = getattr(resp, "raw", None)
        status = int(getattr(raw, "status_code", 0) or 0)
        code = int(resp.code if resp.code is not None else -1)
        data = getattr(resp, "data", None)
        message_id = getattr(data, "message_id", None) if data is not None else None
        body: Any = None
        if method == "raw" and raw is not None and raw.content:
            try:
                body = json.loads(raw.content)
            except ValueError:
                body = None
        return ApiResult(status, code, str(resp.msg or ""), message_id, body)

    async def create(self, *, chat_id: str, msg_type: str, content: str, uuid: str) -> ApiResult:
        body = (
            CreateMessageRequestBody.builder()
            .receive_id(chat_id)
            .msg_type(msg_type)
            .content(content)
            .uuid(uuid)
            .build()
        )
        req = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
        return await self._call("acreate", req)

    async def reply(self, *, message_id: str, msg_type: str, content: str, uuid: str) -> ApiResult:
        body = (
            ReplyMessageRequestBody.builder().msg_type(msg_type).content(content).uuid(uuid).build()
        )
        req = ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
        return await self._call("areply", req)

    async def patch(self, *, message_id: str, content: str) -> ApiResult:
        body = PatchMessageRequestBody.builder().content(content).build()
        req = PatchMessageRequest.builder().message_id(message_id).request_body(body).build()
        return await self._call("apatch", req)

    async def bot_info(self) -> ApiResult:
        """``GET /open-apis/bot/v3/info``: the SDK has no typed call for it."""
        req = (
            BaseRequest.builder()
            .http_method(HttpMethod.GET)
            .uri("/open-apis/bot/v3/info")
            .token_types({AccessTokenType.TENANT})
            .build()
        )
        return await self._call("raw", req)
