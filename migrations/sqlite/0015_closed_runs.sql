-- toolgate storage, SQLite flavour: runs that were rolled back.
-- Keep in step with migrations/postgres/0014_closed_runs.sql.
--
-- A run rolled back takes no more calls: a call posted later under its
-- run_id would run after the rollback and stay, undone by nothing. The
-- rollback closes its run before it reads the run's calls; the writer
-- refuses a call of a closed run in the transaction that would record it,
-- so a call either committed before the close (and the rollback sees it)
-- or is refused.
CREATE TABLE closed_runs (
    thread_id    TEXT    NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    run_id       TEXT    NOT NULL,
    closed_at_ms INTEGER NOT NULL,
    PRIMARY KEY (thread_id, run_id)
) WITHOUT ROWID;

-- The runs rolled back so far, as the audit log records them.
INSERT OR IGNORE INTO closed_runs (thread_id, run_id, closed_at_ms)
SELECT a.thread_id, a.detail ->> '$.run_id', MIN(a.at_ms)
FROM audit_log AS a
WHERE a.action = 'run.rolled_back'
  AND json_type(a.detail, '$.run_id') = 'text'
  AND EXISTS (SELECT 1 FROM threads AS t WHERE t.id = a.thread_id)
GROUP BY a.thread_id, a.detail ->> '$.run_id';
