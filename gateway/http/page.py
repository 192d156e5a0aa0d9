"""The ``/admin`` page: login, the page and the parts its script re-reads, and the two
testers (reply words, policy): JSON routes for scripts, and for the page their answer as a
reading with the JSON beside it (``reading.html``). The page and its parts are rendered from
the Jinja2 templates in gateway/http/templates/ with autoescape on, one renderer for both,
so a refresh looks like a load; their words are ``texts.ADMIN_LABELS``.

Who may see it is decided by ``gateway.http.server.require_admin`` like every admin route:
the login form turns the token and the person's name into a server-side session
(gateway/http/sessions.py) whose id is the page's cookie; nothing else here checks it.
Decisions from the page go through the admin API (``POST /api/confirmations/{id}/decision``)
and are taken as the person: the login proxy's name for them, else the name they logged in
with. The token is an operator's, never a person: four-eyes is judged on the name.
"""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
import structlog
from aiohttp import web
from pydantic import TypeAdapter

from config.keywords import KeywordStore
from gateway import texts
from gateway.confirm.model import Status
from gateway.confirm.replies import ParsedReply
from gateway.confirm.service import ConfirmationService
from gateway.confirm.views import (
    ESCALATED_REF,
    asks_approvers_directly,
    direct_recipients_told,
    effect_tables,
    escalated,
    grant_offered,
)
from gateway.http.admin import MAX_ID_LENGTH, search
from gateway.http.identity import came_over_tls, client_address, identity_of
from gateway.http.instances import instances_report
from gateway.http.jsonapi import (
    NAME_PATTERN,
    NAME_RULE,
    ApiError,
    ConfirmationQuery,
    PolicyTestBody,
    ReplyTestBody,
    json_response,
    read_body,
    validate,
)
from gateway.http.openapi import BAD, Reply, Route, serve
from gateway.http.openapi_models import Error
from gateway.http.server import ADMIN_COOKIE, admin_person
from gateway.http.sessions import ADMIN_SESSIONS, AdminSessions, LoginLimiter
from gateway.texts import votes as vote_texts
from gateway.texts.labels import label_functions
from gateway.tools.base import ToolArgumentsError, ToolRegistry
from gateway.tools.policy import Policy
from gateway.tools.policy_check import PolicyReport, UnknownToolError, explain

