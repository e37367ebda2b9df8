-- toolgate storage, Postgres flavour: a call's approval, found by the call.
-- Keep in step with migrations/sqlite/0008_approvals_by_call.sql.
--
-- A call waiting for approval is resumed, withdrawn or run after its
-- decision by its thread and call id. Without this index the engine read
-- through the owner's pending approvals to find the one of the call.
CREATE INDEX approvals_call ON approvals (thread_id, tool_call_id);
