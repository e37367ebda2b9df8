//! The embedded store: one SQLite file, the default when no `DATABASE_URL`
//! is configured.
//!
//! The file runs in WAL mode with `synchronous=FULL`, so a returned commit is
//! on disk and readers never block the writer. JSON columns hold JSON text
//! (checked by `json_valid()` in the schema; see `store::sqlite_writes` for
//! the one connection that leaves the schema's checks to the types it
//! writes from). Writers serialise on SQLite's
//! database lock, waiting up to [`BUSY_TIMEOUT`] for another connection or
//! process to finish.
//!
//! The group-commit writer's batches and audit appends go through one
//! connection of their own, run synchronously on the calling thread
//! (`store::sqlite_writes`); reads and the few other writes
//! use a pool.

use std::borrow::Cow;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use super::reads::{Reads, audit_entries, audit_query};
use super::sqlite_writes::{DEFAULT_CHECKPOINT_EVERY, WriteConnection};
use super::{
    ApprovalRecord, ApprovalStatus, AuditEntry, AuditFilter, DeletedApproval, NewAuditEntry, Store,
    StoreError, StoreResult, StoredEvent, StoredMessage, ThreadSnapshot, ThreadSummary,
    ToolCallRecord, UnitReceipt, WriteUnit,
};

/// How long a statement waits for SQLite's write lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The migrations of `migrations/sqlite`, embedded in the binary.
///
/// `sqlx::migrate!` lives behind sqlx's `macros` feature, which this crate
/// does not enable; the files are embedded here instead. Version, description
/// and checksum match what `migrate!` would record.
pub(super) const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../../migrations/sqlite/0001_init.sql"),
    ),
    (
        2,
        "safety",
        include_str!("../../migrations/sqlite/0002_safety.sql"),
    ),
    (
        3,
        "checks without lists",
        include_str!("../../migrations/sqlite/0003_checks_without_lists.sql"),
    ),
    (
        4,
        "result events",
        include_str!("../../migrations/sqlite/0004_result_events.sql"),
    ),
    (
        5,
        "approvals by time",
        include_str!("../../migrations/sqlite/0005_approvals_by_time.sql"),
    ),
    (
        6,
        "call scope",
        include_str!("../../migrations/sqlite/0006_call_scope.sql"),
    ),
    (
        7,
        "threads by owner",
        include_str!("../../migrations/sqlite/0007_threads_by_owner.sql"),
    ),
    (
        8,
        "approvals by call",
        include_str!("../../migrations/sqlite/0008_approvals_by_call.sql"),
    ),
    (
        9,
        "declared calls",
        include_str!("../../migrations/sqlite/0009_declared_calls.sql"),
    ),
    (
        10,
        "developer role",
        include_str!("../../migrations/sqlite/0010_developer_role.sql"),
    ),
    (
        11,
        "declared aliases",
        include_str!("../../migrations/sqlite/0011_declared_aliases.sql"),
    ),
    (
        12,
        "call instance",
        include_str!("../../migrations/sqlite/0012_call_instance.sql"),
    ),
    (
        13,
        "call parent",
        include_str!("../../migrations/sqlite/0013_call_parent.sql"),
    ),
    (
        14,
        "call position",
        include_str!("../../migrations/sqlite/0014_call_position.sql"),
    ),
    (
        15,
        "closed runs",
        include_str!("../../migrations/sqlite/0015_closed_runs.sql"),
    ),
    (
        16,
        "parent index",
        include_str!("../../migrations/sqlite/0016_parent_index.sql"),
    ),
    (
        17,
        "instances",
        include_str!("../../migrations/sqlite/0017_instances.sql"),
    ),
    (
        18,
        "deleted threads",
        include_str!("../../migrations/sqlite/0018_deleted_threads.sql"),
    ),
    (
        19,
        "closing threads",
        include_str!("../../migrations/sqlite/0019_closing_threads.sql"),
    ),
    (
        20,
        "approvals of deleted threads",
        include_str!("../../migrations/sqlite/0020_approvals_of_deleted_threads.sql"),
    ),
];

#[derive(Debug)]
struct Embedded;

impl<'s> MigrationSource<'s> for Embedded {
    fn resolve(
        self,
    ) -> futures::future::BoxFuture<'s, Result<Vec<Migration>, sqlx::error::BoxDynError>> {
        Box::pin(async move {
            Ok(MIGRATIONS
                .iter()
                .map(|&(version, description, sql)| {
                    Migration::new(
                        version,
                        Cow::Borrowed(description),
                        MigrationType::Simple,
                        Cow::Borrowed(sql),
                        false,
                    )
                })
                .collect())
        })
    }
}

