//! The embedded store: one SQLite file, the default when no `DATABASE_URL`
//! is configured.
//!
//! The file runs in WAL mode with `synchronous=FULL`, so a returned commit is
//! on disk and readers never block the writer. JSON columns hold JSON text
//! (checked by `json_valid()` in the schema). Writers serialise on SQLite's
//! database lock, waiting up to [`BUSY_TIMEOUT`] for another connection or
//! process to finish.

use std::borrow::Cow;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Acquire, Row, SqliteConnection};

use super::{
    CallStatus, FinishedToolCall, NewEvent, NewMessage, NewToolCall, Role, Store, StoreError,
    StoreResult, StoredEvent, StoredMessage, ToolCallRecord, UnitReceipt, WriteOp, WriteUnit,
};

/// How long a statement waits for SQLite's write lock before failing.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The migrations of `migrations/sqlite`, embedded in the binary.
///
/// `sqlx::migrate!` lives behind sqlx's `macros` feature, which this crate
/// does not enable; the files are embedded here instead. Version, description
/// and checksum match what `migrate!` would record.
const MIGRATIONS: &[(i64, &str, &str)] = &[(
    1,
    "init",
    include_str!("../../migrations/sqlite/0001_init.sql"),
)];

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

/// Create the unit's thread (for its owner) or lock and bump its counters,
/// reserving the seqs of the unit's events and messages; returns the owner
/// and the new last seqs. A unit of another owner rolls this back.
const RESERVE_SEQS: &str = "\
INSERT INTO threads (id, owner, created_at_ms, last_event_seq, last_message_seq) \
VALUES ($1, $2, $3, $4, $5) \
ON CONFLICT (id) DO UPDATE SET \
    last_event_seq = threads.last_event_seq + excluded.last_event_seq, \
    last_message_seq = threads.last_message_seq + excluded.last_message_seq \
RETURNING owner, last_event_seq, last_message_seq";

const TOOL_CALL_COLUMNS: &str = "thread_id, id, owner, run_id, tool_name, args, status, output, \
     undo, message_id, created_at_ms, finished_at_ms";

const MESSAGE_COLUMNS: &str =
    "thread_id, seq, id, role, content, metadata, tool_call_id, created_at_ms";

pub struct SqliteStore {
    pool: SqlitePool,
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
        let pool = pool_options.connect_with(options).await?;
        Migrator::new(Embedded).await?.run(&pool).await?;
        Ok(SqliteStore { pool })
    }

    /// The connection pool (for diagnostics and tests).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
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
        data: row.try_get("data")?,
        created_at_ms: row.try_get("created_at_ms")?,
    })
}

/// A failed statement inside a unit: unique violations are conflicts.
fn unit_error(err: sqlx::Error, what: impl FnOnce() -> String) -> StoreError {
    match &err {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict(format!("{}: {}", what(), db.message()))
        }
        _ => StoreError::Database(err),
    }
}

/// Apply one unit on `conn` (already inside the unit's savepoint).
async fn apply_unit(conn: &mut SqliteConnection, unit: &WriteUnit) -> StoreResult<UnitReceipt> {
    let event_count: usize = unit
        .ops
        .iter()
        .map(|op| match op {
            WriteOp::AppendEvents(events) => events.len(),
            _ => 0,
        })
        .sum();
    let message_count = unit
        .ops
        .iter()
        .filter(|op| matches!(op, WriteOp::InsertMessage(_)))
        .count();

    // Create the thread or bump its counters: this reserves the unit's seqs.
    let row = sqlx::query(RESERVE_SEQS)
        .bind(&unit.thread_id)
        .bind(&unit.owner)
        .bind(crate::protocol::now_ms())
        .bind(event_count as i64)
        .bind(message_count as i64)
        .fetch_one(&mut *conn)
        .await?;
    let owner: String = row.try_get("owner")?;
    if owner != unit.owner {
        return Err(StoreError::NotOwner);
    }
    let mut next_event_seq = row.try_get::<i64, _>("last_event_seq")? - event_count as i64 + 1;
    let mut next_message_seq =
        row.try_get::<i64, _>("last_message_seq")? - message_count as i64 + 1;

    let mut receipt = UnitReceipt::default();
    for op in &unit.ops {
        match op {
            WriteOp::InsertToolCall(call) => insert_tool_call(conn, unit, call).await?,
            WriteOp::FinishToolCall(finished) => finish_tool_call(conn, unit, finished).await?,
            WriteOp::InsertMessage(message) => {
                insert_message(conn, unit, message, next_message_seq).await?;
                receipt
                    .messages
                    .push((message.id.clone(), next_message_seq));
                next_message_seq += 1;
            }
            WriteOp::AppendEvents(events) => {
                for event in events {
                    let stored = insert_event(conn, unit, event, next_event_seq).await?;
                    receipt.events.push(stored);
                    next_event_seq += 1;
                }
            }
        }
    }
    Ok(receipt)
}

async fn insert_tool_call(
    conn: &mut SqliteConnection,
    unit: &WriteUnit,
    call: &NewToolCall,
) -> StoreResult<()> {
    let done = sqlx::query(
        "INSERT INTO tool_calls (thread_id, id, owner, run_id, tool_name, args, status, \
         created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, 'running', $7) \
         ON CONFLICT (thread_id, id) DO NOTHING",
    )
    .bind(&unit.thread_id)
    .bind(&call.id)
    .bind(&unit.owner)
    .bind(&call.run_id)
    .bind(&call.tool_name)
    .bind(json_text(&call.args))
    .bind(call.created_at_ms)
    .execute(&mut *conn)
    .await
    .map_err(|e| unit_error(e, || format!("tool call {:?}", call.id)))?;
    if done.rows_affected() == 0 {
        return Err(StoreError::Conflict(format!(
            "tool call {:?} is already recorded in thread {:?}",
            call.id, unit.thread_id
        )));
    }
    Ok(())
}

