-- toolgate storage, Postgres flavour: the calls assistant messages declare.
-- Keep in step with migrations/sqlite/0009_declared_calls.sql.
--
-- An assistant message's tool_calls declare call ids, each with a tool and
-- arguments. A call id means one call in a thread: a later message, or a
-- call posted to /tool-calls, that gives it another tool or other
-- arguments is refused. The writer checks that in the transaction that
-- writes the message or the call, against this table (and tool_calls), so
-- two requests at the same moment cannot both pass the check. tool_name is
-- the tool's own name when the message named it by an alias; args are the
-- arguments as the message declared them. The first declaration of an id
-- is kept.
CREATE TABLE declared_calls (
    thread_id  TEXT  NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    call_id    TEXT  NOT NULL,
    tool_name  TEXT  NOT NULL,
    args       JSONB NOT NULL,
    message_id TEXT  NOT NULL,
    PRIMARY KEY (thread_id, call_id)
);

-- The declarations recorded so far, first declaration first. (Names stay as
-- the messages wrote them: these were written before aliases were resolved
-- here.)
INSERT INTO declared_calls (thread_id, call_id, tool_name, args, message_id)
SELECT m.thread_id, c.value ->> 'id', c.value ->> 'name', c.value -> 'arguments', m.id
FROM messages AS m
CROSS JOIN LATERAL jsonb_array_elements(
    CASE WHEN jsonb_typeof(m.metadata -> 'tool_calls') = 'array'
         THEN m.metadata -> 'tool_calls' ELSE '[]'::JSONB END
) WITH ORDINALITY AS c (value, ord)
WHERE m.role = 'assistant'
  AND jsonb_typeof(c.value -> 'id') = 'string'
  AND jsonb_typeof(c.value -> 'name') = 'string'
  AND c.value ? 'arguments'
ORDER BY m.thread_id, m.seq, c.ord
ON CONFLICT (thread_id, call_id) DO NOTHING;
