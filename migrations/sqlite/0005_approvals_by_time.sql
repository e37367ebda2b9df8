-- toolgate storage, SQLite flavour: every owner's approvals in time order.
-- Keep in step with migrations/postgres/0004_approvals_by_time.sql.
--
-- An approver (scope toolgate:approve) lists the approvals of every owner,
-- newest first. The owner indexes cannot serve that order, so without this
-- index each page scanned and sorted the whole table; with it, a page walks
-- the newest entries and stops at its limit.
CREATE INDEX approvals_created ON approvals (created_at_ms DESC, id DESC);