log = structlog.get_logger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
STATIC_FILES = {"admin.js": "text/javascript", "admin.css": "text/css"}
PAGE_HEADERS = {
    # No inline script or style: what a record holds can never run as code here.
    "Content-Security-Policy": (
        "default-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
}
HISTORY_LIMIT = 100
MAX_TOKEN_FIELD = 1024
PARTS = ("pending", "history", "grants", "health", "keywords")
# The policy tester's first question: a call the policy decides (the demo's orders table).
# A DELETE given to the first tool listed, sql_query, was refused before the policy.
POLICY_PRESET_TOOL = "sql_modify"
POLICY_PRESET_ARGS = {"sql": "DELETE FROM orders WHERE id = 3"}


def clock(at: float | None) -> str:
    return "—" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def as_json(value: Mapping[str, Any], indent: int | None = 2) -> str:
    return json.dumps(dict(value), ensure_ascii=False, indent=indent)


def setup_templates(app: web.Application) -> jinja2.Environment:
    """The page's templates (gateway/http/templates/) on ``app``. Autoescape is on: every
    value from a record or a person (tool arguments, reasons, names) is escaped."""
    env = aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("gateway.http"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        default_helpers=False,
        filters={"as_json": as_json},
    )
    env.policies["json.dumps_kwargs"] = {"ensure_ascii": False}
    env.globals.update(
        label_functions(texts.ADMIN_LABELS),
        script_texts={key: texts.ADMIN_LABELS[key] for key in texts.ADMIN_SCRIPT_LABELS},
        clock=clock,
        statuses=[s.value for s in Status],
        stage=texts.stage,
        outcome=texts.outcome,
        asks_approvers_directly=asks_approvers_directly,
        direct_recipients_told=direct_recipients_told,
        grant_offered=grant_offered,
        vote_tally=vote_texts.tally,  # several approvers: "1/2 已批准：alice"
        effect_tables=effect_tables,
        preview_label=texts.FIELD_PREVIEW,
        escalated=escalated,
        escalated_ref=ESCALATED_REF,
    )
    return env


class AdminPage:
    """Renders the admin page from the parts it shows; registered next to ``AdminApi``."""

    def __init__(
        self,
        *,
        confirmations: ConfirmationService,
        keywords: KeywordStore,
        registry: ToolRegistry,
        policy: Policy,
        admin_token: str | None,
        sessions: AdminSessions,
        limiter: LoginLimiter,
        channel_status: Callable[[], list[dict[str, Any]]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.confirmations = confirmations
        self.keywords = keywords
        self.registry = registry
        self.policy = policy
        self._token = admin_token.encode("utf-8", "surrogatepass") if admin_token else None
        self.sessions = sessions
        self.limiter = limiter
        self.channel_status = channel_status
        self.clock = clock

    def register(self, app: web.Application) -> None:
        app[ADMIN_SESSIONS] = self.sessions  # require_admin looks the cookie up there
        setup_templates(app)
        app.router.add_get("/admin", self.page)
        app.router.add_get("/admin/login", self.login_form)
        app.router.add_post("/admin/login", self.login)
        app.router.add_post("/admin/logout", self.logout)
        app.router.add_get("/admin/part/{name}", self.part)
        app.router.add_get("/admin/confirmations/{id}", self.detail)
        app.router.add_get("/admin/static/{name}", self.static)
        app.router.add_post("/admin/tester/reply", self.reply_reading)
        app.router.add_post("/admin/tester/policy", self.policy_reading)
        serve(app, (
            Route("post", "/api/replies/test", self.test_reply,
                  "how a chat reply would be read with the keywords in force",
                  {200: Reply("the reading", ParsedReply), 400: BAD}, body=ReplyTestBody),
            Route("post", "/api/policy/test", self.test_policy,
                  "how the policy would decide a call (nothing runs); as `gateway policy test`",
                  {200: Reply("the decision", PolicyReport), 400: BAD,
                   404: Reply("no such tool", Error),
                   422: Reply("arguments the tool refuses", Error)},
                  body=PolicyTestBody),
        ))  # fmt: skip

    def actor(self, request: web.Request) -> str | None:
        """Who the page acts as: the login proxy's name for them, else the login's name;
        None (not logged in, no token on loopback): the page cannot decide."""
        return identity_of(request).user(request) or admin_person(request)

    # ------------------------------------------------------------------ login

    async def login_form(self, request: web.Request) -> web.Response:
        return self._login_page(request, None)

    def _login_page(
        self, request: web.Request, error: str | None, status: int = 200
    ) -> web.Response:
        known_as = identity_of(request).user(request)
        context = {"error": error, "token": self._token is not None, "known_as": known_as}
        context |= {"actor": None, "logout": False, "no_token": self._token is None}
        return _html(request, "login.html", context, status)

    async def login(self, request: web.Request) -> web.Response:
        """Token (when one is set) and name -> a session. Wrong tokens are limited per
        client address: past the limit, 429 with Retry-After, before the token is read."""
        client = client_address(request)
        wait = self.limiter.retry_after(client)
        if wait is not None:
            message = texts.admin_line("too_many_logins", wait=wait)
            response = self._login_page(request, message, status=429)
            response.headers["Retry-After"] = str(wait)
            return response
        form = await request.post()
        if self._token is not None:
            given = _field(form, "token", MAX_TOKEN_FIELD)
            if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), self._token):
                log.info("admin.login_failed", client=client[:100])
                self.limiter.failed(client)
                return self._login_page(request, texts.admin_line("wrong_token"), status=401)
        name = identity_of(request).user(request) or _field(form, "name", 64)
        if not NAME_PATTERN.fullmatch(name):
            message = texts.admin_line("name_needed", rule=NAME_RULE)
            return self._login_page(request, message, status=422)
        response = _see_other("/admin")
        response.set_cookie(
            ADMIN_COOKIE,
            await self.sessions.login(name),
            max_age=int(self.sessions.seconds),
            path="/",
            httponly=True,  # the page's script never needs it: a script injection cannot read it
            samesite="Strict",  # never sent on a request another site starts (CSRF)
            # Over TLS (ours, or a listed proxy's X-Forwarded-Proto: https) the browser must
            # never send it over plain HTTP.
            secure=came_over_tls(request),
        )
        log.info("admin.login", client=client[:100], name=name)
        return response

    async def logout(self, request: web.Request) -> web.Response:
        """Ends the session on the server: a copy of the cookie no longer works either."""
        await self.sessions.logout(request.cookies.get(ADMIN_COOKIE, ""))
        response = _see_other("/admin/login")
        response.del_cookie(ADMIN_COOKIE, path="/")
        return response

    # ------------------------------------------------------------------ pages

    async def page(self, request: web.Request) -> web.Response:
        query = {k: v for k, v in request.query.items() if isinstance(v, str)}
        parts = await self._parts(request, PARTS)
        names = self.registry.names
        preset = POLICY_PRESET_TOOL if POLICY_PRESET_TOOL in names else None
        context = {
            "query": query,
            "tools": names,
            "preset_tool": preset,
            "preset_args": as_json(POLICY_PRESET_ARGS if preset else {}, indent=None),
        }
        return _html(request, "admin.html", {**parts, **context})

    async def part(self, request: web.Request) -> web.Response:
        """One part of the page, re-read by the script when an event says it changed."""
        name = request.match_info["name"]
        if name not in PARTS:
            raise web.HTTPNotFound()
        return _html(request, f"{name}.html", await self._parts(request, (name,)))

    async def _parts(self, request: web.Request, names: tuple[str, ...]) -> dict[str, Any]:
        """What the named parts of the page show (one renderer: a refresh looks like a load)."""
        context: dict[str, Any] = {
            "actor": self.actor(request) or "",
            "logout": admin_person(request) is not None,
            "no_token": self._token is None,
            "now": self.clock(),
        }
        if "pending" in names:
            context["pending"] = await self._pending()
        if "history" in names:
            context["history"] = await search(self.confirmations, self._history_query(request))
        if "grants" in names:
            context["grants"] = await self.confirmations.grants.live()
        if "health" in names:
            context["channels"] = self.channel_status()
            context["report"] = await instances_report(self.confirmations)
        if "keywords" in names:
            context["words"] = self.keywords.words.to_dict()
            context["keywords_file"] = str(self.keywords.path)
            context["keywords_error"] = self.keywords.last_error
        return context

    async def detail(self, request: web.Request) -> web.Response:
        cid = request.match_info["id"]
        found = await self.confirmations.get(cid) if len(cid) <= MAX_ID_LENGTH else None
        if found is None:
            raise web.HTTPNotFound(text=f"no confirmation {cid[:MAX_ID_LENGTH]}")
        context = await self._parts(request, ())
        events = await self.confirmations.store.events(found.id)
        return _html(request, "detail.html", {**context, "c": found, "events": events})

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in STATIC_FILES:
            raise web.HTTPNotFound()
        return web.FileResponse(
            STATIC_DIR / name,
            headers={
                **PAGE_HEADERS,
                "Content-Type": STATIC_FILES[name],
                "Cache-Control": "no-cache",
            },
        )

    async def _pending(self) -> list[Any]:
        found = await self.confirmations.list(status=Status.PENDING, limit=1000)
        return sorted(found, key=lambda c: c.created_at)

    def _history_query(self, request: web.Request) -> ConfirmationQuery:
        wanted = {k: v for k, v in request.query.items() if v != ""}
        try:
            return validate(ConfirmationQuery, {**wanted, "limit": HISTORY_LIMIT})
        except ApiError:
            # A hand-edited URL with a bad filter: show everything rather than an error page.
            return ConfirmationQuery(limit=HISTORY_LIMIT)

    # ------------------------------------------------------------------ testers

    async def test_reply(self, request: web.Request) -> web.Response:
        """How the gateway would read ``text`` as a reply to a prompt, with today's words."""
        return json_response(_dumped(await self._read_reply(request)))

    async def test_policy(self, request: web.Request) -> web.Response:
        """What ``gateway policy test`` prints, as JSON: nothing runs."""
        return json_response((await self._explain(request)).to_dict())

    async def reply_reading(self, request: web.Request) -> web.Response:
        """The reply tester's answer on the page: a reading, the JSON behind a toggle."""
        try:
            parsed = await self._read_reply(request)
        except ApiError as exc:
            return _refusal(request, exc)
        lines = texts.reply_reading(parsed)
        return _reading(request, parsed.intent.value, lines, _dumped(parsed))

    async def policy_reading(self, request: web.Request) -> web.Response:
        """The policy tester's answer on the page: a reading, the JSON behind a toggle."""
        try:
            report = await self._explain(request)
        except ApiError as exc:
            return _refusal(request, exc)
        verdict = "refused" if report.refused else report.level
        return _reading(request, verdict, texts.policy_reading(report), report.to_dict())

    async def _read_reply(self, request: web.Request) -> ParsedReply:
        body = await read_body(request, ReplyTestBody)
        return self.confirmations.parser.parse(body.text)

    async def _explain(self, request: web.Request) -> PolicyReport:
        body = await read_body(request, PolicyTestBody)
        try:
            return await explain(self.registry, self.policy, body.tool, body.args)
        except UnknownToolError as exc:
            raise ApiError(404, str(exc), field="tool") from exc
        except ToolArgumentsError as exc:
            raise ApiError(422, str(exc), field="args") from exc


def _reading(
    request: web.Request,
    verdict: str,
    lines: list[str],
    answer: Mapping[str, Any],
    status: int = 200,
) -> web.Response:
    """A tester's answer as the page shows it: the reading, and the JSON behind a toggle."""
    context = {"verdict": verdict, "lines": lines, "answer": answer}
    return _html(request, "reading.html", context, status)


def _refusal(request: web.Request, exc: ApiError) -> web.Response:
    """A question the tester cannot answer: what to change, and the JSON error the API
    gives for it."""
    log.info("http.client_error", path=request.path, status=exc.status, error=exc.message)
    answer = {"error": exc.message} | ({"field": exc.field} if exc.field else {})
    return _reading(
        request, "error", [texts.tester_error(exc.message, exc.field)], answer, exc.status
    )


def _dumped(parsed: ParsedReply) -> dict[str, Any]:
    """A reply's reading as the JSON API gives it."""
    dumped: dict[str, Any] = TypeAdapter(ParsedReply).dump_python(parsed, mode="json")
    return dumped


def _field(form: Mapping[str, object], name: str, longest: int) -> str:
    """A text field of the login form, stripped; "" when missing or too long."""
    value = form.get(name)
    return value.strip() if isinstance(value, str) and len(value) <= longest else ""


def _see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})


def _html(
    request: web.Request, template: str, context: Mapping[str, Any], status: int = 200
) -> web.Response:
    response = aiohttp_jinja2.render_template(template, request, context, status=status)
    response.headers.update(PAGE_HEADERS)
    return response
