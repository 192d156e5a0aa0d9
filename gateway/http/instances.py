"""Instance / replica health: this process, every process the store knows, and the store.

``GET /api/instances`` (admin, like all of ``/api``) and the admin page's health panel
(gateway/http/templates/health.html) read the same report, so the page shows what the API says.
An instance is alive while its heartbeat is younger than the lease
(``Instance.alive``); a dead one stays listed until a live instance has adopted what it
left and forgotten it (gateway/confirm/replicas.py).
"""

from __future__ import annotations

from typing import Any

import structlog
from aiohttp import web

from gateway.confirm.model import Instance
from gateway.confirm.service import ConfirmationService
from gateway.http.jsonapi import json_response
from gateway.http.openapi import Reply, Route, serve
from gateway.http.openapi_models import Instances

log = structlog.get_logger(__name__)


async def instances_report(confirmations: ConfirmationService) -> dict[str, Any]:
    """This instance's id, the lease, the store's readiness (as /readyz says it) and every
    instance the store knows, each with ``alive`` and ``this``."""
    store = confirmations.store
    me = confirmations.instance.id
    lease = confirmations.lease
    # The store is asked each time, like /readyz: an outage shows here and clears by itself.
    problem = await store.unavailable()
    listed: list[Instance] = []
    if problem is None:
        try:
            listed = await store.list_instances()
        except Exception as exc:
            # Any store failure between the two questions (Redis gone, a locked file): the
            # report says so instead of failing the page that shows it.
            problem = f"cannot list instances: {type(exc).__name__}: {exc}"
            log.warning("admin.instances_unreadable", error=problem)
    now = confirmations.clock()
    return {
        "instance": me,
        "lease_seconds": lease,
        "now": now,
        "store": {"ready": problem is None, "reason": problem},
        "instances": [
            {**i.to_dict(), "alive": i.alive(now, lease), "this": i.id == me} for i in listed
        ],
    }


class InstancesApi:
    """``GET /api/instances``: the report above, as JSON."""

    def __init__(self, *, confirmations: ConfirmationService) -> None:
        self.confirmations = confirmations

    def register(self, app: web.Application) -> None:
        serve(app, (
            Route("get", "/api/instances", self.list_instances,
                  "this instance, every instance (replica) the store knows, alive or dead, "
                  "and the store",
                  {200: Reply("the instances and the store's readiness", Instances)},
                  description="alive: the instance's heartbeat is younger than lease_seconds. "
                  "A dead one is listed until a live one has taken over what it left. When "
                  "the store is down, store.ready is false with the reason and instances is "
                  "empty."),
        ))  # fmt: skip

    async def list_instances(self, _: web.Request) -> web.Response:
        return json_response(await instances_report(self.confirmations))
