-- toolgate storage, SQLite flavour: the calls assistant messages declare.
-- Keep in step with migrations/postgres/0008_declared_calls.sql.
--
-- An assistant message's tool_calls declare call ids, each with a tool and
-- arguments. A call id means one call in a thread: a later message, or a
-- call posted to /tool-calls, that gives it another tool or other
-- arguments is refused. The writer checks that in the transaction that
-- writes the message or the call, against this table (and tool_calls), so
-- two requests at the same moment cannot both pass the check. tool_name is
-- the tool's own name when the message named it by an alias; args is the
-- arguments' JSON text as the message declared them. The first declaration
-- of an id is kept.
CREATE TABLE declared_calls (
    thread_id  TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    call_id    TEXT NOT NULL,
    tool_name  TEXT NOT NULL,
    args       TEXT NOT NULL CHECK (json_valid(args)),
    message_id TEXT NOT NULL,
    PRIMARY KEY (thread_id, call_id)
) WITHOUT ROWID;

-- The declarations recorded so far, first declaration first. (Names stay as
-- the messages wrote them: these were written before aliases were resolved
-- here.)
INSERT OR IGNORE INTO declared_calls (thread_id, call_id, tool_name, args, message_id)
SELECT m.thread_id, c.value ->> '$.id', c.value ->> '$.name', c.value -> '$.arguments', m.id
FROM messages AS m, json_each(m.metadata, '$.tool_calls') AS c
WHERE m.role = 'assistant'
  AND json_type(c.value, '$.id') = 'text'
  AND json_type(c.value, '$.name') = 'text'
  AND json_type(c.value, '$.arguments') IS NOT NULL
  AND json_type(m.metadata, '$.tool_calls') = 'array'
ORDER BY m.thread_id, m.seq, c.key;
