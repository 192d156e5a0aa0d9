"""Approving a held call with edited arguments (issue 15).

An approver who sees a wrong argument fixes it instead of rejecting and hoping the model
tries again. The new arguments go through what the model's call went through — the tool's
schema, its preview, the policy — and the approval then needs what the edited call needs:

- ``deny`` or ``manual`` for the edited call: refused, nothing changes (the call waits).
- Four-eyes for the edited call (the policy says so, or the edit raises the risk to
  ``critical``): the requester may not approve it, not even through the admin API.
- Otherwise the usual rule of the decision path (``ConfirmationService.may_decide`` for a
  chat; the admin token for ``via="admin"``), checked on the call before and after.

The edit is written by the store in the same compare-and-set as ``pending -> approved``
(``CallEdit``): a cancel, another decision or the expiry racing it leaves exactly one
winner, and the call on record is the edited one only if the edit won. The executor runs
the stored call; the chat, the audit trail and the model are told what changed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

import structlog

from gateway import texts
from gateway.confirm.ids import canonical_id
from gateway.confirm.model import (
    Answer,
    CallEdit,
    Confirmation,
    DecideOutcome,
    DecideResult,
    Decision,
    GrantAsk,
    Risk,
    ToolCall,
)
from gateway.confirm.service import ConfirmationService, self_approval
from gateway.texts import votes as vote_texts
from gateway.tools.base import ToolArgumentsError, ToolRegistry
from gateway.tools.policy import Policy

log = structlog.get_logger(__name__)

# A person's JSON, kept beside the record and shown in chats: bounded.
MAX_ARGUMENTS_CHARS = 64_000


class EditRefusedError(Exception):
    """The edit may not be approved; nothing changed.

    ``kind`` is ``invalid`` (the arguments do not fit the tool: a 422 naming ``field``) or
    ``forbidden`` (the edited call needs what this decider cannot give: a 403).
    """

    def __init__(
        self,
        kind: Literal["invalid", "forbidden"],
        message: str,
        *,
        field: str | None = None,
        confirmation: Confirmation | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.field = field
        self.confirmation = confirmation


class CallEditor:
    """Checks new arguments for a pending call and approves them (see module doc)."""

    def __init__(
        self, *, registry: ToolRegistry, policy: Policy, confirmations: ConfirmationService
    ) -> None:
        self.registry = registry
        self.policy = policy
        self.confirmations = confirmations

    async def approve(
        self,
        confirmation_id: str,
        arguments: Mapping[str, Any],
        *,
        actor: str,
        via: str,
        reason: str | None = None,
        grant: GrantAsk | None = None,
    ) -> DecideResult:
        """Approve ``confirmation_id`` with ``arguments`` in place of the asked ones.

        Raises EditRefusedError when they may not be approved. Arguments equal to the
        asked ones are a plain approval.
        """
        service = self.confirmations
        cid = canonical_id(confirmation_id)
        current = await service.store.get(cid)
        if current is None:
            return DecideResult(DecideOutcome.NOT_FOUND, None, texts.unknown_id(cid))
        if current.status.is_terminal:
            return DecideResult(
                DecideOutcome.ALREADY_DECIDED, current, texts.already_decided(current)
            )
        edit = None
        if dict(arguments) != dict(current.tool_call.args):
            edit = await self.check(current, arguments, actor=actor, via=via)
        result = await service.answer(
            Answer(
                confirmation_id=cid,
                decision=Decision.APPROVE,
                actor=actor,
                via=via,
                reason=reason,
                edit=edit,
                grant=grant,
            ),
            record=current,
        )
        if edit is not None and result.outcome is DecideOutcome.DECIDED:
            log.info("confirm.edited", confirmation_id=cid, actor=actor, via=via)
        return result

    async def check(
        self, current: Confirmation, arguments: Mapping[str, Any], *, actor: str, via: str
    ) -> CallEdit:
        """What ``current`` becomes with ``arguments``, or EditRefusedError saying why not."""
        call = current.tool_call
        tool = self.registry.get(call.name)
        if tool is None:
            raise EditRefusedError(
                "invalid", f"no tool named {call.name!r} any more", field="arguments"
            )
        size = len(json.dumps(dict(arguments), ensure_ascii=False, default=str))
        if size > MAX_ARGUMENTS_CHARS:
            raise EditRefusedError(
                "invalid",
                f"arguments are too long ({size} > {MAX_ARGUMENTS_CHARS} characters of JSON)",
                field="arguments",
            )
        try:
            parsed = tool.parse_args(arguments)
        except ToolArgumentsError as exc:
            where = f"arguments.{exc.field}" if exc.field else "arguments"
            raise EditRefusedError("invalid", str(exc), field=where) from exc
        preview = await tool.preview(parsed)
        if preview.error:
            problem = f"{call.name} refuses these arguments: {preview.error}"
            raise EditRefusedError("invalid", problem, field="arguments")
        decision = self.policy.evaluate(tool, parsed.model_dump(), preview)
        if decision.level in ("deny", "manual"):
            raise EditRefusedError(
                "forbidden",
                texts.edit_refused(call.name, decision.level, decision.rule),
                confirmation=current,
            )
        if decision.approvals >= 2 or current.takes_votes:
            # Several people approve one call they all saw (issue 25): an edit would give
            # the call to one approver, or change it under the votes already in.
            raise EditRefusedError("forbidden", vote_texts.NO_EDIT_WITH_VOTES, confirmation=current)
        raised_to_critical = decision.risk is Risk.CRITICAL and current.risk is not Risk.CRITICAL
        edit = CallEdit(
            tool_call=ToolCall(name=call.name, args=dict(arguments), call_id=call.call_id),
            summary=preview.summary,
            details={
                **preview.for_record(decision.rule),
                "edited": {
                    "by": actor,
                    "via": via,
                    "args_before": dict(call.args),
                    "risk_before": current.risk.value,
                    "summary_before": current.summary,
                },
            },
            risk=decision.risk,
            four_eyes=decision.four_eyes or raised_to_critical or current.four_eyes,
        )
        self._check_decider(current, current.edited(edit), actor=actor, via=via)
        return edit

    def _check_decider(
        self, current: Confirmation, edited: Confirmation, *, actor: str, via: str
    ) -> None:
        """The approval needs what the call needs before and after the edit."""
        if self_approval(edited, actor, Decision.APPROVE):
            raise EditRefusedError("forbidden", texts.EDIT_FOUR_EYES, confirmation=current)
        if via == "admin":
            return  # the admin token authenticates the operator (as for any decision)
        for record in (current, edited):
            allowed, why = self.confirmations.may_decide(record, actor, Decision.APPROVE)
            if not allowed:
                raise EditRefusedError("forbidden", why, confirmation=current)
