//! The production store: Postgres.
//!
//! JSON columns are `JSONB` (bound as `sqlx::types::Json`); event data stays
//! `TEXT` so a replay is byte-identical. Writers of one thread serialise on
//! the thread's row lock (taken by the first statement of each unit), which
//! also holds across several toolgate processes sharing the database.

use std::borrow::Cow;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};
use sqlx::types::Json;
use sqlx::{Acquire, PgConnection, Row};

use super::{
    CallStatus, FinishedToolCall, NewEvent, NewMessage, NewToolCall, Role, Store, StoreError,
    StoreResult, StoredEvent, StoredMessage, ToolCallRecord, UnitReceipt, WriteOp, WriteUnit,
};

/// The migrations of `migrations/postgres`, embedded in the binary.
///
/// `sqlx::migrate!` lives behind sqlx's `macros` feature, which this crate
/// does not enable; the files are embedded here instead. Version, description
/// and checksum match what `migrate!` would record.
const MIGRATIONS: &[(i64, &str, &str)] = &[(
    1,
    "init",
    include_str!("../../migrations/postgres/0001_init.sql"),
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

pub struct PgStore {
    pool: PgPool,
}

impl PgStore {
    /// Connect a pool to `url` (`postgres://…`) and run pending migrations
    /// (under Postgres' migration lock, so replicas may start together).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        Migrator::new(Embedded).await?.run(&pool).await?;
        Ok(PgStore { pool })
    }

    /// The connection pool (e.g. for `LISTEN`/`NOTIFY`).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

fn tool_call_from_row(row: &PgRow) -> StoreResult<ToolCallRecord> {
    let status: String = row.try_get("status")?;
    Ok(ToolCallRecord {
        thread_id: row.try_get("thread_id")?,
        id: row.try_get("id")?,
        owner: row.try_get("owner")?,
        run_id: row.try_get("run_id")?,
        tool_name: row.try_get("tool_name")?,
        args: row.try_get::<Json<Value>, _>("args")?.0,
        status: CallStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown tool call status {status:?}")))?,
        output: row
            .try_get::<Option<Json<Value>>, _>("output")?
            .map(|j| j.0),
        undo: row.try_get::<Option<Json<Value>>, _>("undo")?.map(|j| j.0),
        message_id: row.try_get("message_id")?,
        created_at_ms: row.try_get("created_at_ms")?,
        finished_at_ms: row.try_get("finished_at_ms")?,
    })
}

fn message_from_row(row: &PgRow) -> StoreResult<StoredMessage> {
    let role: String = row.try_get("role")?;
    Ok(StoredMessage {
        thread_id: row.try_get("thread_id")?,
        seq: row.try_get("seq")?,
        id: row.try_get("id")?,
        role: Role::parse(&role)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown message role {role:?}")))?,
        content: row.try_get("content")?,
        metadata: row.try_get::<Json<Value>, _>("metadata")?.0,
        tool_call_id: row.try_get("tool_call_id")?,
        created_at_ms: row.try_get("created_at_ms")?,
    })
}

fn event_from_row(row: &PgRow) -> StoreResult<StoredEvent> {
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
async fn apply_unit(conn: &mut PgConnection, unit: &WriteUnit) -> StoreResult<UnitReceipt> {
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
                let stored = insert_events(conn, unit, events, next_event_seq).await?;
                next_event_seq += stored.len() as i64;
                receipt.events.extend(stored);
            }
        }
    }
    Ok(receipt)
}

async fn insert_tool_call(
    conn: &mut PgConnection,
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
    .bind(Json(&call.args))
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
    conn: &mut PgConnection,
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
    .bind(Json(&finished.output))
    .bind(finished.undo.as_ref().map(Json))
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
    conn: &mut PgConnection,
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
    .bind(Json(&message.metadata))
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

/// Append `events` with seqs from `first_seq` on, in one statement.
async fn insert_events(
    conn: &mut PgConnection,
    unit: &WriteUnit,
    events: &[NewEvent],
    first_seq: i64,
) -> StoreResult<Vec<StoredEvent>> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let seqs: Vec<i64> = (first_seq..).take(events.len()).collect();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    let data: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
    let created: Vec<i64> = events.iter().map(|e| e.created_at_ms).collect();
    sqlx::query(
        "INSERT INTO events (thread_id, seq, event_type, data, created_at_ms) \
         SELECT $1, u.seq, u.event_type, u.data, u.created_at_ms \
         FROM UNNEST($2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::BIGINT[]) \
             AS u (seq, event_type, data, created_at_ms)",
    )
    .bind(&unit.thread_id)
    .bind(&seqs)
    .bind(&types)
    .bind(&data)
    .bind(&created)
    .execute(&mut *conn)
    .await
    .map_err(|e| unit_error(e, || format!("events from seq {first_seq}")))?;
    Ok(events
        .iter()
        .zip(seqs)
        .map(|(event, seq)| StoredEvent {
            thread_id: unit.thread_id.clone(),
            seq,
            event_type: event.event_type.clone(),
            data: event.data.clone(),
            created_at_ms: event.created_at_ms,
        })
        .collect())
}

/// Whether a unit's error concerns that unit alone (its savepoint is rolled
/// back and the batch goes on) rather than the connection or the database
/// (the whole batch fails, so a locked or broken database is not retried unit
/// by unit).
fn is_unit_local(err: &StoreError) -> bool {
    match err {
        StoreError::NotOwner | StoreError::Conflict(_) | StoreError::NotFound(_) => true,
        // Integrity constraint violations (SQLSTATE class 23) and data
        // exceptions (class 22, e.g. a NUL character in text or a \u0000
        // escape in JSONB): the unit's data, not the database, is at fault.
        StoreError::Database(sqlx::Error::Database(db)) => {
            !matches!(db.kind(), sqlx::error::ErrorKind::Other)
                || db.code().is_some_and(|code| code.starts_with("22"))
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
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
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
