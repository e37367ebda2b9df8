//! The SQLite store's writes: [`Store::apply_batch`](super::Store::apply_batch)
//! and audit appends, on one connection of their own that runs statements
//! synchronously on the calling thread (rusqlite, over the same SQLite library
//! sqlx links).
//!
//! The group-commit writer calls this on its own thread, so a batch is a
//! straight run of SQLite calls: no hand-off to a driver thread and back per
//! statement, which under load cost more than the statements themselves.
//! The connection stays open, so its page cache stays warm between batches
//! (a pooled connection would find its cache invalidated by the other
//! connections' writes). Statements are prepared once and cached.
//!
//! A transaction takes the write lock when it begins (`BEGIN IMMEDIATE`), so
//! it never fails half-way on a lock another connection took first; it waits
//! up to [`BUSY_TIMEOUT`](super::sqlite::BUSY_TIMEOUT) instead.

use std::path::Path;
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};
use serde_json::Value;

use super::batch::{Place, Plan, Reserved};
use super::checks::{self, Decision, Reservation};
use super::{
    ApprovalRecord, DeletedContent, FinishedToolCall, JsonText, NewAuditEntry, NewEvent,
    NewMessage, NewToolCall, Role, StoreError, StoreResult, UnitReceipt, WriteOp, WriteUnit,
};

/// Page cache of the connection: 16 MiB (negative: KiB).
///
/// Not more: SQLite walks the whole page cache at nearly every commit (a
/// b-tree rebalance parks a page under a page number past the end of the
/// file, and the commit then drops every cached page past the end by
/// visiting each one), so a commit's cost grows with the cache. In the echo
/// benchmark, with 6,000-8,000 pages cached, that walk was 6-9 % of the
/// writer's time; a 64 MiB cache lets it grow to 16,384 pages.
const CACHE_SIZE_KIB: i64 = -16384;

/// Pages the cache may hold, dirty ones included, before a transaction
/// writes some to the WAL ahead of its commit: 16,384 (64 MiB at 4 KiB), so
/// a batch of large results is still written once, at commit.
const CACHE_SPILL_PAGES: i64 = 16_384;

/// WAL pages after which a commit of the write connection itself copies
/// the WAL back into the database (SQLite's default is 1000): the safety
/// net for when the [checkpointer](Checkpointer) cannot keep up (about
/// 200 MB of WAL). Set lower, large results (a batch of megabyte files)
/// would cross it at nearly every commit and the writer would copy the WAL
/// itself while every caller of the batch waits.
const AUTOCHECKPOINT_PAGES: i64 = 50_000;

/// Bytes of WAL file kept for good: past them the [checkpointer]
/// (Checkpointer) gives the space back once writes pause. Without that the
/// file would keep its largest size (a burst of large results left a
/// gigabyte) until toolgate stops.
///
/// The write connection itself never shrinks the file (its
/// `journal_size_limit` stays -1). SQLite's own limit would have it cut the
/// file at the first commit after every restart of the WAL, inside a batch
/// every caller waits for: under a saturating load of echo calls the WAL
/// passed 64 MiB about once a second, and each cut (an `ftruncate` freeing
/// tens of megabytes) held the batch up 28 ms, which made the p99 of the
/// whole load (35-39 ms against 20 ms without the cuts, BENCHMARKS.md).
const WAL_SIZE_LIMIT: u64 = 64 * 1024 * 1024;

/// How often the checkpointer copies the WAL back into the database unless
/// told otherwise (`storage.sqlite_checkpoint_ms`). Under a saturating load
/// of echo calls, 20 ms rather than 100 ms cut p99 from 21–23 ms to
/// 17–19 ms for 1–20 % fewer calls per second, 6 % on average over four
/// paired rounds (BENCHMARKS.md).
pub const DEFAULT_CHECKPOINT_EVERY: Duration = Duration::from_millis(20);

/// The checkpointer's nice value (raising it needs no privilege). When the
/// cores are saturated it yields to the writer and the request path and
/// copies the WAL back in fewer, larger passes, each page once for several
/// commits: 3–15 % more echo calls per second (7 % on average) in five
/// paired rounds, p99 unchanged (BENCHMARKS.md). The writer's own
/// autocheckpoint still bounds the WAL should it fall behind.
const CHECKPOINTER_NICE: i32 = 10;

/// Prepared statements kept per connection (the batch paths use fewer).
const STATEMENT_CACHE: usize = 32;

/// Create the unit's thread (for its owner) or bump its counters, reserving
/// the seqs of its events and messages and the ordinals of its calls;
/// [`READ_SEQS`] then reads the owner and the new last values. Two
/// statements rather than one with `RETURNING`: SQLite gathers `RETURNING`
/// rows in a temporary b-tree that it creates and tears down at every
/// execution, which cost the writer more than the second lookup of a page it
/// has just written.
const RESERVE_SEQS: &str = "\
INSERT INTO threads (id, owner, created_at_ms, last_event_seq, last_message_seq, \
    last_call_ordinal) \
VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
ON CONFLICT (id) DO UPDATE SET \
    last_event_seq = threads.last_event_seq + excluded.last_event_seq, \
    last_message_seq = threads.last_message_seq + excluded.last_message_seq, \
    last_call_ordinal = threads.last_call_ordinal + excluded.last_call_ordinal";

const READ_SEQS: &str = "\
SELECT owner, last_event_seq, last_message_seq, last_call_ordinal, deleted_at_ms, closing_at_ms \
FROM threads WHERE id = ?1";

const INSERT_CALL: &str = "\
INSERT INTO tool_calls (thread_id, id, owner, run_id, tool_name, args, status, created_at_ms, \
    undo_of, ordinal, undo, message_id, finished_at_ms, workspace, dry_run, instance, \
    parent_message_id, after_message_seq) \
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18) \
ON CONFLICT (thread_id, id) DO NOTHING";

const FINISH_CALL: &str = "\
UPDATE tool_calls SET status = ?3, undo = ?4, message_id = ?5, finished_at_ms = ?6 \
WHERE thread_id = ?1 AND id = ?2 AND status IN ('running', 'pending_approval')";

const INSERT_MESSAGE: &str = "\
INSERT INTO messages (thread_id, seq, id, role, content, metadata, tool_call_id, created_at_ms) \
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
ON CONFLICT (thread_id, id) DO NOTHING";

const DECLARED_CALL: &str = "\
SELECT tool_name, args, message_id FROM declared_calls WHERE thread_id = ?1 AND call_id = ?2";

const RECORDED_CALL: &str = "\
SELECT tool_name, args, parent_message_id FROM tool_calls WHERE thread_id = ?1 AND id = ?2";

