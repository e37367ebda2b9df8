-- toolgate storage, Postgres flavour (production). Keep in step with
-- migrations/sqlite/0001_init.sql: same tables, columns and constraints.

-- One row per thread. The owner is fixed at creation. last_event_seq and
-- last_message_seq are the per-thread sequence counters: a write bumps them
-- (UPDATE ... RETURNING) inside its transaction; the row lock this takes
-- serialises writers of one thread across processes, so seqs are gap-free
-- and become visible in order.
CREATE TABLE threads (
    id               TEXT   NOT NULL PRIMARY KEY,
    owner            TEXT   NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    last_event_seq   BIGINT NOT NULL DEFAULT 0,
    last_message_seq BIGINT NOT NULL DEFAULT 0
);

-- The conversation. content is always text; structure lives in metadata.
CREATE TABLE messages (
    thread_id     TEXT   NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq           BIGINT NOT NULL,
    id            TEXT   NOT NULL,
    role          TEXT   NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
    content       TEXT   NOT NULL,
    metadata      JSONB  NOT NULL,
    tool_call_id  TEXT,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (thread_id, seq),
    UNIQUE (thread_id, id)
);

-- The idempotency and undo record of every tool call.
CREATE TABLE tool_calls (
    thread_id      TEXT   NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    id             TEXT   NOT NULL,
    owner          TEXT   NOT NULL,
    run_id         TEXT   NOT NULL,
    tool_name      TEXT   NOT NULL,
    args           JSONB  NOT NULL,
    status         TEXT   NOT NULL CHECK (status IN ('running', 'success', 'failure', 'partial')),
    output         JSONB,
    undo           JSONB,
    message_id     TEXT,
    created_at_ms  BIGINT NOT NULL,
    finished_at_ms BIGINT,
    PRIMARY KEY (thread_id, id)
);

-- Start-up scans for calls left running by a crash; keep that scan cheap.
CREATE INDEX tool_calls_running ON tool_calls (status) WHERE status = 'running';

-- The per-thread event log behind SSE resume. data is the AG-UI event JSON
-- text exactly as streamed (TEXT, not JSONB, so a replay is byte-identical).
CREATE TABLE events (
    thread_id     TEXT   NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq           BIGINT NOT NULL,
    event_type    TEXT   NOT NULL,
    data          TEXT   NOT NULL,
    created_at_ms BIGINT NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
