-- The SQLite store's schema 1, verbatim from gateway/confirm/sqlite_store.py before issue 12:
-- test_sqlite_store.py builds a schema 1 file with it to test the migration.
CREATE TABLE IF NOT EXISTS confirmations (
    id           TEXT PRIMARY KEY,
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
    prompt_refs  TEXT NOT NULL DEFAULT '{}'  -- JSON {key: value}
);
CREATE INDEX IF NOT EXISTS confirmations_session_status
    ON confirmations (session_key, status);
CREATE INDEX IF NOT EXISTS confirmations_status_created
    ON confirmations (status, created_at);
CREATE INDEX IF NOT EXISTS confirmations_created
    ON confirmations (created_at);

CREATE TABLE IF NOT EXISTS confirmation_events (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    id      TEXT NOT NULL,   -- the confirmation id
    at      REAL NOT NULL,
    status  TEXT NOT NULL,   -- the status the confirmation entered
    actor   TEXT,
    via     TEXT,
    reason  TEXT
);
CREATE INDEX IF NOT EXISTS confirmation_events_id ON confirmation_events (id);
-- The audit log is append-only: rewriting history must fail loudly, not silently succeed.
CREATE TRIGGER IF NOT EXISTS confirmation_events_no_update
    BEFORE UPDATE ON confirmation_events
    BEGIN SELECT RAISE(ABORT, 'confirmation_events is append-only'); END;
CREATE TRIGGER IF NOT EXISTS confirmation_events_no_delete
    BEFORE DELETE ON confirmation_events
    BEGIN SELECT RAISE(ABORT, 'confirmation_events is append-only'); END;