const CALL_UNDER_PARENT: &str = "\
SELECT id FROM tool_calls WHERE thread_id = ?1 AND parent_message_id = ?2 LIMIT 1";

const MESSAGE_ROLE: &str = "SELECT role FROM messages WHERE thread_id = ?1 AND id = ?2";

const INSERT_DECLARED_CALL: &str = "\
INSERT INTO declared_calls (thread_id, call_id, tool_name, args, message_id) \
VALUES (?1, ?2, ?3, ?4, ?5) \
ON CONFLICT (thread_id, call_id) DO NOTHING";

const RUN_CLOSED: &str = "SELECT 1 FROM closed_runs WHERE thread_id = ?1 AND run_id = ?2";

const CLOSE_RUN: &str = "\
INSERT INTO closed_runs (thread_id, run_id, closed_at_ms) VALUES (?1, ?2, ?3) \
ON CONFLICT (thread_id, run_id) DO NOTHING";

const CLOSE_THREAD: &str = "\
UPDATE threads SET closing_at_ms = COALESCE(closing_at_ms, ?2) WHERE id = ?1";

const INSERT_EVENT: &str = "\
INSERT INTO events (thread_id, seq, event_type, data, created_at_ms, message_id) \
VALUES (?1, ?2, ?3, ?4, ?5, ?6)";

const INSERT_AUDIT: &str = "\
INSERT INTO audit_log (at_ms, owner, thread_id, tool_call_id, tool_name, action, operation, \
    verdict, rule, approval_id, outcome, duration_ms, detail) \
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)";

/// The store's write connection.
pub(crate) struct WriteConnection {
    conn: Mutex<Connection>,
    /// The database file and its identity when opened (none in memory): a
    /// batch is not committed into a file that was removed or replaced
    /// under the service, where nothing would find it again.
    file: Option<(std::path::PathBuf, (u64, u64))>,
    /// Stops the checkpointer when the connection goes (file databases).
    _checkpointer: Option<Checkpointer>,
}

/// A thread with a connection of its own that copies the WAL back into the
/// database at a fixed interval (a passive checkpoint: it waits for
/// no reader or writer). A checkpoint then no longer runs inside a batch's
/// commit, where it held up every caller of the batch (a 10,000-page copy
/// every few hundred commits was the latency tail of the write path), and
/// runs on a core the writer is not using.
struct Checkpointer {
    /// Dropping it ends the thread.
    _stop: mpsc::Sender<()>,
}

impl Checkpointer {
    fn start(path: &Path, flags: OpenFlags, every: Duration) -> StoreResult<Checkpointer> {
        // A zero interval would copy without pause.
        let every = every.max(Duration::from_millis(1));
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(super::sqlite::BUSY_TIMEOUT)?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        let wal = wal_path(path);
        let (stop, stopped) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("toolgate-checkpoint".into())
            .spawn(move || {
                super::writer::set_thread_nice(CHECKPOINTER_NICE, "checkpointer");
                let mut last = None;
                let mut failures = Failures::default();
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                    last = checkpoint(&conn, &wal, last, &mut failures);
                }
            })
            .map_err(|e| StoreError::Corrupt(format!("starting the checkpointer: {e}")))?;
        Ok(Checkpointer { _stop: stop })
    }
}

/// The WAL file of the database file at `path` (SQLite's name for it).
fn wal_path(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    name.into()
}

/// What one checkpoint found: the frames in the WAL and how many of them
/// are in the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct WalState {
    frames: i64,
    copied: i64,
}

/// One passive checkpoint; reports the WAL's size as a gauge. When the WAL
/// file is larger than [`WAL_SIZE_LIMIT`] and nothing was written since
/// the `previous` checkpoint, which copied everything back, the file is
/// truncated (see [`shrink_wal`]). Returns what this checkpoint found.
fn checkpoint(
    conn: &Connection,
    wal: &Path,
    previous: Option<WalState>,
    failures: &mut Failures,
) -> Option<WalState> {
    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok(WalState {
            frames: row.get(1)?,
            copied: row.get(2)?,
        })
    });
    match done {
        Ok(state) => {
            failures.recovered();
            metrics::gauge!("toolgate_sqlite_wal_pages").set(state.frames as f64);
            tracing::trace!(frames = state.frames, copied = state.copied, "checkpoint");
            let quiet = previous == Some(state) && state.copied == state.frames;
            if quiet && std::fs::metadata(wal).is_ok_and(|m| m.len() > WAL_SIZE_LIMIT) {
                shrink_wal(conn);
                return None;
            }
            Some(state)
        }
        Err(err) => {
            let _ = failures.failed(&err);
            None
        }
    }
}

/// How often the log hears again of checkpoints that keep failing.
const FAILURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// Checkpoints failing in a row (a full disk, a read-only file): the log
/// hears of the first, then once a minute with the count, and of the
/// recovery, rather than of every try (one every few milliseconds).
#[derive(Default)]
struct Failures {
    count: u64,
    logged: Option<std::time::Instant>,
}

impl Failures {
    /// Counts a failure; returns whether the log heard of it.
    fn failed(&mut self, err: &rusqlite::Error) -> bool {
        self.count += 1;
        let log = self
            .logged
            .is_none_or(|at| at.elapsed() >= FAILURE_LOG_EVERY);
        if log {
            tracing::warn!(error = %err, failures = self.count, "checkpoint failed");
            self.logged = Some(std::time::Instant::now());
        }
        log
    }

    fn recovered(&mut self) {
        if self.count > 0 {
            tracing::info!(failures = self.count, "checkpoints succeed again");
            *self = Failures::default();
        }
    }
}

/// Give the WAL file's space back: a `TRUNCATE` checkpoint, which takes the
/// write lock and needs every reader on the newest snapshot. It is tried
/// without waiting (a busy database is left for the next pause), so a
/// long read cannot make writers wait behind it.
fn shrink_wal(conn: &Connection) {
    if let Err(err) = conn.busy_timeout(Duration::ZERO) {
        tracing::warn!(error = %err, "checkpoint: setting the busy timeout failed");
        return;
    }
    let done = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
        row.get::<_, i64>(0)
    });
    match done {
        Ok(0) => tracing::debug!("checkpoint: the WAL file was truncated"),
        Ok(_) => tracing::debug!("checkpoint: the WAL is in use; truncating it later"),
        Err(err) => tracing::warn!(error = %err, "checkpoint: truncating the WAL failed"),
    }
    if let Err(err) = conn.busy_timeout(super::sqlite::BUSY_TIMEOUT) {
        tracing::warn!(error = %err, "checkpoint: restoring the busy timeout failed");
    }
}

