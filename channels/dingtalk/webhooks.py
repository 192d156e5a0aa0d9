"""Which ``sessionWebhook`` URLs the gateway posts to.

The URL comes from the message body, and in HTTP robot mode the body is not signed (only
the timestamp is): posting to whatever it names would let a forged body make the gateway
send requests anywhere, loopback and the internal network included (SSRF). So a webhook is
used only when its scheme is allowed (https by default), it carries no user or password,
and its host is on ``channels.dingtalk.webhook_hosts``: an exact host name on the scheme's
default port, or ``host:port`` as listed. The URL is read by yarl, the parser aiohttp
itself uses, so what is checked is what would be posted to.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog
from cachetools import TTLCache
from yarl import URL

log = structlog.get_logger(__name__)

# A refused host is logged again after a day (one line per host, not per message).
REFUSAL_LOG_SECONDS = 24 * 3600.0


class WebhookRule:
    """The allow-list for session webhooks; refusals are logged once per host."""

    def __init__(self, *, hosts: Iterable[str], schemes: Iterable[str]) -> None:
        self._hosts = frozenset(h.lower() for h in hosts)
        self._schemes = frozenset(s.lower() for s in schemes)
        self._logged: TTLCache[str, bool] = TTLCache(maxsize=1000, ttl=REFUSAL_LOG_SECONDS)

    def allows(self, url: str) -> bool:
        """Whether ``url`` may be posted to; a refusal is logged (once per host)."""
        host, problem = _check(url, self._hosts, self._schemes)
        if problem is None:
            return True
        if host not in self._logged:
            self._logged[host] = True
            # Never the URL itself: its query string is the session's credential.
            log.warning(
                "dingtalk.webhook_refused",
                host=host,
                reason=problem,
                hint="the reply goes through the robot OpenAPI instead; if this host is "
                "DingTalk's, add it to channels.dingtalk.webhook_hosts",
            )
        return False


def _check(url: str, hosts: frozenset[str], schemes: frozenset[str]) -> tuple[str, str | None]:
    """(the host as named in the URL, why it is refused or None)."""
    try:
        parsed = URL(url)
        port = parsed.port
    except ValueError:
        return "?", "not a URL"
    host = (parsed.host or "").lower()
    if parsed.scheme not in schemes:
        return host, f"scheme {parsed.scheme or 'none'!r} is not in webhook_schemes"
    if not host:
        return "?", "no host"
    if parsed.user is not None or parsed.password is not None or "@" in parsed.raw_authority:
        return host, "user information in the URL"
    named = f"[{host}]" if ":" in host else host
    if parsed.is_default_port() and named in hosts:
        return host, None
    if port is not None and f"{named}:{port}" in hosts:
        return host, None
    return host, "host (and port) not in webhook_hosts"
