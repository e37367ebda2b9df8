-- toolgate storage, SQLite flavour: messages may have the role `developer`.
-- Keep in step with migrations/postgres/0009_developer_role.sql.
--
-- AG-UI and OpenAI give the application's developer a role of its own
-- beside `system`; a thread now keeps it as sent instead of storing such a
-- message as `system`. SQLite cannot change a CHECK in place, so the table
-- is rebuilt with its data (nothing references it and it has no secondary
-- index). Messages recorded before this migration keep the role they were
-- stored with.

CREATE TABLE messages_v10 (
    thread_id     TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq           INTEGER NOT NULL,
    id            TEXT    NOT NULL,
    role          TEXT    NOT NULL
        CHECK (role = 'user' OR role = 'assistant' OR role = 'system' OR role = 'tool'
               OR role = 'developer'),
    content       TEXT    NOT NULL,
    metadata      TEXT    NOT NULL CHECK (json_valid(metadata)),
    tool_call_id  TEXT,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (thread_id, seq),
    UNIQUE (thread_id, id)
);
INSERT INTO messages_v10 (thread_id, seq, id, role, content, metadata, tool_call_id, created_at_ms)
SELECT thread_id, seq, id, role, content, metadata, tool_call_id, created_at_ms
FROM messages;
DROP TABLE messages;
ALTER TABLE messages_v10 RENAME TO messages;
