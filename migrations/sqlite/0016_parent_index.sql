-- toolgate storage, SQLite flavour: the calls posted under each parent.
-- Keep in step with migrations/postgres/0015_parent_index.sql.
--
-- A message other than an assistant's may not take an id a call names as
-- its parent_message_id (a stock AG-UI client would show its text as the
-- assistant's): the writer looks the id up when it records such a message.
-- Most calls name no parent, and the index holds none of those.
CREATE INDEX tool_calls_by_parent ON tool_calls (thread_id, parent_message_id)
    WHERE parent_message_id IS NOT NULL;
