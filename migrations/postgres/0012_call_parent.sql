-- toolgate storage, Postgres flavour: the message a call was posted under.
-- Keep in step with migrations/sqlite/0013_call_parent.sql.
--
-- A call's TOOL_CALL_START names its parent message (`parentMessageId`):
-- the assistant message that declares it, or the `parent_message_id` it
-- was posted with. Kept with the call, so that what shows the call again
-- (a run retried, a stream joining while it runs, GET of the call) names
-- the parent its announcement named. NULL: none, or recorded before this
-- column existed.
ALTER TABLE tool_calls ADD COLUMN parent_message_id TEXT;
