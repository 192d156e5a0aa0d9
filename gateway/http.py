"""The one aiohttp server: web chat, admin API and platform webhooks register routes on it."""

from __future__ import annotations

import ipaddress

import structlog
from aiohttp import web

from config.settings import ConfigError

log = structlog.get_logger(__name__)


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpServer:
    """Owns the aiohttp Application and its listening socket."""

    def __init__(
        self, *, host: str, port: int, admin_token: str | None, client_max_size: int = 1 << 20
    ) -> None:
        self.host = host
        self.port = port
        self.admin_token = admin_token
        self.app = web.Application(client_max_size=client_max_size)
        self._runner: web.AppRunner | None = None

    def check_exposure(self) -> None:
        """Refuse to serve the admin API beyond loopback without a token."""
        if not is_loopback(self.host) and not self.admin_token:
            raise ConfigError(
                f"server.host is {self.host!r}, which is reachable from other machines, and "
                "admin.token is not set: set GATEWAY_ADMIN__TOKEN (or [admin] token) to a long "
                "random string, or bind 127.0.0.1"
            )

    async def start(self) -> None:
        self.check_exposure()
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            self._runner = None
            raise ConfigError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror}; "
                "set GATEWAY_SERVER__PORT (or [server] port) to a free port"
            ) from exc
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        log.info("http.listening", url=self.url)

    @property
    def url(self) -> str:
        host = self.host if ":" not in self.host else f"[{self.host}]"
        if self.host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
