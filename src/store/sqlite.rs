//! The embedded store: one SQLite file, the default when no `DATABASE_URL`
//! is configured.
//!
//! The file runs in WAL mode with `synchronous=FULL`, so a returned commit is
//! on disk and readers never block the writer. JSON columns hold JSON text
//! (checked by `json_valid()` in the schema). Writers serialise on SQLite's
//! database lock, waiting up to [`BUSY_TIMEOUT`] for another connection or
//! process to finish.
//!
//! The group-commit writer's batches and audit appends go through one
//! connection of their own, run synchronously on the calling thread
//! ([`sqlite_writes`](super::sqlite_writes)); reads and the few other writes
//! use a pool.

use std::borrow::Cow;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::Row;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};

use super::sqlite_writes::WriteConnection;
use super::{
    ApprovalRecord, ApprovalStatus, AuditEntry, AuditFilter, CallStatus, NewAuditEntry, Role,
    Store, StoreError, StoreResult, StoredEvent, StoredMessage, ToolCallRecord, UnitReceipt,
    WriteUnit,
};

/// How long a statement waits for SQLite's write lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The migrations of `migrations/sqlite`, embedded in the binary.
///
/// `sqlx::migrate!` lives behind sqlx's `macros` feature, which this crate
/// does not enable; the files are embedded here instead. Version, description
/// and checksum match what `migrate!` would record.
const MIGRATIONS: &[(i64, &str, &str)] = &[
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

const TOOL_CALL_COLUMNS: &str = "thread_id, id, owner, run_id, tool_name, args, status, output, \
     undo, message_id, created_at_ms, finished_at_ms, undo_of, undone_by";

const APPROVAL_COLUMNS: &str = "id, thread_id, owner, tool_call_id, tool_name, arguments, \
     reason, preview, request, status, decided_by, decision_reason, created_at_ms, \
     expires_at_ms, decided_at_ms";

const AUDIT_COLUMNS: &str = "id, at_ms, owner, thread_id, tool_call_id, tool_name, action, \
     operation, verdict, rule, approval_id, outcome, duration_ms, detail";

const MESSAGE_COLUMNS: &str =
    "thread_id, seq, id, role, content, metadata, tool_call_id, created_at_ms";

pub struct SqliteStore {
    pool: SqlitePool,
    /// The connection of [`Store::apply_batch`] and audit appends.
    writes: Arc<WriteConnection>,
}

impl SqliteStore {
    /// Open (creating if missing) the database file at `path` and migrate it.
    pub async fn open_file(path: &Path) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true);
        Self::open_with(options, false).await
    }

    /// Open a `sqlite:` URL (e.g. `sqlite:///var/lib/toolgate/db.sqlite` or
    /// `sqlite::memory:`) and migrate it. A file is created if missing unless
    /// the URL sets `mode=` itself.
    pub async fn connect_url(url: &str) -> Result<Self, StoreError> {
        let mut options = SqliteConnectOptions::from_str(url)?;
        if !url.contains("mode=") {
            options = options.create_if_missing(true);
        }
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        Self::open_with(options, in_memory).await
    }

    async fn open_with(options: SqliteConnectOptions, in_memory: bool) -> Result<Self, StoreError> {
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
        Migrator::new(Embedded).await?.run(&pool).await?;
        // Opened after the migrations: it expects the schema in place.
        let filename = options.get_filename().to_owned();
        let writes =
            tokio::task::spawn_blocking(move || WriteConnection::open(&filename, in_memory))
                .await
                .map_err(worker_crashed)??;
        Ok(SqliteStore {
            pool,
            writes: Arc::new(writes),
        })
    }

    /// The connection pool (for diagnostics and tests).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

/// A blocking task that did not finish (it panicked, or the runtime is
/// shutting down).
fn worker_crashed(err: tokio::task::JoinError) -> StoreError {
    tracing::error!(error = %err, "a SQLite write task did not finish");
    StoreError::Database(sqlx::Error::WorkerCrashed)
}

fn json_text(value: &Value) -> String {
    value.to_string()
}

fn parse_json(column: &str, text: &str) -> StoreResult<Value> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Corrupt(format!("{column} is not valid JSON: {e}")))
}

fn parse_opt_json(column: &str, text: Option<String>) -> StoreResult<Option<Value>> {
    text.map(|t| parse_json(column, &t)).transpose()
}

fn tool_call_from_row(row: &SqliteRow) -> StoreResult<ToolCallRecord> {
    let status: String = row.try_get("status")?;
    Ok(ToolCallRecord {
        thread_id: row.try_get("thread_id")?,
        id: row.try_get("id")?,
        owner: row.try_get("owner")?,
        run_id: row.try_get("run_id")?,
        tool_name: row.try_get("tool_name")?,
        args: parse_json("tool_calls.args", &row.try_get::<String, _>("args")?)?,
        status: CallStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown tool call status {status:?}")))?,
        output: parse_opt_json("tool_calls.output", row.try_get("output")?)?,
        undo: parse_opt_json("tool_calls.undo", row.try_get("undo")?)?,
        message_id: row.try_get("message_id")?,
        created_at_ms: row.try_get("created_at_ms")?,
        finished_at_ms: row.try_get("finished_at_ms")?,
        undo_of: row.try_get("undo_of")?,
        undone_by: row.try_get("undone_by")?,
    })
}

