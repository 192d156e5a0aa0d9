"""The one aiohttp server: web chat, admin API and platform webhooks register routes on it.

Admin protection is decided here, once, by path, and safe by default: every route under
``/api/`` needs the admin token except the web chat's ``/api/chat/...`` and
``/api/openapi.json``; ``/metrics`` and ``/admin`` need it too (but not the login form).
The token comes as a bearer header (scripts, the CLI) or as the admin page's cookie.
``/healthz``, ``/readyz``, the web chat page, its WebSocket, static files and platform
webhooks are public (webhooks verify their own signatures). A route that registers itself
under ``/api/`` later (a channel's dead letters, say) is protected without doing anything.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler, Middleware

from config.settings import LOOPBACK_NAMES, ConfigError
from gateway.http.accept_errors import AcceptErrorLog
from gateway.http.hosts import host_name, is_loopback
from gateway.http.identity import (
    TRUSTED_IDENTITY,
    TrustedIdentity,
    identity_of,
    refuse_duplicate_user_header,
)
from gateway.http.jsonapi import (
    DEFAULT_MAX_JSON_DEPTH,
    MAX_JSON_DEPTH,
    error_response,
    json_errors,
    json_response,
    one_line,
)
from gateway.http.sessions import ADMIN_SESSIONS, AdminSession

log = structlog.get_logger(__name__)

PUBLIC_API_PREFIXES = ("/api/chat/", "/api/openapi.json")
PUBLIC_ADMIN_PAGES = ("/admin/login", "/admin/logout")
UNAUTHORIZED = "missing or wrong bearer token: send Authorization: Bearer <admin token>"
ADMIN_COOKIE = "gateway_admin"
SIGNED_IN = web.RequestKey("signed_in", AdminSession)
# Sent by the admin page's script with every request that changes something.
CSRF_HEADER = "X-Requested-With"
CSRF_VALUE = "gateway-admin"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def needs_admin(path: str) -> bool:
    """Whether a route (its pattern, e.g. ``/api/confirmations/{id}``) is admin-only."""
    if path.startswith("/api/"):
        return not path.startswith(PUBLIC_API_PREFIXES)
    if path in PUBLIC_ADMIN_PAGES or path.startswith("/admin/static/"):
        return False  # the login form, and the page's script and style (no data in them)
    return path == "/metrics" or path == "/admin" or path.startswith("/admin/")


def bearer_matches(header: str, token: bytes) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time.

    On bytes: ``hmac.compare_digest`` raises on non-ASCII ``str``, which made a header
    with a non-ASCII token a 500. ``surrogatepass`` encodes whatever aiohttp decoded.
    """
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "surrogatepass"), token)


async def signed_in(request: web.Request) -> AdminSession | None:
    """The admin page's session of this request (its cookie), if it is a live one."""
    sessions = request.config_dict.get(ADMIN_SESSIONS)
    cookie = request.cookies.get(ADMIN_COOKIE, "")
    if sessions is None or not cookie:
        return None
    return await sessions.find(cookie)


def admin_person(request: web.Request) -> str | None:
    """The name the admin page's login gave, for a request its session authenticated."""
    session = request.get(SIGNED_IN)
    return session.name if session is not None else None


def person_behind(request: web.Request, typed: str | None) -> str | None:
    """The person behind an admin request: the login proxy's name for them, else the name
    the admin page's login gave, else the name the request typed (``actor``); None when
    nobody is named. The admin token is an operator's, never a person's."""
    named = identity_of(request).user(request) or admin_person(request)
    return named or (typed or "").strip() or None


def require_admin(token: str | None) -> Middleware:
    """The one admin check: a bearer header, or the admin page's session cookie.

    No token configured (loopback only) means nothing to check. The cookie is a session id
    (gateway/http/sessions.py): logging out ends it on the server, so a copy of it stops
    working at once. A cookie is sent by the browser on its own, so a request it
    authenticates is open to cross-site request forgery; it is refused unless (a) the
    cookie is ``SameSite=Strict`` (set by the login form), so browsers do not attach it to
    requests started by another site at all, and
    (b) a request that changes something carries ``X-Requested-With: gateway-admin``.
    Another site's page can only add a custom header through a CORS preflight, which this
    server never grants. A custom header was chosen over a double-submit token because it
    needs no token in the page or state on the server, and over an Origin check alone
    because some browsers and privacy proxies drop Origin (``same_origin`` still refuses
    a foreign one). Bearer requests are not open to CSRF: browsers never add that header.
    """
    expected = token.encode("utf-8", "surrogatepass") if token else None

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not needs_admin(_route_path(request)):
            return await handler(request)
        if expected is None:
            # Loopback without a token: open, but a login still says who is deciding.
            session = await signed_in(request)
            if session is not None:
                request[SIGNED_IN] = session
            return await handler(request)
        if bearer_matches(request.headers.get("Authorization", ""), expected):
            return await handler(request)
        session = await signed_in(request)
        if session is not None:
            request[SIGNED_IN] = session
            if request.method in SAFE_METHODS or request.headers.get(CSRF_HEADER) == CSRF_VALUE:
                return await handler(request)
            log.info("admin.csrf_refused", path=request.path[:200])
            return error_response(
                403, f"requests with the admin cookie that change something need {CSRF_HEADER}"
            )
        log.info("admin.unauthorized", path=request.path[:200])
        if request.method == "GET" and request.path.startswith("/admin"):
            # A person opening the page (or a link to a record): show the login form.
            raise web.HTTPSeeOther("/admin/login")
        return json_response(
            {"error": UNAUTHORIZED},
            status=401,
            headers={"WWW-Authenticate": 'Bearer realm="gateway"'},
        )

    return middleware


