-- toolgate storage, Postgres flavour: what the safety features need.
-- Keep in step with migrations/sqlite/0002_safety.sql.

-- Tool calls ---------------------------------------------------------------

-- A call may wait for a human decision before it runs.
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_status_check;
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_status_check
    CHECK (status IN ('pending_approval', 'running', 'success', 'failure', 'partial'));

-- Undo links: undo_of on the undoing call, undone_by on the undone one.
-- ordinal is the call's position in its thread (from threads.last_call_ordinal,
-- bumped like the other per-thread seqs), so the calls of a run keep the order
-- they were recorded in even within one millisecond. Calls recorded before
-- this migration are numbered by (created_at_ms, id).
ALTER TABLE threads ADD COLUMN last_call_ordinal BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tool_calls
    ADD COLUMN undo_of   TEXT,
    ADD COLUMN undone_by TEXT,
    ADD COLUMN ordinal   BIGINT;
UPDATE tool_calls AS c SET ordinal = n.ordinal
FROM (
    SELECT thread_id, id,
           row_number() OVER (PARTITION BY thread_id ORDER BY created_at_ms, id) AS ordinal
    FROM tool_calls
) AS n
WHERE c.thread_id = n.thread_id AND c.id = n.id;
UPDATE threads AS t SET last_call_ordinal = n.calls
FROM (SELECT thread_id, count(*) AS calls FROM tool_calls GROUP BY thread_id) AS n
WHERE t.id = n.thread_id;
ALTER TABLE tool_calls ALTER COLUMN ordinal SET NOT NULL;
ALTER TABLE tool_calls ADD CONSTRAINT tool_calls_ordinal_key UNIQUE (thread_id, ordinal);
CREATE INDEX tool_calls_run ON tool_calls (thread_id, run_id, ordinal);

-- Approvals ----------------------------------------------------------------

CREATE TABLE approvals (
    id              TEXT   NOT NULL PRIMARY KEY,
    thread_id       TEXT   NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    owner           TEXT   NOT NULL,
    tool_call_id    TEXT   NOT NULL,
    tool_name       TEXT   NOT NULL,
    arguments       JSONB  NOT NULL,
    reason          TEXT   NOT NULL,
    preview         JSONB,
    request         JSONB  NOT NULL,
    status          TEXT   NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
    decided_by      TEXT,
    decision_reason TEXT,
    created_at_ms   BIGINT NOT NULL,
    expires_at_ms   BIGINT NOT NULL,
    decided_at_ms   BIGINT
);
CREATE INDEX approvals_owner ON approvals (owner, created_at_ms DESC, id DESC);
CREATE INDEX approvals_owner_status ON approvals (owner, status, created_at_ms DESC, id DESC);
-- The expiry sweeper's scan.
CREATE INDEX approvals_expiry ON approvals (expires_at_ms, id) WHERE status = 'pending';

-- Audit log ----------------------------------------------------------------

-- Append-only. No foreign keys: entries outlive what they describe. The id is
-- global and increasing (a rolled-back insert leaves a gap).
CREATE TABLE audit_log (
    id           BIGSERIAL NOT NULL PRIMARY KEY,
    at_ms        BIGINT    NOT NULL,
    owner        TEXT      NOT NULL,
    thread_id    TEXT,
    tool_call_id TEXT,
    tool_name    TEXT,
    action       TEXT      NOT NULL,
    operation    TEXT,
    verdict      TEXT,
    rule         TEXT,
    approval_id  TEXT,
    outcome      TEXT,
    duration_ms  BIGINT,
    detail       JSONB     NOT NULL
);
CREATE INDEX audit_log_owner ON audit_log (owner, id);
CREATE INDEX audit_log_thread ON audit_log (thread_id, id) WHERE thread_id IS NOT NULL;
CREATE INDEX audit_log_call ON audit_log (tool_call_id, id) WHERE tool_call_id IS NOT NULL;

-- The table owner (the role toolgate connects as) is not bound by GRANTs, so
-- append-only is enforced by triggers: any UPDATE, DELETE or TRUNCATE fails.
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit log is append-only' USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER audit_log_no_update_or_delete
    BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate
    BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_append_only();

-- Owner permission rules ---------------------------------------------------

CREATE TABLE owner_permissions (
    owner         TEXT   NOT NULL PRIMARY KEY,
    rules         JSONB  NOT NULL,
    updated_at_ms BIGINT NOT NULL
);
