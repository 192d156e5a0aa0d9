"""What the JSON APIs answer: small envelopes around the domain types themselves (the
record, its audit events, grants, instances, the policy's report), whose schemas pydantic
derives from their dataclasses, for the routes' declarations (gateway.http.openapi).

Exact (``extra="forbid"``, which the nested dataclasses inherit): tests/admin check that
real answers validate against them, so the document cannot drift from the domain.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.confirm.model import (
    AuditEvent,
    Confirmation,
    DecideOutcome,
    Grant,
    GrantEvent,
    Instance,
)


class Answer(BaseModel):
    # Exact: tests/admin check that real answers validate against these models.
    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)


class Error(Answer):
    error: str
    field: str | None = None


class ConfirmationList(Answer):
    confirmations: list[Confirmation]
    next_cursor: str | None = Field(
        description="pass as ?cursor= for the next page; null on the last page"
    )


class ConfirmationEvents(Answer):
    confirmation_id: str
    events: list[AuditEvent] = Field(description="oldest first")


class OneConfirmation(Answer):
    confirmation: Confirmation


class GrantList(Answer):
    grants: list[Grant]


class OneGrant(Answer):
    grant: Grant
    events: list[GrantEvent] | None = None


class DecisionResult(Answer):
    outcome: DecideOutcome
    message: str
    confirmation: Confirmation | None
    error: str | None = None
    grant: Grant | None = Field(
        default=None, description="with a grant asked for: the grant given, or null if refused"
    )


class Keywords(Answer):
    confirm: list[str]
    cancel: list[str]
    file: str
    last_error: str | None = None


class Health(Answer):
    status: str


class StoreReadiness(Answer):
    ready: bool
    reason: str | None = Field(description="why not, when not (Redis down); as /readyz says")


class Readiness(Answer):
    ready: bool
    channels: list[dict[str, Any]] = Field(description="each channel's name, ready and details")
    store: StoreReadiness


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceView(Instance):
    """An instance as the report shows it: is its heartbeat younger than the lease, and is
    it the process that answered."""

    # A field here, Instance.alive(now, lease) there: the report answers the question.
    # field(): no default, or the dataclass would take the method as one.
    alive: bool = field()  # type: ignore[assignment]
    this: bool


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
