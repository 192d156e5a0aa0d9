"""Scoped grants: an approver's "don't ask again" for a while, and what it may never cover.

Two scopes, both with an expiry:

- ``session``: the same tool, asked for by the same person in the same session, for N
  minutes (reply ``确认 30分钟``), on the same scope: what the tool's preview puts in
  ``details["grant_scope"]`` (SQL: the same statement kinds on the same tables, so a grant
  given on ``DELETE FROM orders WHERE id = 3`` covers DELETEs on ``orders``, nothing else).
  Any arguments of a tool whose preview gives no scope.
- ``call``: exactly this call (same tool, same normalised arguments) in any session.

An approver may shape a grant (the admin page, the API, the web chat card): pinned to the
call's exact arguments (``args_key`` on a ``session`` grant too), or single use — ended,
as it lets its one call run, by the store's first-wins revoke (``SINGLE_USED``) — for 5
minutes to 8 hours (docs/grants.md, "Shapes an approver chooses").

A grant never covers a ``critical`` call, a four-eyes call (a second person must look at
each one), another tool, other arguments (``call``), or a call of higher risk than the
one it was given on. Grants are stored (memory, SQLite, Redis: one contract suite),
listed and revoked by the admin API, page and CLI, and every give / use / revoke is in
their audit trail. The runner asks ``GrantBook.covering`` where the policy said
``confirm``; the chat is told whose grant let a call run, and until when.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from gateway import texts
from gateway.confirm.model import (
    Confirmation,
    Grant,
    GrantEvent,
    Pin,
    Risk,
    Scope,
    ToolCall,
)

if TYPE_CHECKING:
    from gateway.storage.grants import GrantStore

log = structlog.get_logger(__name__)

RISK_ORDER = {Risk.LOW: 0, Risk.MEDIUM: 1, Risk.HIGH: 2, Risk.CRITICAL: 3}
# Longest grants: a day for a session, thirty days for one exact call.
MAX_MINUTES: Mapping[str, int] = {"session": 24 * 60, "call": 30 * 24 * 60}
# A grant an approver shapes (pinned to arguments, or single use): 5 minutes to 8 hours.
SHAPED_MINUTES = (5, 8 * 60)
# ``revoked_by`` of a single-use grant once a call used it.
SINGLE_USED = "(used once)"


def args_key(args: Mapping[str, Any]) -> str:
    """The identity of a call's arguments: keys sorted, JSON, hashed."""
    text = json.dumps(dict(args), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _same_scope(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Scopes compared as stored (JSON): a tuple read back is a list."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def covered_call(
    call: ToolCall,
    session_key: str,
    requester: str,
    decision: Any,
    details: Mapping[str, Any],
    *,
    held: bool = False,
) -> dict[str, Any]:
    """``GrantBook.covering``'s arguments for a call the policy wants confirmed (``details``:
    its preview's; ``held``: its preview held it, ``ToolPreview.hold``)."""
    return {
        "tool": call.name,
        "args": call.args,
        "scope": details.get("grant_scope"),
        "session_key": session_key,
        "requester": requester,
        "risk": decision.risk,
        "four_eyes": decision.four_eyes,
        "held": held,
        "call_id": call.call_id,
    }


class GrantRefusedError(ValueError):
    """A grant that may not be given; the message says why (for the person)."""


async def grant_sentence(
    book: GrantBook,
    c: Confirmation,
    *,
    scope: Scope,
    minutes: int,
    by: str,
    via: str,
    pin: Pin = "scope",
    single_use: bool = False,
) -> tuple[Grant | None, str]:
    """Give a grant on approved ``c``; the grant (or None) and the sentence for its chat."""
    try:
        grant = await book.give(
            c, scope=scope, minutes=minutes, by=by, via=via, pin=pin, single_use=single_use
        )
    except GrantRefusedError as exc:
        return None, texts.grant_refused(str(exc))
    return grant, texts.grant_given(grant)


class GrantBook:
    """Gives, finds, lists and revokes grants; audits each."""

    def __init__(self, store: GrantStore, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    async def give(
        self,
        c: Confirmation,
        *,
        scope: Scope,
        minutes: int,
        by: str,
        via: str,
        pin: Pin = "scope",
        single_use: bool = False,
    ) -> Grant:
        """A grant on approved confirmation ``c``; GrantRefusedError when it may not cover it.

        ``pin="args"``: it covers only calls with exactly ``c``'s arguments (a ``session``
        grant so pinned: in this session, by this person, too); ``single_use``: the first
        call it covers ends it. A grant so shaped lasts 5 minutes to 8 hours."""
        if c.risk is Risk.CRITICAL:
            raise GrantRefusedError(texts.GRANT_NOT_CRITICAL)
        if c.four_eyes:
            raise GrantRefusedError(texts.GRANT_NOT_FOUR_EYES)
        if c.details.get("hold"):  # covering(held=True) would never use it
            raise GrantRefusedError(texts.GRANT_NOT_HELD)
        low, high = SHAPED_MINUTES if (pin == "args" or single_use) else (1, MAX_MINUTES[scope])
        if not low <= minutes <= high:
            raise GrantRefusedError(texts.grant_length(scope, high, least=low))
        now = self.clock()
        grant = Grant(
            id=f"g{secrets.token_hex(4)}",
            scope=scope,
            tool=c.tool_call.name,
            session_key=c.session_key,
            channel=c.channel,
            chat_id=c.chat_id,
            requester=c.requester,
            args_key=args_key(c.tool_call.args) if scope == "call" or pin == "args" else None,
            args=dict(c.tool_call.args),
            risk=c.risk,
            covers=c.details.get("grant_scope"),
            granted_by=by,
            granted_via=via,
            confirmation_id=c.id,
            created_at=now,
            expires_at=now + minutes * 60,
            single_use=single_use,
        )
        await self.store.add(grant)
        await self.store.record(
            GrantEvent(grant_id=grant.id, at=now, kind="given", actor=by, detail=c.id)
        )
        return grant

    async def covering(
        self,
        *,
        tool: str,
        args: Mapping[str, Any],
        scope: Mapping[str, Any] | None,
        session_key: str,
        requester: str,
        risk: Risk,
        four_eyes: bool,
        call_id: str,
        held: bool = False,
    ) -> Grant | None:
        """The live grant that lets this call run without asking (recorded as used), or None.

        ``scope`` is the call's ``grant_scope`` (its preview's details); a grant covers only
        calls of the scope it was given on. A held call (SQL calling a function outside the
        allow-list, or that the gateway cannot fully read) is asked each time: a grant given
        on one such call must not release the next, whose effect nobody has seen (issue 22).
        """
        if risk is Risk.CRITICAL or four_eyes or held:
            return None
        now = self.clock()
        key = args_key(args)
        try:
            live = await self.store.live(now)
        except Exception as exc:
            # Any store failure (Redis down, a locked file): no grant, so the call is asked
            # for as usual. A grant store outage must never let a call through unasked.
            log.warning("grants.unreadable", error=f"{type(exc).__name__}: {exc}")
            return None
        for grant in live:
            if grant.tool != tool or RISK_ORDER[risk] > RISK_ORDER[grant.risk]:
                continue
            if not _same_scope(grant.covers, scope):
                continue
            if grant.args_key is not None and grant.args_key != key:
                continue  # a call grant, or one pinned to its arguments
            if grant.scope == "session" and (
                grant.session_key != session_key or grant.requester != requester
            ):
                continue
            if grant.single_use and not await self._use_up(grant, now):
                continue  # another call used it first (the store's compare-and-set)
            detail = f"{call_id} in {session_key} by {requester}"
            await self.store.record(
                GrantEvent(grant_id=grant.id, at=now, kind="used", actor=None, detail=detail)
            )
            return grant
        return None

    async def _use_up(self, grant: Grant, now: float) -> bool:
        """End a single-use grant as it lets a call run: the store's first-wins revoke, so
        of two calls at once on any replicas exactly one is covered."""
        try:
            return await self.store.revoke(grant.id, by=SINGLE_USED, now=now) is not None
        except Exception as exc:
            # As an unreadable store in ``covering``: not covered, so the call is asked for
            # as usual. A store outage must never let a call through unasked.
            log.warning(
                "grants.not_used_up", grant_id=grant.id, error=f"{type(exc).__name__}: {exc}"
            )
            return False

    async def live(self) -> list[Grant]:
        return await self.store.live(self.clock())

    async def get(self, grant_id: str) -> Grant | None:
        return await self.store.get(grant_id)

    async def revoke(self, grant_id: str, *, by: str) -> Grant | None:
        now = self.clock()
        done = await self.store.revoke(grant_id, by=by, now=now)
        if done is not None:
            await self.store.record(GrantEvent(grant_id=grant_id, at=now, kind="revoked", actor=by))
        return done

    async def events(self, grant_id: str) -> list[GrantEvent]:
        return await self.store.events(grant_id)
