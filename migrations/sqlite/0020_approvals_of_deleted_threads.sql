-- toolgate storage, SQLite flavour: the audit entries of each approval.
-- Keep in step with migrations/postgres/0019_approvals_of_deleted_threads.sql.
--
-- A thread's deletion removes its approvals, while the audit log keeps
-- their entries: an approval looked up after its thread was deleted is
-- found there, so it answers `410` `THREAD_DELETED` like the thread does
-- rather than `404`. Most entries name no approval, and the index holds
-- none of those.
CREATE INDEX audit_log_approval ON audit_log (approval_id)
    WHERE approval_id IS NOT NULL;