impl WriteConnection {
    /// Open the (already migrated) database at `path`, the file name the
    /// pool opened; with `in_memory`, that of a shared-cache in-memory
    /// database the pool keeps alive. A file database's WAL is copied back
    /// into it every `checkpoint_every`.
    pub fn open(
        path: &Path,
        in_memory: bool,
        checkpoint_every: Duration,
    ) -> StoreResult<WriteConnection> {
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if in_memory {
            flags |= OpenFlags::SQLITE_OPEN_MEMORY | OpenFlags::SQLITE_OPEN_SHARED_CACHE;
        }
        let conn = if in_memory {
            Connection::open_with_flags(path, flags)?
        } else {
            // A commit's WAL frames in one write (see `wal_vfs`).
            super::wal_vfs::register()?;
            Connection::open_with_flags_and_vfs(path, flags, super::wal_vfs::NAME)?
        };
        conn.busy_timeout(super::sqlite::BUSY_TIMEOUT)?;
        conn.pragma_update(None, "foreign_keys", true)?;
        // The schema's CHECKs (JSON columns `json_valid()`, roles and
        // statuses from their lists) hold by construction on this
        // connection: every JSON column is bound from a `JsonText`, made
        // only by serializing a value (and checked again when read back
        // from the spool), and roles and statuses from their enums. So the
        // writer, the one thread every write waits for, does not parse each
        // document a second time (about 11 % of its instructions per echo
        // call, BENCHMARKS.md). Every other connection still enforces them.
        conn.pragma_update(None, "ignore_check_constraints", true)?;
        conn.pragma_update(None, "temp_store", "memory")?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let checkpointer = if in_memory {
            None // no WAL
        } else {
            // WAL mode is a property of the file (set when the pool opened
            // it); synchronous, cache and checkpoints are per connection.
            // FULL syncs the WAL at every commit, which `wal_vfs` needs.
            conn.pragma_update(None, "synchronous", "FULL")?;
            conn.pragma_update(None, "cache_size", CACHE_SIZE_KIB)?;
            // The threshold, then spilling back on: SQLite also reads the
            // number as a yes/no, from its low byte (16384 would say "no"),
            // and a number (1 for `true`) as a new threshold.
            conn.pragma_update(None, "cache_spill", CACHE_SPILL_PAGES)?;
            conn.pragma_update(None, "cache_spill", "ON")?;
            conn.pragma_update(None, "wal_autocheckpoint", AUTOCHECKPOINT_PAGES)?;
            // The checkpointer, not a commit, shrinks the file.
            conn.pragma_update(None, "journal_size_limit", -1)?;
            Some(Checkpointer::start(path, flags, checkpoint_every)?)
        };
        let file = if in_memory {
            None
        } else {
            super::sqlite::identity(path)
                .ok()
                .map(|id| (path.to_owned(), id))
        };
        Ok(WriteConnection {
            conn: Mutex::new(conn),
            file,
            _checkpointer: checkpointer,
        })
    }

