"""SQLite backend: the embedded default of ``gateway serve``.

Durable (WAL, fsync on commit). Several handles (or processes) may share one file: every
compare-and-set — a decision, a claim, a start, an end, an adoption — is a single
``UPDATE ... WHERE <rule> RETURNING``, which SQLite serialises with its write lock, so of
any number of racers exactly one sees its row come back. Tables, indexes and the
migration from schema 1 are in ``schema.py``; each operation runs whole on the
connection's thread (``thread.py``).
"""

from __future__ import annotations

import builtins
import json
import sqlite3
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import structlog

from gateway.confirm.model import (
    AuditEvent,
    CallEdit,
    Confirmation,
    ExecState,
    Instance,
    Status,
    Vote,
    VoteOutcome,
    vote_on,
)
from gateway.storage.confirmations import (
    ConfirmationExistsError,
    ConfirmationStore,
    FeedEntry,
    FeedKind,
    LocalFeed,
    PendingLimits,
    check_edit,
    pending_limit,
)
from gateway.storage.sqlite import rows
from gateway.storage.sqlite.schema import IN_FLIGHT, OPEN, migrate
from gateway.storage.sqlite.thread import SqliteThread, transaction

log = structlog.get_logger(__name__)

Confirmations = builtins.list[Confirmation]

# The pending caps' counts (create): each answered from an index, never a table scan, and
# counting no further than the cap (LIMIT), so a create costs the same at 100k pending
# (bench/store_backlog.py) as at 10.
COUNT_PENDING_IN_SESSION = (
    "SELECT count(*) FROM (SELECT 1 FROM confirmations"
    " WHERE session_key = ? AND status = 'pending' LIMIT ?)"
)
COUNT_PENDING = (
    "SELECT count(*) FROM (SELECT 1 FROM confirmations WHERE status = 'pending' LIMIT ?)"
)

# store.may_claim, as one WHERE: approved, and unclaimed — or idempotent, claimed once,
# still in flight and its lease run out (its claimer died): once more.
_MAY_CLAIM = (
    "status = 'approved' AND (exec_state = 'waiting' OR (idempotent = 1"
    f" AND {IN_FLIGHT} AND attempts = 1 AND lease_until IS NOT NULL AND lease_until <= ?))"
)
_FINAL = frozenset({ExecState.SUCCEEDED, ExecState.FAILED, ExecState.INTERRUPTED})
# What a vote tells the feed: a counted one, and the last one's end.
_FED: dict[VoteOutcome, FeedKind] = {VoteOutcome.COUNTED: "voted", VoteOutcome.APPROVED: "resolved"}


def _pending_sessions(conn: sqlite3.Connection) -> builtins.list[str]:
    sql = "SELECT DISTINCT session_key FROM confirmations WHERE status = 'pending'"
    return [str(r[0]) for r in conn.execute(sql).fetchall()]


