//! The group-commit writer: many callers' [`WriteUnit`]s share one
//! transaction.
//!
//! One task owns a bounded channel. It takes the first queued job, drains
//! whatever else is queued (up to [`WriterConfig::max_batch`], waiting up to
//! [`WriterConfig::linger`] for more), applies the batch with one
//! [`Store::apply_batch`](super::Store::apply_batch), calls the commit hook
//! with the committed events and only then answers each caller. A caller is
//! never told "done" for data that is not committed: if the transaction
//! fails, every caller of the batch gets the error (and, through
//! [`Writer::write_or_return`], its unit back).
//!
//! A caller that stops waiting (its `write` future dropped) does not
//! withdraw its unit: once queued, it is written. When every [`Writer`]
//! handle is dropped the task finishes the queued work and ends.

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::db_error::DbError;
use super::{DynStore, StoreError, StoreResult, StoredEvent, UnitReceipt, WriteUnit};

#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Most units in one transaction (default 256).
    pub max_batch: usize,
    /// Units that may wait in the queue before `write` itself waits
    /// (back-pressure; default 4096).
    pub channel_capacity: usize,
    /// How long a batch waits for more units once it has its first; zero
    /// (the default) takes whatever is queued and commits at once.
    pub linger: Duration,
    /// The writer thread's nice value (Linux; -20..=19, lower runs first);
    /// `None` leaves it as inherited. Every write waits for this one
    /// thread, so when the machine is busy it should not queue behind
    /// request threads: a negative value needs `CAP_SYS_NICE` (or a fitting
    /// `RLIMIT_NICE`); without it the writer runs at its inherited priority
    /// and says so in the log.
    pub nice: Option<i32>,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            max_batch: 256,
            channel_capacity: 4096,
            linger: Duration::ZERO,
            nice: None,
        }
    }
}

/// Called once per committed batch, after the commit and before any caller
/// of the batch is answered, with the events of the units that committed (in
/// commit order; possibly empty). A panic in the hook is logged and does not
/// affect the callers.
pub type CommitHook = Arc<dyn Fn(&[StoredEvent]) + Send + Sync>;

struct Job {
    unit: WriteUnit,
    reply: oneshot::Sender<Answer>,
}

/// A unit's outcome; when it was not committed (its batch failed, it alone
/// was rolled back, or the writer was gone before taking it), the error
/// comes with the unit itself, so the caller may write it, or what is left
/// of it, again without having kept a copy.
pub type Answer = Result<UnitReceipt, (StoreError, Option<WriteUnit>)>;

/// A handle to the writer task; cheap to clone.
#[derive(Clone)]
pub struct Writer {
    jobs: mpsc::Sender<Job>,
    /// When (Unix ms) the last batch failed because the database could not
    /// be written (unreachable, full, read-only); 0 once a batch commits.
    failing: Arc<AtomicU64>,
}

/// How long a batch that failed for want of a writable database keeps
/// [`Writer::writes_failing`] true when nothing commits meanwhile: a
/// readiness probe that said "not ready" for good would keep away the
/// very traffic whose writes would show the database is back.
const FAILING_FOR: u64 = 30_000;

impl fmt::Debug for Writer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Writer")
            .field("closed", &self.jobs.is_closed())
            .finish()
    }
}

impl Writer {
    /// Start the writer on a thread of its own, with its own single-thread
    /// runtime: a batch awaits the database several times (statements,
    /// commit), and on the server's runtime each of those wake-ups would
    /// queue behind every request being served, stretching each batch and
    /// so every caller's wait.
    pub fn spawn(store: DynStore, config: WriterConfig, on_commit: CommitHook) -> Writer {
        let (jobs, queue) = mpsc::channel(config.channel_capacity.max(1));
        let failing = Arc::new(AtomicU64::new(0));
        let failed = failing.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the writer's runtime starts");
        std::thread::Builder::new()
            .name("toolgate-writer".into())
            .spawn(move || {
                if let Some(nice) = config.nice {
                    set_thread_nice(nice, "writer");
                }
                runtime.block_on(run(store, config, on_commit, queue, failed))
            })
            .expect("the writer's thread starts");
        Writer { jobs, failing }
    }

    /// Whether the last batch failed because the database could not be
    /// written (unreachable, a full disk, a read-only file) within the last
    /// 30 s and none has committed since: `/readyz` is then not ready.
    pub fn writes_failing(&self) -> bool {
        let since = self.failing.load(Ordering::Relaxed);
        since != 0 && crate::protocol::now_ms().saturating_sub(since as i64) < FAILING_FOR as i64
    }

    /// Queue `unit` and wait for its batch. Resolves only after the unit's
    /// batch committed (with the unit's receipt, or the unit's own error if
    /// it alone was rolled back) or failed as a whole (with that error).
    pub async fn write(&self, unit: WriteUnit) -> StoreResult<UnitReceipt> {
        self.write_or_return(unit).await.map_err(|(e, _)| e)
    }