    /// The database file is still the one this connection writes: one
    /// removed or replaced under the service (a restore copied over it, a
    /// data directory deleted) is an outage, not a place to commit to.
    fn check_file(&self) -> StoreResult<()> {
        let Some((path, opened)) = &self.file else {
            return Ok(());
        };
        if super::sqlite::identity(path).ok().as_ref() == Some(opened) {
            return Ok(());
        }
        Err(super::sqlite::file_gone(path))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock left no transaction open (a dropped
        // rusqlite transaction rolls back), so the connection is usable.
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// [`Store::apply_batch`](super::Store::apply_batch), on the calling thread.
    pub fn apply_batch(&self, units: &[WriteUnit]) -> StoreResult<Vec<StoreResult<UnitReceipt>>> {
        if units.is_empty() {
            return Ok(Vec::new());
        }
        self.check_file()?;
        let mut conn = self.lock();
        if let Some(plan) = Plan::new(units, super::batch::apply_order(units)) {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            // A unit that would fail (or a failed statement) rolls the fast
            // attempt back (dropping `tx`); the per-unit path then decides
            // each unit's outcome.
            if let Ok(Some(receipts)) = apply_plan(&tx, &plan) {
                tx.commit()?;
                return Ok(receipts.into_iter().map(Ok).collect());
            }
        }
        apply_unit_by_unit(&mut conn, units)
    }

    /// Append one audit entry outside any unit; returns its id.
    pub fn append_audit(&self, entry: &NewAuditEntry) -> StoreResult<i64> {
        insert_audit(&self.lock(), entry)
    }

    /// [`super::Store::purge_deleted`]: one chunk, in a transaction of its
    /// own, so the writer's batches go on between chunks.
    pub fn purge_deleted(&self, thread_id: &str, limit: i64) -> StoreResult<bool> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let deleted: Option<i64> = tx
            .query_row(
                "SELECT deleted_at_ms FROM threads WHERE id = ?1",
                [thread_id],
                |row| row.get(0),
            )
            .optional()?
            .flatten();
        if deleted.is_none() {
            return Ok(false);
        }
        let mut more = false;
        for (table, key) in checks::PURGED_TABLES {
            let removed = tx.execute(&checks::purge_rows(table, key), params![thread_id, limit])?;
            more |= removed as i64 >= limit;
        }
        tx.commit()?;
        Ok(more)
    }
}

/// The per-unit path: each unit under its own savepoint.
fn apply_unit_by_unit(
    conn: &mut Connection,
    units: &[WriteUnit],
) -> StoreResult<Vec<StoreResult<UnitReceipt>>> {
    let mut results: Vec<Option<StoreResult<UnitReceipt>>> =
        (0..units.len()).map(|_| None).collect();
    let mut tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    for index in super::batch::apply_order(units) {
        let savepoint = tx.savepoint()?;
        match apply_unit(&savepoint, &units[index]) {
            Ok(receipt) => {
                savepoint.commit()?;
                results[index] = Some(Ok(receipt));
            }
            // The unit alone is rolled back; if even that fails (SQLite
            // gave up the whole transaction), so does the batch.
            Err(err) if err.is_unit_local() => {
                savepoint.finish()?;
                results[index] = Some(Err(err));
            }
            // Dropping the transaction rolls everything back.
            Err(err) => return Err(err),
        }
    }
    tx.commit()?;
    Ok(results.into_iter().flatten().collect())
}

/// A failed statement inside a unit: unique violations are conflicts.
fn unit_error(err: rusqlite::Error, what: impl FnOnce() -> String) -> StoreError {
    match err.sqlite_error().map(|e| e.extended_code) {
        Some(
            rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE | rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY,
        ) => StoreError::Conflict(format!("{}: {err}", what())),
        _ => err.into(),
    }
}

/// Create the thread or bump its counters by `r`; returns the owner, the
/// new last values and since when the thread is closing
/// ([`WriteOp::CloseThread`]). A deleted thread of `owner`'s fails with
/// [`StoreError::ThreadDeleted`].
fn reserve(
    conn: &Connection,
    thread_id: &str,
    owner: &str,
    r: &Reservation,
) -> StoreResult<(String, Reserved, Option<i64>)> {
    conn.prepare_cached(RESERVE_SEQS)?.execute(params![
        thread_id,
        owner,
        r.created_at_ms,
        r.events,
        r.messages,
        r.calls
    ])?;
    let mut statement = conn.prepare_cached(READ_SEQS)?;
    let (row, deleted) = statement.query_row([thread_id], |row| {
        Ok((
            (
                row.get::<_, String>(0)?,
                Reserved {
                    last_event_seq: row.get(1)?,
                    last_message_seq: row.get(2)?,
                    last_call_ordinal: row.get(3)?,
                },
                row.get::<_, Option<i64>>(5)?,
            ),
            row.get::<_, Option<i64>>(4)?,
        ))
    })?;
    match deleted {
        // Another owner's thread stays another owner's, deleted or not.
        Some(at_ms) if row.0 == owner => Err(StoreError::ThreadDeleted {
            thread: thread_id.to_string(),
            at_ms,
        }),
        _ => Ok(row),
    }
}

/// Apply one unit (already inside the unit's savepoint).
fn apply_unit(conn: &Connection, unit: &WriteUnit) -> StoreResult<UnitReceipt> {
    let reservation = Reservation::of(unit);
    let (owner, last, closing) = reserve(conn, &unit.thread_id, &unit.owner, &reservation)?;
    if owner != unit.owner {
        return Err(StoreError::NotOwner);
    }
    let mut next_event_seq = last.last_event_seq - reservation.events + 1;
    let mut next_message_seq = last.last_message_seq - reservation.messages + 1;
    let mut next_ordinal = last.last_call_ordinal - reservation.calls + 1;

    let mut receipt = UnitReceipt::default();
    for op in &unit.ops {
        match op {
            WriteOp::InsertToolCall(call) => {
                checks::insertable_call_status(&call.id, call.status)?;
                check_declared(conn, &unit.thread_id, call)?;
                check_parent_role(conn, &unit.thread_id, call)?;
                let place = Place {
                    ordinal: next_ordinal,
                    after_message_seq: next_message_seq - 1,
                };
                if !insert_call(conn, (&unit.thread_id, &unit.owner), call, place, None)? {
                    return Err(StoreError::Conflict(format!(
                        "tool call {:?} is already recorded in thread {:?}",
                        call.id, unit.thread_id
                    )));
                }
                // A new call of a closed run: the unit is rolled back. (An
                // id already recorded is the conflict above, answered from
                // its record.)
                if run_closed(conn, &unit.thread_id, &call.run_id)? {
                    return Err(StoreError::RunClosed {
                        run_id: call.run_id.clone(),
                    });
                }
                next_ordinal += 1;
            }
            WriteOp::FinishToolCall(finished) => {
                checks::finishable(unit, finished)?;
                if !finish_call(conn, &unit.thread_id, finished)? {
                    let current = call_status(conn, unit, &finished.id)?;
                    return Err(checks::call_not_changed(
                        unit,
                        &finished.id,
                        current,
                        "running or pending approval",
                    ));
                }
            }
            WriteOp::StartPendingCall { id, instance } => {
                start_pending_call(conn, unit, id, instance.as_deref())?
            }
            WriteOp::MarkUndone { id, undone_by } => mark_undone(conn, unit, id, undone_by)?,
            WriteOp::MarkUndoneIfOpen { id, undone_by } => {
                set_undone(conn, unit, id, undone_by)?;
            }
            WriteOp::InsertMessage(message) => {
                check_parent_id_free(conn, &unit.thread_id, message)?;
                if !insert_message(conn, &unit.thread_id, message, next_message_seq)? {
                    return Err(StoreError::Conflict(format!(
                        "message {:?} already exists in thread {:?}",
                        message.id, unit.thread_id
                    )));
                }
                declare(conn, &unit.thread_id, message)?;
                receipt
                    .messages
                    .push((message.id.clone(), next_message_seq));
                next_message_seq += 1;
            }
            WriteOp::AppendEvents(events) => {
                checks::events_fit_unit(unit, events)?;
                for event in events {
                    insert_event(conn, &unit.thread_id, event, next_event_seq)?;
                    receipt
                        .events
                        .push(event.stored(&unit.thread_id, next_event_seq));
                    next_event_seq += 1;
                }
            }
            WriteOp::InsertApproval(approval) => insert_approval(conn, unit, approval)?,
            WriteOp::DecideApproval { .. } => {
                let decision = Decision::of(op).expect("a DecideApproval op");
                decide_approval(conn, unit, decision)?
            }
            WriteOp::AppendAudit(entry) => {
                checks::audit_fits_unit(unit, entry)?;
                receipt.audit_ids.push(insert_audit(conn, entry)?);
            }
            WriteOp::CloseRun {
                run_id,
                closed_at_ms,
            } => {
                conn.prepare_cached(CLOSE_RUN)?.execute(params![
                    unit.thread_id,
                    run_id,
                    closed_at_ms
                ])?;
            }
            WriteOp::DeleteThread { deleted_at_ms } => {
                checks::deletion_fits_unit(unit)?;
                let content = delete_thread(conn, &unit.thread_id, *deleted_at_ms, &last)?;
                let entry = checks::deletion_audit(unit, *deleted_at_ms, &content);
                receipt.audit_ids.push(insert_audit(conn, &entry)?);
                receipt.deleted = Some(content);
            }
            WriteOp::CloseThread { closing_at_ms } => {
                conn.prepare_cached(CLOSE_THREAD)?
                    .execute(params![unit.thread_id, closing_at_ms])?;
            }
        }
        checks::open_for(unit, op, closing)?;
    }
    Ok(receipt)
}

/// [`WriteOp::DeleteThread`], its unit's reservation having taken the
/// write lock and read the thread's counters (`held`: gap-free, so they
/// count its events, messages and calls).
fn delete_thread(
    conn: &Connection,
    thread_id: &str,
    at_ms: i64,
    held: &Reserved,
) -> StoreResult<DeletedContent> {
    let mut busy = conn.prepare(checks::BUSY_CALLS)?;
    let calls = busy
        .query_map([thread_id], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })?
        .collect::<Result<Vec<_>, _>>()?;
    checks::not_busy(calls)?;
    let removed = |table: &str| -> StoreResult<i64> {
        Ok(conn.execute(
            &format!("DELETE FROM {table} WHERE thread_id = ?1"),
            [thread_id],
        )? as i64)
    };
    let content = DeletedContent {
        messages: held.last_message_seq,
        events: held.last_event_seq,
        tool_calls: held.last_call_ordinal,
        approvals: removed("approvals")?,
    };
    if content.messages + content.events + content.tool_calls <= checks::DELETE_AT_ONCE {
        for (table, _) in checks::PURGED_TABLES {
            removed(table)?;
        }
    }
    for table in checks::OTHER_THREAD_TABLES {
        removed(table)?;
    }
    conn.execute(
        "UPDATE threads SET deleted_at_ms = ?2 WHERE id = ?1",
        params![thread_id, at_ms],
    )?;
    Ok(content)
}

