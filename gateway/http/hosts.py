"""Host names as the server sees them: the name in a ``Host`` header, and whether a name
is this machine's (loopback). Shared by the Host allow-list, the admin token check and
the reading of who is making a request."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a Host header, lowercased, without port, brackets or trailing dot."""
    host = header.strip().lower()
    if host.startswith("["):  # [::1]:8080
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:  # name:8080; more colons is a bare IPv6 address
        host = host.partition(":")[0]
    return host.rstrip(".")
