"""Runs a tool call through the policy and, when asked for, a person's decision.

This is where the hold is enforced: ``Tool.run`` is reached for a ``confirm`` call only
after the confirmation service returned an ``approved`` record for that very call.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from gateway import texts
from gateway.confirm.model import Confirmation, Status, ToolCall
from gateway.confirm.service import ConfirmationService
from gateway.confirm.store import StoreUnavailableError
from gateway.tools.base import ToolArgumentsError, ToolRegistry
from gateway.tools.policy import Policy, PolicyDecision

# (tool name, "ok" | "error", seconds): how the metrics see each run.
ToolRunObserver = Callable[[str, str, float], None]

log = structlog.get_logger(__name__)

OutcomeStatus = Literal[
    "ok", "error", "denied", "manual", "rejected", "expired", "cancelled", "unknown_tool"
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnContext:
    """Who is asking, and where to answer: one agent turn."""

    session_key: str
    channel: str
    chat_id: str
    sender_id: str
    is_group: bool
    say: Callable[[str], Awaitable[None]]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    approvers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    status: OutcomeStatus
    output: str
    confirmation: Confirmation | None = None
    decision: PolicyDecision | None = None

    @property
    def feedback(self) -> str | None:
        """A person's free-text message given instead of a decision, for the model."""
        c = self.confirmation
        if c is not None and c.feedback and c.reason:
            return c.reason
        return None

    def for_model(self) -> str:
        """The tool result the model sees."""
        c = self.confirmation
        if self.status == "rejected":
            reason = c.reason if c and c.reason else "no reason given"
            who = c.decided_by if c and c.decided_by else "the user"
            kind = "wrote instead of deciding" if c and c.feedback else "gave as the reason"
            return (
                f"The user rejected this call; it did not run. {who} {kind}: {reason!r}. "
                "Do not retry the same call."
            )
        if self.status in ("expired", "cancelled"):
            why = c.reason if c and c.reason else self.status
            return f"This call was {self.status} ({why}); it did not run. Do not retry it."
        if self.status == "denied":
            return f"This call is not allowed by policy; it did not run. {self.output}"
        if self.status == "manual":
            return (
                "This call is set to manual: it was shown to the user and not run. "
                "A person will run it by hand if they want it."
            )
        if self.status == "error":
            return f"Error: {self.output}"
        return self.output


class ToolRunner:
    """Policy, confirmation and execution for every tool call of every agent."""

    def __init__(
        self,
        *,
        registry: ToolRegistry,
        policy: Policy,
        confirmations: ConfirmationService,
        on_tool_run: ToolRunObserver | None = None,
    ) -> None:
        self.registry = registry
        self.policy = policy
        self.confirmations = confirmations
        self._on_tool_run = on_tool_run

    async def invoke(self, call: ToolCall, turn: TurnContext) -> ToolOutcome:
        tool = self.registry.get(call.name)
        if tool is None:
            return ToolOutcome("unknown_tool", f"no tool named {call.name!r}")
        try:
            args = tool.parse_args(call.args)
        except ToolArgumentsError as exc:
            return ToolOutcome("error", str(exc))
        preview = await tool.preview(args)
        if preview.error:
            await turn.say(texts.tool_failed(call.name, preview.error))
            return ToolOutcome("error", preview.error)
        decision = self.policy.evaluate(tool, args.model_dump(), preview)
        log.info(
            "tool.policy",
            tool=call.name,
            # Not "level": structlog's add_log_level overwrites that key.
            policy_level=decision.level,
            risk=decision.risk.value,
            rule=decision.rule,
            risk_rule=decision.risk_rule,
        )
        if decision.level == "deny":
            await turn.say(texts.tool_denied(call.name, decision.rule))
            return ToolOutcome("denied", f"rule: {decision.rule}", decision=decision)
        if decision.level == "manual":
            await turn.say(
                texts.manual_only(call.name, _describe(preview.details, preview.summary))
            )
            return ToolOutcome("manual", preview.summary, decision=decision)
        if decision.level == "confirm":
            try:
                final = await self.confirmations.request(
                    session_key=turn.session_key,
                    channel=turn.channel,
                    chat_id=turn.chat_id,
                    requester=turn.sender_id,
                    is_group=turn.is_group,
                    tool_call=call,
                    summary=preview.summary,
                    # Which rule asked, for the admin API and cards; the person sees why.
                    details={**preview.details, "policy_rule": decision.rule},
                    risk=decision.risk,
                    approvers=turn.approvers,
                    four_eyes=decision.four_eyes,
                    metadata=turn.metadata,
                )
            except StoreUnavailableError as exc:  # fail closed, and say so (issue 13)
                await turn.say(texts.STORE_UNAVAILABLE.format(tool=call.name))
                return ToolOutcome("error", str(exc), decision=decision)
            if final.status is not Status.APPROVED or final.tool_call != call:
                status: OutcomeStatus = (
                    "rejected"
                    if final.status is Status.REJECTED
                    else "expired"
                    if final.status is Status.EXPIRED
                    else "cancelled"
                )
                return ToolOutcome(status, texts.outcome(final), final, decision)
            return await self._execute(call, args, turn, decision, final)
        outcome = await self._execute(call, args, turn, decision, None)
        if decision.level == "notify" and outcome.status == "ok":
            await turn.say(texts.notify_ran(call.name, _describe(preview.details, preview.summary)))
        return outcome

    async def _execute(
        self,
        call: ToolCall,
        args: Any,
        turn: TurnContext,
        decision: PolicyDecision,
        confirmation: Confirmation | None,
    ) -> ToolOutcome:
        tool = self.registry.get(call.name)
        assert tool is not None
        started = time.monotonic()
        try:
            result = await tool.run(args)
        except Exception as exc:
            log.warning("tool.failed", tool=call.name, error=f"{type(exc).__name__}: {exc}")
            self._observe(call.name, "error", started)
            return ToolOutcome("error", f"{type(exc).__name__}: {exc}", confirmation, decision)
        log.info("tool.ran", tool=call.name)
        self._observe(call.name, "ok", started)
        return ToolOutcome("ok", str(result), confirmation, decision)

    def _observe(self, tool: str, result: str, started: float) -> None:
        if self._on_tool_run is not None:
            self._on_tool_run(tool, result, time.monotonic() - started)

    async def run_orphan(
        self, confirmation: Confirmation, say: Callable[[str], Awaitable[None]]
    ) -> ToolOutcome:
        """Run an approved call whose turn did not survive a restart.

        The person approved exactly this stored call; the policy is checked again in case
        it was tightened meanwhile.
        """
        call = confirmation.tool_call
        tool = self.registry.get(call.name)
        if tool is None:
            await say(texts.tool_failed(call.name, "tool no longer exists"))
            return ToolOutcome("unknown_tool", call.name)
        args = tool.parse_args(call.args)
        preview = await tool.preview(args)
        decision = self.policy.evaluate(tool, args.model_dump(), preview)
        if decision.level in ("deny", "manual"):
            await say(texts.tool_denied(call.name, decision.rule))
            return ToolOutcome("denied", decision.rule, confirmation, decision)
        turn = TurnContext(
            session_key=confirmation.session_key,
            channel=confirmation.channel,
            chat_id=confirmation.chat_id,
            sender_id=confirmation.requester,
            is_group=confirmation.is_group,
            say=say,
        )
        return await self._execute(call, args, turn, decision, confirmation)


def _describe(details: Mapping[str, Any], summary: str) -> str:
    statement = details.get("statement")
    return f"{summary}\n{statement}" if statement else summary
