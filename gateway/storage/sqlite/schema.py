"""The SQLite store's tables, indexes and the migration from schema 1.

Schema 2 (issue 12) adds the execution ledger, owner, idempotent and continuation to each
record, a table of gateway instances, and audit events written by the service (kind,
actor, JSON detail) in place of the store's own status rows.

Indexes follow the queries, so that no query's cost grows with the pending backlog:
``list_pending`` has a partial index of pending records by session (ordered by creation),
so SQLite never walks every pending record to find one chat's (issue 12: the
``(status, created_at)`` index it used to pick made a fresh chat's round trip 19x slower
at 100,000 pending). The ledger's lookups (by owner, by claimer, approved-and-waiting)
are partial indexes over the few records not yet settled.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 3

# The execution states of a record someone still answers for (ExecState not is_final).
# Written out, not bound: a partial index is used only when the query repeats its WHERE
# term word for word.
OPEN = "exec_state IN ('waiting', 'claimed', 'running')"
IN_FLIGHT = "exec_state IN ('claimed', 'running')"

_TABLES = """
CREATE TABLE IF NOT EXISTS confirmations (
    seq          INTEGER PRIMARY KEY,        -- creation order: the page cursor
    id           TEXT NOT NULL UNIQUE,
    session_key  TEXT NOT NULL,
    channel      TEXT NOT NULL,
    chat_id      TEXT NOT NULL,
    requester    TEXT NOT NULL,
    is_group     INTEGER NOT NULL,
    tool_call    TEXT NOT NULL,              -- JSON {name, args, call_id}
    summary      TEXT NOT NULL,
    details      TEXT NOT NULL DEFAULT '{}', -- JSON
    risk         TEXT NOT NULL,
    approvers    TEXT NOT NULL DEFAULT '[]', -- JSON list
    four_eyes    INTEGER NOT NULL DEFAULT 0,
    created_at   REAL NOT NULL,
    expires_at   REAL NOT NULL,
    status       TEXT NOT NULL,
    decided_by   TEXT,
    decided_at   REAL,
    decided_via  TEXT,
    reason       TEXT,
    feedback     INTEGER NOT NULL DEFAULT 0,
    prompt_refs  TEXT NOT NULL DEFAULT '{}', -- JSON {key: value}
    exec_state   TEXT NOT NULL DEFAULT 'waiting',
    claimed_by   TEXT,
    lease_until  REAL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    started_at   REAL,
    finished_at  REAL,
    result       TEXT,
    owner        TEXT,
    idempotent   INTEGER NOT NULL DEFAULT 0,
    continuation TEXT,                       -- JSON object, or NULL
    approvals    INTEGER NOT NULL DEFAULT 0, -- people who must approve (schema 3)
    votes        TEXT NOT NULL DEFAULT '[]'  -- JSON list of Vote (schema 3)
);

CREATE TABLE IF NOT EXISTS confirmation_events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    id      TEXT NOT NULL,                   -- the confirmation id
    at      REAL NOT NULL,
    kind    TEXT NOT NULL,                   -- requested, prompt_sent, decided, claimed, ...
    actor   TEXT,
    detail  TEXT NOT NULL DEFAULT '{}'       -- JSON
);

CREATE TABLE IF NOT EXISTS instances (
    id          TEXT PRIMARY KEY,
    pid         INTEGER NOT NULL,
    host        TEXT NOT NULL,
    started_at  REAL NOT NULL,
    seen_at     REAL NOT NULL
);
"""

_INDEXES = f"""
CREATE INDEX IF NOT EXISTS confirmations_pending_by_session
    ON confirmations (session_key, created_at) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS confirmations_session ON confirmations (session_key);
CREATE INDEX IF NOT EXISTS confirmations_status ON confirmations (status);
CREATE INDEX IF NOT EXISTS confirmations_created ON confirmations (created_at);
CREATE INDEX IF NOT EXISTS confirmations_open_by_owner
    ON confirmations (owner) WHERE {OPEN};
CREATE INDEX IF NOT EXISTS confirmations_in_flight_by_claimer
    ON confirmations (claimed_by) WHERE {IN_FLIGHT};
CREATE INDEX IF NOT EXISTS confirmations_approved_waiting
    ON confirmations (created_at) WHERE status = 'approved' AND exec_state = 'waiting';
