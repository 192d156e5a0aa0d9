"""Runs a tool call through the policy and, when asked for, a person's decision.

This is where the hold is enforced. A ``confirm`` call is asked (``invoke``): stored with
its turn's continuation, and the turn ends there (``waiting``). ``Tool.run`` is reached for
it only from ``settle``, for a record the store holds as ``approved`` for that very call,
and then only through the executor's claim (gateway/tools/executor.py): one claim, one run.
``settle`` is the one path from an ended record, in the process that ended it or in one
that adopted it: the same code live, after a restart and on another replica.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import structlog

from gateway import texts
from gateway.confirm.again import AgainRequest, Reasked
from gateway.confirm.grants import GrantBook, covered_call
from gateway.confirm.model import Confirmation, ExecState, Status, ToolCall
from gateway.confirm.service import ConfirmationService
from gateway.logs import RateLimitedLine
from gateway.storage.confirmations import (
    PendingLimitReached,
    StoreUnavailableError,
    may_claim,
)
from gateway.storage.grants import MemoryGrantStore
from gateway.texts import again as words_again
from gateway.tools.base import ToolArgumentsError, ToolPreview, ToolRegistry, failure
from gateway.tools.executor import Executor, Ran, result_line
from gateway.tools.policy import Policy, PolicyDecision

# (tool name, "ok" | "error", seconds): how the metrics see each run.
ToolRunObserver = Callable[[str, str, float], None]

log = structlog.get_logger(__name__)

OutcomeStatus = Literal[
    "ok",
    "error",
    "denied",
    "manual",
    "rejected",
    "expired",
    "cancelled",
    "unknown_tool",
    "waiting",  # asked: the turn ends; its call's outcome goes on from the stored record
    "not_held",  # too many calls already wait for a decision: not asked, not run
]


async def _nothing() -> None:
    return


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
    # Stored on a confirmation this turn asks for: what the turn needs to go on once the
    # call has ended (the model conversation up to the call; gateway/agent/model_agent.py).
    continuation: Mapping[str, Any] | None = None
    # Awaited before each tool call (and, from the agent loop, each line said): the first
    # one marks the turn's message taken, so a crash from then on does not process it
    # again, while one during the model's first answer does (gateway/storage/inbox.py).
    before_effect: Callable[[], Awaitable[None]] = _nothing
    # Set when this "turn" asks an ended call again (gateway/confirm/again.py): the new
    # question takes the id the link reserved and is linked to the first.
    again: AgainRequest | None = None


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
        """The tool result the model sees; after an edit, first what actually ran."""
        note = _edit_note(self.confirmation) if self.status in ("ok", "error") else ""
        return note + self._result_for_model()

    def _result_for_model(self) -> str:
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
        if self.status == "not_held":
            return (
                f"This call was not held for approval and did not run: {self.output}. "
                "Too many calls already wait for a decision; do not retry it now, ask the "
                "user to decide or cancel the waiting ones first."
            )
        return self.output


class ToolRunner:
    """Policy, confirmation and execution for every tool call of every agent."""

    def __init__(
        self,
        *,
        registry: ToolRegistry,
        policy: Policy,
        confirmations: ConfirmationService,
        grants: GrantBook | None = None,
        executor: Executor,
        on_tool_run: ToolRunObserver | None = None,
    ) -> None:
        self.registry = registry
        self.policy = policy
        self.confirmations = confirmations
        self.grants = grants or GrantBook(MemoryGrantStore())
        self.executor = executor
        self._on_tool_run = on_tool_run
        self._pending_limit_log = RateLimitedLine("confirm.pending_limit", interval=60.0)
        confirmations.again.use(self.ask_again)

    async def ask_again(self, again: AgainRequest) -> Reasked:
        """Evaluate an ended call again as when the model first asked it (gateway/confirm/
        again.py): the tool's preview and the policy, a grant, then asked, run or refused —
        ``invoke``, for the requester, in the chat where it was first asked."""
        first = again.first
        turn = TurnContext(
            session_key=first.session_key,
            channel=first.channel,
            chat_id=first.chat_id,
            sender_id=first.requester,
            is_group=first.is_group,
            say=partial(self.confirmations.say_to_chat, first),
            approvers=first.approvers,
            continuation=again.continuation,
            again=again,
        )
        outcome = await self.invoke(again.call, turn)
        log.info("tool.asked_again", confirmation_id=first.id, status=outcome.status)
        if outcome.status == "waiting":
            return Reasked("asked", outcome.confirmation)
        if outcome.status == "ok":
            await turn.say(texts.tool_result(again.call.name, outcome.output))
            return Reasked("ran", output=outcome.output)
        if outcome.status in ("denied", "manual", "cancelled"):
            # Said by invoke, or by the cancel's update (the gateway was stopping).
            return Reasked(outcome.status, outcome.confirmation)
        if outcome.status == "error" and outcome.decision is not None:
            await turn.say(texts.tool_failed(again.call.name, outcome.output))
        return Reasked("failed", outcome.confirmation)

    async def invoke(self, call: ToolCall, turn: TurnContext) -> ToolOutcome:
        await turn.before_effect()
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
            grant = await self.grants.covering(
                **covered_call(
                    call,
                    turn.session_key,
                    turn.sender_id,
                    decision,
                    preview.details,
                    held=bool(preview.hold),
                )
            )
            if grant is not None:  # an approver said "don't ask again" for this (grants.py)
                await turn.say(texts.grant_used(call.name, grant, now=self.grants.clock()))
                return await self._execute(call, args, turn, decision, None)
            try:
                asked = await self.confirmations.request(
                    session_key=turn.session_key,
                    channel=turn.channel,
                    chat_id=turn.chat_id,
                    requester=turn.sender_id,
                    is_group=turn.is_group,
                    tool_call=call,
                    summary=preview.summary,
                    # Which rule asked, for the admin API and cards; the person sees why.
                    details=preview.for_record(decision.rule),
                    risk=decision.risk,
                    approvers=turn.approvers,
                    # An undo is asked as its change was (gateway/tools/sql_undo.py).
                    four_eyes=decision.four_eyes
                    or preview.details.get("four_eyes_as_original") is True,
                    approvals=max(
                        decision.approvals, int(preview.details.get("approvals_as_original") or 0)
                    ),
                    metadata=turn.metadata,
                    idempotent=tool.idempotent,
                    continuation=turn.continuation,
                    **_again_link(turn.again),
                )
            except StoreUnavailableError as exc:  # fail closed, and say so (issue 13)
                await turn.say(texts.STORE_UNAVAILABLE.format(tool=call.name))
                return ToolOutcome("error", str(exc), decision=decision)
            except PendingLimitReached as exc:  # nothing stored: said here, once
                # A client that keeps asking past a cap must not flood the log instead.
                self._pending_limit_log.hit(session=turn.session_key, setting=exc.setting)
                said = texts.PENDING_LIMIT_SESSION if exc.per_session else texts.PENDING_LIMIT_TOTAL
                await turn.say(said.format(limit=exc.limit, tool=call.name))
                return ToolOutcome("not_held", str(exc), decision=decision)
            if asked.status.is_terminal:  # cancelled at once (stopping, or no prompt posted)
                return ToolOutcome(_ended(asked.status), texts.outcome(asked), asked, decision)
            return ToolOutcome("waiting", asked.id, asked, decision)
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
            said, raw = failure(exc)
            log.warning("tool.failed", tool=call.name, error=raw)
            self._observe(call.name, "error", started)
            return ToolOutcome("error", said, confirmation, decision)
        log.info("tool.ran", tool=call.name)
        self._observe(call.name, "ok", started)
        return ToolOutcome("ok", str(result), confirmation, decision)

    def _observe(self, tool: str, result: str, started: float) -> None:
        if self._on_tool_run is not None:
            self._on_tool_run(tool, result, time.monotonic() - started)

    async def settle(
        self, confirmation: Confirmation, say: Callable[[str], Awaitable[None]], *, report: bool
    ) -> ToolOutcome | None:
        """Go on from an ended record: for an approved call claim, run and record it.

        The one path for every ended record, wherever it ended. The person approved exactly
        this stored call (an edit included); the policy is checked again in case it was
        tightened meanwhile: then the call is settled as failed without running. ``report``
        posts the result line (no model turn goes on to say it). None when another process
        has the call (it goes on there).
        """
        if confirmation.status is not Status.APPROVED:
            status = _ended(confirmation.status)
            return ToolOutcome(status, texts.outcome(confirmation), confirmation)
        if not may_claim(confirmation, self.confirmations.clock()):
            return await self._ran_already(confirmation, say, report=report)
        call = confirmation.tool_call
        tool = self.registry.get(call.name)
        refused: str | None = None
        decision: PolicyDecision | None = None
        if tool is not None:
            try:
                args = tool.parse_args(call.args)
            except ToolArgumentsError as exc:
                refused = str(exc)
            else:
                # From what the record kept, not a new preview: no database trip between
                # the decision and the run (issue 24 checks the approved effect).
                kept = ToolPreview.of_record(
                    confirmation.summary, confirmation.details, confirmation.risk
                )
                decision = self.policy.evaluate(tool, args.model_dump(), kept)
                if decision.level in ("deny", "manual"):
                    refused = texts.tool_denied(call.name, decision.rule)
        if refused is not None:
            ran = await self.executor.refuse(confirmation, refused, say=say)
        else:
            started = time.monotonic()
            ran = await self.executor.run(confirmation, say=say, report=report)
            self._observe_ran(ran, started)
        if ran.status == "lost":
            return None
        if ran.effect_changed:
            return await self._after_drift(ran, say, report=report)
        return ToolOutcome(
            "ok" if ran.status == "succeeded" else "error", ran.output, ran.record, decision
        )

    async def _ran_already(
        self, confirmation: Confirmation, say: Callable[[str], Awaitable[None]], *, report: bool
    ) -> ToolOutcome | None:
        """The call was claimed before this and may not be claimed again (only an idempotent
        call whose one claimer died may): while it runs or after an interruption, None
        (whoever claimed it goes on; an interrupted call's chat was told). Once it ran, its
        turn comes here again only because the process going on from it died before the
        turn said anything (its message came back, gateway/agent/loop.py): the turn goes on
        from the stored result (the ledger's summary of the output), never a second run."""
        ex = confirmation.execution
        if ex.state not in (ExecState.SUCCEEDED, ExecState.FAILED):
            return None
        output = ex.result or ""
        log.info("tool.went_on_from_record", confirmation_id=confirmation.id, state=ex.state)
        if report:
            await say(result_line(confirmation, ex.state, output))
        return ToolOutcome(
            "ok" if ex.state is ExecState.SUCCEEDED else "error", output, confirmation
        )

    async def _after_drift(
        self, ran: Ran, say: Callable[[str], Awaitable[None]], *, report: bool
    ) -> ToolOutcome | None:
        """The run found the data changed since the approval (``EffectChangedError``: rolled
        back, recorded failed): the chat hears the new numbers and the call is asked again
        with a fresh preview. None while the new question waits: the turn that waited on
        the first waits on it (its continuation moved there) instead of going on with a
        failure. Otherwise the outcome of what the policy now made of it."""
        first = ran.record
        numbers = "" if report else ran.output  # reported: the executor said them already
        await say(words_again.effect_changed(first.tool_call.name, first.id, numbers).rstrip())
        result = await self.confirmations.again.after_drift(first, ran.output)
        await say(result.message)
        reasked = result.reasked
        if reasked is not None and reasked.outcome == "asked":
            return None
        if reasked is not None and reasked.outcome == "ran":
            return ToolOutcome("ok", reasked.output, first)
        return ToolOutcome("error", ran.output, first)

    def _observe_ran(self, ran: Ran, started: float) -> None:
        if ran.status != "lost":
            name = ran.record.tool_call.name
            self._observe(name, "ok" if ran.status == "succeeded" else "error", started)


def _ended(status: Status) -> OutcomeStatus:
    """The outcome of a call that ended without running."""
    if status is Status.REJECTED:
        return "rejected"
    return "expired" if status is Status.EXPIRED else "cancelled"


def _again_link(again: AgainRequest | None) -> dict[str, Any]:
    """What ``request`` takes to ask a call again: the reserved id and the first id."""
    if again is None:
        return {}
    return {"confirmation_id": again.new_id, "asked_again_from": again.first.id}


def _edit_note(c: Confirmation | None) -> str:
    """Tells the model that a person changed its call's arguments before approving them."""
    note = c.edit_note if c is not None else None
    if c is None or note is None:
        return ""
    after = json.dumps(dict(c.tool_call.args), ensure_ascii=False)
    before = json.dumps(dict(note.get("args_before") or {}), ensure_ascii=False)
    return (
        f"Note: {c.decided_by or 'a person'} edited the arguments before approving. "
        f"What ran was {c.tool_call.name} with {after}, not what you proposed ({before}). "
        "Result of the edited call:\n"
    )


def _describe(details: Mapping[str, Any], summary: str) -> str:
    statement = details.get("statement")
    return f"{summary}\n{statement}" if statement else summary
