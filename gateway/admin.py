"""Admin HTTP API: health, readiness, metrics (confirmations, events and keywords follow)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from gateway.app import Gateway


def setup_admin(app: web.Application, gateway: Gateway) -> None:
    """Register the admin routes on the shared server."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        ready = gateway.ready
        return web.json_response(
            {"ready": ready, "channels": gateway.channels.status()}, status=200 if ready else 503
        )

    async def metrics(_: web.Request) -> web.Response:
        body = gateway.metrics.render()
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