CREATE INDEX IF NOT EXISTS confirmation_events_id ON confirmation_events (id, seq);
-- The audit trail is append-only: rewriting history must fail loudly. Only the events of
-- a record that is gone (purged after the retention period) may be deleted.
CREATE TRIGGER IF NOT EXISTS confirmation_events_no_update
    BEFORE UPDATE ON confirmation_events
    BEGIN SELECT RAISE(ABORT, 'confirmation_events is append-only'); END;
CREATE TRIGGER IF NOT EXISTS confirmation_events_no_delete
    BEFORE DELETE ON confirmation_events
    WHEN EXISTS (SELECT 1 FROM confirmations WHERE id = OLD.id)
    BEGIN SELECT RAISE(ABORT, 'confirmation_events is append-only'); END;
"""

# Schema 1 -> 2. Tables are rebuilt (SQLite cannot add a rowid alias or change a column
# in place): records keep their order (seq = old rowid) and gain a settled ledger.
# A record decided under schema 1 had no ledger: what became of an approved call is not
# known, so it is `interrupted` with that said, never `waiting` (it must not run again).
_FROM_V1 = f"""
DROP INDEX IF EXISTS confirmations_session_status;
DROP INDEX IF EXISTS confirmations_status_created;
DROP INDEX IF EXISTS confirmations_created;
DROP TRIGGER IF EXISTS confirmation_events_no_update;
DROP TRIGGER IF EXISTS confirmation_events_no_delete;
DROP INDEX IF EXISTS confirmation_events_id;
ALTER TABLE confirmations RENAME TO confirmations_v1;
ALTER TABLE confirmation_events RENAME TO confirmation_events_v1;
{_TABLES}
INSERT INTO confirmations (
    seq, id, session_key, channel, chat_id, requester, is_group, tool_call, summary, details,
    risk, approvers, four_eyes, created_at, expires_at, status, decided_by, decided_at,
    decided_via, reason, feedback, prompt_refs, exec_state, finished_at, result)
SELECT
    rowid, id, session_key, channel, chat_id, requester, is_group, tool_call, summary, details,
    risk, approvers, four_eyes, created_at, expires_at, status, decided_by, decided_at,
    decided_via, reason, feedback, prompt_refs,
    CASE status WHEN 'pending' THEN 'waiting' WHEN 'approved' THEN 'interrupted'
        ELSE 'skipped' END,
    CASE status WHEN 'pending' THEN NULL ELSE decided_at END,
    CASE status WHEN 'approved'
        THEN 'decided before the execution ledger (schema 1): whether it ran is not recorded'
    END
FROM confirmations_v1 ORDER BY rowid;
INSERT INTO confirmation_events (seq, id, at, kind, actor, detail)
SELECT seq, id, at,
    CASE status WHEN 'pending' THEN 'requested' ELSE 'decided' END,
    actor,
    CASE status WHEN 'pending' THEN json_object('via', via)
        ELSE json_object('status', status, 'via', via, 'reason', reason) END
FROM confirmation_events_v1 ORDER BY seq;
DROP TABLE confirmations_v1;
DROP TABLE confirmation_events_v1;
"""


# Schema 2 -> 3 (issue 25): several approvers; a record of schema 2 needed one decision.
_FROM_V2 = """
ALTER TABLE confirmations ADD COLUMN approvals INTEGER NOT NULL DEFAULT 0;
ALTER TABLE confirmations ADD COLUMN votes TEXT NOT NULL DEFAULT '[]';
"""


def migrate(conn: sqlite3.Connection) -> int:
    """Bring the file to ``SCHEMA_VERSION`` in one transaction; the version found.

    A new file gets the tables; a schema 1 file is rebuilt; schema 2 gains the votes; a
    file from a newer gateway is refused (this one would misread it).
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"confirmations database has schema {version}, this gateway knows "
                f"{SCHEMA_VERSION}: upgrade the gateway or use another data_dir"
            )
        if version == 1:
            _run(conn, _FROM_V1)  # rebuilt with the tables of this version
        elif version == 2:
            _run(conn, _FROM_V2)
        _run(conn, _TABLES + _INDEXES)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return version


def _run(conn: sqlite3.Connection, script: str) -> None:
    # Statement by statement inside the caller's transaction: executescript() would
    # COMMIT first. complete_statement keeps a trigger's inner `;` with its body.
    buffer = ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--") and not buffer.strip():
            continue
        buffer += line
        if sqlite3.complete_statement(buffer):
            conn.execute(buffer)
            buffer = ""
