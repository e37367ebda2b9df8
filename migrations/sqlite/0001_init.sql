-- toolgate storage, SQLite flavour (embedded default). Keep in step with
-- migrations/postgres/0001_init.sql: same tables, columns and constraints;
-- JSON is stored as text here and checked with json_valid().

-- One row per thread. The owner is fixed at creation. last_event_seq and
-- last_message_seq are the per-thread sequence counters: a write bumps them
-- (UPDATE ... RETURNING) inside its transaction, so seqs are gap-free.
CREATE TABLE threads (
    id               TEXT    NOT NULL PRIMARY KEY,
    owner            TEXT    NOT NULL,
    created_at_ms    INTEGER NOT NULL,
    last_event_seq   INTEGER NOT NULL DEFAULT 0,
    last_message_seq INTEGER NOT NULL DEFAULT 0
);

-- The conversation. content is always text; structure lives in metadata.
CREATE TABLE messages (
    thread_id     TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL,
    id            TEXT    NOT NULL,
    role          TEXT    NOT NULL CHECK (role IN ('user', 'assistant', 'system', 'tool')),
    content       TEXT    NOT NULL,
    metadata      TEXT    NOT NULL CHECK (json_valid(metadata)),
    tool_call_id  TEXT,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (thread_id, seq),
    UNIQUE (thread_id, id)
);

-- The idempotency and undo record of every tool call.
CREATE TABLE tool_calls (
    thread_id      TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    id             TEXT    NOT NULL,
    owner          TEXT    NOT NULL,
    run_id         TEXT    NOT NULL,
    tool_name      TEXT    NOT NULL,
    args           TEXT    NOT NULL CHECK (json_valid(args)),
    status         TEXT    NOT NULL CHECK (status IN ('running', 'success', 'failure', 'partial')),
    output         TEXT CHECK (output IS NULL OR json_valid(output)),
    undo           TEXT CHECK (undo IS NULL OR json_valid(undo)),
    message_id     TEXT,
    created_at_ms  INTEGER NOT NULL,
    finished_at_ms INTEGER,
    PRIMARY KEY (thread_id, id)
);

-- Start-up scans for calls left running by a crash; keep that scan cheap.
CREATE INDEX tool_calls_running ON tool_calls (status) WHERE status = 'running';

-- The per-thread event log behind SSE resume. data is the AG-UI event JSON
-- text exactly as streamed (text, so a replay is byte-identical).
CREATE TABLE events (
    thread_id     TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL,
    event_type    TEXT    NOT NULL,
    data          TEXT    NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
