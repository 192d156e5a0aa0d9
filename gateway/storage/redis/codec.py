"""Key names and the hash <-> record mapping of the Redis store (layout: scripts.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog
from redis.asyncio import Redis

from gateway.confirm.model import AuditEvent, Confirmation, ExecState, Execution, Status

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RedisKeys:
    """Every key the store uses, derived from one prefix."""

    prefix: str

    def record(self, confirmation_id: str) -> str:
        return f"{self.prefix}:c:{confirmation_id}"

    def events(self, confirmation_id: str) -> str:
        return f"{self.prefix}:ev:{confirmation_id}"

    def session_pending(self, session_key: str) -> str:
        return f"{self.prefix}:pending:{session_key}"

    @property
    def all_pending(self) -> str:
        return f"{self.prefix}:pending-all"

    @property
    def index(self) -> str:
        return f"{self.prefix}:index"

    def session_index(self, session_key: str) -> str:
        return f"{self.prefix}:session:{session_key}"

    def status_index(self, status: Status) -> str:
        """Records of one status; pending ones are in ``all_pending``."""
        if status is Status.PENDING:
            return self.all_pending
        return f"{self.prefix}:status:{status.value}"

    @property
    def approved_waiting(self) -> str:
        return f"{self.prefix}:approved-waiting"

    def owned(self, instance: str) -> str:
        return f"{self.prefix}:owned:{instance}"

    def claims(self, instance: str) -> str:
        return f"{self.prefix}:claims:{instance}"

    @property
    def instances(self) -> str:
        return f"{self.prefix}:instances"

    def alive(self, instance: str) -> str:
        """Set by each heartbeat with a TTL of one lease: gone when the instance is."""
        return f"{self.prefix}:alive:{instance}"

    @property
    def finished_stream(self) -> str:
        return f"{self.prefix}:finished"


# Prefix of a hash field holding one entry of ``details`` written after the create.
DETAIL = "detail:"


def text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def dumps(value: Any) -> str:
    # default=str: tool details may hold a Decimal or a date; keep the record rather than fail.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def event_lines(events: Sequence[AuditEvent]) -> str:
    """Audit events for a script, one JSON a line (JSON escapes every newline inside)."""
    return "\n".join(dumps(e.to_dict()) for e in events)


def pairs(flat: Sequence[Any] | Mapping[Any, Any] | None) -> dict[str, str]:
    """HGETALL as a dict of str, from a script's flat list or the client's mapping."""
    if not flat:
        return {}
    if isinstance(flat, Mapping):
        return {text(k): text(v) for k, v in flat.items()}
    return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat), 2)}


def number(value: float) -> str:
    """A float as Redis keeps it: ``repr`` round-trips exactly."""
    return repr(float(value))


def hash_fields(c: Confirmation) -> dict[str, str]:
    """The hash of a new record: its JSON plus the fields scripts read and change."""
    fields = {
        "record": dumps(c.to_dict()),
        "status": c.status.value,
        "expires_at": number(c.expires_at),
        "created_at": number(c.created_at),
        "session_key": c.session_key,
        "idempotent": "1" if c.idempotent else "0",
    }
    if c.owner is not None:
        fields["owner"] = c.owner
    if c.decided_at is not None:
        fields["decided_at"] = number(c.decided_at)
    if c.approvals:
        fields["approvals"] = str(c.approvals)
    for n, vote in enumerate(c.votes, start=1):  # a record created with votes (a copy)
        fields[f"vote:{n}"] = dumps(vote.to_dict())
        fields[f"voter:{vote.person}"] = "1"
    if c.votes:
        fields["votes_n"] = str(len(c.votes))
    fields.update(_execution_fields(c.execution))
    return fields


def _execution_fields(ex: Execution) -> dict[str, str]:
    fields = {"x_state": ex.state.value, "x_attempts": str(ex.attempts)}
    optional = {
        "x_by": ex.claimed_by,
        "x_lease": None if ex.lease_until is None else number(ex.lease_until),
        "x_started": None if ex.started_at is None else number(ex.started_at),
        "x_finished": None if ex.finished_at is None else number(ex.finished_at),
        "x_result": ex.result,
    }
    fields.update({k: v for k, v in optional.items() if v is not None})
    return fields


def _maybe_float(value: str | None) -> float | None:
    return None if value is None else float(value)


def decode(fields: Mapping[str, str]) -> Confirmation | None:
    """The record a hash holds, or None for a missing (expired) one."""
    if "record" not in fields:
        return None
    data = json.loads(fields["record"])
    data["status"] = fields.get("status", data.get("status"))
    if "edit" in fields:  # the call as approved with new arguments (CallEdit.to_dict)
        data.update(json.loads(fields["edit"]))
    if "decision" in fields:
        data.update(json.loads(fields["decision"]))
    details = dict(data.get("details") or {})  # fields written after the create (swap_detail)
    details.update({k[7:]: json.loads(v) for k, v in fields.items() if k.startswith(DETAIL)})
    data["details"] = details
    refs = dict(data.get("prompt_refs") or {})
    refs.update({k[4:]: v for k, v in fields.items() if k.startswith("ref:")})
    data["prompt_refs"] = refs
    data["owner"] = fields.get("owner")
    if "votes_n" in fields:  # the votes in the order they were written (scripts.VOTE)
        count = int(fields["votes_n"])
        data["votes"] = [json.loads(fields[f"vote:{n}"]) for n in range(1, count + 1)]
    c = Confirmation.from_dict(data)
    execution = Execution(
        state=ExecState(fields.get("x_state", ExecState.WAITING.value)),
        claimed_by=fields.get("x_by"),
        lease_until=_maybe_float(fields.get("x_lease")),
        attempts=int(fields.get("x_attempts", "0")),
        started_at=_maybe_float(fields.get("x_started")),
        finished_at=_maybe_float(fields.get("x_finished")),
        result=fields.get("x_result"),
    )
    return replace(c, execution=execution)


async def load(
    redis: Redis, keys: RedisKeys, index_key: str, ids: Iterable[Any]
) -> list[Confirmation]:
    """Fetch records in ``ids`` order; drop ids whose record has expired from ``index_key``."""
    id_list = [text(i) for i in ids]
    if not id_list:
        return []
    async with redis.pipeline(transaction=False) as pipe:
        for confirmation_id in id_list:
            pipe.hgetall(keys.record(confirmation_id))
        results = await pipe.execute()
    found: list[Confirmation] = []
    gone: list[str] = []
    for confirmation_id, fields in zip(id_list, results, strict=True):
        c = decode(pairs(fields))
        if c is None:
            gone.append(confirmation_id)
        else:
            found.append(c)
    if gone:
        # The record's TTL ran out; sorted sets have no per-member TTL, so tidy here.
        await redis.zrem(index_key, *gone)
        log.debug("confirm.redis_pruned", index=index_key, count=len(gone))
    return found