fn approval_from_row(row: &SqliteRow) -> StoreResult<ApprovalRecord> {
    let status: String = row.try_get("status")?;
    Ok(ApprovalRecord {
        id: row.try_get("id")?,
        thread_id: row.try_get("thread_id")?,
        owner: row.try_get("owner")?,
        tool_call_id: row.try_get("tool_call_id")?,
        tool_name: row.try_get("tool_name")?,
        arguments: parse_json(
            "approvals.arguments",
            &row.try_get::<String, _>("arguments")?,
        )?,
        reason: row.try_get("reason")?,
        preview: parse_opt_json("approvals.preview", row.try_get("preview")?)?,
        request: parse_json("approvals.request", &row.try_get::<String, _>("request")?)?,
        status: ApprovalStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown approval status {status:?}")))?,
        decided_by: row.try_get("decided_by")?,
        decision_reason: row.try_get("decision_reason")?,
        created_at_ms: row.try_get("created_at_ms")?,
        expires_at_ms: row.try_get("expires_at_ms")?,
        decided_at_ms: row.try_get("decided_at_ms")?,
    })
}

fn audit_from_row(row: &SqliteRow) -> StoreResult<AuditEntry> {
    Ok(AuditEntry {
        id: row.try_get("id")?,
        at_ms: row.try_get("at_ms")?,
        owner: row.try_get("owner")?,
        thread_id: row.try_get("thread_id")?,
        tool_call_id: row.try_get("tool_call_id")?,
        tool_name: row.try_get("tool_name")?,
        action: row.try_get("action")?,
        operation: row.try_get("operation")?,
        verdict: row.try_get("verdict")?,
        rule: row.try_get("rule")?,
        approval_id: row.try_get("approval_id")?,
        outcome: row.try_get("outcome")?,
        duration_ms: row.try_get("duration_ms")?,
        detail: parse_json("audit_log.detail", &row.try_get::<String, _>("detail")?)?,
    })
}

fn message_from_row(row: &SqliteRow) -> StoreResult<StoredMessage> {
    let role: String = row.try_get("role")?;
    Ok(StoredMessage {
        thread_id: row.try_get("thread_id")?,
        seq: row.try_get("seq")?,
        id: row.try_get("id")?,
        role: Role::parse(&role)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown message role {role:?}")))?,
        content: row.try_get("content")?,
        metadata: parse_json("messages.metadata", &row.try_get::<String, _>("metadata")?)?,
        tool_call_id: row.try_get("tool_call_id")?,
        created_at_ms: row.try_get("created_at_ms")?,
    })
}