pub struct SqliteStore {
    pool: SqlitePool,
    /// The connection of [`Store::apply_batch`] and audit appends.
    writes: Arc<WriteConnection>,
    /// The database file and its identity (device, inode) when opened; none
    /// in memory.
    file: Option<(std::path::PathBuf, (u64, u64))>,
    superseded: super::Superseded,
    /// What SQLite's `quick_check` found wrong with the file, checked once
    /// after it opened: a damaged file (a copy taken while it was written,
    /// say) is not ready, though the tables the start reads are intact.
    damage: Arc<std::sync::OnceLock<String>>,
}

/// A file's device and inode.
pub(crate) fn identity(path: &Path) -> std::io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path)?;
    Ok((meta.dev(), meta.ino()))
}

/// The database file at `path` is not the one the store opened: an outage
/// (I/O), which a restart with the file restored ends.
pub(crate) fn file_gone(path: &Path) -> StoreError {
    StoreError::Database(sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!(
            "the database file {} was removed or replaced while toolgate served it: \
             restore it and restart toolgate",
            path.display()
        ),
    )))
}

impl SqliteStore {
    /// The queries both backends share, over the read pool.
    fn reads(&self) -> Reads<'_, sqlx::Sqlite> {
        Reads { pool: &self.pool }
    }

    /// Open (creating if missing) the database file at `path` and migrate it.
    pub async fn open_file(path: &Path) -> Result<Self, StoreError> {
        Self::open_file_with(path, DEFAULT_CHECKPOINT_EVERY).await
    }

    /// [`open_file`](Self::open_file), checkpointing every `checkpoint_every`.
    pub async fn open_file_with(
        path: &Path,
        checkpoint_every: Duration,
    ) -> Result<Self, StoreError> {
        create_private(path)?;
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true);
        Self::open_with(options, false, checkpoint_every).await
    }

    /// Open a `sqlite:` URL (e.g. `sqlite:///var/lib/toolgate/db.sqlite` or
    /// `sqlite::memory:`) and migrate it. A file is created if missing unless
    /// the URL sets `mode=` itself.
    pub async fn connect_url(url: &str) -> Result<Self, StoreError> {
        Self::connect_url_with(url, DEFAULT_CHECKPOINT_EVERY).await
    }

    /// [`connect_url`](Self::connect_url), checkpointing a file database
    /// every `checkpoint_every`.
    pub async fn connect_url_with(
        url: &str,
        checkpoint_every: Duration,
    ) -> Result<Self, StoreError> {
        let mut options = SqliteConnectOptions::from_str(url)?;
        let in_memory = super::is_in_memory(url);
        if !url.contains("mode=") {
            if !in_memory {
                create_private(options.get_filename())?;
            }
            options = options.create_if_missing(true);
        }
        Self::open_with(options, in_memory, checkpoint_every).await
    }

    async fn open_with(
        options: SqliteConnectOptions,
        in_memory: bool,
        checkpoint_every: Duration,
    ) -> Result<Self, StoreError> {
        let options = options
            .pragma("temp_store", "memory")
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let mut pool_options = SqlitePoolOptions::new().max_connections(8);
        if in_memory {
            // An in-memory database lives only as long as one connection to it
            // stays open: never let the pool close the last one.
            pool_options = pool_options
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        }
        let pool = pool_options.connect_with(options.clone()).await?;
        Migrator::new(Embedded)
            .await?
            .run(&pool)
            .await
            .map_err(super::migration_error)?;
        // Opened after the migrations: it expects the schema in place.
        let filename = options.get_filename().to_owned();
        let writes = tokio::task::spawn_blocking(move || {
            WriteConnection::open(&filename, in_memory, checkpoint_every)
        })
        .await
        .map_err(worker_crashed)??;
        let file = if in_memory {
            None
        } else {
            let path = options.get_filename().to_owned();
            identity(&path).ok().map(|id| (path, id))
        };
        let damage = Arc::new(std::sync::OnceLock::new());
        if !in_memory {
            tokio::spawn(check_file(pool.clone(), damage.clone()));
        }
        Ok(SqliteStore {
            pool,
            writes: Arc::new(writes),
            file,
            superseded: super::Superseded::default(),
            damage,
        })
    }

    /// The connection pool (for diagnostics and tests).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

