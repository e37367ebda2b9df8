-- toolgate storage, Postgres flavour: where and how a call ran.
-- Keep in step with migrations/sqlite/0006_call_scope.sql.
--
-- A tool call id answers with its recorded outcome only when it is posted
-- again as the same call: same tool, same arguments, and now also the same
-- sub-workspace (NULL: the owner's main workspace) and the same dry-run
-- flag (0 or 1). A dry run followed by the real call under the same id was
-- answered with the preview, and nothing ran. NULL in dry_run marks calls
-- recorded before these columns existed: they are compared as before.
ALTER TABLE tool_calls ADD COLUMN workspace TEXT;
ALTER TABLE tool_calls ADD COLUMN dry_run BIGINT;