/// Whether the thread's run `run_id` was closed (rolled back).
fn run_closed(conn: &Connection, thread_id: &str, run_id: &str) -> StoreResult<bool> {
    Ok(conn
        .prepare_cached(RUN_CLOSED)?
        .exists(params![thread_id, run_id])?)
}

/// Insert a call (finished already when `finish` is given) at `place`;
/// false when the thread already records a call with its id.
fn insert_call(
    conn: &Connection,
    (thread_id, owner): (&str, &str),
    call: &NewToolCall,
    place: Place,
    finish: Option<&FinishedToolCall>,
) -> StoreResult<bool> {
    let status = finish.map_or(call.status, |f| f.status);
    let changed = conn
        .prepare_cached(INSERT_CALL)?
        .execute(params![
            thread_id,
            call.id,
            owner,
            call.run_id,
            call.tool_name,
            call.args.as_str(),
            status.as_str(),
            call.created_at_ms,
            call.undo_of,
            place.ordinal,
            finish.and_then(|f| f.undo.as_ref().map(JsonText::as_str)),
            finish.map(|f| &f.message_id),
            finish.map(|f| f.finished_at_ms),
            call.workspace,
            i64::from(call.dry_run),
            call.instance,
            call.parent_message_id,
            place.after_message_seq,
        ])
        .map_err(|e| unit_error(e, || format!("tool call {:?}", call.id)))?;
    Ok(changed == 1)
}

/// `Redeclared` when the thread declares `call`'s id with another tool or
/// other arguments; `Conflict` when another message declares it than the
/// caller found ([`NewToolCall::declared_by`]).
fn check_declared(conn: &Connection, thread_id: &str, call: &NewToolCall) -> StoreResult<()> {
    let declared: Option<(String, String, String)> = conn
        .prepare_cached(DECLARED_CALL)?
        .query_row(params![thread_id, call.id], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()?;
    let now = (call.tool_name.as_str(), call.args.as_str());
    match &declared {
        Some((tool, args, _)) if !checks::same_declared_call((tool, args), now) => {
            Err(checks::redeclared(&call.id, checks::GivenIn::Declaration))
        }
        _ => checks::declared_as_expected(
            &call.id,
            declared.as_ref().map(|(_, _, message)| message.as_str()),
            call.declared_by.as_deref(),
        ),
    }
}

/// Keep the calls `message` declares; `Redeclared` when the thread
/// records or declares one of their ids with another tool or other
/// arguments.
fn declare(conn: &Connection, thread_id: &str, message: &NewMessage) -> StoreResult<()> {
    for d in &message.declares {
        let now = (d.tool_name.as_str(), d.args.as_str());
        let recorded: Option<(String, String, Option<String>)> = conn
            .prepare_cached(RECORDED_CALL)?
            .query_row(params![thread_id, d.id], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })
            .optional()?;
        if let Some((tool, args, _)) = &recorded
            && !checks::same_declared_call((tool, args), now)
        {
            return Err(checks::redeclared(&d.id, checks::GivenIn::Record));
        }
        let inserted = conn.prepare_cached(INSERT_DECLARED_CALL)?.execute(params![
            thread_id,
            d.id,
            d.tool_name,
            d.args.as_str(),
            message.id
        ])?;
        // The first declaration of a call posted under a parent is that
        // parent's (a later one by another message is refused below).
        if inserted == 1
            && let Some((_, _, Some(parent))) = &recorded
            && *parent != message.id
        {
            return Err(StoreError::Conflict(checks::posted_under_other_parent(
                &message.id,
                &d.id,
                parent,
            )));
        }
        if inserted == 0
            && let Some((tool, args, by)) = conn
                .prepare_cached(DECLARED_CALL)?
                .query_row(params![thread_id, d.id], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                    ))
                })
                .optional()?
        {
            if !checks::same_declared_call((&tool, &args), now) {
                return Err(checks::redeclared(&d.id, checks::GivenIn::Declaration));
            }
            if by != message.id {
                return Err(StoreError::Conflict(checks::declared_by_other(
                    &message.id,
                    &d.id,
                    &by,
                )));
            }
        }
    }
    Ok(())
}

/// `Conflict` when a user, system or developer message would take the id
/// a call of the thread was posted with as its parent. (A tool message's
/// id is toolgate's own, or checked by the run that brings it.)
fn check_parent_id_free(
    conn: &Connection,
    thread_id: &str,
    message: &NewMessage,
) -> StoreResult<()> {
    if matches!(message.role, Role::Assistant | Role::Tool) {
        return Ok(());
    }
    let call: Option<String> = conn
        .prepare_cached(CALL_UNDER_PARENT)?
        .query_row(params![thread_id, message.id], |row| row.get(0))
        .optional()?;
    match call {
        Some(call) => Err(checks::parent_id_taken(message, &call)),
        None => Ok(()),
    }
}

/// `Conflict` when `call`, posted under a parent no message declaring it
/// names, names a message of the thread that is not an assistant's (one
/// recorded since the request was checked).
fn check_parent_role(conn: &Connection, thread_id: &str, call: &NewToolCall) -> StoreResult<()> {
    let (None, Some(parent)) = (&call.declared_by, &call.parent_message_id) else {
        return Ok(());
    };
    let role: Option<String> = conn
        .prepare_cached(MESSAGE_ROLE)?
        .query_row(params![thread_id, parent], |row| row.get(0))
        .optional()?;
    match role {
        Some(role) if role != Role::Assistant.as_str() => {
            Err(checks::parent_not_assistant(&call.id, parent, &role))
        }
        _ => Ok(()),
    }
}

/// Finish a running or pending call; false when no such call matched.
fn finish_call(conn: &Connection, thread_id: &str, f: &FinishedToolCall) -> StoreResult<bool> {
    let changed = conn.prepare_cached(FINISH_CALL)?.execute(params![
        thread_id,
        f.id,
        f.status.as_str(),
        f.undo.as_ref().map(JsonText::as_str),
        f.message_id,
        f.finished_at_ms,
    ])?;
    Ok(changed == 1)
}

