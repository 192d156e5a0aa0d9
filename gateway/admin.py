"""Admin HTTP API: confirmations, server-sent events, keywords, health, metrics, OpenAPI.

Every route except /healthz, /readyz and /api/openapi.json needs
``Authorization: Bearer <token>`` when ``[admin] token`` is set. The server refuses to
listen beyond loopback without a token (``HttpServer.check_exposure``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from config.keywords import KeywordsError, KeywordSet
from gateway.confirm.model import Decision, Status
from gateway.confirm.service import ConfirmationEvent, ConfirmationService, DecideOutcome
from gateway.jsonapi import ApiError, install_middlewares, optional_string, read_json_object
from gateway.openapi import openapi_document

if TYPE_CHECKING:
    from gateway.app import Gateway

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_ACTOR_LENGTH = 128
MAX_REASON_LENGTH = 1000
MAX_WORDS = 500
MAX_WORD_LENGTH = 64
MAX_LIST_LIMIT = 1000
# Seen after a decision: HTTP status for each outcome of ConfirmationService.decide.
DECISION_STATUS = {
    DecideOutcome.DECIDED: 200,
    DecideOutcome.ALREADY_DECIDED: 409,
    DecideOutcome.EXPIRED: 409,
    DecideOutcome.NOT_FOUND: 404,
    DecideOutcome.FORBIDDEN: 403,
}


def event_payload(event: ConfirmationEvent) -> dict[str, Any]:
    """What an SSE subscriber gets: the headline fields, and the whole record."""
    c = event.confirmation
    return {
        "id": c.id,
        "status": c.status.value,
        "actor": c.decided_by,
        "via": c.decided_via,
        "reason": c.reason,
        "session_key": c.session_key,
        "tool": c.tool_call.name,
        "confirmation": c.to_dict(),
    }


class AdminApi:
    """The admin routes, bound to one running Gateway."""

    def __init__(self, gateway: Gateway, *, token: str | None) -> None:
        self.gateway = gateway
        # An empty token is no token: it must not make 'Bearer ' (nothing) a password.
        self._token = token or None
        self._streams: set[asyncio.Queue[ConfirmationEvent | None]] = set()

    # ------------------------------------------------------------------ plumbing

    @property
    def confirmations(self) -> ConfirmationService:
        service = self.gateway.confirmations
        if service is None:
            raise ApiError(503, "gateway is not started yet")
        return service

    def protected(self, handler: Handler) -> Handler:
        """Require the bearer token (when one is configured)."""

        async def check(request: web.Request) -> web.StreamResponse:
            if self._token is not None:
                header = request.headers.get("Authorization", "")
                scheme, _, given = header.partition(" ")
                ok = scheme.lower() == "bearer" and hmac.compare_digest(
                    given.strip().encode(), self._token.encode()
                )
                if not ok:
                    log.info("admin.unauthorized", path=request.path)
                    return web.json_response(
                        {"error": "missing or wrong bearer token: send Authorization: Bearer ..."},
                        status=401,
                        headers={"WWW-Authenticate": 'Bearer realm="gateway"'},
                    )
            return await handler(request)

        return check

    def register(self, app: web.Application) -> None:
        install_middlewares(app)
        p = self.protected
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", p(self.metrics))
        app.router.add_get("/api/openapi.json", self.openapi)
        app.router.add_get("/api/confirmations", p(self.list_confirmations))
        app.router.add_get("/api/confirmations/{id}", p(self.get_confirmation))
        app.router.add_post("/api/confirmations/{id}/decision", p(self.decide))
        app.router.add_get("/api/events", p(self.events))
        app.router.add_get("/api/keywords", p(self.get_keywords))
        app.router.add_put("/api/keywords", p(self.put_keywords))
        app.on_shutdown.append(self._close_streams)

    # ------------------------------------------------------------------ health

    async def healthz(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(self, _: web.Request) -> web.Response:
        ready = self.gateway.ready
        return web.json_response(
            {"ready": ready, "channels": self.gateway.channels.status()},
            status=200 if ready else 503,
        )

    async def metrics(self, _: web.Request) -> web.Response:
        if self.gateway.confirmations is not None:
            try:
                pending = await self.gateway.confirmations.list(
                    status=Status.PENDING, limit=1_000_000
                )
            except Exception as exc:
                # A store outage (Redis down) must not hide every other metric: keep the
                # last pending count and serve the rest.
                log.warning("admin.metrics_pending_failed", error=f"{type(exc).__name__}: {exc}")
            else:
                self.gateway.metrics.set_pending(len(pending))
        body = self.gateway.metrics.render()
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})

    async def openapi(self, _: web.Request) -> web.Response:
        return web.json_response(openapi_document())

    # ------------------------------------------------------------------ confirmations

    async def list_confirmations(self, request: web.Request) -> web.Response:
        status: Status | None = None
        raw_status = request.query.get("status")
        if raw_status:
            try:
                status = Status(raw_status)
            except ValueError as exc:
                allowed = ", ".join(s.value for s in Status)
                raise ApiError(400, f"status must be one of {allowed}", field="status") from exc
        session = request.query.get("session") or None
        if session is not None and len(session) > 256:
            raise ApiError(400, "session is too long", field="session")
        limit = 200
        raw_limit = request.query.get("limit")
        if raw_limit is not None:
            try:
                limit = int(raw_limit)
            except ValueError as exc:
                raise ApiError(400, "limit must be a whole number", field="limit") from exc
            if not 1 <= limit <= MAX_LIST_LIMIT:
                raise ApiError(400, f"limit must be 1..{MAX_LIST_LIMIT}", field="limit")
        found = await self.confirmations.list(status=status, session_key=session, limit=limit)
        return web.json_response({"confirmations": [c.to_dict() for c in found]})

    async def get_confirmation(self, request: web.Request) -> web.Response:
        cid = request.match_info["id"]
        found = await self.confirmations.get(cid) if len(cid) <= 32 else None
        if found is None:
            raise ApiError(404, f"no confirmation {cid[:32]}", field="id")
        return web.json_response({"confirmation": found.to_dict()})

    async def decide(self, request: web.Request) -> web.Response:
        cid = request.match_info["id"]
        data = await read_json_object(request)
        raw_decision = data.get("decision")
        if raw_decision not in ("approve", "reject"):
            raise ApiError(400, "decision must be approve or reject", field="decision")
        actor = optional_string(data, "actor", max_length=MAX_ACTOR_LENGTH, default="admin")
        actor = (actor or "").strip() or "admin"
        reason = optional_string(data, "reason", max_length=MAX_REASON_LENGTH)
        reason = (reason or "").strip() or None
        if len(cid) > 32:
            raise ApiError(404, f"no confirmation {cid[:32]}", field="id")
        # The bearer token authenticates the operator, so via="admin" skips the
        # requester/approver check that chat decisions go through.
        result = await self.confirmations.decide(
            cid, Decision(raw_decision), actor=actor, via="admin", reason=reason
        )
        status = DECISION_STATUS[result.outcome]
        body: dict[str, Any] = {
            "outcome": result.outcome.value,
            "message": result.message,
            "confirmation": result.confirmation.to_dict() if result.confirmation else None,
        }
        if status != 200:
            body["error"] = result.message
        log.info("admin.decision", confirmation_id=cid, outcome=result.outcome.value, actor=actor)
        return web.json_response(body, status=status)

    # ------------------------------------------------------------------ events

    async def events(self, request: web.Request) -> web.StreamResponse:
        settings = self.gateway.settings.admin
        queue: asyncio.Queue[ConfirmationEvent | None] = asyncio.Queue(
            maxsize=settings.sse_queue_size
        )

        def listener(event: ConfirmationEvent) -> None:
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                # A reader this far behind is gone or stuck: end its stream, it reconnects.
                log.warning("admin.sse_overflow")
                _end_stream(queue)

        unsubscribe = self.confirmations.subscribe(listener)
        self._streams.add(queue)
        self.gateway.metrics.sse_subscribers.inc()
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",  # nginx would buffer the stream otherwise
            }
        )
        try:
            await response.prepare(request)
            await response.write(b": connected\n\n")
            count = 0
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), settings.sse_heartbeat_seconds)
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if event is None:
                    break
                count += 1
                data = json.dumps(event_payload(event), ensure_ascii=False)
                chunk = f"id: {count}\nevent: confirmation.{event.kind}\ndata: {data}\n\n"
                await response.write(chunk.encode())
        except (ConnectionResetError, asyncio.CancelledError):
            # The subscriber went away, or the server is stopping: nothing to tell anyone.
            pass
        finally:
            unsubscribe()
            self._streams.discard(queue)
            self.gateway.metrics.sse_subscribers.dec()
        return response

    async def _close_streams(self, _: web.Application) -> None:
        for queue in list(self._streams):
            _end_stream(queue)

    # ------------------------------------------------------------------ keywords

    async def get_keywords(self, _: web.Request) -> web.Response:
        store = self.gateway.keywords
        if store is None:
            raise ApiError(503, "gateway is not started yet")
        return web.json_response(
            {**store.words.to_dict(), "file": str(store.path), "last_error": store.last_error}
        )

    async def put_keywords(self, request: web.Request) -> web.Response:
        store = self.gateway.keywords
        if store is None:
            raise ApiError(503, "gateway is not started yet")
        data = await read_json_object(request)
        lists = {name: _word_list(data, name) for name in ("confirm", "cancel")}
        try:
            words = KeywordSet.build(lists["confirm"], lists["cancel"])
        except KeywordsError as exc:
            raise ApiError(422, str(exc)) from exc
        try:
            store.replace(words)
        except OSError as exc:
            log.error("admin.keywords_write_failed", path=str(store.path), error=str(exc))
            return web.json_response(
                {"error": f"cannot write {store.path}: {exc.strerror}"}, status=500
            )
        log.info("admin.keywords_replaced", confirm=len(words.confirm), cancel=len(words.cancel))
        return web.json_response({**words.to_dict(), "file": str(store.path)})


def _word_list(data: dict[str, Any], name: str) -> list[str]:
    value = data.get(name)
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        raise ApiError(400, f"{name} must be a list of strings", field=name)
    if len(value) > MAX_WORDS:
        raise ApiError(400, f"{name} has too many words (max {MAX_WORDS})", field=name)
    for word in value:
        if len(word) > MAX_WORD_LENGTH:
            raise ApiError(400, f"a word in {name} is too long (max {MAX_WORD_LENGTH})", field=name)
    return value


def _end_stream(queue: asyncio.Queue[ConfirmationEvent | None]) -> None:
    """Make the stream's loop end: drop what is queued and put the end marker."""
    with contextlib.suppress(asyncio.QueueEmpty):
        while True:
            queue.get_nowait()
    queue.put_nowait(None)


def setup_admin(app: web.Application, gateway: Gateway) -> AdminApi:
    """Register the admin routes on the shared server."""
    token = gateway.settings.admin.token
    api = AdminApi(gateway, token=token.get_secret_value() if token else None)
    api.register(app)
    return api
