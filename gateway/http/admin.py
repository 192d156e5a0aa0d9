"""Admin HTTP API: confirmations, server-sent events, keywords, health, metrics, OpenAPI.

Which routes need the bearer token is decided by ``gateway.http.server.require_admin``
(everything here except /healthz, /readyz and /api/openapi.json). Given the parts it
needs, not the Gateway: the composition root builds this before it builds the Gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

import structlog
from aiohttp import web

from config.keywords import KeywordsError, KeywordSet, KeywordStore, ListName, WordExists
from config.settings import AdminSettings
from gateway import texts
from gateway.confirm.model import Answer, Confirmation, Decision, GrantAsk, Status
from gateway.confirm.service import (
    ConfirmationEvent,
    ConfirmationService,
    DecideOutcome,
    DecideResult,
)
from gateway.http.jsonapi import (
    ApiError,
    ConfirmationQuery,
    DecisionBody,
    GrantBody,
    KeywordBody,
    KeywordsBody,
    json_response,
    read_body,
    read_query,
)
from gateway.http.openapi import BAD, ID, UNKNOWN_ID, Reply, Route, serve, serve_document
from gateway.http.openapi_models import (
    ConfirmationEvents,
    ConfirmationList,
    DecisionResult,
    Error,
    Health,
    Keywords,
    OneConfirmation,
    Readiness,
)
from gateway.http.server import person_behind
from gateway.metrics import Metrics
from gateway.storage.confirmations import ConfirmationStore
from gateway.tools.edits import CallEditor, EditRefusedError

log = structlog.get_logger(__name__)

MAX_ID_LENGTH = 32
ACTOR_REQUIRED = (
    "actor is required: name the person deciding (the admin token is an operator's, not a "
    "person's; four-eyes compares the person with the requester), or log in on /admin, or "
    "send the login proxy's user header"
)
# Seen after a decision: HTTP status for each outcome of ConfirmationService.decide.
DECISION_STATUS = {
    DecideOutcome.DECIDED: 200,
    DecideOutcome.VOTED: 200,  # counted; the call waits for more approvals
    DecideOutcome.ALREADY_DECIDED: 409,
    DecideOutcome.EXPIRED: 409,
    DecideOutcome.NOT_FOUND: 404,
    DecideOutcome.FORBIDDEN: 403,
}


def event_payload(event: ConfirmationEvent) -> dict[str, Any]:
    """What an SSE subscriber gets: the headline fields, and the whole record.

    ``remote``: another replica made the change (with the Redis store every replica's
    stream carries every replica's changes, each once). ``stage`` and ``outcome``: what its
    cards say of it now (gateway/texts), for a page that shows it in words.
    """
    c = event.confirmation
    return {
        "id": c.id,
        "remote": event.remote,
        "status": c.status.value,
        "stage": texts.stage(c).value,
        "outcome": None if c.status is Status.PENDING else texts.outcome(c),
        "actor": c.decided_by,
        "via": c.decided_via,
        "reason": c.reason,
        "session_key": c.session_key,
        "tool": c.tool_call.name,
        "confirmation": c.to_dict(),
    }


class AdminApi:
    """The admin routes, given the parts they read and drive."""

    def __init__(
        self,
        *,
        confirmations: ConfirmationService,
        editor: CallEditor,
        store: ConfirmationStore,
        keywords: KeywordStore,
        metrics: Metrics,
        settings: AdminSettings,
        ready: Callable[[], bool],
        channel_status: Callable[[], list[dict[str, Any]]],
    ) -> None:
        self.confirmations = confirmations
        self.editor = editor
        self.store = store
        self.keywords = keywords
        self.metrics = metrics
        self.settings = settings
        self.ready = ready
        self.channel_status = channel_status
        self._streams: set[asyncio.Queue[ConfirmationEvent | None]] = set()

    def register(self, app: web.Application) -> None:
        serve(app, (
            Route("get", "/healthz", self.healthz, "process is alive",
                  {200: Reply("alive", Health)}),
            Route("get", "/readyz", self.readyz,
                  "all channels started and the confirmation store reachable",
                  {200: Reply("ready", Readiness),
                   503: Reply("not ready; channels and store say why", Readiness)}),
            Route("get", "/metrics", self.get_metrics, "Prometheus metrics",
                  {200: Reply("text exposition format", media="text/plain")}),
            Route("get", "/api/openapi.json", serve_document, "this API as OpenAPI 3.1",
                  {200: Reply("this document")}),
            Route("get", "/api/confirmations", self.list_confirmations,
                  "list confirmations, newest first",
                  {200: Reply("the confirmations", ConfirmationList), 400: BAD},
                  query=ConfirmationQuery),
            Route("get", "/api/confirmations/{id}", self.get_confirmation, "one confirmation",
                  {200: Reply("the record", OneConfirmation), 404: UNKNOWN_ID},
                  path_params=ID),
            Route("get", "/api/confirmations/{id}/events", self.confirmation_events,
                  "the audit trail of one confirmation: every transition with its time",
                  {200: Reply("the events, oldest first", ConfirmationEvents),
                   404: UNKNOWN_ID},
                  path_params=ID),
            Route("post", "/api/confirmations/{id}/decision", self.decide,
                  "approve (optionally with edited arguments) or reject as a named person "
                  "(via=admin)",
                  {200: Reply("decided; the final record", DecisionResult),
                   400: BAD,
                   403: Reply("four-eyes and the person deciding is the requester, or the "
                              "edited call may not be approved (policy deny/manual); the "
                              "record, still pending", DecisionResult),
                   404: Reply("unknown id", DecisionResult),
                   409: Reply("already decided or expired; the record", DecisionResult),
                   422: Reply("no person named (field actor: required unless the login "
                              "proxy's header or the /admin login names one), or the edited "
                              "arguments do not fit the tool (field names the first bad one, "
                              "arguments.sql); the call still waits", Error)},
                  body=DecisionBody, path_params=ID,
                  description="With arguments (approve only) the call runs with them instead "
                  "of the asked ones: they are checked against the tool's schema and its "
                  "preview, then the policy again; the chat, the audit trail (an edited event "
                  "with before and after) and the model are told. See docs/http-api.md."),
            Route("get", "/api/events", self.events,
                  "server-sent events: confirmation.requested, .resolved, .executed (every "
                  "replica's)",
                  {200: Reply("an event stream", media="text/event-stream")},
                  description="Each event's data is JSON: id, remote (made by another "
                  "replica), status, actor, via, reason, session_key, tool and the whole "
                  "confirmation."),
            Route("get", "/api/keywords", self.get_keywords, "the confirm/cancel words in force",
                  {200: Reply("words", Keywords)}),
            Route("put", "/api/keywords", self.put_keywords,
                  "replace both lists: validated, written to the file, applied now",
                  {200: Reply("the new words", Keywords), 400: BAD,
                   422: Reply("invalid word lists (empty, or a word in both)", Error)},
                  body=KeywordsBody),
            Route("post", "/api/keywords/{list}", self.add_keyword,
                  "add one word to the confirm or cancel list, keeping the file's comments "
                  "and order",
                  {200: Reply("the words now in force", Keywords), 400: BAD,
                   404: Reply("no such list (use confirm or cancel)", Error),
                   409: Reply("the word is already in that list; nothing changed", Error),
                   422: Reply("the word is in the other list", Error)},
                  body=KeywordBody,
                  path_params={"list": {"type": "string", "enum": ["confirm", "cancel"]}}),
        ))  # fmt: skip
        app.on_shutdown.append(self._close_streams)

    # ------------------------------------------------------------------ health

    async def healthz(self, _: web.Request) -> web.Response:
        return json_response({"status": "ok"})

    async def readyz(self, _: web.Request) -> web.Response:
        # The store is asked each time: a Redis outage must show here (issue 13), and
        # clear again without a restart when Redis is back.
        problem = await self.store.unavailable()
        ready = self.ready() and problem is None
        body = {
            "ready": ready,
            "channels": self.channel_status(),
            "store": {"ready": problem is None, "reason": problem},
        }
        return json_response(body, status=200 if ready else 503)

    async def get_metrics(self, _: web.Request) -> web.Response:
        try:
            # One indexed count: loading every record to count them took 2.6 s at 100k
            # pending and blocked the event loop for 2.3 s of it (issue 12).
            pending = await self.store.count(Status.PENDING)
        except Exception as exc:
            # A store outage (Redis down) must not hide every other metric: keep the
            # last pending count and serve the rest.
            log.warning("admin.metrics_pending_failed", error=f"{type(exc).__name__}: {exc}")
        else:
            self.metrics.set_pending(pending)
        return web.Response(
            body=self.metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4"}
        )

    # ------------------------------------------------------------------ confirmations

    async def list_confirmations(self, request: web.Request) -> web.Response:
        query = read_query(request, ConfirmationQuery)
        found, next_cursor = await search_page(self.store, query)
        return json_response(
            {"confirmations": [c.to_dict() for c in found], "next_cursor": next_cursor}
        )

    async def get_confirmation(self, request: web.Request) -> web.Response:
        found = await self._found(request)
        return json_response({"confirmation": found.to_dict()})

    async def confirmation_events(self, request: web.Request) -> web.Response:
        """The audit trail: every transition of one confirmation with its time, oldest first."""
        found = await self._found(request)
        events = await self.store.events(found.id)
        return json_response({"confirmation_id": found.id, "events": [e.to_dict() for e in events]})

    async def _found(self, request: web.Request) -> Confirmation:
        cid = request.match_info["id"]
        found = await self.confirmations.get(cid) if len(cid) <= MAX_ID_LENGTH else None
        if found is None:
            raise ApiError(404, f"no confirmation {cid[:MAX_ID_LENGTH]}", field="id")
        return found

    async def decide(self, request: web.Request) -> web.Response:
        cid = request.match_info["id"]
        body = await read_body(request, DecisionBody)
        # Four-eyes is judged on the person, so every decision names one: a login proxy's
        # name wins, then the page's login, then the body. Never a default (issue 22: the
        # requester holding the token approved their own call by leaving actor out).
        actor = person_behind(request, body.actor)
        if actor is None:
            raise ApiError(422, ACTOR_REQUIRED, field="actor")
        reason = (body.reason or "").strip() or None
        if len(cid) > MAX_ID_LENGTH:
            raise ApiError(404, f"no confirmation {cid[:MAX_ID_LENGTH]}", field="id")
        # The bearer token authenticates the operator, so via="admin" skips the
        # requester/approver check that chat decisions go through; four-eyes still holds.
        if body.arguments is not None:
            result = await self._approve_edited(cid, body, actor=actor, reason=reason)
        else:
            result = await self.confirmations.answer(
                Answer(
                    confirmation_id=cid,
                    decision=Decision(body.decision),
                    actor=actor,
                    via="admin",
                    reason=reason,
                    grant=asked_grant(body.grant),
                )
            )
        status = DECISION_STATUS[result.outcome]
        answer: dict[str, Any] = {
            "outcome": result.outcome.value,
            "message": result.message,
            "confirmation": result.confirmation.to_dict() if result.confirmation else None,
        }
        if body.grant is not None:
            answer["grant"] = result.grant.to_dict() if result.grant else None
        if status != 200:
            answer["error"] = result.message
        log.info("admin.decision", confirmation_id=cid, outcome=result.outcome.value, actor=actor)
        return json_response(answer, status=status)

    async def _approve_edited(
        self, cid: str, body: DecisionBody, *, actor: str, reason: str | None
    ) -> DecideResult:
        """Approve with new arguments (gateway/tools/edits.py): 422 names a bad argument;
        a refused edit answers 403 with the record, still pending."""
        assert body.arguments is not None
        if body.decision != "approve":
            raise ApiError(400, "arguments go only with approve", field="arguments")
        try:
            return await self.editor.approve(
                cid,
                body.arguments,
                actor=actor,
                via="admin",
                reason=reason,
                grant=asked_grant(body.grant),
            )
        except EditRefusedError as exc:
            if exc.kind == "invalid":
                raise ApiError(422, exc.message, field=exc.field) from exc
            log.info("admin.edit_refused", confirmation_id=cid, actor=actor, why=exc.message)
            return DecideResult(DecideOutcome.FORBIDDEN, exc.confirmation, exc.message)

    # ------------------------------------------------------------------ events

    async def events(self, request: web.Request) -> web.StreamResponse:
        queue: asyncio.Queue[ConfirmationEvent | None] = asyncio.Queue(
            maxsize=self.settings.sse_queue_size
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
        self.metrics.sse_subscribers.inc()
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
            await self._stream(response, queue)
        except (ConnectionResetError, asyncio.CancelledError):
            # The subscriber went away, or the server is stopping: nothing to tell anyone.
            pass
        finally:
            unsubscribe()
            self._streams.discard(queue)
            self.metrics.sse_subscribers.dec()
        return response

    async def _stream(
        self, response: web.StreamResponse, queue: asyncio.Queue[ConfirmationEvent | None]
    ) -> None:
        count = 0
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), self.settings.sse_heartbeat_seconds)
            except TimeoutError:
                await response.write(b": keep-alive\n\n")
                continue
            if event is None:
                return
            count += 1
            data = json.dumps(event_payload(event), ensure_ascii=False)
            chunk = f"id: {count}\nevent: confirmation.{event.kind}\ndata: {data}\n\n"
            await response.write(chunk.encode())

    async def _close_streams(self, _: web.Application) -> None:
        for queue in list(self._streams):
            _end_stream(queue)

    # ------------------------------------------------------------------ keywords

    async def get_keywords(self, _: web.Request) -> web.Response:
        store = self.keywords
        return json_response(
            {**store.words.to_dict(), "file": str(store.path), "last_error": store.last_error}
        )

    async def put_keywords(self, request: web.Request) -> web.Response:
        body = await read_body(request, KeywordsBody)
        try:
            words = KeywordSet.build(body.confirm, body.cancel)
        except KeywordsError as exc:
            raise ApiError(422, str(exc)) from exc
        return self._saved(lambda: self.keywords.replace(words), "admin.keywords_replaced")

    async def add_keyword(self, request: web.Request) -> web.Response:
        which = request.match_info["list"]
        if which not in ("confirm", "cancel"):
            raise ApiError(404, f"no word list {which!r}: use /api/keywords/confirm or /cancel")
        body = await read_body(request, KeywordBody)
        list_name: ListName = "confirm" if which == "confirm" else "cancel"
        return self._saved(lambda: self.keywords.add(list_name, body.word), "admin.keyword_added")

    def _saved(self, edit: Callable[[], object], event: str) -> web.Response:
        """Run an edit of the keyword file and answer with the words now in force."""
        path = self.keywords.path
        try:
            edit()
        except WordExists as exc:
            raise ApiError(409, str(exc)) from exc
        except KeywordsError as exc:
            raise ApiError(422, str(exc)) from exc
        except OSError as exc:
            log.error("admin.keywords_write_failed", path=str(path), error=str(exc))
            return json_response({"error": f"cannot write {path}: {exc.strerror}"}, status=500)
        words = self.keywords.words
        log.info(event, confirm=len(words.confirm), cancel=len(words.cancel))
        return json_response({**words.to_dict(), "file": str(path)})


# Tool and person are filtered here, not in the store: read this many, keep the matches.
SEARCH_WINDOW = 1000


async def search(
    confirmations: ConfirmationService, query: ConfirmationQuery
) -> list[Confirmation]:
    """Confirmations matching ``query``, newest first: the first page (the admin page)."""
    found, _ = await search_page(confirmations.store, query)
    return found


async def search_page(
    store: ConfirmationStore, query: ConfirmationQuery
) -> tuple[list[Confirmation], str | None]:
    """One page of confirmations matching ``query``, newest first, and the next cursor.

    Status and session are the store's (indexed); tool and person are filtered here, over
    at most SEARCH_WINDOW records per call. Each read asks the store for no more records
    than matches are still wanted, so the returned cursor never skips a match.
    """

    def matches(c: Confirmation) -> bool:
        if query.tool and c.tool_call.name != query.tool:
            return False
        return not query.person or query.person in (c.requester, c.decided_by)

    found: list[Confirmation] = []
    cursor, read = query.cursor, 0
    while True:
        try:
            page, cursor = await store.page(
                status=query.status,
                session_key=query.session or None,
                limit=query.limit - len(found),
                cursor=cursor,
            )
        except ValueError as exc:  # each store parses its own cursors
            raise ApiError(400, "cursor is not one this gateway gave", field="cursor") from exc
        read += len(page)
        found += [c for c in page if matches(c)]
        if len(found) >= query.limit or cursor is None or read >= SEARCH_WINDOW:
            return found, cursor


def _end_stream(queue: asyncio.Queue[ConfirmationEvent | None]) -> None:
    """Make the stream's loop end: drop what is queued and put the end marker."""
    with contextlib.suppress(asyncio.QueueEmpty):
        while True:
            queue.get_nowait()
    queue.put_nowait(None)


def asked_grant(body: GrantBody | None) -> GrantAsk | None:
    """The grant a decision's body asks for, shape and all."""
    if body is None:
        return None
    return GrantAsk(body.scope, body.minutes, pin=body.pin, single_use=body.single_use)
