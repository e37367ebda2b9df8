-- toolgate storage, Postgres flavour: threads being deleted.
-- Keep in step with migrations/sqlite/0019_closing_threads.sql.
--
-- `DELETE /v1/threads/{id}?cancel=true` first closes the thread: from then
-- on it takes no new calls or turns (they are refused with `409`
-- `THREAD_CLOSING`), while the calls it already holds are cancelled or
-- finish, so a stream of new calls cannot keep it from being deleted.
-- The row keeps when it was closed; the deletion follows.
ALTER TABLE threads ADD COLUMN closing_at_ms BIGINT;
