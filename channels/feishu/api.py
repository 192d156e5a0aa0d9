"""The Feishu open API calls the channel makes, through lark-oapi's async methods.

Why the tenant token is handled here and not by the SDK: lark-oapi 1.7.5 fetches it with a
blocking ``requests`` call even inside its ``a*`` coroutines (that would stall the
gateway's loop), caches it in a process-global class attribute shared by every client,
and never drops it when the API answers "invalid token" (99991663). So the client is built
with ``enable_set_token(True)`` and every call carries the token from a ``CachedToken``
per channel instance, fetched asynchronously (through ``ApiTransport``) and fetched again
at once when Feishu answers with an invalid-token code.

The SDK builds the requests (typed builders, URL and headers) and reads the answers; they
travel through ``ApiTransport``: one HTTP client per channel instead of the SDK's new
client (and SSL context) per call.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

import httpx
import structlog
from lark_oapi.api.im.v1.model.create_message_request import CreateMessageRequest
from lark_oapi.api.im.v1.model.create_message_request_body import CreateMessageRequestBody
from lark_oapi.api.im.v1.model.create_message_response import CreateMessageResponse
from lark_oapi.api.im.v1.model.patch_message_request import PatchMessageRequest
from lark_oapi.api.im.v1.model.patch_message_request_body import PatchMessageRequestBody
from lark_oapi.api.im.v1.model.patch_message_response import PatchMessageResponse
from lark_oapi.api.im.v1.model.reply_message_request import ReplyMessageRequest
from lark_oapi.api.im.v1.model.reply_message_request_body import ReplyMessageRequestBody
from lark_oapi.api.im.v1.model.reply_message_response import ReplyMessageResponse
from lark_oapi.core.const import FEISHU_DOMAIN, LARK_DOMAIN
from lark_oapi.core.enum import AccessTokenType, HttpMethod
from lark_oapi.core.http import transport
from lark_oapi.core.json import JSON
from lark_oapi.core.model import BaseRequest, BaseResponse, Config, RawResponse, RequestOption
from lark_oapi.core.token.auth import verify
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


def check_origin(domain: str) -> None:
    """The origin rule of lark-oapi's ``ClientBuilder.domain`` (which the channel no longer
    builds): ``https://host[:port]``, or ``http`` on loopback only; ValueError otherwise."""
    parsed = urllib.parse.urlsplit(domain)
    if parsed.scheme == "http":
        if (parsed.hostname or "").lower() not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"domain must use https scheme (got {domain!r})")
    elif parsed.scheme != "https":
        raise ValueError(f"domain must use https scheme (got {domain!r})")
    if not parsed.netloc or "@" in parsed.netloc:
        raise ValueError(f"domain must be host[:port] without credentials (got {domain!r})")
    if parsed.path or parsed.query or parsed.fragment:
        raise ValueError(f"domain must be an origin without path or query (got {domain!r})")


class ApiTransport:
    """Sends lark-oapi requests through one ``httpx.AsyncClient`` per channel.

    ``per_call_client=True`` takes the SDK's own path (``Transport.aexecute``: a new client
    per call); bench/feishu_send.py compares the two.
    """

    def __init__(self, config: Config, *, per_call_client: bool = False) -> None:
        self.config = config
        self._per_call_client = per_call_client
        # One client, one SSL context, kept-alive connections: bench/feishu_send.py CPU ms
        # per reply (23.4 ms with a client per call).
        self._client = httpx.AsyncClient(timeout=config.timeout)

    async def execute(self, req: BaseRequest, option: RequestOption | None = None) -> RawResponse:
        """The SDK's ``RawResponse`` for ``req`` (status, headers, content)."""
        option = option or RequestOption()
        # Picks the one token type this call goes with (the set holds TENANT and USER).
        verify(self.config, req, option)
        if self._per_call_client:
            return await transport.Transport.aexecute(self.config, req, option)
        url = transport._build_url(self.config.domain, req.uri, req.paths)
        transport._build_header(req, option, self.config)
        body = None if req.body is None else json.loads(JSON.marshal(req.body))
        response = await self._client.request(
            str(req.http_method.name), url, headers=req.headers, params=req.queries, json=body
        )
        raw = RawResponse()
        raw.status_code = response.status_code
        raw.headers = dict(response.headers)
        raw.content = response.content
        return raw

    async def aclose(self) -> None:
        await self._client.aclose()


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


