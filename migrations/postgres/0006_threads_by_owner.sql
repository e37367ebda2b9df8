-- toolgate storage, Postgres flavour: an owner's threads, newest first.
-- Keep in step with migrations/sqlite/0007_threads_by_owner.sql.
--
-- GET /v1/threads lists the token owner's threads by creation, newest
-- first, a page at a time. Without this index each page scanned the whole
-- table; with it, a page walks the owner's newest entries and stops at its
-- limit. A thread's owner and creation time never change, so the writer's
-- per-batch update of a thread's counters can stay a HOT update.
CREATE INDEX threads_owner_created ON threads (owner, created_at_ms DESC, id DESC);
