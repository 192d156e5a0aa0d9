"""The confirmation record and its vocabulary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Final, Literal


class Status(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self is not Status.PENDING


class Decision(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"

    @property
    def status(self) -> Status:
        return Status.APPROVED if self is Decision.APPROVE else Status.REJECTED


class DecideOutcome(StrEnum):
    """What a ``decide`` call came to."""

    DECIDED = "decided"
    ALREADY_DECIDED = "already_decided"
    NOT_FOUND = "not_found"
    FORBIDDEN = "forbidden"
    EXPIRED = "expired"
    VOTED = "voted"  # an approval counted; the call waits for more (``approvals = N``)


class ExecState(StrEnum):
    """What became of the call after the decision: the execution ledger.

    ``waiting`` -> ``claimed`` -> ``running`` -> ``succeeded`` | ``failed`` | ``interrupted``;
    ``skipped`` when the confirmation ended in anything but ``approved``.
    """

    WAITING = "waiting"
    CLAIMED = "claimed"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    SKIPPED = "skipped"

    @property
    def is_final(self) -> bool:
        return self in _FINAL_STATES

    @property
    def in_flight(self) -> bool:
        """Claimed or running: a process has taken the call and not yet said how it ended."""
        return self in (ExecState.CLAIMED, ExecState.RUNNING)


_FINAL_STATES = frozenset(
    {ExecState.SUCCEEDED, ExecState.FAILED, ExecState.INTERRUPTED, ExecState.SKIPPED}
)


# Not frozen: frozen's __init__ sets each field through object.__setattr__, about an eighth
# of a round trip in bench/confirm_roundtrip.py. Final fields keep it immutable for mypy.
@dataclass(slots=True, kw_only=True)
class Execution:
    """The ledger of one approved call: who took it, when it ran, how it ended."""

    state: Final[ExecState] = ExecState.WAITING
    claimed_by: Final[str | None] = None
    lease_until: Final[float | None] = None
    attempts: Final[int] = 0
    started_at: Final[float | None] = None
    finished_at: Final[float | None] = None
    result: Final[str | None] = None  # a summary of the output, or the error text

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state.value,
            "claimed_by": self.claimed_by,
            "lease_until": self.lease_until,
            "attempts": self.attempts,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "result": self.result,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Execution:
        if not data:
            return cls()
        return cls(
            state=ExecState(data.get("state", "waiting")),
            claimed_by=data.get("claimed_by"),
            lease_until=data.get("lease_until"),
            attempts=int(data.get("attempts") or 0),
            started_at=data.get("started_at"),
            finished_at=data.get("finished_at"),
            result=data.get("result"),
        )


# Every new record's ledger: one object shared by all, as nothing changes a record in place.
WAITING = Execution()


@dataclass(frozen=True, slots=True, kw_only=True)
class Instance:
    """A running ``gateway serve`` process, as its heartbeat in the store shows it."""

    id: str
    pid: int
    host: str
    started_at: float
    seen_at: float

    def alive(self, now: float, lease: float) -> bool:
        return now - self.seen_at < lease

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Instance:
        return cls(
            id=str(data["id"]),
            pid=int(data["pid"]),
            host=str(data["host"]),
            started_at=float(data["started_at"]),
            seen_at=float(data["seen_at"]),
        )


# Not frozen, as Confirmation (below).
@dataclass(slots=True, kw_only=True)
class AuditEvent:
    """One line of a confirmation's audit trail: what happened, when, by whom, how."""

    confirmation_id: Final[str]
    at: Final[float]
    kind: Final[str]  # requested, prompt_sent, reply_read, decided, claimed, started, finished, ...
    actor: Final[str | None] = None
    detail: Final[Mapping[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "confirmation_id": self.confirmation_id,
            "at": self.at,
            "kind": self.kind,
            "actor": self.actor,
            "detail": dict(self.detail),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AuditEvent:
        return cls(
            confirmation_id=str(data["confirmation_id"]),
            at=float(data["at"]),
            kind=str(data["kind"]),
            actor=data.get("actor"),
            detail=dict(data.get("detail") or {}),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Vote:
    """One approval of a call that needs several people (``approvals = N``).

    ``person`` is the name folded (NFKC, case, spaces: ``service.same_person``), which the
    store compares so that ``Alice`` on the admin API and ``alice`` in a chat are one vote.
    """

    actor: str
    person: str
    at: float
    via: str

    def to_dict(self) -> dict[str, Any]:
        return {"actor": self.actor, "person": self.person, "at": self.at, "via": self.via}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Vote:
        return cls(
            actor=str(data["actor"]),
            person=str(data["person"]),
            at=float(data["at"]),
            via=str(data["via"]),
        )


class VoteOutcome(StrEnum):
    """What a store's ``vote`` came to."""

    COUNTED = "counted"  # written; the call still waits for more
    APPROVED = "approved"  # the last vote needed: the record is approved
    ALREADY_VOTED = "already_voted"  # this person's vote is already on the record
    REFUSED = "refused"  # not pending any more, or past its deadline: nothing written
    NOT_FOUND = "not_found"


def vote_on(current: Confirmation, vote: Vote) -> tuple[Confirmation | None, VoteOutcome]:
    """The rule of a vote, for every backend (the Redis script repeats it in Lua): the record
    with ``vote`` added (approved by the ``approvals``-th), or None and why nothing changes.

    Only a pending record before its deadline takes a vote, one per person.
    """
    if current.status is not Status.PENDING or vote.at >= current.expires_at:
        return None, VoteOutcome.REFUSED
    if any(v.person == vote.person for v in current.votes):
        return None, VoteOutcome.ALREADY_VOTED
    voted = replace(current, votes=(*current.votes, vote))
    if len(voted.votes) < current.approvals:
        return voted, VoteOutcome.COUNTED
    done = voted.finished(Status.APPROVED, by=vote.actor, at=vote.at, via=vote.via, reason=None)
    return done, VoteOutcome.APPROVED


class Risk(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the agent wants to make: the thing a person approves, exactly."""

    name: str
    args: Mapping[str, Any]
    call_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "args": dict(self.args), "call_id": self.call_id}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(name=str(data["name"]), args=dict(data["args"]), call_id=str(data["call_id"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class CallEdit:
    """A person's new arguments for a held call, approved with it: what the record becomes.

    Worked out (schema, preview, policy) before the decision by gateway/tools/edits.py; the
    store writes it in the same compare-and-set as ``pending -> approved``, so an edit and
    any other decision or the expiry have one winner. ``details["edited"]`` says who
    changed what (``args_before``), for the chat, the model and the admin page.
    """

    tool_call: ToolCall
    summary: str
    details: Mapping[str, Any]
    risk: Risk
    four_eyes: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_call": self.tool_call.to_dict(),
            "summary": self.summary,
            "details": dict(self.details),
            "risk": self.risk.value,
            "four_eyes": self.four_eyes,
        }


# Not frozen: frozen's __init__ sets each field through object.__setattr__, about an eighth
# of a round trip in bench/confirm_roundtrip.py. Final fields keep it immutable for mypy.
@dataclass(slots=True, kw_only=True)
class Confirmation:
    """A held tool call and what became of it.

    Immutable: stores replace whole records (``dataclasses.replace`` gives a changed copy).
    """

    id: Final[str]
    session_key: Final[str]
    channel: Final[str]
    chat_id: Final[str]
    requester: Final[str]
    is_group: Final[bool]
    tool_call: Final[ToolCall]
    summary: Final[str]
    created_at: Final[float]
    expires_at: Final[float]
    details: Final[Mapping[str, Any]] = field(default_factory=dict)
    risk: Final[Risk] = Risk.MEDIUM
    approvers: Final[tuple[str, ...]] = ()
    four_eyes: Final[bool] = False
    # How many distinct people other than the requester must approve (a policy rule's
    # ``approvals``); 0 or 1: one decision settles it. From 2 on, approvals are ``votes``
    # (the store's ``vote``): the last one needed approves, any rejection settles at once.
    approvals: Final[int] = 0
    votes: Final[tuple[Vote, ...]] = ()
    status: Final[Status] = Status.PENDING
    decided_by: Final[str | None] = None
    decided_at: Final[float | None] = None
    decided_via: Final[str | None] = None
    reason: Final[str | None] = None
    feedback: Final[bool] = False
    prompt_refs: Final[Mapping[str, str]] = field(default_factory=dict)
    # The execution ledger and who answers for the record.
    execution: Final[Execution] = field(default_factory=lambda: WAITING)
    owner: Final[str | None] = None  # instance id of the process that holds the deadline
    idempotent: Final[bool] = False  # the tool may be re-claimed once after its claimer died
    # What the turn that asked needs to go on once the call has ended, on whichever process
    # ends it: for a model turn, the conversation up to the tool call (gateway/agent/); None
    # for a command, whose result line is all that follows.
    continuation: Final[Mapping[str, Any] | None] = None

    def seconds_left(self, now: float) -> float:
        return max(0.0, self.expires_at - now)

    @property
    def takes_votes(self) -> bool:
        """Whether approvals are counted votes (``approvals`` of 2 or more people)."""
        return self.approvals >= 2

    def voted(self, person: str) -> bool:
        """Whether ``person`` (folded, as ``Vote.person``) has approved already."""
        return any(v.person == person for v in self.votes)

    @property
    def continues_a_model_turn(self) -> bool:
        """Whether a model turn goes on from this call's outcome (it answers the chat)."""
        return self.continuation is not None and self.continuation.get("kind") == "model"

    def finished(
        self,
        status: Status,
        *,
        by: str | None,
        at: float,
        via: str | None,
        reason: str | None,
        feedback: bool = False,
    ) -> Confirmation:
        """This record with its decision: status, by, at, via, reason, feedback."""
        # Every field spelled out instead of dataclasses.replace (which walks the fields
        # at run time): 27k of 606k instructions per round trip in bench/count_instructions.py.
        # tests/confirm/test_model.py fails when a field is added here and not below.
        return Confirmation(
            id=self.id,
            session_key=self.session_key,
            channel=self.channel,
            chat_id=self.chat_id,
            requester=self.requester,
            is_group=self.is_group,
            tool_call=self.tool_call,
            summary=self.summary,
            created_at=self.created_at,
            expires_at=self.expires_at,
            details=self.details,
            risk=self.risk,
            approvers=self.approvers,
            four_eyes=self.four_eyes,
            approvals=self.approvals,
            votes=self.votes,
            status=status,
            decided_by=by,
            decided_at=at,
            decided_via=via,
            reason=reason,
            feedback=feedback,
            prompt_refs=self.prompt_refs,
            execution=self.execution,
            owner=self.owner,
            idempotent=self.idempotent,
            continuation=self.continuation,
        )

    def edited(self, edit: CallEdit) -> Confirmation:
        """This record with the call (and what was worked out of it) replaced by ``edit``."""
        return replace(
            self,
            tool_call=edit.tool_call,
            summary=edit.summary,
            details=dict(edit.details),
            risk=edit.risk,
            four_eyes=edit.four_eyes,
        )

    @property
    def edit_note(self) -> Mapping[str, Any] | None:
        """Who changed the arguments before approving, and from what (None: as asked)."""
        found = self.details.get("edited")
        return found if isinstance(found, Mapping) else None

    def skipped(self, at: float) -> Confirmation:
        """This record with its execution ``skipped``: what a store writes with any end but
        ``approved``."""
        return replace(
            self, execution=replace(self.execution, state=ExecState.SKIPPED, finished_at=at)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_key": self.session_key,
            "channel": self.channel,
            "chat_id": self.chat_id,
            "requester": self.requester,
            "is_group": self.is_group,
            "tool_call": self.tool_call.to_dict(),
            "summary": self.summary,
            "details": dict(self.details),
            "risk": self.risk.value,
            "approvers": list(self.approvers),
            "four_eyes": self.four_eyes,
            "approvals": self.approvals,
            "votes": [v.to_dict() for v in self.votes],
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "status": self.status.value,
            "decided_by": self.decided_by,
            "decided_at": self.decided_at,
            "decided_via": self.decided_via,
            "reason": self.reason,
            "feedback": self.feedback,
            "prompt_refs": dict(self.prompt_refs),
            "execution": self.execution.to_dict(),
            "owner": self.owner,
            "idempotent": self.idempotent,
            "continuation": None if self.continuation is None else dict(self.continuation),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Confirmation:
        return cls(
            id=str(data["id"]),
            session_key=str(data["session_key"]),
            channel=str(data["channel"]),
            chat_id=str(data["chat_id"]),
            requester=str(data["requester"]),
            is_group=bool(data["is_group"]),
            tool_call=ToolCall.from_dict(data["tool_call"]),
            summary=str(data["summary"]),
            details=dict(data.get("details") or {}),
            risk=Risk(data.get("risk", "medium")),
            approvers=tuple(data.get("approvers") or ()),
            four_eyes=bool(data.get("four_eyes", False)),
            approvals=int(data.get("approvals") or 0),
            votes=tuple(Vote.from_dict(v) for v in data.get("votes") or ()),
            created_at=float(data["created_at"]),
            expires_at=float(data["expires_at"]),
            status=Status(data.get("status", "pending")),
            decided_by=data.get("decided_by"),
            decided_at=data.get("decided_at"),
            decided_via=data.get("decided_via"),
            reason=data.get("reason"),
            feedback=bool(data.get("feedback", False)),
            prompt_refs=dict(data.get("prompt_refs") or {}),
            execution=Execution.from_dict(data.get("execution")),
            owner=data.get("owner"),
            idempotent=bool(data.get("idempotent", False)),
            continuation=data.get("continuation"),
        )


@dataclass(frozen=True, slots=True)
class DecideResult:
    """The outcome of a decision, the record as it now is, and the sentence for the person;
    ``grant``: the grant an approval asked for and got."""

    outcome: DecideOutcome
    confirmation: Confirmation | None
    message: str
    grant: Grant | None = None


# A grant's reach: the same tool for the same person in one session, or one exact call.
Scope = Literal["session", "call"]
# What a grant is pinned to (docs/grants.md): the call's scope (SQL: its statement kinds and
# tables; any arguments of a tool that gives none), or its exact arguments.
Pin = Literal["scope", "args"]


@dataclass(frozen=True, slots=True)
class GrantAsk:
    """ "Don't ask again" asked for with an approval: its reach and length, and the shape
    an approver may give it on the admin page and API (``pin``, ``single_use``)."""

    scope: Scope
    minutes: int
    pin: Pin = "scope"
    single_use: bool = False  # covers one call, then ends (consumed by compare-and-set)

    @property
    def shaped(self) -> bool:
        """Shaped by an approver (pinned to arguments, or single use): 5 min to 8 h."""
        return self.pin == "args" or self.single_use


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """A person's decision on a confirmation, whichever way it came: a typed reply, a card
    click on any channel, the admin API, page or CLI. ``ConfirmationService.answer`` takes
    every one, and alone judges who may decide."""

    confirmation_id: str
    decision: Decision
    actor: str  # who: the platform's id, the proxy's header, the admin API's named person
    via: str  # text | card | web | admin | ...
    reason: str | None = None
    feedback: bool = False  # a message written instead of deciding: the model answers it
    grant: GrantAsk | None = None  # with an approval: don't ask again, within this reach
    edit: CallEdit | None = None  # approve these arguments instead (gateway/tools/edits.py)


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    """Permission to run calls without asking, given on one confirmation, until a time."""

    id: str
    scope: Scope
    tool: str
    session_key: str  # where it was given; a session grant covers only this session
    channel: str  # where to tell people it was revoked
    chat_id: str
    requester: str  # whose calls a session grant covers
    args_key: str | None  # a call grant covers only these arguments
    args: Mapping[str, Any]  # the arguments it was given on, for people to read
    risk: Risk  # the highest risk it covers
    # What calls of the tool it covers: the grant_scope of the call it was given on (SQL:
    # its statement kinds and tables); None for a tool that gives none (any arguments).
    covers: Mapping[str, Any] | None = None
    granted_by: str
    granted_via: str
    confirmation_id: str
    created_at: float
    expires_at: float
    revoked_by: str | None = None
    revoked_at: float | None = None
    single_use: bool = False  # ends when it first lets a call run (revoked_by SINGLE_USED)

    def live(self, now: float) -> bool:
        return self.revoked_at is None and now < self.expires_at

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["args"] = dict(self.args)
        data["risk"] = self.risk.value
        data["covers"] = None if self.covers is None else dict(self.covers)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Grant:
        return cls(**{**data, "args": dict(data["args"]), "risk": Risk(data["risk"])})


@dataclass(frozen=True, slots=True, kw_only=True)
class GrantEvent:
    """One line of a grant's audit trail."""

    grant_id: str
    at: float
    kind: Literal["given", "used", "revoked"]
    actor: str | None
    detail: str = ""  # used: the call id and session

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
