"""The answers of the JSON APIs as pydantic models, for the OpenAPI document
(gateway.http.openapi). Exact (``extra="forbid"``): tests/admin check that real answers
validate against them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.confirm.model import Risk, Status


class Answer(BaseModel):
    # Exact: tests/admin check that real answers validate against these models.
    model_config = ConfigDict(extra="forbid")


class Error(Answer):
    error: str
    field: str | None = None


class ToolCallView(Answer):
    name: str
    args: dict[str, Any]
    call_id: str


class ExecutionView(Answer):
    """What became of the call after the decision (the execution ledger)."""

    state: Literal["waiting", "claimed", "running", "succeeded", "failed", "interrupted", "skipped"]
    claimed_by: str | None
    lease_until: float | None
    attempts: int
    started_at: float | None
    finished_at: float | None
    result: str | None


class Confirmation(Answer):
    """A held tool call and what became of it."""

    id: str = Field(examples=["K7Q2"])
    session_key: str = Field(examples=["webchat:lobby"])
    channel: str
    chat_id: str
    requester: str
    is_group: bool
    tool_call: ToolCallView
    summary: str
    details: dict[str, Any] = Field(
        description="tool-specific; SQL: statement, kind, tables, rows_affected"
    )
    risk: Risk
    approvers: list[str]
    four_eyes: bool
    created_at: float = Field(description="Unix time, seconds")
    expires_at: float
    status: Status
    decided_by: str | None
    decided_at: float | None
    decided_via: str | None = Field(examples=["web"])
    reason: str | None
    feedback: bool
    prompt_refs: dict[str, str]
    execution: ExecutionView
    owner: str | None
    idempotent: bool
    continuation: dict[str, Any] | None


class ConfirmationList(Answer):
    confirmations: list[Confirmation]
    next_cursor: str | None = Field(
        description="pass as ?cursor= for the next page; null on the last page"
    )


class AuditEventView(Answer):
    """One transition of a confirmation."""

    confirmation_id: str
    at: float = Field(description="Unix time, seconds")
    kind: str = Field(
        examples=["requested"],
        description=(
            "requested, prompt_sent, reply_read, edited, decided, claimed, started, "
            "finished, interrupted, prompt_reposted, adopted"
        ),
    )
    actor: str | None
    detail: dict[str, Any] = Field(
        description=(
            "by kind: reply_read {intent, how}, edited {before, after, risk_before, "
            "risk_after}, decided {via}, finished {state, result}"
        )
    )


class ConfirmationEvents(Answer):
    confirmation_id: str
    events: list[AuditEventView] = Field(description="oldest first")


class OneConfirmation(Answer):
    confirmation: Confirmation


class GrantView(Answer):
    """Permission to run calls without asking, until a time (docs/grants.md)."""

    id: str = Field(examples=["g1a2b3c4d"])
    scope: Literal["session", "call"]
    tool: str
    session_key: str
    channel: str
    chat_id: str
    requester: str = Field(description="session scope: whose calls it covers")
    args_key: str | None = Field(description="call scope: hash of the arguments it covers")
    args: dict[str, Any]
    risk: Risk = Field(description="the highest risk it covers")
    covers: dict[str, Any] | None = Field(
        description="what calls of the tool it covers (SQL: statement kinds and tables); "
        "null: any arguments"
    )
    granted_by: str
    granted_via: str
    confirmation_id: str
    created_at: float
    expires_at: float
    revoked_by: str | None
    revoked_at: float | None


class GrantEventView(Answer):
    grant_id: str
    at: float
    kind: Literal["given", "used", "revoked"]
    actor: str | None
    detail: str


class GrantList(Answer):
    grants: list[GrantView]


class OneGrant(Answer):
    grant: GrantView
    events: list[GrantEventView] | None = None


class DecisionResult(Answer):
    outcome: Literal["decided", "already_decided", "not_found", "forbidden", "expired"]
    message: str
    confirmation: Confirmation | None
    error: str | None = None
    grant: GrantView | None = Field(
        default=None, description="with a grant asked for: the grant given, or null if refused"
    )


class Keywords(Answer):
    confirm: list[str]
    cancel: list[str]
    file: str
    last_error: str | None = None


class ReplyReading(Answer):
    intent: Literal["confirm", "cancel", "unclear", "none"]
    confirmation_id: str | None
    matched: list[str] = Field(description="the decision words found")
    reason: str | None = Field(description="a cancel's reason ('取消，太危险了')")
    why: str


class PolicyAnswer(Answer):
    tool: str
    summary: str
    level: str = Field(examples=["confirm"])
    risk: str
    rule: str = Field(description="what decided the level")
    risk_rule: str | None
    four_eyes: bool
    matched: list[str] = Field(description="every rule that matched, most specific first")
    refused: str | None = Field(description="the tool refused the call before the policy")


class Health(Answer):
    status: str


class Readiness(Answer):
    ready: bool
    channels: list[dict[str, Any]] = Field(description="each channel's name, ready and details")
    store: dict[str, Any] = Field(
        description="the confirmation store: ready, and the reason when not (Redis down)"
    )


class StoreReadiness(Answer):
    ready: bool
    reason: str | None = Field(description="why not, when not (Redis down); as /readyz says")


class InstanceView(Answer):
    """A gateway process as its heartbeat in the store shows it."""

    id: str = Field(examples=["web-1-7411-a3f09c"], description="<host>-<pid>-<random>")
    host: str
    pid: int
    started_at: float = Field(description="Unix time, seconds")
    seen_at: float = Field(description="its last heartbeat, Unix time")
    alive: bool = Field(description="its last heartbeat is younger than the lease")
    this: bool = Field(description="the process that answered")


class Instances(Answer):
    instance: str = Field(description="the id of the process that answered")
    lease_seconds: float = Field(description="silent longer than this is dead")
    now: float = Field(description="this process's clock, Unix time")
    store: StoreReadiness
    instances: list[InstanceView] = Field(
        description="every instance the store knows, oldest first; empty when it cannot say"
    )


class DeadLetters(Answer):
    channel: str | None = None
    failed: list[dict[str, Any]]


class Accepted(Answer):
    message_id: str
    seq: int  # the message's place in the room's history: poll after it for the answer


class ChatMessage(Answer):
    seq: int
    kind: Literal["text", "confirmation", "confirmation_update"]
    text: str
    confirmation: Confirmation | None = None
    at: float
    user: str | None = Field(description="who wrote it; null for the gateway")
    message_id: str | None = None
    can_decide: dict[str, Any] | None = Field(
        default=None,
        description=(
            "only with ?user= and a confirmation: may that user approve / reject, and does "
            "the card show them the grant button (grant: allowed, scope, minutes)"
        ),
    )
    card: dict[str, Any] | None = Field(
        default=None, description="a confirmation's words as the page shows them (gateway/texts)"
    )


class ChatHistory(Answer):
    messages: list[ChatMessage]
    last_seq: int