def _route_path(request: web.Request) -> str:
    """The pattern of the route that will answer, else the path (unknown routes: 404/405).

    Deciding on the matched route, not the raw path, means no spelling of a URL
    (``%2F``, ``..``) can reach an admin handler through a public prefix.
    """
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else request.path


def allowed_hosts(names: Iterable[str]) -> Middleware:
    """Answer only requests whose Host is a known name of this server: 421 otherwise.

    Without it, a page on another site whose DNS name resolves to 127.0.0.1 (DNS
    rebinding) is same-origin with this server in the browser and can use the web chat
    and an admin API without a token. Every route is covered: pages, the WebSocket
    upgrade, the APIs and platform webhooks. A request without Host is not a browser's.
    """
    allowed = {host_name(name) for name in names}
    any_host = "*" in allowed

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Host")
        if any_host or header is None or host_name(header) in allowed:
            return await handler(request)
        log.info("http.host_refused", host=header[:200], path=request.path[:200])
        return error_response(
            421,
            f"host {header[:200]!r} is not served here: add it to server.allowed_hosts "
            "(GATEWAY_SERVER__ALLOWED_HOSTS) if this server should answer it",
        )

    return middleware


@web.middleware
async def same_origin(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse browser requests from other sites that change something or open a socket.

    WebSockets and form-like POSTs are not covered by CORS: without this, any page a
    user visits could drive a gateway on their machine (cross-site WebSocket hijacking).
    Requests without an Origin header (curl, scripts, the CLI) are not browsers: allowed.
    """
    origin = request.headers.get("Origin")
    changes = request.method not in ("GET", "HEAD", "OPTIONS") or request.path == "/ws"
    if origin and changes and urlsplit(origin).netloc.lower() != request.host.lower():
        log.info("http.cross_origin_refused", path=request.path, origin=origin[:200])
        return error_response(403, "cross-origin request refused: open the gateway's own page")
    return await handler(request)


# A strong admin token: long, and not one character (or a word) repeated. What
# GENERATE_TOKEN prints (43 characters of 64 kinds) is far beyond both.
MIN_EXPOSED_TOKEN_LENGTH = 32
MIN_EXPOSED_TOKEN_KINDS = 8
GENERATE_TOKEN = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'
STRONG_TOKEN = (
    f"a strong token (at least {MIN_EXPOSED_TOKEN_LENGTH} characters, at least "
    f"{MIN_EXPOSED_TOKEN_KINDS} different ones), e.g. from {GENERATE_TOKEN}"
)


def admin_token_problem(
    host: str, token: str | None, allowed_host_names: Iterable[str] = ()
) -> str | None:
    """Why the admin API would be open to guessing or to anyone, or None.

    Served on loopback only, no token is needed. Bound beyond loopback, or answering a
    Host name that is not loopback (a reverse proxy publishes it: the gateway sees only
    the proxy's loopback connection), or any Host ("*", reachable by DNS rebinding), it
    needs a strong token ("token", "a" and 24 times "k" were accepted before).
    """
    names = [*allowed_host_names]
    if "*" in names:
        where = (
            'server.allowed_hosts is "*", so any web page can reach the admin API through '
            "a DNS name that resolves here"
        )
    elif not is_loopback(host):
        where = f"server.host is {host!r}, which is reachable from other machines"
    else:
        public = [name for name in names if not is_loopback(host_name(name))]
        if not public:
            return None
        where = (
            f"server.allowed_hosts lists {public[0][:100]!r}, so a reverse proxy publishes "
            "the admin API"
        )
    if not token:
        weakness = "admin.token is not set"
    elif len(token) < MIN_EXPOSED_TOKEN_LENGTH:
        weakness = f"admin.token is only {len(token)} characters"
    elif len(set(token)) < MIN_EXPOSED_TOKEN_KINDS:
        weakness = f"admin.token uses only {len(set(token))} distinct characters"
    else:
        return None
    return (
        f"{where}, and {weakness}: set GATEWAY_ADMIN__TOKEN (or [admin] token) to "
        f"{STRONG_TOKEN}, or bind 127.0.0.1 and list only loopback names in server.allowed_hosts"
    )


class ProtocolErrorLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server logger, with malformed requests reported as one info line.

    Scanners send garbage request lines and headers all day, and clients hang up in the
    middle of a body; aiohttp logged each at error level with a 20-line traceback. Those
    are the client's doing: one line, no traceback. Any other exception (a bug in a
    handler) is logged as aiohttp always did.
    """

    def __init__(self) -> None:
        super().__init__(logging.getLogger("aiohttp.server"))

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kw: Any) -> None:
        remote = str(args[0]) if args else None
        if isinstance(exc_info, HttpProcessingError):
            log.info(
                "http.bad_request",
                remote=remote,
                status=exc_info.code,
                error=one_line(exc_info.message),
            )
            return
        if isinstance(exc_info, ConnectionResetError):
            log.info("http.client_gone", remote=remote, error=one_line(exc_info))
            return
        super().exception(msg, *args, exc_info=exc_info, **kw)


class HttpServer:
    """Owns the aiohttp Application, its middlewares and its listening socket.

    Refuses to exist bound beyond loopback without a long admin token: the admin API
    would be open to the network.
    """

    def __init__(
        self,
        *,
        host: str,
        port: int,
        admin_token: str | None,
        allowed_host_names: Iterable[str] = LOOPBACK_NAMES,
        max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
        client_max_size: int = 1 << 20,
        trusted_user_header: str | None = None,
        trusted_proxies: Iterable[str] = (),
        accept_error_log_seconds: float = 60.0,
    ) -> None:
        self.host = host
        self.port = port
        # An empty token is no token: it must not make 'Bearer ' (nothing) a password.
        self.admin_token = admin_token or None
        names = [*allowed_host_names]
        problem = admin_token_problem(host, self.admin_token, names)
        if problem is not None:
            raise ConfigError(problem)
        if host not in ("0.0.0.0", "::", ""):  # the bound host, unless it is every address
            names.append(host)
        self.app = web.Application(
            client_max_size=client_max_size,
            middlewares=[
                allowed_hosts(names),
                refuse_duplicate_user_header,
                same_origin,
                json_errors,  # outside require_admin: its session lookup may find Redis down
                require_admin(self.admin_token),
            ],
        )
        self.app[MAX_JSON_DEPTH] = max_json_depth
        self.app[TRUSTED_IDENTITY] = TrustedIdentity(
            header=trusted_user_header, proxies=trusted_proxies
        )
        self._runner: web.AppRunner | None = None
        self._accept_errors = AcceptErrorLog(interval=accept_error_log_seconds)

    async def start(self) -> None:
        # Out of file descriptors: one line a minute with a count, not one per attempt.
        self._accept_errors.install(asyncio.get_running_loop())
        # Malformed requests are reported by ProtocolErrorLog: one line, no traceback.
        self._runner = web.AppRunner(
            self.app, access_log=None, handle_signals=False, logger=ProtocolErrorLog()
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await self.stop()
            raise ConfigError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror}; "
                "set GATEWAY_SERVER__PORT (or [server] port) to a free port"
            ) from exc
        addresses = self._runner.addresses
        if addresses:
            self.port = addresses[0][1]
        log.info("http.listening", url=self.url)

    @property
    def url(self) -> str:
        return local_url(self.host, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await stop_runner(self._runner)
            self._runner = None


async def stop_runner(runner: web.AppRunner) -> None:
    """Clean ``runner`` up without leaving open a connection accepted as it stops.

    asyncio accepts a connection in one loop turn and gives it a transport in a later one;
    a server closed in between never closes that socket (Python 3.11's transport fails to
    attach to the closed server, and nothing closes the accepted socket). So stop accepting
    first, give the accepted connections their turns, then clean up: aiohttp then closes
    every connection it was handed.
    """
    loop = asyncio.get_running_loop()
    for site in runner.sites:
        server = site._server  # aiohttp keeps the asyncio server it started private
        if isinstance(server, asyncio.Server):
            for sock in server.sockets:
                loop.remove_reader(sock.fileno())
    for _ in range(3):
        await asyncio.sleep(0)
    await runner.cleanup()


def local_url(host: str, port: int) -> str:
    """The URL a browser on this machine opens for a server listening on host:port."""
    shown = host if ":" not in host else f"[{host}]"
    if host in ("0.0.0.0", "::"):
        shown = "127.0.0.1"
    return f"http://{shown}:{port}"
