"""Who is making a request: a name a trusted login proxy vouches for, or one a person typed.

``server.trusted_user_header`` (e.g. ``X-Forwarded-User``) is read only from
``server.trusted_proxies``: from anywhere else anyone could send it. Without it, web chat
names are typed by whoever opens the page. Their decisions count only from this machine
(a loopback address, not forwarded by a proxy): there, whoever types is the operator anyway.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import structlog
from aiohttp import web

from config.settings import ConfigError
from gateway.bus import SenderIdentity
from gateway.http.jsonapi import NAME_PATTERN, NAME_RULE

log = structlog.get_logger(__name__)

# Headers a reverse proxy adds: a request carrying one came from further away.
FORWARDING_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP")


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
        """The proxy's name for the person, or None (no header, or not from a proxy)."""
        if self.header is None:
            return None
        value = request.headers.get(self.header)
        if value is None or not _is_in(request.remote, self.proxies):
            return None
        value = value.strip()
        if not NAME_PATTERN.fullmatch(value):
            log.info("identity.bad_header", header=self.header, rule=NAME_RULE)
            return None
        return value

    def of(self, request: web.Request) -> SenderIdentity:
        if self.user(request) is not None:
            return SenderIdentity.VERIFIED
        if _is_in(request.remote, LOOPBACK) and not any(
            h in request.headers for h in FORWARDING_HEADERS
        ):
            return SenderIdentity.LOCAL
        return SenderIdentity.SELF_DECLARED


LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
TRUSTED_IDENTITY = web.AppKey("trusted_identity", TrustedIdentity)
NOBODY_TRUSTED = TrustedIdentity(header=None, proxies=())


def identity_of(request: web.Request) -> TrustedIdentity:
    """The server's reader (set by HttpServer); none trusted on an app without one."""
    return request.config_dict.get(TRUSTED_IDENTITY, NOBODY_TRUSTED)


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


def client_address(request: web.Request) -> str:
    """The client's address, for per-client caps: the peer, or, on a request from one of
    ``server.trusted_proxies``, the address that proxy forwarded.

    ``X-Forwarded-For`` is read from the right, past the trusted proxies: the entries left
    of the first other address are whatever the client sent. Then ``X-Real-IP``.
    """
    proxies = identity_of(request).proxies
    peer = request.remote or ""
    if not _is_in(peer, proxies):
        return peer
    hops = ",".join(request.headers.getall("X-Forwarded-For", [])).split(",")
    for hop in reversed([h.strip() for h in hops if h.strip()]):
        if not _is_in(hop, proxies):
            return hop
    return request.headers.get("X-Real-IP", "").strip() or peer
