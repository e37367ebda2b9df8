-- toolgate storage, SQLite flavour: which process runs a call.
-- Keep in step with migrations/postgres/0011_call_instance.sql.
--
-- A starting process finishes the calls it left `running` as INTERRUPTED.
-- Several processes may share one database (Postgres), each with its own
-- data directory and so its own instance id (data_dir/instance.id): a call
-- records the instance that runs it, and a process finishes only its own
-- calls, never a live one's. NULL marks calls recorded before this column
-- existed: any process finishes those, as before.
ALTER TABLE tool_calls ADD COLUMN instance TEXT;