    /// [`write`](Self::write), handing the unit back with the error when it
    /// was not committed (the writer gone, or its batch or the unit itself
    /// rolled back).
    pub async fn write_or_return(&self, unit: WriteUnit) -> Answer {
        let (reply, answer) = oneshot::channel();
        if let Err(refused) = self.jobs.send(Job { unit, reply }).await {
            return Err((StoreError::WriterClosed, Some(refused.0.unit)));
        }
        answer
            .await
            .unwrap_or(Err((StoreError::WriterClosed, None)))
    }
}

/// Set the calling thread's nice value (on Linux a thread has its own);
/// `thread` names it in the log.
#[cfg(target_os = "linux")]
pub(super) fn set_thread_nice(nice: i32, thread: &str) {
    // SAFETY: gettid and setpriority take plain integers and touch no
    // memory of ours.
    let done = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice)
    };
    if done == 0 {
        tracing::debug!(nice, thread, "thread priority set");
    } else {
        tracing::info!(
            nice,
            thread,
            error = %std::io::Error::last_os_error(),
            "could not set a storage thread's priority (a negative nice value needs \
             CAP_SYS_NICE or RLIMIT_NICE of at least 20 - nice); it runs at its inherited \
             priority"
        );
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn set_thread_nice(nice: i32, thread: &str) {
    tracing::info!(
        nice,
        thread,
        "a storage thread's priority is only set on Linux"
    );
}

async fn run(
    store: DynStore,
    config: WriterConfig,
    on_commit: CommitHook,
    mut queue: mpsc::Receiver<Job>,
    failing: Arc<AtomicU64>,
) {
    let max_batch = config.max_batch.max(1);
    let mut units = Vec::with_capacity(max_batch);
    let mut replies = Vec::with_capacity(max_batch);
    while let Some(first) = queue.recv().await {
        units.push(first.unit);
        replies.push(first.reply);
        while units.len() < max_batch {
            match queue.try_recv() {
                Ok(job) => {
                    units.push(job.unit);
                    replies.push(job.reply);
                }
                Err(_) => break,
            }
        }
        if !config.linger.is_zero() && units.len() < max_batch {
            let deadline = tokio::time::Instant::now() + config.linger;
            while units.len() < max_batch {
                match tokio::time::timeout_at(deadline, queue.recv()).await {
                    Ok(Some(job)) => {
                        units.push(job.unit);
                        replies.push(job.reply);
                    }
                    // Deadline reached, or every handle dropped.
                    Ok(None) | Err(_) => break,
                }
            }
        }

        commit_batch(&store, &on_commit, &mut units, &mut replies, &failing).await;
        units.clear();
        replies.clear();
    }
    tracing::debug!("store writer stopped: every handle dropped");
}

async fn commit_batch(
    store: &DynStore,
    on_commit: &CommitHook,
    units: &mut Vec<WriteUnit>,
    replies: &mut Vec<oneshot::Sender<Answer>>,
    failing: &AtomicU64,
) {
    let started = std::time::Instant::now();
    let applied = store.apply_batch(units).await;
    let unwritable = matches!(&applied, Err(e) if e.is_unavailable());
    failing.store(
        if unwritable {
            crate::protocol::now_ms().max(1) as u64
        } else {
            0
        },
        Ordering::Relaxed,
    );
    metrics::histogram!("toolgate_writer_batch_units").record(units.len() as f64);
    metrics::histogram!("toolgate_writer_batch_seconds").record(started.elapsed().as_secs_f64());
    let results = match applied {
        Ok(results) if results.len() == units.len() => results,
        Ok(results) => {
            // A store bug; the transaction did commit, but which unit got
            // which receipt is unknown, so nobody is told "done".
            tracing::error!(
                units = units.len(),
                results = results.len(),
                "store returned a wrong number of unit results"
            );
            let err = StoreError::Corrupt(format!(
                "store answered {} units with {} results",
                units.len(),
                results.len()
            ));
            for reply in replies.drain(..) {
                let _ = reply.send(Err((replicate(&err), None)));
            }
            return;
        }
        Err(err) => {
            tracing::warn!(units = units.len(), error = %err, "write batch failed");
            for (reply, unit) in replies.drain(..).zip(units.drain(..)) {
                let _ = reply.send(Err((replicate(&err), Some(unit))));
            }
            return;
        }
    };

    let committed: Vec<StoredEvent> = results
        .iter()
        .filter_map(|result| result.as_ref().ok())
        .flat_map(|receipt| receipt.events.iter().cloned())
        .collect();
    if std::panic::catch_unwind(AssertUnwindSafe(|| on_commit(&committed))).is_err() {
        tracing::error!("the commit hook panicked; the batch is committed regardless");
    }

    for ((reply, result), unit) in replies.drain(..).zip(results).zip(units.drain(..)) {
        // The caller may have stopped waiting; its unit is committed anyway.
        // A unit rolled back on its own goes back with its error.
        let _ = reply.send(match result {
            Ok(receipt) => Ok(receipt),
            Err(e) => Err((e, Some(unit))),
        });
    }
}

/// A copy of a batch-wide error for each caller of the batch (the error
/// types are not `Clone`). Database errors keep their message, SQLSTATE code
/// and kind, so a caller can still tell e.g. a serialization failure.
fn replicate(err: &StoreError) -> StoreError {
    match err {
        StoreError::NotOwner => StoreError::NotOwner,
        StoreError::Conflict(m) => StoreError::Conflict(m.clone()),
        StoreError::Redeclared(m) => StoreError::Redeclared(m.clone()),
        StoreError::CallConflict { id, field } => StoreError::CallConflict {
            id: id.clone(),
            field,
        },
        StoreError::RunClosed { run_id } => StoreError::RunClosed {
            run_id: run_id.clone(),
        },
        StoreError::Refused { field, detail } => StoreError::Refused {
            field,
            detail: detail.clone(),
        },
        StoreError::ThreadDeleted { thread, at_ms } => StoreError::ThreadDeleted {
            thread: thread.clone(),
            at_ms: *at_ms,
        },
        StoreError::ThreadClosing { thread, since_ms } => StoreError::ThreadClosing {
            thread: thread.clone(),
            since_ms: *since_ms,
        },
        StoreError::ThreadBusy { calls } => StoreError::ThreadBusy {
            calls: calls.clone(),
        },
        StoreError::NotFound(m) => StoreError::NotFound(m.clone()),
        StoreError::Corrupt(m) => StoreError::Corrupt(m.clone()),
        StoreError::NotMigrated(m) => StoreError::NotMigrated(m.clone()),
        StoreError::WriterClosed => StoreError::WriterClosed,
        StoreError::Newer(v) => StoreError::Newer(*v),
        StoreError::Migrate(e) => StoreError::Corrupt(e.to_string()),
        StoreError::Database(e) => StoreError::Database(replicate_sqlx(e)),
    }
}

fn replicate_sqlx(err: &sqlx::Error) -> sqlx::Error {
    use sqlx::Error as E;
    match err {
        E::Database(db) => E::Database(Box::new(DbError::of(db.as_ref()))),
        E::Io(io) => E::Io(std::io::Error::new(io.kind(), io.to_string())),
        E::PoolTimedOut => E::PoolTimedOut,
        E::PoolClosed => E::PoolClosed,
        E::WorkerCrashed => E::WorkerCrashed,
        E::RowNotFound => E::RowNotFound,
        E::BeginFailed => E::BeginFailed,
        E::InvalidSavePointStatement => E::InvalidSavePointStatement,
        E::Protocol(m) => E::Protocol(m.clone()),
        E::InvalidArgument(m) => E::InvalidArgument(m.clone()),
        other => E::Protocol(other.to_string()),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The nice values of this process's threads named `name` (as
    /// `/proc` shows it: at most 15 bytes).
    #[cfg(target_os = "linux")]
    pub(in crate::store) fn thread_nice_values(name: &str) -> Vec<i64> {
        let mut values = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim() != name {
                continue;
            }
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // Fields after the command name, which ends with ')': state is
            // field 3 of stat(5), nice field 19.
            if let Some((_, rest)) = stat.rsplit_once(')') {
                let fields: Vec<&str> = rest.split_whitespace().collect();
                if let Some(nice) = fields.get(19 - 3).and_then(|f| f.parse().ok()) {
                    values.push(nice);
                }
            }
        }
        values
    }

    /// A positive nice value needs no privilege, so this runs anywhere.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_writer_thread_takes_its_nice_value() {
        let store: DynStore = Arc::new(
            crate::store::sqlite::SqliteStore::connect_url("sqlite::memory:")
                .await
                .unwrap(),
        );
        let config = WriterConfig {
            nice: Some(7),
            ..WriterConfig::default()
        };
        let writer = Writer::spawn(store, config, Arc::new(|_| {}));
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !thread_nice_values("toolgate-writer").contains(&7) {
            assert!(
                std::time::Instant::now() < deadline,
                "no writer thread at nice 7: {:?}",
                thread_nice_values("toolgate-writer")
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(writer);
    }

    #[test]
    fn replicated_errors_keep_their_variant_and_message() {
        let io = StoreError::Database(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "reset by peer",
        )));
        match replicate(&io) {
            StoreError::Database(sqlx::Error::Io(e)) => {
                assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
                assert_eq!(e.to_string(), "reset by peer");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            replicate(&StoreError::Database(sqlx::Error::PoolTimedOut)),
            StoreError::Database(sqlx::Error::PoolTimedOut)
        ));
        assert!(matches!(
            replicate(&StoreError::Conflict("x".into())),
            StoreError::Conflict(m) if m == "x"
        ));
    }
}
