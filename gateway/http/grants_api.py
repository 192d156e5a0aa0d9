"""Admin routes for grants: list the live ones, read one with its audit trail, revoke.

Grants are given with a decision (``POST /api/confirmations/{id}/decision`` with
``grant``), by a reply such as ``确认 30分钟``, or from the admin page.
"""

from __future__ import annotations

import structlog
from aiohttp import web

from gateway import texts
from gateway.bus import MessageBus, OutboundMessage
from gateway.confirm.grants import GrantBook
from gateway.confirm.model import Grant
from gateway.confirm.service import ConfirmationService
from gateway.http.jsonapi import ApiError, RevokeBody, json_response, read_body
from gateway.http.openapi import ID, UNKNOWN_ID, Reply, Route, serve
from gateway.http.openapi_models import Error, GrantList, OneGrant
from gateway.http.server import person_behind

log = structlog.get_logger(__name__)

MAX_GRANT_ID = 32


class GrantsApi:
    """``/api/grants``: list, show, revoke."""

    def __init__(self, *, grants: GrantBook, confirmations: ConfirmationService) -> None:
        self.grants = grants
        self.confirmations = confirmations

    def register(self, app: web.Application) -> None:
        serve(app, (
            Route("get", "/api/grants", self.list_grants, "live grants, oldest first",
                  {200: Reply("grants", GrantList)}),
            Route("get", "/api/grants/{id}", self.get_grant,
                  "one grant and its audit trail (given, used, revoked)",
                  {200: Reply("the grant", OneGrant), 404: UNKNOWN_ID}, path_params=ID),
            Route("post", "/api/grants/{id}/revoke", self.revoke,
                  "end a grant now; its chat is told",
                  {200: Reply("the revoked grant", OneGrant), 404: UNKNOWN_ID,
                   409: Reply("already expired or revoked", Error)},
                  body=RevokeBody, path_params=ID),
        ))  # fmt: skip

    async def list_grants(self, _: web.Request) -> web.Response:
        return json_response({"grants": [g.to_dict() for g in await self.grants.live()]})

    async def get_grant(self, request: web.Request) -> web.Response:
        grant = await self._find(request)
        events = await self.grants.events(grant.id)
        return json_response({"grant": grant.to_dict(), "events": [e.to_dict() for e in events]})

    async def revoke(self, request: web.Request) -> web.Response:
        grant = await self._find(request)
        body = await read_body(request, RevokeBody) if request.can_read_body else RevokeBody()
        actor = person_behind(request, body.actor) or "admin"
        done = await self.grants.revoke(grant.id, by=actor)
        if done is None:
            raise ApiError(409, f"grant {grant.id} has already ended (expired or revoked)")
        log.info("admin.grant_revoked", grant_id=grant.id, actor=actor)
        await say_in(
            self.confirmations.bus,
            done.channel,
            done.chat_id,
            done.session_key,
            texts.grant_revoked(done),
        )
        return json_response({"grant": done.to_dict()})

    async def _find(self, request: web.Request) -> Grant:
        gid = request.match_info["id"]
        grant = await self.grants.get(gid) if len(gid) <= MAX_GRANT_ID else None
        if grant is None:
            raise ApiError(404, f"no grant {gid[:MAX_GRANT_ID]}", field="id")
        return grant


async def say_in(bus: MessageBus, channel: str, chat_id: str, session_key: str, text: str) -> None:
    """Tell a chat what happened to a grant (given, refused, revoked)."""
    await bus.publish_outbound(
        OutboundMessage(channel=channel, chat_id=chat_id, session_key=session_key, text=text)
    )