/// The status of call `id` in the unit's thread, `None` if not recorded.
fn call_status(conn: &Connection, unit: &WriteUnit, id: &str) -> StoreResult<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT status FROM tool_calls WHERE thread_id = ?1 AND id = ?2")?
        .query_row(params![unit.thread_id, id], |row| row.get(0))
        .optional()?)
}

fn start_pending_call(
    conn: &Connection,
    unit: &WriteUnit,
    id: &str,
    instance: Option<&str>,
) -> StoreResult<()> {
    let changed = conn
        .prepare_cached(
            "UPDATE tool_calls SET status = 'running', instance = ?3 \
             WHERE thread_id = ?1 AND id = ?2 AND status = 'pending_approval'",
        )?
        .execute(params![unit.thread_id, id, instance])?;
    if changed == 1 {
        return Ok(());
    }
    let current = call_status(conn, unit, id)?;
    Err(checks::call_not_changed(
        unit,
        id,
        current,
        "pending approval",
    ))
}

/// Mark call `id` undone by `undone_by` if it is recorded and not marked
/// yet; whether it was.
fn set_undone(conn: &Connection, unit: &WriteUnit, id: &str, undone_by: &str) -> StoreResult<bool> {
    let changed = conn
        .prepare_cached(
            "UPDATE tool_calls SET undone_by = ?3 \
             WHERE thread_id = ?1 AND id = ?2 AND undone_by IS NULL",
        )?
        .execute(params![unit.thread_id, id, undone_by])?;
    Ok(changed == 1)
}

fn mark_undone(conn: &Connection, unit: &WriteUnit, id: &str, undone_by: &str) -> StoreResult<()> {
    if set_undone(conn, unit, id, undone_by)? {
        return Ok(());
    }
    let current: Option<Option<String>> = conn
        .prepare_cached("SELECT undone_by FROM tool_calls WHERE thread_id = ?1 AND id = ?2")?
        .query_row(params![unit.thread_id, id], |row| row.get(0))
        .optional()?;
    Err(match current {
        None => StoreError::NotFound(format!("tool call {id:?} in thread {:?}", unit.thread_id)),
        Some(by) => StoreError::Conflict(format!(
            "tool call {id:?} is already undone (by {:?})",
            by.unwrap_or_default()
        )),
    })
}

fn insert_approval(
    conn: &Connection,
    unit: &WriteUnit,
    approval: &ApprovalRecord,
) -> StoreResult<()> {
    checks::approval_fits_unit(unit, approval)?;
    let changed = conn
        .prepare_cached(
            "INSERT INTO approvals (id, thread_id, owner, tool_call_id, tool_name, arguments, \
             reason, preview, request, status, decided_by, decision_reason, created_at_ms, \
             expires_at_ms, decided_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15) \
             ON CONFLICT (id) DO NOTHING",
        )?
        .execute(params![
            approval.id,
            approval.thread_id,
            approval.owner,
            approval.tool_call_id,
            approval.tool_name,
            approval.arguments.to_string(),
            approval.reason,
            approval.preview.as_ref().map(Value::to_string),
            approval.request.to_string(),
            approval.status.as_str(),
            approval.decided_by,
            approval.decision_reason,
            approval.created_at_ms,
            approval.expires_at_ms,
            approval.decided_at_ms,
        ])
        .map_err(|e| unit_error(e, || format!("approval {:?}", approval.id)))?;
    if changed == 0 {
        return Err(checks::approval_exists(&approval.id));
    }
    Ok(())
}

