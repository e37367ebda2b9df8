-- toolgate storage, SQLite flavour: what the safety features need.
-- Keep in step with migrations/postgres/0002_safety.sql.

-- Tool calls ---------------------------------------------------------------

-- SQLite cannot change a CHECK constraint in place, so tool_calls is rebuilt
-- (nothing references it; its index is recreated below). New: the status
-- pending_approval (a call waiting for a human decision), the undo links
-- (undo_of on the undoing call, undone_by on the undone one) and ordinal,
-- the call's position in its thread (from threads.last_call_ordinal, bumped
-- like the other per-thread seqs), so the calls of a run keep the order they
-- were recorded in even within one millisecond. Calls recorded before this
-- migration are numbered by (created_at_ms, id).
ALTER TABLE threads ADD COLUMN last_call_ordinal INTEGER NOT NULL DEFAULT 0;

CREATE TABLE tool_calls_v2 (
    thread_id      TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    id             TEXT    NOT NULL,
    owner          TEXT    NOT NULL,
    run_id         TEXT    NOT NULL,
    tool_name      TEXT    NOT NULL,
    args           TEXT    NOT NULL CHECK (json_valid(args)),
    status         TEXT    NOT NULL
        CHECK (status IN ('pending_approval', 'running', 'success', 'failure', 'partial')),
    output         TEXT CHECK (output IS NULL OR json_valid(output)),
    undo           TEXT CHECK (undo IS NULL OR json_valid(undo)),
    message_id     TEXT,
    created_at_ms  INTEGER NOT NULL,
    finished_at_ms INTEGER,
    undo_of        TEXT,
    undone_by      TEXT,
    ordinal        INTEGER NOT NULL,
    PRIMARY KEY (thread_id, id),
    UNIQUE (thread_id, ordinal)
);
INSERT INTO tool_calls_v2 (thread_id, id, owner, run_id, tool_name, args, status, output, undo,
                           message_id, created_at_ms, finished_at_ms, ordinal)
SELECT thread_id, id, owner, run_id, tool_name, args, status, output, undo,
       message_id, created_at_ms, finished_at_ms,
       row_number() OVER (PARTITION BY thread_id ORDER BY created_at_ms, id)
FROM tool_calls;
DROP TABLE tool_calls;
ALTER TABLE tool_calls_v2 RENAME TO tool_calls;
UPDATE threads
SET last_call_ordinal = (SELECT count(*) FROM tool_calls WHERE tool_calls.thread_id = threads.id);

CREATE INDEX tool_calls_running ON tool_calls (status) WHERE status = 'running';
CREATE INDEX tool_calls_run ON tool_calls (thread_id, run_id, ordinal);

-- Approvals ----------------------------------------------------------------

CREATE TABLE approvals (
    id              TEXT    NOT NULL PRIMARY KEY,
    thread_id       TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    owner           TEXT    NOT NULL,
    tool_call_id    TEXT    NOT NULL,
    tool_name       TEXT    NOT NULL,
    arguments       TEXT    NOT NULL CHECK (json_valid(arguments)),
    reason          TEXT    NOT NULL,
    preview         TEXT CHECK (preview IS NULL OR json_valid(preview)),
    request         TEXT    NOT NULL CHECK (json_valid(request)),
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
    decided_by      TEXT,
    decision_reason TEXT,
    created_at_ms   INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL,
    decided_at_ms   INTEGER
);
CREATE INDEX approvals_owner ON approvals (owner, created_at_ms DESC, id DESC);
CREATE INDEX approvals_owner_status ON approvals (owner, status, created_at_ms DESC, id DESC);
-- The expiry sweeper's scan.
CREATE INDEX approvals_expiry ON approvals (expires_at_ms, id) WHERE status = 'pending';

-- Audit log ----------------------------------------------------------------

-- Append-only. No foreign keys: entries outlive what they describe.
-- AUTOINCREMENT: ids are never reused, even after the highest row is gone.
CREATE TABLE audit_log (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms        INTEGER NOT NULL,
    owner        TEXT    NOT NULL,
    thread_id    TEXT,
    tool_call_id TEXT,
    tool_name    TEXT,
    action       TEXT    NOT NULL,
    operation    TEXT,
    verdict      TEXT,
    rule         TEXT,
    approval_id  TEXT,
    outcome      TEXT,
    duration_ms  INTEGER,
    detail       TEXT    NOT NULL CHECK (json_valid(detail))
);
CREATE INDEX audit_log_owner ON audit_log (owner, id);
CREATE INDEX audit_log_thread ON audit_log (thread_id, id) WHERE thread_id IS NOT NULL;
CREATE INDEX audit_log_call ON audit_log (tool_call_id, id) WHERE tool_call_id IS NOT NULL;

CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit log is append-only');
END;
CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit log is append-only');
END;

-- Owner permission rules ---------------------------------------------------

CREATE TABLE owner_permissions (
    owner         TEXT    NOT NULL PRIMARY KEY,
    rules         TEXT    NOT NULL CHECK (json_valid(rules)),
    updated_at_ms INTEGER NOT NULL
);
