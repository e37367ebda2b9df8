-- toolgate storage, SQLite flavour: when each process was last seen.
-- Keep in step with migrations/postgres/0016_instances.sql.
--
-- Every process on a shared database says it is alive every ten seconds.
-- A call left `running` by a process silent for a minute (killed, its
-- machine gone) is finished as INTERRUPTED by another, not only once no
-- process could still be running it by its age. A process from before
-- this table has no row: its calls are judged by their age, as before.
-- (One process serves a SQLite file: the table stays empty there.)
CREATE TABLE instances (
    id          TEXT    PRIMARY KEY,
    seen_at_ms  INTEGER NOT NULL
) WITHOUT ROWID;