/// Read the whole file once (`PRAGMA quick_check`, in the background: its
/// time grows with the file) and keep what it finds wrong.
async fn check_file(pool: SqlitePool, damage: Arc<std::sync::OnceLock<String>>) {
    let found: Result<Vec<String>, sqlx::Error> = sqlx::query_scalar("PRAGMA quick_check(5)")
        .fetch_all(&pool)
        .await;
    let problems = match found {
        Ok(lines) if lines.iter().all(|l| l == "ok") => return,
        Ok(lines) => lines.join("; "),
        // The check itself could not read the file.
        Err(e)
            if e.as_database_error()
                .and_then(|d| d.code())
                .is_some_and(|c| super::damaged_code(&c)) =>
        {
            e.to_string()
        }
        Err(e) => {
            tracing::warn!(error = %e, "the database file's integrity check did not run");
            return;
        }
    };
    tracing::error!(
        problems = %problems,
        "the SQLite database file is damaged: /readyz answers 503; restore it from a \
         backup (VACUUM INTO copy) and restart"
    );
    // What is wrong where stays in the log: the probe needs no token.
    let _ = damage.set(
        "SQLite's integrity check found the file damaged (the log says where); restore it \
         from a backup and restart"
            .to_string(),
    );
}

/// Create the database file at `path`, if missing, readable and writable
/// by the service's user alone (`0600`): a file named by `DATABASE_URL`
/// may lie outside the data directory, in a directory others can read.
/// SQLite gives its `-wal` and `-shm` files the database file's mode. A
/// file that exists keeps its mode (an operator may have chosen it).
fn create_private(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(StoreError::Database(sqlx::Error::Io(e))),
    }
}

