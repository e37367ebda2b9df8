-- toolgate storage, Postgres flavour: where a call was announced among the
-- thread's messages. Keep in step with migrations/sqlite/0014_call_position.sql.
--
-- after_message_seq is the thread's last message seq when the call's record
-- committed, which is when its TOOL_CALL_START was logged: a client that
-- watched live made the call's message (when it made one) after that
-- message. A snapshot puts the call there too. NULL: recorded before this
-- column existed (a snapshot then shows the call just before its result).
ALTER TABLE tool_calls ADD COLUMN after_message_seq BIGINT;
