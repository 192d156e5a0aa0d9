"""Who is making a request: a name a trusted login proxy vouches for, or one a person typed.

``server.trusted_user_header`` (e.g. ``X-Forwarded-User``) is read only from
``server.trusted_proxies``: from anywhere else anyone could send it. It must come exactly
once: a second copy (or a comma-joined value) means a proxy appended to what the client
sent instead of replacing it, so the request is refused (400) rather than guessed at.

Without it, web chat names are typed by whoever opens the page. Their decisions count
only on a truly local connection: a loopback peer, a loopback ``Host`` and no forwarding
header. A reverse proxy on this machine connects from loopback too, but it passes the
public ``Host`` on or adds a forwarding header (docs/deploy.md sets both): what comes
through it is someone further away, not identified, who can chat but not decide.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import structlog
from aiohttp import web
from aiohttp.typedefs import Handler

from config.settings import ConfigError
from gateway.bus import SenderIdentity
from gateway.http.hosts import host_name, is_loopback
from gateway.http.jsonapi import NAME_PATTERN, NAME_RULE, error_response

log = structlog.get_logger(__name__)

# Headers a reverse proxy adds: a request carrying one came from further away.
FORWARDING_HEADERS = (
    "Forwarded",
    "X-Forwarded-For",
    "X-Forwarded-Host",
    "X-Forwarded-Proto",
    "X-Forwarded-Port",
    "X-Forwarded-Server",
    "X-Forwarded-Prefix",
    "X-Real-IP",
    "X-Client-IP",
    "True-Client-IP",
    "Via",
)


class TrustedIdentity:
    """Reads the trusted user header of requests that come from a trusted proxy."""

    def __init__(self, *, header: str | None, proxies: Iterable[str]) -> None:
        self.header = header or None
        self.proxies = tuple(ipaddress.ip_network(p, strict=False) for p in proxies)
        if self.header and not self.proxies:
            raise ConfigError(
                f"server.trusted_user_header is {self.header!r} but server.trusted_proxies is "
                "empty, so it would never be believed: list the login proxy's addresses in "
                "GATEWAY_SERVER__TRUSTED_PROXIES (or [server] trusted_proxies)"
            )

    def user(self, request: web.Request) -> str | None:
        """The proxy's name for the person, or None (no header, not from a proxy, or not
        exactly one copy: ``refuse_duplicate_user_header`` answers those with 400)."""
        values = self._values(request)
        if not values or self.duplicated(request):
            return None
        value = values[0].strip()
        if not value:
            return None  # a proxy that sets it empty when nobody signed in (Caddy)
        if not NAME_PATTERN.fullmatch(value):
            log.info("identity.bad_header", header=self.header, rule=NAME_RULE)
            return None
        return value

    def duplicated(self, request: web.Request) -> bool:
        """The trusted proxy sent the header more than once, or several names in one."""
        values = self._values(request)
        return len(values) > 1 or any("," in v for v in values)

    def _values(self, request: web.Request) -> list[str]:
        """Every copy of the header, if the request is from a trusted proxy."""
        if self.header is None or not _is_in(request.remote, self.proxies):
            return []
        return request.headers.getall(self.header, [])

    def of(self, request: web.Request) -> SenderIdentity:
        if self.user(request) is not None:
            return SenderIdentity.VERIFIED
        if self.is_local(request):
            return SenderIdentity.LOCAL
        return SenderIdentity.SELF_DECLARED

    def is_local(self, request: web.Request) -> bool:
        """A connection from this machine that no proxy passed on: loopback peer, loopback
        Host, no forwarding header (nor the user header: a proxy not listed sent it)."""
        host = request.headers.get("Host")
        passed_on = (*FORWARDING_HEADERS, *([self.header] if self.header else []))
        return (
            _is_in(request.remote, LOOPBACK)
            and host is not None
            and is_loopback(host_name(host))
            and not any(h in request.headers for h in passed_on)
        )


LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
TRUSTED_IDENTITY = web.AppKey("trusted_identity", TrustedIdentity)
NOBODY_TRUSTED = TrustedIdentity(header=None, proxies=())


def identity_of(request: web.Request) -> TrustedIdentity:
    """The server's reader (set by HttpServer); none trusted on an app without one."""
    return request.config_dict.get(TRUSTED_IDENTITY, NOBODY_TRUSTED)


@web.middleware
async def refuse_duplicate_user_header(
    request: web.Request, handler: Handler
) -> web.StreamResponse:
    """400 for a request from a trusted proxy with the user header twice (or comma-joined).

    A proxy that appends its header to the client's (instead of replacing it) would let
    the client pick who it is by which copy is read first; no copy is believed instead,
    on every route, and the operator reads one line saying which proxy to fix.
    """
    trusted = identity_of(request)
    if not trusted.duplicated(request):
        return await handler(request)
    log.warning(
        "identity.duplicate_header",
        header=trusted.header,
        remote=request.remote,
        path=request.path[:200],
    )
    return error_response(
        400,
        f"the {trusted.header} header came more than once (or with several names): the proxy "
        "must replace the client's copy (nginx: proxy_set_header; Caddy: header_up), not add "
        "to it",
    )


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _is_in(remote: str | None, networks: Iterable[Network]) -> bool:
    if not remote:
        return False
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:  # a Unix socket path
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in net for net in networks)


def _from_proxy(request: web.Request, header: str) -> str | None:
    """The last value of ``header`` (the one the nearest proxy added) on a request from a
    listed proxy; None from anywhere else, where anyone could have written it."""
    if not _is_in(request.remote, identity_of(request).proxies):
        return None
    values = [v.strip() for line in request.headers.getall(header, []) for v in line.split(",")]
    return values[-1] if values and values[-1] else None


def came_over_tls(request: web.Request) -> bool:
    """Whether the browser's connection was TLS: this server's own, or a listed proxy's
    ``X-Forwarded-Proto: https`` (the proxy terminates TLS and speaks HTTP to us)."""
    if request.secure:
        return True
    proto = _from_proxy(request, "X-Forwarded-Proto")
    return proto is not None and proto.lower() == "https"


def client_address(request: web.Request) -> str:
    """The client's address: a listed proxy's ``X-Forwarded-For`` (its last entry, the
    address the proxy saw), else the peer's. Behind a proxy every peer is the proxy."""
    forwarded = _from_proxy(request, "X-Forwarded-For")
    return forwarded or request.remote or "unknown"