fn event_from_row(row: &SqliteRow) -> StoreResult<StoredEvent> {
    Ok(StoredEvent {
        thread_id: row.try_get("thread_id")?,
        seq: row.try_get("seq")?,
        event_type: row.try_get("event_type")?,
        data: row.try_get::<String, _>("data")?.into(),
        created_at_ms: row.try_get("created_at_ms")?,
    })
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn ready(&self) -> StoreResult<()> {
        let applied: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                .fetch_all(&self.pool)
                .await?;
        for &(version, description, _) in MIGRATIONS {
            if !applied.contains(&version) {
                return Err(StoreError::Corrupt(format!(
                    "migration {version} ({description}) is not applied"
                )));
            }
        }
        Ok(())
    }

    async fn thread_owner(&self, thread_id: &str) -> StoreResult<Option<String>> {
        Ok(
            sqlx::query_scalar("SELECT owner FROM threads WHERE id = $1")
                .bind(thread_id)
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    async fn claim_thread(&self, thread_id: &str, owner: &str) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO threads (id, owner, created_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(thread_id)
        .bind(owner)
        .bind(crate::protocol::now_ms())
        .execute(&self.pool)
        .await?;
        match self.thread_owner(thread_id).await? {
            Some(existing) if existing == owner => Ok(()),
            Some(_) => Err(StoreError::NotOwner),
            None => Err(StoreError::NotFound(format!("thread {thread_id:?}"))),
        }
    }

    async fn tool_call(&self, thread_id: &str, id: &str) -> StoreResult<Option<ToolCallRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE thread_id = $1 AND id = $2"
        ))
        .bind(thread_id)
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(tool_call_from_row).transpose()
    }

    async fn running_tool_calls(&self) -> StoreResult<Vec<ToolCallRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE status = 'running' \
             ORDER BY created_at_ms, thread_id, id"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(tool_call_from_row).collect()
    }

    async fn run_calls(&self, thread_id: &str, run_id: &str) -> StoreResult<Vec<ToolCallRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {TOOL_CALL_COLUMNS} FROM tool_calls WHERE thread_id = $1 AND run_id = $2 \
             ORDER BY ordinal"
        ))
        .bind(thread_id)
        .bind(run_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(tool_call_from_row).collect()
    }

    async fn approval(&self, id: &str) -> StoreResult<Option<ApprovalRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(approval_from_row).transpose()
    }

    async fn approvals(
        &self,
        owner: &str,
        status: Option<ApprovalStatus>,
        limit: i64,
    ) -> StoreResult<Vec<ApprovalRecord>> {
        if limit <= 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals \
             WHERE owner = $1 AND ($2 IS NULL OR status = $2) \
             ORDER BY created_at_ms DESC, id DESC LIMIT $3"
        ))
        .bind(owner)
        .bind(status.map(ApprovalStatus::as_str))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(approval_from_row).collect()
    }

    async fn expired_approvals(&self, now_ms: i64, limit: i64) -> StoreResult<Vec<ApprovalRecord>> {
        if limit <= 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals \
             WHERE status = 'pending' AND expires_at_ms <= $1 \
             ORDER BY expires_at_ms, id LIMIT $2"
        ))
        .bind(now_ms)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(approval_from_row).collect()
    }

    async fn audit(&self, filter: &AuditFilter) -> StoreResult<Vec<AuditEntry>> {
        if filter.limit <= 0 {
            return Ok(Vec::new());
        }
        let mut query = sqlx::QueryBuilder::new(format!(
            "SELECT {AUDIT_COLUMNS} FROM audit_log WHERE owner = "
        ));
        query.push_bind(&filter.owner);
        for (column, value) in [
            ("thread_id", &filter.thread_id),
            ("tool_name", &filter.tool_name),
            ("action", &filter.action),
            ("tool_call_id", &filter.tool_call_id),
        ] {
            if let Some(value) = value {
                query
                    .push(format_args!(" AND {column} = "))
                    .push_bind(value);
            }
        }
        if let Some(since) = filter.since_ms {
            query.push(" AND at_ms >= ").push_bind(since);
        }
        if let Some(until) = filter.until_ms {
            query.push(" AND at_ms < ").push_bind(until);
        }
        if let Some(before) = filter.before_id {
            query.push(" AND id < ").push_bind(before);
        }
        query
            .push(" ORDER BY id DESC LIMIT ")
            .push_bind(filter.limit);
        let rows = query.build().fetch_all(&self.pool).await?;
        rows.iter().map(audit_from_row).collect()
    }

    async fn append_audit(&self, entry: &NewAuditEntry) -> StoreResult<i64> {
        let writes = Arc::clone(&self.writes);
        let entry = entry.clone();
        tokio::task::spawn_blocking(move || writes.append_audit(&entry))
            .await
            .map_err(worker_crashed)?
    }

    async fn owner_rules(&self, owner: &str) -> StoreResult<Option<Value>> {
        let rules: Option<String> =
            sqlx::query_scalar("SELECT rules FROM owner_permissions WHERE owner = $1")
                .bind(owner)
                .fetch_optional(&self.pool)
                .await?;
        rules
            .map(|text| parse_json("owner_permissions.rules", &text))
            .transpose()
    }

    async fn put_owner_rules(
        &self,
        owner: &str,
        rules: &Value,
        updated_at_ms: i64,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO owner_permissions (owner, rules, updated_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (owner) DO UPDATE SET \
                 rules = excluded.rules, updated_at_ms = excluded.updated_at_ms",
        )
        .bind(owner)
        .bind(json_text(rules))
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
        if limit <= 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "SELECT thread_id, seq, event_type, data, created_at_ms FROM events \
             WHERE thread_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(thread_id)
        .bind(after)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(event_from_row).collect()
    }

    async fn last_event_seq(&self, thread_id: &str) -> StoreResult<i64> {
        let seq: Option<i64> =
            sqlx::query_scalar("SELECT last_event_seq FROM threads WHERE id = $1")
                .bind(thread_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(seq.unwrap_or(0))
    }

    async fn messages_before(
        &self,
        thread_id: &str,
        before: Option<i64>,
        limit: i64,
    ) -> StoreResult<Vec<StoredMessage>> {
        if limit <= 0 {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE thread_id = $1 AND seq < $2 \
             ORDER BY seq DESC LIMIT $3"
        ))
        .bind(thread_id)
        .bind(before.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let mut page = rows
            .iter()
            .map(message_from_row)
            .collect::<StoreResult<Vec<_>>>()?;
        page.reverse();
        Ok(page)
    }

    async fn all_messages(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>> {
        let rows = sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE thread_id = $1 ORDER BY seq"
        ))
        .bind(thread_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(message_from_row).collect()
    }

    async fn apply_batch(&self, units: &[WriteUnit]) -> StoreResult<Vec<StoreResult<UnitReceipt>>> {
        // Synchronous: the group-commit writer calls this on its own thread.
        self.writes.apply_batch(units)
    }
}
