-- toolgate storage, SQLite flavour: deleted threads.
-- Keep in step with migrations/postgres/0017_deleted_threads.sql.
--
-- `DELETE /v1/threads/{id}` removes a thread's messages, events, calls,
-- approvals, declarations and closed runs, and keeps its row, stamped
-- with when it was deleted: the id stays its owner's and is never used
-- again, so a call posted again under it (a retry of an old one) is
-- refused rather than run a second time. The audit log keeps its entries
-- (they hold no arguments, outputs or messages).
ALTER TABLE threads ADD COLUMN deleted_at_ms INTEGER;
