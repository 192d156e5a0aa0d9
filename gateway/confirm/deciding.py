"""A person's decision on a confirmation: who may decide, and the one way it is taken.

A typed reply (intercept.py), a card click, the admin API and an approval with edited
arguments (gateway/tools/edits.py) all come here. The decision itself is the store's
compare-and-set in the service's ``_finish``, the one way every confirmation ends.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from typing import TYPE_CHECKING

import structlog

from config.settings import ConfirmationSettings
from gateway import texts
from gateway.confirm import ledger
from gateway.confirm.ids import canonical_id
from gateway.confirm.model import (
    AuditEvent,
    CallEdit,
    Confirmation,
    DecideOutcome,
    DecideResult,
    Decision,
    Status,
)
from gateway.confirm.store import ConfirmationStore

if TYPE_CHECKING:
    from gateway.confirm.doubts import Doubts

log = structlog.get_logger(__name__)


def same_person(a: str, b: str) -> bool:
    """Whether two names are one person's, leniently (NFKC, case, spaces): used only to
    refuse, so ``Alice`` typed on the admin API cannot approve ``alice``'s call."""
    return _folded(a) == _folded(b)


def _folded(name: str) -> str:
    return "".join(unicodedata.normalize("NFKC", name).casefold().split())


def self_approval(c: Confirmation, actor: str, decision: Decision) -> bool:
    """The requester approving their own four-eyes call: refused on every path."""
    return c.four_eyes and decision is Decision.APPROVE and same_person(actor, c.requester)


class Deciding:
    """The deciding half of ``ConfirmationService`` (a mixin: it needs the store, the
    settings and the service's ends)."""

    store: ConfirmationStore
    settings: ConfirmationSettings

    if TYPE_CHECKING:
        doubts: Doubts

        async def _finish(
            self,
            confirmation_id: str,
            status: Status,
            *,
            by: str | None,
            via: str,
            reason: str | None,
            feedback: bool = False,
            edit: CallEdit | None = None,
            trail: Sequence[AuditEvent] = (),
        ) -> tuple[Confirmation | None, str | None]: ...

        async def expire(
            self, confirmation_id: str, *, reason: str = texts.TIMEOUT_REASON
        ) -> Confirmation | None: ...

    def may_decide(self, c: Confirmation, actor: str, decision: Decision) -> tuple[bool, str]:
        """Requester and approvers may decide; with four-eyes the requester may only reject."""
        if self_approval(c, actor, decision):
            return False, texts.FOUR_EYES
        if actor == c.requester:
            return True, ""
        if actor in c.approvers or actor in self.settings.approvers:
            return True, ""
        return False, texts.ONLY_APPROVERS

    async def decide(
        self,
        confirmation_id: str,
        decision: Decision,
        *,
        actor: str,
        via: str,
        reason: str | None = None,
        feedback: bool = False,
    ) -> DecideResult:
        """The one way a person decides. ``via="admin"`` is authorised by the admin token."""
        cid = canonical_id(confirmation_id)
        current = await self.store.get(cid)
        if current is None:
            return DecideResult(DecideOutcome.NOT_FOUND, None, texts.unknown_id(cid))
        return await self.decide_record(
            current, decision, actor=actor, via=via, reason=reason, feedback=feedback
        )

    async def decide_record(
        self,
        current: Confirmation,
        decision: Decision,
        *,
        actor: str,
        via: str,
        reason: str | None = None,
        feedback: bool = False,
        edit: CallEdit | None = None,
        trail: Sequence[AuditEvent] = (),
    ) -> DecideResult:
        """``decide`` for a record just read from the store; the compare-and-set settles races.

        ``edit`` approves new arguments instead (checked first by gateway/tools/edits.py).
        ``trail``: audit lines that led here (the reply read), written with the decision,
        or on their own when this call decides nothing.
        """
        if current.status.is_terminal:
            await ledger.audit_many(self.store, trail)
            return DecideResult(
                DecideOutcome.ALREADY_DECIDED, current, texts.already_decided(current)
            )
        if current.id in self.doubts:
            # Its request was refused to its turn (doubts.py): nobody here approves it;
            # settling it first cancels it, or finds what another replica decided.
            settled = await self.doubts.settle(current.id)
            await ledger.audit_many(self.store, trail)
            assert settled is not None
            return DecideResult(
                DecideOutcome.ALREADY_DECIDED, settled, texts.already_decided(settled)
            )
        if via == "admin":
            # The token vouches for an operator, not for a second person: four-eyes holds,
            # judged on the person the admin API named (gateway/http/server.person_behind).
            allowed, why = not self_approval(current, actor, decision), texts.FOUR_EYES
        else:
            allowed, why = self.may_decide(current, actor, decision)
        if not allowed:
            log.info(
                "confirm.decision_refused",
                confirmation_id=current.id,
                session=current.session_key,
                actor=actor,
                via=via,
            )
            await ledger.audit_many(self.store, trail)
            return DecideResult(DecideOutcome.FORBIDDEN, current, why)
        final, said = await self._finish(
            current.id,
            decision.status,
            by=actor,
            via=via,
            reason=reason,
            feedback=feedback,
            edit=edit,
            trail=trail,
        )
        assert final is not None
        if said is not None:
            return DecideResult(DecideOutcome.DECIDED, final, said)
        if final.status is Status.PENDING:
            # Past its deadline but the timer has not fired yet: expire it now.
            expired = await self.expire(current.id)
            assert expired is not None
            final = expired
        if final.status is Status.EXPIRED:
            return DecideResult(DecideOutcome.EXPIRED, final, texts.already_decided(final))
        return DecideResult(DecideOutcome.ALREADY_DECIDED, final, texts.already_decided(final))