async def fetch_tenant_token(api: ApiTransport) -> tuple[str, float]:
    """``POST /open-apis/auth/v3/tenant_access_token/internal``: (token, seconds valid)."""
    req = (
        CreateSelfTenantTokenRequest.builder()
        .request_body(
            CreateTokenRequestBody.builder()
            .app_id(api.config.app_id)
            .app_secret(api.config.app_secret)
            .build()
        )
        .build()
    )
    try:
        raw = await api.execute(req)
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


_RESPONSES: dict[str, type[BaseResponse]] = {
    "create": CreateMessageResponse,
    "reply": ReplyMessageResponse,
    "patch": PatchMessageResponse,
    "raw": BaseResponse,
}


class FeishuApi:
    """Typed wrappers over the SDK's async IM calls, each returning an ``ApiResult``."""

    def __init__(
        self,
        *,
        app_id: str,
        app_secret: str,
        domain: str,
        timeout: float = 10.0,
        per_call_client: bool = False,
    ) -> None:
        origin = resolve_domain(domain)
        try:
            check_origin(origin)
        except ValueError as exc:
            raise ConfigError(
                f"channels.feishu.domain {domain!r} is not usable ({exc}): use feishu, lark "
                "or an https origin; set GATEWAY_CHANNELS__FEISHU__DOMAIN or "
                "[channels.feishu] domain"
            ) from exc
        config = Config()
        config.app_id, config.app_secret = app_id, app_secret
        config.domain, config.timeout = origin, timeout
        # Tokens come from CachedToken (see the module docstring).
        config.enable_set_token = True
        self.transport = ApiTransport(config, per_call_client=per_call_client)
        self.token = CachedToken(
            fetch=lambda: fetch_tenant_token(self.transport),
            refresh_early_seconds=TOKEN_EARLY_REFRESH_SECONDS,
        )

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def _call(self, method: str, req: Any) -> ApiResult:
        """One API call; a token Feishu calls invalid is fetched again and the call repeated."""

        async def with_token(token: str) -> ApiResult:
            return await self._call_with(method, req, token)

        return await self.token.call(with_token, refused=lambda result: result.invalid_token)

    async def _call_with(self, method: str, req: Any, token: str) -> ApiResult:
        option = RequestOption.builder().tenant_access_token(token).build()
        try:
            raw = await self.transport.execute(req, option)
            resp: Any = JSON.unmarshal(str(raw.content, "utf-8"), _RESPONSES[method])
        except ValueError as exc:
            # A non-JSON body (a proxy's 429/502 page) fails the SDK's unmarshal.
            return ApiResult(0, -1, f"unreadable response: {exc}")
        except Exception as exc:  # httpx errors: timeouts, refused, reset
            return ApiResult(0, -1, f"{type(exc).__name__}: {exc}")
        status = int(raw.status_code or 0)
        code = int(resp.code if resp.code is not None else -1)
        data = getattr(resp, "data", None)
        message_id = getattr(data, "message_id", None) if data is not None else None
        body: Any = None
        if method == "raw" and raw.content:
            try:
                body = json.loads(raw.content)
            except ValueError:
                body = None
        return ApiResult(status, code, str(resp.msg or ""), message_id, body)

    async def create(
        self,
        *,
        chat_id: str,
        msg_type: str,
        content: str,
        uuid: str,
        receive_id_type: str = "chat_id",
    ) -> ApiResult:
        """A new message in a chat, or (``receive_id_type="open_id"``) in a person's direct
        chat with the bot: ``chat_id`` is then their open_id."""
        body = (
            CreateMessageRequestBody.builder()
            .receive_id(chat_id)
            .msg_type(msg_type)
            .content(content)
            .uuid(uuid)
            .build()
        )
        req = (
            CreateMessageRequest.builder()
            .receive_id_type(receive_id_type)
            .request_body(body)
            .build()
        )
        return await self._call("create", req)

    async def reply(self, *, message_id: str, msg_type: str, content: str, uuid: str) -> ApiResult:
        body = (
            ReplyMessageRequestBody.builder().msg_type(msg_type).content(content).uuid(uuid).build()
        )
        req = ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
        return await self._call("reply", req)

    async def patch(self, *, message_id: str, content: str) -> ApiResult:
        body = PatchMessageRequestBody.builder().content(content).build()
        req = PatchMessageRequest.builder().message_id(message_id).request_body(body).build()
        return await self._call("patch", req)

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
