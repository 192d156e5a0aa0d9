"""Records and audit events to SQLite rows and back, and the queries that return them, for
the SQLite store."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from gateway.confirm.model import AuditEvent, Confirmation, Instance, Status
from gateway.storage.sqlite.thread import transaction

COLUMNS = (
    "id",
    "session_key",
    "channel",
    "chat_id",
    "requester",
    "is_group",
    "tool_call",
    "summary",
    "details",
    "risk",
    "approvers",
    "four_eyes",
    "created_at",
    "expires_at",
    "status",
    "decided_by",
    "decided_at",
    "decided_via",
    "reason",
    "feedback",
    "prompt_refs",
    "exec_state",
    "claimed_by",
    "lease_until",
    "attempts",
    "started_at",
    "finished_at",
    "result",
    "owner",
    "idempotent",
    "continuation",
    "approvals",
    "votes",
)
SELECT = f"SELECT seq, {', '.join(COLUMNS)} FROM confirmations"
INSERT = (
    f"INSERT INTO confirmations ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
)
RETURNING = f"RETURNING seq, {', '.join(COLUMNS)}"

# Only for a record that exists: a late event of a purged record is dropped.
ADD_EVENT = (
    "INSERT INTO confirmation_events (id, at, kind, actor, detail)"
    " SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM confirmations WHERE id = ?)"
)

# A nudge's line (add_event_once): only on a pending record whose trail has none of its kind.
ADD_EVENT_ONCE = (
    "INSERT INTO confirmation_events (id, at, kind, actor, detail)"
    " SELECT ?, ?, ?, ?, ? WHERE EXISTS"
    " (SELECT 1 FROM confirmations WHERE id = ? AND status = 'pending')"
    " AND NOT EXISTS (SELECT 1 FROM confirmation_events WHERE id = ? AND kind = ?)"
)


def to_json(value: Any) -> str:
    # default=str: details come from tools and may hold a Decimal or a date; the stored
    # copy is for people, so a string rendering beats refusing to store the confirmation.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def values(c: Confirmation) -> tuple[Any, ...]:
    """The row of ``c``, in ``COLUMNS`` order."""
    ex = c.execution
    return (
        c.id,
        c.session_key,
        c.channel,
        c.chat_id,
        c.requester,
        int(c.is_group),
        to_json(c.tool_call.to_dict()),
        c.summary,
        to_json(dict(c.details)),
        c.risk.value,
        to_json(list(c.approvers)),
        int(c.four_eyes),
        c.created_at,
        c.expires_at,
        c.status.value,
        c.decided_by,
        c.decided_at,
        c.decided_via,
        c.reason,
        int(c.feedback),
        to_json(dict(c.prompt_refs)),
        ex.state.value,
        ex.claimed_by,
        ex.lease_until,
        ex.attempts,
        ex.started_at,
        ex.finished_at,
        ex.result,
        c.owner,
        int(c.idempotent),
        None if c.continuation is None else to_json(dict(c.continuation)),
        c.approvals,
        to_json([v.to_dict() for v in c.votes]),
    )


def confirmation(row: sqlite3.Row) -> Confirmation:
    continuation = row["continuation"]
    return Confirmation.from_dict(
        {
            "id": row["id"],
            "session_key": row["session_key"],
            "channel": row["channel"],
            "chat_id": row["chat_id"],
            "requester": row["requester"],
            "is_group": bool(row["is_group"]),
            "tool_call": json.loads(row["tool_call"]),
            "summary": row["summary"],
            "details": json.loads(row["details"]),
            "risk": row["risk"],
            "approvers": json.loads(row["approvers"]),
            "four_eyes": bool(row["four_eyes"]),
            "created_at": row["created_at"],
            "expires_at": row["expires_at"],
            "status": row["status"],
            "decided_by": row["decided_by"],
            "decided_at": row["decided_at"],
            "decided_via": row["decided_via"],
            "reason": row["reason"],
            "feedback": bool(row["feedback"]),
            "prompt_refs": json.loads(row["prompt_refs"]),
            "execution": {
                "state": row["exec_state"],
                "claimed_by": row["claimed_by"],
                "lease_until": row["lease_until"],
                "attempts": row["attempts"],
                "started_at": row["started_at"],
                "finished_at": row["finished_at"],
                "result": row["result"],
            },
            "owner": row["owner"],
            "idempotent": bool(row["idempotent"]),
            "continuation": None if continuation is None else json.loads(continuation),
            "approvals": row["approvals"],
            "votes": json.loads(row["votes"]),
        }
    )


def instance(row: sqlite3.Row) -> Instance:
    return Instance(
        id=row["id"],
        pid=row["pid"],
        host=row["host"],
        started_at=row["started_at"],
        seen_at=row["seen_at"],
    )


def event(row: sqlite3.Row) -> AuditEvent:
    return AuditEvent(
        confirmation_id=row["id"],
        at=row["at"],
        kind=row["kind"],
        actor=row["actor"],
        detail=json.loads(row["detail"]),
    )


def event_values(event: AuditEvent) -> tuple[Any, ...]:
    """The parameters of ``ADD_EVENT`` for ``event``."""
    cid = event.confirmation_id
    return (cid, event.at, event.kind, event.actor, to_json(dict(event.detail)), cid)


def insert_events(conn: sqlite3.Connection, events: Sequence[AuditEvent]) -> None:
    """Append ``events`` to their records' trails (inside the caller's transaction)."""
    conn.executemany(ADD_EVENT, [event_values(e) for e in events])


def select_events(conn: sqlite3.Connection, confirmation_id: str) -> list[AuditEvent]:
    found = conn.execute(
        "SELECT id, at, kind, actor, detail FROM confirmation_events WHERE id = ? ORDER BY seq",
        (confirmation_id,),
    ).fetchall()
    return [event(r) for r in found]


# ------------------------------------------------------------ queries


def one(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> Confirmation | None:
    # fetchall, not fetchone: an UPDATE ... RETURNING left unfinished would keep its
    # autocommit transaction (and the write lock) open.
    found = conn.execute(sql, params).fetchall()
    return confirmation(found[0]) if found else None


def changed(
    conn: sqlite3.Connection, sql: str, params: tuple[Any, ...], events: Sequence[AuditEvent]
) -> Confirmation | None:
    """``one`` of a compare-and-set, with ``events`` in the same transaction if it won."""

    def change(conn: sqlite3.Connection) -> Confirmation | None:
        done = one(conn, sql, params)
        if done is not None:
            insert_events(conn, events)
        return done

    return transaction(conn, change) if events else change(conn)


def many(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> list[Confirmation]:
    return [confirmation(r) for r in conn.execute(sql, params).fetchall()]


def page(
    conn: sqlite3.Connection,
    status: Status | None,
    session_key: str | None,
    limit: int,
    cursor: str | None,
) -> tuple[list[Confirmation], str | None]:
    """Newest first, ``limit`` at most, and the cursor of the next page (None: no more).

    Keyset on seq (creation order, never reused while a newer record exists): a page is
    where seq < the cursor, so records created meanwhile never shift it.
    """
    clauses: list[str] = []
    params: list[Any] = []
    if status is not None:
        clauses.append("status = ?")
        params.append(status.value)
    if session_key is not None:
        clauses.append("session_key = ?")
        params.append(session_key)
    if cursor is not None:
        clauses.append("seq < ?")
        params.append(int(cursor))
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    params.append(limit + 1)
    found = conn.execute(f"{SELECT}{where} ORDER BY seq DESC LIMIT ?", params).fetchall()
    nxt = str(found[limit - 1]["seq"]) if len(found) > limit and limit > 0 else None
    return [confirmation(r) for r in found[:limit]], nxt