/// A blocking task that did not finish (it panicked, or the runtime is
/// shutting down).
fn worker_crashed(err: tokio::task::JoinError) -> StoreError {
    tracing::error!(error = %err, "a SQLite write task did not finish");
    StoreError::Database(sqlx::Error::WorkerCrashed)
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn ready(&self) -> StoreResult<()> {
        // Connections already open go on reading and writing a file that
        // was removed (or replaced) under them, while new ones fail or open
        // another: whatever the check's query says, such a database is not
        // the one toolgate stores into.
        if let Some((path, opened)) = &self.file
            && identity(path).ok().as_ref() != Some(opened)
        {
            return Err(file_gone(path));
        }
        if let Some(damage) = self.damage.get() {
            return Err(StoreError::Corrupt(damage.clone()));
        }
        let ready = self.reads().ready(MIGRATIONS).await;
        self.superseded.note(&ready);
        ready
    }

    async fn thread_owner(&self, thread_id: &str) -> StoreResult<Option<super::ThreadOwner>> {
        // Most requests read this first: a query that fails on a file
        // replaced under the service (a copy of an older schema, say) is
        // the outage the replacement is, not an internal error.
        let read = self.reads().thread_owner(thread_id).await;
        match (&read, &self.file) {
            (Err(_), Some((path, opened))) if identity(path).ok().as_ref() != Some(opened) => {
                Err(file_gone(path))
            }
            _ => read,
        }
    }

    async fn deleted_approval(&self, approval_id: &str) -> StoreResult<Option<DeletedApproval>> {
        self.reads().deleted_approval(approval_id).await
    }

    async fn call_declaration(
        &self,
        thread_id: &str,
        call_id: &str,
    ) -> StoreResult<super::Declaration> {
        self.reads().call_declaration(thread_id, call_id).await
    }

    async fn claim_thread(&self, thread_id: &str, owner: &str) -> StoreResult<()> {
        self.superseded.check()?;
        self.reads().claim_thread(thread_id, owner).await
    }

    async fn tool_call(&self, thread_id: &str, id: &str) -> StoreResult<Option<ToolCallRecord>> {
        self.reads().tool_call(thread_id, id).await
    }

    async fn running_tool_calls(&self, instance: &str) -> StoreResult<Vec<ToolCallRecord>> {
        self.reads().running_tool_calls(instance).await
    }

    async fn running_calls_created_before(
        &self,
        cutoff_ms: i64,
    ) -> StoreResult<Vec<ToolCallRecord>> {
        self.reads().running_calls_created_before(cutoff_ms).await
    }

    async fn beat(&self, instance: &str, at_ms: i64) -> StoreResult<()> {
        self.superseded.check()?;
        self.reads().beat(instance, at_ms).await
    }

    async fn running_calls_of_silent(
        &self,
        seen_before_ms: i64,
        except: &str,
    ) -> StoreResult<Vec<ToolCallRecord>> {
        self.reads()
            .running_calls_of_silent(seen_before_ms, except)
            .await
    }

    async fn run_calls(&self, thread_id: &str, run_id: &str) -> StoreResult<Vec<ToolCallRecord>> {
        self.reads().run_calls(thread_id, run_id).await
    }

    async fn run_closed(&self, thread_id: &str, run_id: &str) -> StoreResult<bool> {
        self.reads().run_closed(thread_id, run_id).await
    }

    async fn approval(&self, id: &str) -> StoreResult<Option<ApprovalRecord>> {
        self.reads().approval(id).await
    }

    async fn approvals(
        &self,
        owner: Option<&str>,
        thread: Option<&str>,
        status: Option<ApprovalStatus>,
        now_ms: i64,
        before: Option<(i64, &str)>,
        limit: i64,
    ) -> StoreResult<Vec<ApprovalRecord>> {
        self.reads()
            .approvals(owner, thread, status, now_ms, before, limit)
            .await
    }

    async fn approval_of_call(
        &self,
        thread_id: &str,
        tool_call_id: &str,
    ) -> StoreResult<Option<ApprovalRecord>> {
        self.reads().approval_of_call(thread_id, tool_call_id).await
    }

    async fn approval_outlines(
        &self,
        owner: Option<&str>,
        thread: Option<&str>,
        open_at: Option<i64>,
        since_ms: i64,
        limit: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        self.reads()
            .approval_outlines(owner, thread, open_at, since_ms, limit)
            .await
    }

    async fn open_approvals_of_thread(
        &self,
        thread_id: &str,
        now_ms: i64,
    ) -> StoreResult<Vec<ApprovalRecord>> {
        self.reads()
            .open_approvals_of_thread(thread_id, now_ms)
            .await
    }

    async fn expired_approvals(&self, now_ms: i64, limit: i64) -> StoreResult<Vec<ApprovalRecord>> {
        self.reads().expired_approvals(now_ms, limit).await
    }

    async fn audit(&self, filter: &AuditFilter) -> StoreResult<Vec<AuditEntry>> {
        let Some(mut query) = audit_query(filter) else {
            return Ok(Vec::new());
        };
        audit_entries(&query.build().fetch_all(&self.pool).await?)
    }

    async fn append_audit(&self, entry: &NewAuditEntry) -> StoreResult<i64> {
        self.superseded.check()?;
        let writes = Arc::clone(&self.writes);
        let entry = entry.clone();
        tokio::task::spawn_blocking(move || writes.append_audit(&entry))
            .await
            .map_err(worker_crashed)?
    }

    async fn owner_rules(&self, owner: &str) -> StoreResult<Option<Value>> {
        self.reads().owner_rules(owner).await
    }

    async fn put_owner_rules(
        &self,
        owner: &str,
        rules: &Value,
        updated_at_ms: i64,
    ) -> StoreResult<()> {
        self.superseded.check()?;
        sqlx::query(
            "INSERT INTO owner_permissions (owner, rules, updated_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (owner) DO UPDATE SET \
                 rules = excluded.rules, updated_at_ms = excluded.updated_at_ms",
        )
        .bind(owner)
        .bind(rules.to_string())
        .bind(updated_at_ms)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn events_after(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<StoredEvent>> {
        self.reads().events_after(thread_id, after, limit).await
    }

    async fn last_event_seq(&self, thread_id: &str) -> StoreResult<i64> {
        self.reads().last_event_seq(thread_id).await
    }

    async fn messages_before(
        &self,
        thread_id: &str,
        before: Option<i64>,
        limit: i64,
    ) -> StoreResult<Vec<StoredMessage>> {
        self.reads().messages_before(thread_id, before, limit).await
    }

    async fn threads_of(
        &self,
        owner: &str,
        before: Option<(i64, &str)>,
        limit: i64,
    ) -> StoreResult<Vec<ThreadSummary>> {
        self.reads().threads_of(owner, before, limit).await
    }

    async fn message(&self, thread_id: &str, id: &str) -> StoreResult<Option<StoredMessage>> {
        self.reads().message(thread_id, id).await
    }

    async fn snapshot(&self, thread_id: &str, now_ms: i64) -> StoreResult<ThreadSnapshot> {
        self.reads().snapshot(thread_id, now_ms, None).await
    }

    async fn all_messages(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>> {
        self.reads().all_messages(thread_id).await
    }

    async fn conversation(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>> {
        self.reads().conversation(thread_id).await
    }

    async fn message_outlines(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>> {
        self.reads().message_outlines(thread_id).await
    }

    async fn call_parents(&self, thread_id: &str) -> StoreResult<Vec<(String, String)>> {
        self.reads().call_parents(thread_id).await
    }

    async fn apply_batch(&self, units: &[WriteUnit]) -> StoreResult<Vec<StoreResult<UnitReceipt>>> {
        self.superseded.check()?;
        // Synchronous: the group-commit writer calls this on its own thread.
        self.writes.apply_batch(units)
    }

    async fn purge_deleted(&self, thread_id: &str, limit: i64) -> StoreResult<bool> {
        self.superseded.check()?;
        let writes = Arc::clone(&self.writes);
        let thread_id = thread_id.to_string();
        tokio::task::spawn_blocking(move || writes.purge_deleted(&thread_id, limit))
            .await
            .map_err(worker_crashed)?
    }

    async fn unpurged_threads(&self) -> StoreResult<Vec<String>> {
        self.reads().unpurged_threads().await
    }
}