fn decide_approval(conn: &Connection, unit: &WriteUnit, decision: Decision<'_>) -> StoreResult<()> {
    checks::decision_status(decision.id, decision.status)?;
    // A human decision must come before the deadline; expiry may come late.
    let changed = conn
        .prepare_cached(
            "UPDATE approvals SET status = ?3, decided_by = ?4, decision_reason = ?5, \
             decided_at_ms = ?6 \
             WHERE id = ?1 AND thread_id = ?2 AND status = 'pending' \
               AND (?3 = 'expired' OR expires_at_ms > ?6)",
        )?
        .execute(params![
            decision.id,
            unit.thread_id,
            decision.status.as_str(),
            decision.decided_by,
            decision.reason,
            decision.decided_at_ms,
        ])?;
    if changed == 1 {
        return Ok(());
    }
    let current = conn
        .prepare_cached(
            "SELECT status, expires_at_ms FROM approvals WHERE id = ?1 AND thread_id = ?2",
        )?
        .query_row(params![decision.id, unit.thread_id], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    Err(checks::approval_not_decided(unit, decision.id, current))
}

/// Append one audit entry; returns its id.
fn insert_audit(conn: &Connection, entry: &NewAuditEntry) -> StoreResult<i64> {
    // The row id from the connection, not `RETURNING` (see RESERVE_SEQS).
    conn.prepare_cached(INSERT_AUDIT)?
        .execute(params![
            entry.at_ms,
            entry.owner,
            entry.thread_id,
            entry.tool_call_id,
            entry.tool_name,
            entry.action,
            entry.operation,
            entry.verdict,
            entry.rule,
            entry.approval_id,
            entry.outcome,
            entry.duration_ms,
            entry.detail.as_str(),
        ])
        .map_err(|e| unit_error(e, || format!("audit entry {:?}", entry.action)))?;
    Ok(conn.last_insert_rowid())
}

/// Insert a message at `seq`; false when the thread already has a message
/// with its id.
fn insert_message(
    conn: &Connection,
    thread_id: &str,
    message: &NewMessage,
    seq: i64,
) -> StoreResult<bool> {
    let changed = conn
        .prepare_cached(INSERT_MESSAGE)?
        .execute(params![
            thread_id,
            seq,
            message.id,
            message.role.as_str(),
            message.content,
            message.metadata.as_str(),
            message.tool_call_id,
            message.created_at_ms,
        ])
        .map_err(|e| unit_error(e, || format!("message {:?}", message.id)))?;
    Ok(changed == 1)
}

fn insert_event(conn: &Connection, thread_id: &str, event: &NewEvent, seq: i64) -> StoreResult<()> {
    conn.prepare_cached(INSERT_EVENT)?
        .execute(params![
            thread_id,
            seq,
            event.event_type,
            event.logged_data(),
            event.created_at_ms,
            event.announces,
        ])
        .map_err(|e| unit_error(e, || format!("event {seq}")))?;
    Ok(())
}

/// The fast path: the batch's rows with no savepoints, threads reserved once
/// each. `None` when some unit would fail: the caller rolls back and goes
/// unit by unit.
fn apply_plan(tx: &Transaction<'_>, plan: &Plan<'_>) -> StoreResult<Option<Vec<UnitReceipt>>> {
    let mut counters = Vec::with_capacity(plan.threads.len());
    for thread in &plan.threads {
        let totals = Reservation {
            events: thread.events,
            messages: thread.messages,
            calls: thread.calls,
            created_at_ms: thread.created_at_ms.unwrap_or_else(crate::protocol::now_ms),
        };
        let (owner, last, closing) = match reserve(tx, thread.id, thread.owner, &totals) {
            Err(StoreError::ThreadDeleted { .. }) => return Ok(None),
            reserved => reserved?,
        };
        if owner != thread.owner || closing.is_some() {
            return Ok(None); // another owner's thread, or one closing
        }
        counters.push(last);
    }
    let rows = plan.rows(&counters);
    // Units that reach the fast path were checked by the plan; a row that
    // does not go in means a unit that must fail.
    for c in &rows.calls {
        if run_closed(tx, c.thread_id, &c.call.run_id)? {
            return Ok(None); // a call of a closed run
        }
        check_declared(tx, c.thread_id, c.call)?;
        check_parent_role(tx, c.thread_id, c.call)?;
        if !insert_call(tx, (c.thread_id, c.owner), c.call, c.place, c.finish)? {
            return Ok(None); // a call already recorded
        }
    }
    for f in &rows.finishes {
        if !finish_call(tx, f.thread_id, f.finished)? {
            return Ok(None); // a call not recorded, or not running
        }
    }
    for m in &rows.messages {
        check_parent_id_free(tx, m.thread_id, m.message)?;
        if !insert_message(tx, m.thread_id, m.message, m.seq)? {
            return Ok(None); // a message id already used
        }
    }
    for e in &rows.events {
        insert_event(tx, e.thread_id, e.event, e.seq)?;
    }
    let mut audit_ids = Vec::with_capacity(rows.audits.len());
    for entry in &rows.audits {
        audit_ids.push(insert_audit(tx, entry)?);
    }
    Ok(Some(rows.into_receipts(&audit_ids)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failing_checkpoints_are_logged_once_a_minute_and_on_recovery() {
        let err = rusqlite::Error::InvalidQuery;
        let mut failures = Failures::default();
        assert!(failures.failed(&err), "the first failure is logged");
        assert!(
            !failures.failed(&err),
            "the next ones, a moment later, are not"
        );
        assert_eq!(failures.count, 2);
        failures.recovered();
        assert_eq!(failures.count, 0);
        assert!(
            failures.failed(&err),
            "a failure after a recovery is logged"
        );
    }

    /// A new WAL-mode database file in `dir` and a write connection to it.
    fn wal_database(dir: &tempfile::TempDir) -> (std::path::PathBuf, WriteConnection) {
        wal_database_checkpointed_every(dir, DEFAULT_CHECKPOINT_EVERY)
    }

    fn wal_database_checkpointed_every(
        dir: &tempfile::TempDir,
        every: Duration,
    ) -> (std::path::PathBuf, WriteConnection) {
        let path = dir.path().join("writes.db");
        Connection::open(&path)
            .unwrap()
            .pragma_update(None, "journal_mode", "WAL")
            .unwrap();
        let writes = WriteConnection::open(&path, false, every).unwrap();
        (path, writes)
    }

    /// A WAL file of `dir`'s database grown well past [`WAL_SIZE_LIMIT`]
    /// by a burst of large rows (deleted again), checkpoints only when the
    /// test asks. Returns the database's path, the write connection and the
    /// WAL's path.
    fn after_a_burst(
        dir: &tempfile::TempDir,
    ) -> (std::path::PathBuf, WriteConnection, std::path::PathBuf) {
        let (path, writes) = wal_database_checkpointed_every(dir, Duration::from_secs(3600));
        let wal = wal_path(&path);
        {
            let conn = writes.lock();
            conn.execute_batch("CREATE TABLE burst (b BLOB)").unwrap();
            for _ in 0..96 {
                conn.execute("INSERT INTO burst VALUES (zeroblob(1048576))", [])
                    .unwrap();
            }
            conn.execute("DELETE FROM burst", []).unwrap();
        }
        let burst = std::fs::metadata(&wal).unwrap().len();
        assert!(burst > WAL_SIZE_LIMIT, "{burst}");
        (path, writes, wal)
    }

    fn wal_size(wal: &Path) -> u64 {
        std::fs::metadata(wal).unwrap().len()
    }

    /// After a burst the WAL file shrinks back, not at a commit (which every
    /// caller of a batch waits for) but in the checkpointer, once a
    /// checkpoint finds that nothing was written since the one before.
    #[test]
    fn the_wal_file_shrinks_once_writes_pause() {
        let dir = tempfile::tempdir().unwrap();
        let (path, writes, wal) = after_a_burst(&dir);
        let burst = wal_size(&wal);
        let checkpointer = Connection::open(&path).unwrap();
        let first = checkpoint(&checkpointer, &wal, None, &mut Failures::default());
        assert!(first.is_some_and(|s| s.copied == s.frames), "{first:?}");
        // A commit after the checkpoint starts the WAL over and leaves its
        // size alone.
        writes
            .lock()
            .execute("INSERT INTO burst VALUES (1)", [])
            .unwrap();
        assert_eq!(wal_size(&wal), burst);
        // Written since: no pause yet.
        let second = checkpoint(&checkpointer, &wal, first, &mut Failures::default());
        assert!(second.is_some() && second != first, "{first:?} {second:?}");
        assert_eq!(wal_size(&wal), burst);
        // Nothing written since the last checkpoint: the file is cut.
        assert_eq!(
            checkpoint(&checkpointer, &wal, second, &mut Failures::default()),
            None
        );
        let after = wal_size(&wal);
        assert!(after <= WAL_SIZE_LIMIT, "{burst} → {after}");
        // The database goes on as before.
        let conn = writes.lock();
        conn.execute("INSERT INTO burst VALUES (2)", []).unwrap();
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM burst", [], |row| row.get(0))
            .unwrap();
        assert_eq!(rows, 2);
    }

    /// A reader still on an old snapshot keeps the WAL in use: the shrink
    /// is given up at once (and tried at the next pause), rather than
    /// holding the write lock while it waits for the reader.
    #[test]
    fn a_reader_in_the_wal_does_not_hold_up_writes_behind_a_shrink() {
        let dir = tempfile::tempdir().unwrap();
        let (path, writes, wal) = after_a_burst(&dir);
        let burst = wal_size(&wal);
        let mut reader = Connection::open(&path).unwrap();
        let snapshot = reader.transaction().unwrap();
        let _: i64 = snapshot
            .query_row("SELECT count(*) FROM burst", [], |row| row.get(0))
            .unwrap();
        // Were the shrink to wait for the reader, it would wait an hour.
        let checkpointer = Connection::open(&path).unwrap();
        checkpointer
            .busy_timeout(Duration::from_secs(3600))
            .unwrap();
        let (done, finished) = mpsc::channel();
        let wal_file = wal.clone();
        std::thread::spawn(move || {
            let first = checkpoint(&checkpointer, &wal_file, None, &mut Failures::default());
            let second = checkpoint(&checkpointer, &wal_file, first, &mut Failures::default());
            let _ = done.send((second, checkpointer));
        });
        let (second, checkpointer) = finished
            .recv_timeout(Duration::from_secs(120))
            .expect("the shrink gave up at once");
        assert_eq!(second, None);
        assert_eq!(wal_size(&wal), burst, "the reader's frames stay");
        // The write lock is free again, and the busy timeout is back.
        writes
            .lock()
            .execute("INSERT INTO burst VALUES (1)", [])
            .unwrap();
        let timeout: i64 = checkpointer
            .pragma_query_value(None, "busy_timeout", |row| row.get(0))
            .unwrap();
        assert_eq!(timeout, 10_000);
        drop(snapshot);
    }

    /// The write connection is where durability is decided: it must wait for
    /// the disk on commit, enforce foreign keys and wait for a lock rather
    /// than fail.
    #[test]
    fn the_write_connection_is_durable_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let (_, writes) = wal_database(&dir);
        let conn = writes.lock();
        let pragma = |name: &str| -> i64 {
            conn.pragma_query_value(None, name, |row| row.get(0))
                .unwrap()
        };
        assert_eq!(pragma("synchronous"), 2, "FULL");
        assert_eq!(pragma("foreign_keys"), 1);
        assert_eq!(pragma("busy_timeout"), 10_000);
        assert_eq!(pragma("cache_size"), CACHE_SIZE_KIB);
        // The spill threshold (0 would mean spilling is off).
        assert_eq!(pragma("cache_spill"), CACHE_SPILL_PAGES);
        assert_eq!(pragma("wal_autocheckpoint"), AUTOCHECKPOINT_PAGES);
        // The writer never cuts the WAL file (the checkpointer does).
        assert_eq!(pragma("journal_size_limit"), -1);
        let journal: String = conn
            .pragma_query_value(None, "journal_mode", |row| row.get(0))
            .unwrap();
        assert_eq!(journal, "wal");
        // The WAL-buffering VFS, which is safe only with synchronous=FULL.
        assert_eq!(
            super::super::wal_vfs::vfs_of(&conn).as_deref(),
            Some(super::super::wal_vfs::NAME)
        );
    }

    /// Commit about 1 MB of rows, with no checkpoint at commit.
    fn write_a_megabyte(writes: &WriteConnection) {
        let conn = writes.lock();
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn.execute_batch(
            "CREATE TABLE t (v TEXT); \
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) \
             INSERT INTO t SELECT printf('%.1000c', 'x') FROM n;",
        )
        .unwrap();
    }

    /// It yields to the writer and the request path when the cores are busy.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_checkpointer_runs_at_a_lower_priority() {
        let dir = tempfile::tempdir().unwrap();
        let (_path, _writes) = wal_database(&dir);
        let niced = || {
            super::super::writer::tests::thread_nice_values("toolgate-checkp")
                .contains(&i64::from(CHECKPOINTER_NICE))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !niced() {
            assert!(
                std::time::Instant::now() < deadline,
                "no checkpointer thread at nice {CHECKPOINTER_NICE}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The checkpointer keeps to the interval it is given: with an hour,
    /// committed pages stay in the WAL.
    #[test]
    fn the_checkpointer_waits_for_its_interval() {
        let dir = tempfile::tempdir().unwrap();
        let (path, writes) = wal_database_checkpointed_every(&dir, Duration::from_secs(3600));
        let before = std::fs::metadata(&path).unwrap().len();
        write_a_megabyte(&writes);
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), before);
    }

    /// Committed pages reach the database file without any commit
    /// checkpointing.
    #[test]
    fn the_checkpointer_copies_the_wal_into_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let (path, writes) = wal_database(&dir);
        let before = std::fs::metadata(&path).unwrap().len();
        write_a_megabyte(&writes);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::fs::metadata(&path).unwrap().len() < before + 1_000_000 {
            assert!(
                std::time::Instant::now() < deadline,
                "the database file stayed at {} bytes",
                std::fs::metadata(&path).unwrap().len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn sqlite_errors_keep_their_kind() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT CHECK (v <> 'x'))")
            .unwrap();
        conn.execute("INSERT INTO t VALUES ('a', 'b')", []).unwrap();
        let duplicate = conn
            .execute("INSERT INTO t VALUES ('a', 'c')", [])
            .unwrap_err();
        assert!(matches!(
            unit_error(duplicate, || "row a".into()),
            StoreError::Conflict(m) if m.starts_with("row a: ")
        ));
        let check = conn
            .execute("INSERT INTO t VALUES ('b', 'x')", [])
            .unwrap_err();
        match StoreError::from(check) {
            StoreError::Database(sqlx::Error::Database(db)) => {
                assert_eq!(db.kind(), sqlx::error::ErrorKind::CheckViolation);
                assert!(
                    db.message().contains("CHECK constraint failed"),
                    "{}",
                    db.message()
                );
            }
            other => panic!("unexpected {other:?}"),
        }
        conn.execute_batch(
            "CREATE TRIGGER refuse BEFORE INSERT ON t WHEN NEW.v = 'no' \
             BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END",
        )
        .unwrap();
        let raised = conn
            .execute("INSERT INTO t VALUES ('c', 'no')", [])
            .unwrap_err();
        let err = StoreError::from(raised);
        assert!(
            err.is_refused_data() && err.is_unit_local() && !err.is_unavailable(),
            "a trigger's refusal concerns the unit: {err:?}"
        );
        let missing = conn
            .execute("INSERT INTO nowhere VALUES (1)", [])
            .unwrap_err();
        let err = StoreError::from(missing);
        assert!(
            err.is_raised_on_statement() && err.is_unit_local() && !err.is_refused_data(),
            "a broken statement fails its unit, not the refused-data way: {err:?}"
        );
        let malformed = conn
            .query_row("SELECT json('not json')", [], |row| row.get::<_, String>(0))
            .unwrap_err();
        let err = StoreError::from(malformed);
        assert!(
            err.is_raised_on_statement() && !err.is_refused_data() && !err.is_unavailable(),
            "{err:?}"
        );
    }
}