async fn finish_tool_call(
    conn: &mut SqliteConnection,
    unit: &WriteUnit,
    finished: &FinishedToolCall,
) -> StoreResult<()> {
    if finished.status == CallStatus::Running {
        return Err(StoreError::Conflict(format!(
            "tool call {:?} cannot be finished with status running",
            finished.id
        )));
    }
    let done = sqlx::query(
        "UPDATE tool_calls SET status = $3, output = $4, undo = $5, message_id = $6, \
         finished_at_ms = $7 \
         WHERE thread_id = $1 AND id = $2 AND status = 'running'",
    )
    .bind(&unit.thread_id)
    .bind(&finished.id)
    .bind(finished.status.as_str())
    .bind(json_text(&finished.output))
    .bind(finished.undo.as_ref().map(json_text))
    .bind(&finished.message_id)
    .bind(finished.finished_at_ms)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 1 {
        return Ok(());
    }
    let status: Option<String> =
        sqlx::query_scalar("SELECT status FROM tool_calls WHERE thread_id = $1 AND id = $2")
            .bind(&unit.thread_id)
            .bind(&finished.id)
            .fetch_optional(&mut *conn)
            .await?;
    Err(match status {
        None => StoreError::NotFound(format!(
            "tool call {:?} in thread {:?}",
            finished.id, unit.thread_id
        )),
        Some(status) => StoreError::Conflict(format!(
            "tool call {:?} is no longer running (status {status})",
            finished.id
        )),
    })
}

async fn insert_message(
    conn: &mut SqliteConnection,
    unit: &WriteUnit,
    message: &NewMessage,
    seq: i64,
) -> StoreResult<()> {
    let done = sqlx::query(
        "INSERT INTO messages (thread_id, seq, id, role, content, metadata, tool_call_id, \
         created_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (thread_id, id) DO NOTHING",
    )
    .bind(&unit.thread_id)
    .bind(seq)
    .bind(&message.id)
    .bind(message.role.as_str())
    .bind(&message.content)
    .bind(json_text(&message.metadata))
    .bind(&message.tool_call_id)
    .bind(message.created_at_ms)
    .execute(&mut *conn)
    .await
    .map_err(|e| unit_error(e, || format!("message {:?}", message.id)))?;
    if done.rows_affected() == 0 {
        return Err(StoreError::Conflict(format!(
            "message {:?} already exists in thread {:?}",
            message.id, unit.thread_id
        )));
    }
    Ok(())
}

async fn insert_event(
    conn: &mut SqliteConnection,
    unit: &WriteUnit,
    event: &NewEvent,
    seq: i64,
) -> StoreResult<StoredEvent> {
    sqlx::query(
        "INSERT INTO events (thread_id, seq, event_type, data, created_at_ms) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&unit.thread_id)
    .bind(seq)
    .bind(&event.event_type)
    .bind(&event.data)
    .bind(event.created_at_ms)
    .execute(&mut *conn)
    .await
    .map_err(|e| unit_error(e, || format!("event {seq}")))?;
    Ok(StoredEvent {
        thread_id: unit.thread_id.clone(),
        seq,
        event_type: event.event_type.clone(),
        data: event.data.clone(),
        created_at_ms: event.created_at_ms,
    })
}

/// Whether a unit's error concerns that unit alone (its savepoint is rolled
/// back and the batch goes on) rather than the connection or the database
/// (the whole batch fails, so a locked or broken database is not retried unit
/// by unit).
fn is_unit_local(err: &StoreError) -> bool {
    match err {
        StoreError::NotOwner | StoreError::Conflict(_) | StoreError::NotFound(_) => true,
        // Constraint violations: the unit's data, not the database, is at fault.
        StoreError::Database(sqlx::Error::Database(db)) => {
            !matches!(db.kind(), sqlx::error::ErrorKind::Other)
        }
        _ => false,
    }
}

/// The order in which a batch's units are applied: grouped by thread id
/// (stable, so one thread's units keep their order). Every writer locks
/// threads in the same order, which rules out lock-order deadlocks between
/// concurrent batches.
fn apply_order(units: &[WriteUnit]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by(|&a, &b| units[a].thread_id.cmp(&units[b].thread_id));
    order
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
        if units.is_empty() {
            return Ok(Vec::new());
        }
        let mut results: Vec<Option<StoreResult<UnitReceipt>>> =
            (0..units.len()).map(|_| None).collect();
        let mut tx = self.pool.begin().await?;
        for index in apply_order(units) {
            let mut savepoint = tx.begin().await?;
            match apply_unit(&mut savepoint, &units[index]).await {
                Ok(receipt) => {
                    savepoint.commit().await?;
                    results[index] = Some(Ok(receipt));
                }
                Err(err) if is_unit_local(&err) => {
                    savepoint.rollback().await?;
                    results[index] = Some(Err(err));
                }
                // Dropping the transaction rolls everything back.
                Err(err) => return Err(err),
            }
        }
        tx.commit().await?;
        Ok(results.into_iter().flatten().collect())
    }
}