class SqliteConfirmationStore(ConfirmationStore):
    """Confirmations, their audit trail and the gateway instances in one SQLite file.

    ``open(path)`` makes the connection (on its own thread) and brings the schema up to
    date. The audit trail holds what the service writes, with ``add_event`` or with the
    change an event describes, nothing else: one trail, in the order things happened.
    """

    def __init__(self, db: SqliteThread, pending_sessions: Iterable[str] = ()) -> None:
        self._db = db
        self._feed = LocalFeed()
        # Sessions that may have a pending record -> how many records this handle created
        # in them. Most inbound messages come from sessions with nothing pending, and each
        # asks list_pending first (the reply intercept): for those it answers without a
        # thread hop (bench/ingest.py). Exact because one gateway owns a data dir (the
        # data dir lock; the lifecycle feed assumes it too): every pending record is either in
        # the file when it opens (read in open()) or created through this handle.
        self._pending_sessions = dict.fromkeys(pending_sessions, 0)

    @classmethod
    async def open(
        cls, path: str | Path, *, busy_timeout_ms: int = 5_000
    ) -> SqliteConfirmationStore:
        """Open (and create if needed) the database file, in WAL mode, with the schema."""
        db = await SqliteThread.connect(path, busy_timeout_ms=busy_timeout_ms)
        try:
            found = await db.run(migrate)
            sessions = await db.run(_pending_sessions)
        except BaseException:
            await db.close()
            raise
        log.info("confirm.sqlite_opened", path=str(path), schema_found=found)
        return cls(db, sessions)

    async def close(self) -> None:
        await self._db.close()

    # ------------------------------------------------------------ records and decisions

    async def create(
        self,
        confirmation: Confirmation,
        *,
        events: Sequence[AuditEvent] = (),
        limits: PendingLimits | None = None,
    ) -> None:
        row = rows.values(confirmation)
        key = confirmation.session_key
        # Counted before the insert is queued: a list_pending already on its way must not
        # forget the session (see list_pending).
        self._pending_sessions[key] = self._pending_sessions.get(key, 0) + 1
        if confirmation.status is not Status.PENDING:
            limits = None

        def create(conn: sqlite3.Connection) -> None:
            if limits is not None:  # counted in the insert's transaction: no race
                refused = pending_limit(
                    limits,
                    in_session=conn.execute(
                        COUNT_PENDING_IN_SESSION, (key, limits.per_session)
                    ).fetchone()[0],
                    total=conn.execute(COUNT_PENDING, (limits.total,)).fetchone()[0],
                )
                if refused is not None:
                    raise refused
            try:
                conn.execute(rows.INSERT, row)
            except sqlite3.IntegrityError as exc:
                raise ConfirmationExistsError(confirmation.id) from exc
            rows.insert_events(conn, events)

        await self._db.run(lambda conn: transaction(conn, create))
        if confirmation.status is Status.PENDING:
            self._feed.announce(confirmation.id, "requested")

    async def get(self, confirmation_id: str) -> Confirmation | None:
        return await self._db.run(
            lambda conn: rows.one(conn, f"{rows.SELECT} WHERE id = ?", (confirmation_id,))
        )

    async def list_pending(self, session_key: str) -> Confirmations:
        created = self._pending_sessions.get(session_key)
        if created is None:
            return []  # nothing was ever pending there (see __init__)
        # Matches the partial index confirmations_pending_by_session word for word.
        sql = f"{rows.SELECT} WHERE session_key = ? AND status = 'pending' ORDER BY created_at, seq"
        found = await self._db.run(lambda conn: rows.many(conn, sql, (session_key,)))
        if not found and self._pending_sessions.get(session_key) == created:
            # None left, and none created since this query was queued: forget the session.
            del self._pending_sessions[session_key]
        return found

    async def finish(
        self,
        confirmation_id: str,
        status: Status,
        *,
        by: str | None,
        via: str | None,
        reason: str | None,
        now: float,
        feedback: bool = False,
        edit: CallEdit | None = None,
        events: Sequence[AuditEvent] = (),
    ) -> tuple[Confirmation | None, bool]:
        if not status.is_terminal:
            raise ValueError("finish() moves a confirmation to a terminal status")
        check_edit(status, edit)
        # store.decision_allowed: a person's decision counts only before the deadline;
        # expiry and cancellation whenever the record is still pending. Any end but
        # approved also settles the ledger: nothing will run.
        needs_deadline = status in (Status.APPROVED, Status.REJECTED)
        skipped = status is not Status.APPROVED
        # An edited call is written by the same UPDATE: it exists only if this decision won.
        set_call = ""
        call_params: tuple[Any, ...] = ()
        if edit is not None:
            set_call = " tool_call = ?, summary = ?, details = ?, risk = ?, four_eyes = ?,"
            call_params = (
                rows.to_json(edit.tool_call.to_dict()),
                edit.summary,
                rows.to_json(dict(edit.details)),
                edit.risk.value,
                int(edit.four_eyes),
            )
        sql = (
            f"UPDATE confirmations SET{set_call} status = ?, decided_by = ?, decided_at = ?,"
            " decided_via = ?, reason = ?, feedback = ?,"
            " exec_state = CASE WHEN ? THEN 'skipped' ELSE exec_state END,"
            " finished_at = CASE WHEN ? THEN ? ELSE finished_at END"
            " WHERE id = ? AND status = 'pending' AND (? = 0 OR expires_at > ?) " + rows.RETURNING
        )
        params = (
            *call_params,
            status.value,
            by,
            now,
            via,
            reason,
            int(feedback),
            skipped,
            skipped,
            now,
            confirmation_id,
            int(needs_deadline),
            now,
        )

        def finish(conn: sqlite3.Connection) -> tuple[Confirmation | None, bool]:
            done = rows.changed(conn, sql, params, events)
            if done is not None:
                return done, True
            return rows.one(conn, f"{rows.SELECT} WHERE id = ?", (confirmation_id,)), False

        current, changed = await self._db.run(finish)
        if changed:
            self._feed.announce(confirmation_id, "resolved")
        return current, changed

    async def vote(
        self,
        confirmation_id: str,
        vote: Vote,
        *,
        events: Sequence[AuditEvent] = (),
        approved_events: Sequence[AuditEvent] = (),
    ) -> tuple[Confirmation | None, VoteOutcome]:
        # Read, judge (model.vote_on) and write in one IMMEDIATE transaction: the write
        # lock is held from the read on, so handles and processes on the file take turns.
        sql = (
            "UPDATE confirmations SET votes = ?, status = ?, decided_by = ?, decided_at = ?,"
            " decided_via = ?, reason = NULL, feedback = 0 WHERE id = ? AND status = 'pending' "
            + rows.RETURNING
        )

        def cast(conn: sqlite3.Connection) -> tuple[Confirmation | None, VoteOutcome]:
            current = rows.one(conn, f"{rows.SELECT} WHERE id = ?", (confirmation_id,))
            if current is None:
                return None, VoteOutcome.NOT_FOUND
            done, outcome = vote_on(current, vote)
            if done is None:
                return current, outcome
            written = rows.one(
                conn,
                sql,
                (
                    rows.to_json([v.to_dict() for v in done.votes]),
                    done.status.value,
                    done.decided_by,
                    done.decided_at,
                    done.decided_via,
                    confirmation_id,
                ),
            )
            approved = outcome is VoteOutcome.APPROVED
            rows.insert_events(conn, (*events, *approved_events) if approved else events)
            return written, outcome

        current, outcome = await self._db.run(lambda conn: transaction(conn, cast))
        if outcome in _FED:
            self._feed.announce(confirmation_id, _FED[outcome])
        return current, outcome

    def lifecycle_feed(self) -> AbstractAsyncContextManager[AsyncIterator[FeedEntry]]:
        # Not shared (one gateway serves a data dir): its own changes are the whole feed.
        return self._feed.feed()

    async def set_prompt_ref(self, confirmation_id: str, key: str, value: str) -> None:
        def update(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT prompt_refs FROM confirmations WHERE id = ?", (confirmation_id,)
            ).fetchone()
            if row is not None:
                refs = {**json.loads(row["prompt_refs"]), key: value}
                conn.execute(
                    "UPDATE confirmations SET prompt_refs = ? WHERE id = ?",
                    (rows.to_json(refs), confirmation_id),
                )

        await self._db.run(lambda conn: transaction(conn, update))

    async def swap_detail(
        self,
        confirmation_id: str,
        key: str,
        *,
        expected: Mapping[str, Any] | None,
        value: Mapping[str, Any],
        events: Sequence[AuditEvent] = (),
    ) -> tuple[Confirmation | None, bool]:
        # Read and write in one BEGIN IMMEDIATE: the write lock serialises racers, also
        # those of another process on the same file.
        def swap(conn: sqlite3.Connection) -> tuple[Confirmation | None, bool]:
            where = (confirmation_id,)
            row = conn.execute("SELECT details FROM confirmations WHERE id = ?", where).fetchone()
            if row is None:
                return None, False
            details = json.loads(row["details"])
            changed = details.get(key) == (None if expected is None else dict(expected))
            if changed:
                details[key] = dict(value)
                conn.execute(
                    "UPDATE confirmations SET details = ? WHERE id = ?",
                    (rows.to_json(details), confirmation_id),
                )
                rows.insert_events(conn, events)
            return rows.one(conn, f"{rows.SELECT} WHERE id = ?", where), changed

        return await self._db.run(lambda conn: transaction(conn, swap))

    # ------------------------------------------------------------ the execution ledger

    async def claim(
        self, confirmation_id: str, *, instance: str, now: float, lease: float
    ) -> Confirmation | None:
        sql = (
            "UPDATE confirmations SET exec_state = 'claimed', claimed_by = ?, lease_until = ?,"
            f" attempts = attempts + 1, started_at = NULL WHERE id = ? AND {_MAY_CLAIM} "
            + rows.RETURNING
        )
        params = (instance, now + lease, confirmation_id, now)
        return await self._db.run(lambda conn: rows.one(conn, sql, params))

    async def start_execution(
        self, confirmation_id: str, *, instance: str, now: float
    ) -> Confirmation | None:
        sql = (
            "UPDATE confirmations SET exec_state = 'running', started_at = ?"
            " WHERE id = ? AND exec_state = 'claimed' AND claimed_by = ? " + rows.RETURNING
        )
        params = (now, confirmation_id, instance)
        return await self._db.run(lambda conn: rows.one(conn, sql, params))

    async def finish_execution(
        self,
        confirmation_id: str,
        *,
        instance: str,
        state: ExecState,
        result: str | None,
        now: float,
        events: Sequence[AuditEvent] = (),
    ) -> Confirmation | None:
        if state not in _FINAL:
            raise ValueError("finish_execution() ends in succeeded, failed or interrupted")
        sql = (
            "UPDATE confirmations SET exec_state = ?, finished_at = ?, result = ?"
            f" WHERE id = ? AND {IN_FLIGHT} AND claimed_by = ? " + rows.RETURNING
        )
        params = (state.value, now, result, confirmation_id, instance)
        done = await self._db.run(lambda conn: rows.changed(conn, sql, params, events))
        if done is not None:
            self._feed.announce(confirmation_id, "executed")
        return done

    async def adopt(
        self, confirmation_id: str, *, from_owner: str | None, to_owner: str
    ) -> Confirmation | None:
        sql = "UPDATE confirmations SET owner = ? WHERE id = ? AND owner IS ? " + rows.RETURNING
        params = (to_owner, confirmation_id, from_owner)
        return await self._db.run(lambda conn: rows.one(conn, sql, params))

    async def adopt_many(self, records: Sequence[Confirmation], *, to_owner: str) -> Confirmations:
        sql = "UPDATE confirmations SET owner = ? WHERE id = ? AND owner IS ? " + rows.RETURNING
        moves = [(to_owner, c.id, c.owner) for c in records]

        def adopt(conn: sqlite3.Connection) -> Confirmations:
            return [c for m in moves if (c := rows.one(conn, sql, m)) is not None]

        return await self._db.run(lambda conn: transaction(conn, adopt))

    async def list_unsettled(self, *, instance: str) -> Confirmations:
        # Two lookups in the partial indexes of open records (by owner, by claimer); a
        # pending record is `waiting`, any other end but approved is `skipped`.
        sql = (
            f"{rows.SELECT} WHERE owner = ? AND {OPEN}"
            f" UNION {rows.SELECT} WHERE claimed_by = ? AND {IN_FLIGHT} ORDER BY seq"
        )
        return await self._db.run(lambda conn: rows.many(conn, sql, (instance, instance)))

    async def list_approved_waiting(self) -> Confirmations:
        sql = f"{rows.SELECT} WHERE status = 'approved' AND exec_state = 'waiting' ORDER BY seq"
        return await self._db.run(lambda conn: rows.many(conn, sql, ()))

    # ------------------------------------------------------------ instances

    async def heartbeat(self, instance: Instance, *, lease: float) -> None:
        i = instance

        def beat(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO instances (id, pid, host, started_at, seen_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET pid = excluded.pid,"
                " host = excluded.host, started_at = excluded.started_at,"
                " seen_at = excluded.seen_at",
                (i.id, i.pid, i.host, i.started_at, i.seen_at),
            )
            conn.execute(
                f"UPDATE confirmations SET lease_until = ? WHERE claimed_by = ? AND {IN_FLIGHT}",
                (i.seen_at + lease, i.id),
            )

        await self._db.run(lambda conn: transaction(conn, beat))

    async def list_instances(self) -> builtins.list[Instance]:
        def select(conn: sqlite3.Connection) -> builtins.list[Instance]:
            found = conn.execute("SELECT * FROM instances ORDER BY started_at, id").fetchall()
            return [rows.instance(r) for r in found]

        return await self._db.run(select)

    async def forget_instance(self, instance_id: str) -> None:
        await self._db.run(
            lambda conn: conn.execute("DELETE FROM instances WHERE id = ?", (instance_id,))
        )

    # ------------------------------------------------------------ audit trail

    async def add_event(self, event: AuditEvent) -> None:
        params = rows.event_values(event)
        await self._db.run(lambda conn: conn.execute(rows.ADD_EVENT, params))

    async def add_events(self, events: Sequence[AuditEvent]) -> None:
        await self._db.run(lambda conn: transaction(conn, lambda c: rows.insert_events(c, events)))

    async def events(self, confirmation_id: str) -> builtins.list[AuditEvent]:
        return await self._db.run(lambda conn: rows.select_events(conn, confirmation_id))

    async def add_event_once(self, event: AuditEvent) -> bool:
        # One statement: SQLite runs it alone, so its checks and its insert are one step.
        params = (*rows.event_values(event), event.confirmation_id, event.kind)
        written: int = await self._db.run(
            lambda conn: conn.execute(rows.ADD_EVENT_ONCE, params).rowcount
        )
        return written == 1

    async def purge(self, *, before: float) -> int:
        # decided_at >= created_at, so `created_at < before` (indexed) bounds the scan.
        def purge(conn: sqlite3.Connection) -> int:
            gone = conn.execute(
                "DELETE FROM confirmations WHERE created_at < ?"
                f" AND coalesce(decided_at, created_at) < ? AND NOT ({OPEN}) RETURNING id",
                (before, before),
            ).fetchall()
            # The records first: the trigger lets only a gone record's events go.
            conn.executemany(
                "DELETE FROM confirmation_events WHERE id = ?", [(r["id"],) for r in gone]
            )
            return len(gone)

        return await self._db.run(lambda conn: transaction(conn, purge))

    # ------------------------------------------------------------ listing and counting

    async def page(
        self,
        *,
        status: Status | None = None,
        session_key: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[Confirmations, str | None]:
        def select(conn: sqlite3.Connection) -> tuple[Confirmations, str | None]:
            return rows.page(conn, status, session_key, max(0, limit), cursor)

        return await self._db.run(select)

    async def count(self, status: Status) -> int:
        # The status as a literal (an enum value, not user text), so that SQLite sees which
        # index answers it; counting the index entries never loads a record.
        sql = f"SELECT count(*) FROM confirmations WHERE status = '{status.value}'"

        def select(conn: sqlite3.Connection) -> int:
            return int(conn.execute(sql).fetchone()[0])

        return await self._db.run(select)
