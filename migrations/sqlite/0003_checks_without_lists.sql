-- toolgate storage, SQLite flavour: the same constraints, cheaper to check.
--
-- SQLite evaluates a CHECK of the form `x IN ('a', 'b', 'c', ...)` (more
-- than two values) by building a temporary b-tree of the list every time a
-- row is written, and tearing it down after the statement: on the write
-- path that was most of the cost of a tool call's and a message's insert
-- beyond the row itself. The same conditions written as comparisons joined
-- by OR allow and refuse exactly the same values without it. SQLite cannot
-- change a CHECK in place, so both tables are rebuilt (with their data and
-- indexes); nothing references them. Postgres needs no such change: its
-- schema keeps the IN lists, and the two schemas accept the same rows.

CREATE TABLE messages_v3 (
    thread_id     TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL,
    id            TEXT    NOT NULL,
    role          TEXT    NOT NULL
        CHECK (role = 'user' OR role = 'assistant' OR role = 'system' OR role = 'tool'),
    content       TEXT    NOT NULL,
    metadata      TEXT    NOT NULL CHECK (json_valid(metadata)),
    tool_call_id  TEXT,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (thread_id, seq),
    UNIQUE (thread_id, id)
);
INSERT INTO messages_v3 (thread_id, seq, id, role, content, metadata, tool_call_id, created_at_ms)
SELECT thread_id, seq, id, role, content, metadata, tool_call_id, created_at_ms
FROM messages;
DROP TABLE messages;
ALTER TABLE messages_v3 RENAME TO messages;

CREATE TABLE tool_calls_v3 (
    thread_id      TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    id             TEXT    NOT NULL,
    owner          TEXT    NOT NULL,
    run_id         TEXT    NOT NULL,
    tool_name      TEXT    NOT NULL,
    args           TEXT    NOT NULL CHECK (json_valid(args)),
    status         TEXT    NOT NULL
        CHECK (status = 'pending_approval' OR status = 'running' OR status = 'success'
               OR status = 'failure' OR status = 'partial'),
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
INSERT INTO tool_calls_v3 (thread_id, id, owner, run_id, tool_name, args, status, output, undo,
                           message_id, created_at_ms, finished_at_ms, undo_of, undone_by, ordinal)
SELECT thread_id, id, owner, run_id, tool_name, args, status, output, undo,
       message_id, created_at_ms, finished_at_ms, undo_of, undone_by, ordinal
FROM tool_calls;
DROP TABLE tool_calls;
ALTER TABLE tool_calls_v3 RENAME TO tool_calls;

CREATE INDEX tool_calls_running ON tool_calls (status) WHERE status = 'running';
CREATE INDEX tool_calls_run ON tool_calls (thread_id, run_id, ordinal);
