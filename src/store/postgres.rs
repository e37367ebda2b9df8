//! The production store: Postgres.
//!
//! JSON columns are `JSONB` (the hot rows' documents arrive as JSON text and
//! are cast with `::JSONB`; the others are bound as `sqlx::types::Json`);
//! event data stays `TEXT` so a replay is byte-identical. Writers of one thread serialise on
//! the thread's row lock (taken by the first statement of each unit), which
//! also holds across several toolgate processes sharing the database.

use std::borrow::Cow;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use sqlx::types::Json;
use sqlx::{Acquire, PgConnection, Row};

use super::batch::{Place, Plan, Reserved};
use super::checks::{Decision, Reservation};
use super::reads::{APPROVAL_COLUMNS, Reads, audit_entries, audit_query};
use super::{
    ApprovalRecord, ApprovalStatus, AuditEntry, AuditFilter, DeletedApproval, EventNotices,
    FinishedToolCall, JsonText, NewAuditEntry, NewEvent, NewMessage, NewToolCall, Role,
    RuleChanges, RulesWatch, Store, StoreError, StoreResult, StoredEvent, StoredMessage,
    ThreadSnapshot, ThreadSummary, ToolCallRecord, UnitReceipt, WriteOp, WriteUnit, checks,
};

/// The `NOTIFY` channel that tells every process of a change of an owner's
/// permission rules (the payload is the owner).
const RULES_CHANNEL: &str = "toolgate_owner_rules";

/// The `NOTIFY` channel that tells every process of the events a batch
/// committed: the writing process's token on the first line, then one line
/// per thread, `<last seq> <thread id>`; the token alone when the list
/// would not fit in a payload (under 8000 bytes).
const EVENTS_CHANNEL: &str = "toolgate_events";

/// The `NOTIFY` channel that tells every process of a thread deleted:
/// `<deleted_at_ms> <thread id>`.
const DELETED_CHANNEL: &str = "toolgate_threads_deleted";

/// A deletion notice read back.
fn read_deleted_notice(payload: &str) -> Option<super::Notice> {
    let (at_ms, thread) = payload.split_once(' ')?;
    Some(super::Notice::Deleted {
        thread: thread.to_string(),
        at_ms: at_ms.parse().ok()?,
    })
}

/// How long an events notice's list may be.
const EVENTS_NOTICE_BYTES: usize = 7000;

/// The notice of the events in `receipts`, by `token`'s process; `None`
/// when they hold none.
fn events_notice<'a>(
    token: &str,
    receipts: impl Iterator<Item = &'a UnitReceipt>,
) -> Option<String> {
    let mut last: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
    for event in receipts.flat_map(|r| &r.events) {
        let seq = last.entry(event.thread_id.as_str()).or_insert(event.seq);
        *seq = (*seq).max(event.seq);
    }
    if last.is_empty() {
        return None;
    }
    let mut notice = token.to_string();
    for (thread, seq) in last {
        if notice.len() + thread.len() + 22 > EVENTS_NOTICE_BYTES {
            return Some(token.to_string());
        }
        notice.push_str(&format!("\n{seq} {thread}"));
    }
    Some(notice)
}

/// Listen on `channel` again after `listener` lost its connection, trying
/// every second; false once the pool is closed (shutting down).
async fn listen_again(listener: &mut PgListener, channels: &[&str]) -> bool {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        match listener.listen_all(channels.iter().copied()).await {
            Ok(()) => return true,
            Err(sqlx::Error::PoolClosed) => return false,
            Err(_) => {}
        }
    }
}

/// An events notice read back: `None` for one of this process (`token`),
/// `Some(None)` for any thread.
fn read_events_notice(token: &str, payload: &str) -> Option<Option<Vec<(String, i64)>>> {
    let mut lines = payload.lines();
    if lines.next()? == token {
        return None;
    }
    let threads: Vec<(String, i64)> = lines
        .filter_map(|line| {
            let (seq, thread) = line.split_once(' ')?;
            Some((thread.to_string(), seq.parse().ok()?))
        })
        .collect();
    Some((!threads.is_empty()).then_some(threads))
}

/// The migrations of `migrations/postgres`, embedded in the binary.
///
/// `sqlx::migrate!` lives behind sqlx's `macros` feature, which this crate
/// does not enable; the files are embedded here instead. Version, description
/// and checksum match what `migrate!` would record.
pub(super) const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        "safety",
        include_str!("../../migrations/postgres/0002_safety.sql"),
    ),
    (
        3,
        "result events",
        include_str!("../../migrations/postgres/0003_result_events.sql"),
    ),
    (
        4,
        "approvals by time",
        include_str!("../../migrations/postgres/0004_approvals_by_time.sql"),
    ),
    (
        5,
        "call scope",
        include_str!("../../migrations/postgres/0005_call_scope.sql"),
    ),
    (
        6,
        "threads by owner",
        include_str!("../../migrations/postgres/0006_threads_by_owner.sql"),
    ),
    (
        7,
        "approvals by call",
        include_str!("../../migrations/postgres/0007_approvals_by_call.sql"),
    ),
    (
        8,
        "declared calls",
        include_str!("../../migrations/postgres/0008_declared_calls.sql"),
    ),
    (
        9,
        "developer role",
        include_str!("../../migrations/postgres/0009_developer_role.sql"),
    ),
    (
        10,
        "declared aliases",
        include_str!("../../migrations/postgres/0010_declared_aliases.sql"),
    ),
    (
        11,
        "call instance",
        include_str!("../../migrations/postgres/0011_call_instance.sql"),
    ),
    (
        12,
        "call parent",
        include_str!("../../migrations/postgres/0012_call_parent.sql"),
    ),
    (
        13,
        "call position",
        include_str!("../../migrations/postgres/0013_call_position.sql"),
    ),
    (
        14,
        "closed runs",
        include_str!("../../migrations/postgres/0014_closed_runs.sql"),
    ),
    (
        15,
        "parent index",
        include_str!("../../migrations/postgres/0015_parent_index.sql"),
    ),
    (
        16,
        "instances",
        include_str!("../../migrations/postgres/0016_instances.sql"),
    ),
    (
        17,
        "deleted threads",
        include_str!("../../migrations/postgres/0017_deleted_threads.sql"),
    ),
    (
        18,
        "closing threads",
        include_str!("../../migrations/postgres/0018_closing_threads.sql"),
    ),
    (
        19,
        "approvals of deleted threads",
        include_str!("../../migrations/postgres/0019_approvals_of_deleted_threads.sql"),
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

/// Create the unit's thread (for its owner) or lock and bump its counters,
/// reserving the seqs of the unit's events and messages and the ordinals of
/// its calls; returns the owner and the new last values. A unit of another
/// owner rolls this back.
const RESERVE_SEQS: &str = "\
INSERT INTO threads (id, owner, created_at_ms, last_event_seq, last_message_seq, \
    last_call_ordinal) \
VALUES ($1, $2, $3, $4, $5, $6) \
ON CONFLICT (id) DO UPDATE SET \
    last_event_seq = threads.last_event_seq + excluded.last_event_seq, \
    last_message_seq = threads.last_message_seq + excluded.last_message_seq, \
    last_call_ordinal = threads.last_call_ordinal + excluded.last_call_ordinal \
RETURNING owner, last_event_seq, last_message_seq, last_call_ordinal, deleted_at_ms, \
    closing_at_ms";

pub struct PgStore {
    pool: PgPool,
    /// One connection for [`Store::apply_batch`], used by the group-commit
    /// writer alone.
    batches: PgPool,
    /// This process's mark on its events notices, which its own watch
    /// passes over (its events reach its subscribers in process).
    token: String,
    superseded: super::Superseded,
}

/// How long a request waits for a connection by default
/// (`storage.database_wait_secs`).
const DEFAULT_WAIT: Duration = Duration::from_secs(10);

impl PgStore {
    /// The queries both backends share, over the read pool.
    fn reads(&self) -> Reads<'_, sqlx::Postgres> {
        Reads { pool: &self.pool }
    }

    /// Connect a pool to `url` (`postgres://…`) and run pending migrations
    /// (under Postgres' migration lock, so replicas may start together).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, DEFAULT_WAIT).await
    }

    /// [`connect`](Self::connect), a request waiting at most `wait` for a
    /// connection: a free one, or a new one while the server refuses them
    /// (it is down or restarting), before it is answered `503`.
    pub async fn connect_with(url: &str, wait: Duration) -> Result<Self, StoreError> {
        let pool = match PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(wait)
            .connect(url)
            .await
        {
            Ok(pool) => pool,
            // The pool retries a failing connection until its timeout and
            // then reports only that: one more attempt says why.
            Err(sqlx::Error::PoolTimedOut) => {
                use sqlx::Connection as _;
                let conn = PgConnection::connect(url).await?;
                let _ = conn.close().await;
                return Err(StoreError::Database(sqlx::Error::PoolTimedOut));
            }
            Err(e) => return Err(e.into()),
        };
        Migrator::new(Embedded)
            .await?
            .run(&pool)
            .await
            .map_err(super::migration_error)?;
        // Connected on first use, by the writer's own runtime; no idle reaper
        // (it would run on this one).
        let batches = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(wait)
            .connect_lazy(url)?;
        Ok(PgStore {
            pool,
            batches,
            token: uuid::Uuid::new_v4().simple().to_string(),
            superseded: super::Superseded::default(),
        })
    }

    /// The connection pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// The server, database and user a Postgres URL names, for messages: never
/// its password.
pub fn describe_target(url: &str) -> String {
    use std::str::FromStr as _;
    match sqlx::postgres::PgConnectOptions::from_str(url) {
        Ok(options) => format!(
            "{:?} on {}:{} as user {:?}",
            options.get_database().unwrap_or(options.get_username()),
            options.get_host(),
            options.get_port(),
            options.get_username()
        ),
        Err(_) => "named by an unreadable URL".into(),
    }
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
    let reserved = Reservation::of(unit);

    // Create the thread or bump its counters: this reserves the unit's seqs.
    let row = sqlx::query(RESERVE_SEQS)
        .bind(&unit.thread_id)
        .bind(&unit.owner)
        .bind(reserved.created_at_ms)
        .bind(reserved.events)
        .bind(reserved.messages)
        .bind(reserved.calls)
        .fetch_one(&mut *conn)
        .await?;
    let owner: String = row.try_get("owner")?;
    if owner != unit.owner {
        return Err(StoreError::NotOwner);
    }
    if let Some(at_ms) = row.try_get::<Option<i64>, _>("deleted_at_ms")? {
        return Err(StoreError::ThreadDeleted {
            thread: unit.thread_id.clone(),
            at_ms,
        });
    }
    let closing: Option<i64> = row.try_get("closing_at_ms")?;
    let mut next_event_seq = row.try_get::<i64, _>("last_event_seq")? - reserved.events + 1;
    let mut next_message_seq = row.try_get::<i64, _>("last_message_seq")? - reserved.messages + 1;
    let mut next_ordinal = row.try_get::<i64, _>("last_call_ordinal")? - reserved.calls + 1;

    let mut receipt = UnitReceipt::default();
    for op in &unit.ops {
        match op {
            WriteOp::InsertToolCall(call) => {
                let place = Place {
                    ordinal: next_ordinal,
                    after_message_seq: next_message_seq - 1,
                };
                insert_tool_call(conn, unit, call, place).await?;
                next_ordinal += 1;
            }
            WriteOp::FinishToolCall(finished) => finish_tool_call(conn, unit, finished).await?,
            WriteOp::StartPendingCall { id, instance } => {
                start_pending_call(conn, unit, id, instance.as_deref()).await?
            }
            WriteOp::MarkUndone { id, undone_by } => mark_undone(conn, unit, id, undone_by).await?,
            WriteOp::MarkUndoneIfOpen { id, undone_by } => {
                set_undone(conn, unit, id, undone_by).await?;
            }
            WriteOp::InsertMessage(message) => {
                insert_message(conn, unit, message, next_message_seq).await?;
                receipt
                    .messages
                    .push((message.id.clone(), next_message_seq));
                next_message_seq += 1;
            }
            WriteOp::AppendEvents(events) => {
                checks::events_fit_unit(unit, events)?;
                let stored = insert_events(conn, unit, events, next_event_seq).await?;
                next_event_seq += stored.len() as i64;
                receipt.events.extend(stored);
            }
            WriteOp::InsertApproval(approval) => insert_approval(conn, unit, approval).await?,
            WriteOp::DecideApproval { .. } => {
                let decision = Decision::of(op).expect("a DecideApproval op");
                decide_approval(conn, unit, decision).await?
            }
            WriteOp::AppendAudit(entry) => {
                checks::audit_fits_unit(unit, entry)?;
                receipt.audit_ids.push(insert_audit(conn, entry).await?);
            }
            WriteOp::CloseRun {
                run_id,
                closed_at_ms,
            } => {
                sqlx::query(
                    "INSERT INTO closed_runs (thread_id, run_id, closed_at_ms) \
                     VALUES ($1, $2, $3) ON CONFLICT (thread_id, run_id) DO NOTHING",
                )
                .bind(&unit.thread_id)
                .bind(run_id)
                .bind(closed_at_ms)
                .execute(&mut *conn)
                .await?;
            }
            WriteOp::DeleteThread { deleted_at_ms } => {
                checks::deletion_fits_unit(unit)?;
                // Gap-free counters: what the thread holds.
                let held = [next_message_seq - 1, next_event_seq - 1, next_ordinal - 1];
                let content = delete_thread(conn, &unit.thread_id, *deleted_at_ms, held).await?;
                let entry = checks::deletion_audit(unit, *deleted_at_ms, &content);
                receipt.audit_ids.push(insert_audit(conn, &entry).await?);
                receipt.deleted = Some(content);
            }
            WriteOp::CloseThread { closing_at_ms } => {
                sqlx::query(
                    "UPDATE threads SET closing_at_ms = COALESCE(closing_at_ms, $2) WHERE id = $1",
                )
                .bind(&unit.thread_id)
                .bind(closing_at_ms)
                .execute(&mut *conn)
                .await?;
            }
        }
        checks::open_for(unit, op, closing)?;
    }
    Ok(receipt)
}

/// [`WriteOp::DeleteThread`], its unit's reservation holding the thread's
/// row lock: every other write of the thread waits for it. `counted`: its
/// messages, events and calls, as its gap-free counters say.
async fn delete_thread(
    conn: &mut PgConnection,
    thread_id: &str,
    at_ms: i64,
    counted: [i64; 3],
) -> StoreResult<super::DeletedContent> {
    let calls: Vec<(String, String)> = sqlx::query_as(checks::BUSY_CALLS)
        .bind(thread_id)
        .fetch_all(&mut *conn)
        .await?;
    checks::not_busy(calls)?;
    let mut removed = async |table: &str| -> StoreResult<i64> {
        Ok(
            sqlx::query(&format!("DELETE FROM {table} WHERE thread_id = $1"))
                .bind(thread_id)
                .execute(&mut *conn)
                .await?
                .rows_affected() as i64,
        )
    };
    let content = super::DeletedContent {
        messages: counted[0],
        events: counted[1],
        tool_calls: counted[2],
        approvals: removed("approvals").await?,
    };
    if counted.iter().sum::<i64>() <= checks::DELETE_AT_ONCE {
        for (table, _) in checks::PURGED_TABLES {
            removed(table).await?;
        }
    }
    for table in checks::OTHER_THREAD_TABLES {
        removed(table).await?;
    }
    sqlx::query("UPDATE threads SET deleted_at_ms = $2 WHERE id = $1")
        .bind(thread_id)
        .bind(at_ms)
        .execute(&mut *conn)
        .await?;
    // Every process's streams of the thread end, and their owners' cache
    // learns of it, as this commits.
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(DELETED_CHANNEL)
        .bind(format!("{at_ms} {thread_id}"))
        .execute(&mut *conn)
        .await?;
    Ok(content)
}

async fn insert_tool_call(
    conn: &mut PgConnection,
    unit: &WriteUnit,
    call: &NewToolCall,
    place: Place,
) -> StoreResult<()> {
    checks::insertable_call_status(&call.id, call.status)?;
    let given = (call.tool_name.as_str(), call.args.as_str());
    let declared = same_as_declared(conn, &unit.thread_id, &call.id, given).await?;
    if let Some((false, _)) = declared {
        return Err(checks::redeclared(&call.id, checks::GivenIn::Declaration));
    }
    checks::declared_as_expected(
        &call.id,
        declared.as_ref().map(|(_, message)| message.as_str()),
        call.declared_by.as_deref(),
    )?;
    if let (None, Some(parent)) = (&call.declared_by, &call.parent_message_id) {
        let role: Option<String> =
            sqlx::query_scalar("SELECT role FROM messages WHERE thread_id = $1 AND id = $2")
                .bind(&unit.thread_id)
                .bind(parent)
                .fetch_optional(&mut *conn)
                .await?;
        if let Some(role) = role.filter(|r| r != Role::Assistant.as_str()) {
            return Err(checks::parent_not_assistant(&call.id, parent, &role));
        }
    }
    let done = sqlx::query(
        "INSERT INTO tool_calls (thread_id, id, owner, run_id, tool_name, args, status, \
         created_at_ms, undo_of, ordinal, workspace, dry_run, instance, parent_message_id, \
         after_message_seq) \
         VALUES ($1, $2, $3, $4, $5, $6::JSONB, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
         ON CONFLICT (thread_id, id) DO NOTHING",
    )
    .bind(&unit.thread_id)
    .bind(&call.id)
    .bind(&unit.owner)
    .bind(&call.run_id)
    .bind(&call.tool_name)
    .bind(call.args.as_str())
    .bind(call.status.as_str())
    .bind(call.created_at_ms)
    .bind(&call.undo_of)
    .bind(place.ordinal)
    .bind(&call.workspace)
    .bind(i64::from(call.dry_run))
    .bind(&call.instance)
    .bind(&call.parent_message_id)
    .bind(place.after_message_seq)
    .execute(&mut *conn)
    .await
    .map_err(|e| unit_error(e, || format!("tool call {:?}", call.id)))?;
    if done.rows_affected() == 0 {
        return Err(StoreError::Conflict(format!(
            "tool call {:?} is already recorded in thread {:?}",
            call.id, unit.thread_id
        )));
    }
    // A new call of a closed run: the unit is rolled back. (An id already
    // recorded is the conflict above, answered from its record.) The unit
    // holds the thread's row lock (its reservation), as a close does: this
    // reads the closes committed before it.
    let closed: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM closed_runs WHERE thread_id = $1 AND run_id = $2)",
    )
    .bind(&unit.thread_id)
    .bind(&call.run_id)
    .fetch_one(&mut *conn)
    .await?;
    if closed {
        return Err(StoreError::RunClosed {
            run_id: call.run_id.clone(),
        });
    }
    Ok(())
}

/// The status of call `id` in the unit's thread, `None` if not recorded.
async fn call_status(
    conn: &mut PgConnection,
    unit: &WriteUnit,
    id: &str,
) -> StoreResult<Option<String>> {
    Ok(
        sqlx::query_scalar("SELECT status FROM tool_calls WHERE thread_id = $1 AND id = $2")
            .bind(&unit.thread_id)
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?,
    )
}

async fn finish_tool_call(
    conn: &mut PgConnection,
    unit: &WriteUnit,
    finished: &FinishedToolCall,
) -> StoreResult<()> {
    checks::finishable(unit, finished)?;
    let done = sqlx::query(
        "UPDATE tool_calls SET status = $3, undo = $4::JSONB, message_id = $5, finished_at_ms = $6 \
         WHERE thread_id = $1 AND id = $2 AND status IN ('running', 'pending_approval')",
    )
    .bind(&unit.thread_id)
    .bind(&finished.id)
    .bind(finished.status.as_str())
    .bind(finished.undo.as_ref().map(JsonText::as_str))
    .bind(&finished.message_id)
    .bind(finished.finished_at_ms)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 1 {
        return Ok(());
    }
    let current = call_status(conn, unit, &finished.id).await?;
    Err(checks::call_not_changed(
        unit,
        &finished.id,
        current,
        "running or pending approval",
    ))
}

async fn start_pending_call(
    conn: &mut PgConnection,
    unit: &WriteUnit,
    id: &str,
    instance: Option<&str>,
) -> StoreResult<()> {
    let done = sqlx::query(
        "UPDATE tool_calls SET status = 'running', instance = $3 \
         WHERE thread_id = $1 AND id = $2 AND status = 'pending_approval'",
    )
    .bind(&unit.thread_id)
    .bind(id)
    .bind(instance)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 1 {
        return Ok(());
    }
    let current = call_status(conn, unit, id).await?;
    Err(checks::call_not_changed(
        unit,
        id,
        current,
        "pending approval",
    ))
}

/// Mark call `id` undone by `undone_by` if it is recorded and not marked
/// yet; whether it was.
async fn set_undone(
    conn: &mut PgConnection,
    unit: &WriteUnit,
    id: &str,
    undone_by: &str,
) -> StoreResult<bool> {
    let done = sqlx::query(
        "UPDATE tool_calls SET undone_by = $3 \
         WHERE thread_id = $1 AND id = $2 AND undone_by IS NULL",
    )
    .bind(&unit.thread_id)
    .bind(id)
    .bind(undone_by)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

async fn mark_undone(
    conn: &mut PgConnection,
    unit: &WriteUnit,
    id: &str,
    undone_by: &str,
) -> StoreResult<()> {
    if set_undone(conn, unit, id, undone_by).await? {
        return Ok(());
    }
    let current: Option<Option<String>> =
        sqlx::query_scalar("SELECT undone_by FROM tool_calls WHERE thread_id = $1 AND id = $2")
            .bind(&unit.thread_id)
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
    Err(match current {
        None => StoreError::NotFound(format!("tool call {id:?} in thread {:?}", unit.thread_id)),
        Some(by) => StoreError::Conflict(format!(
            "tool call {id:?} is already undone (by {:?})",
            by.unwrap_or_default()
        )),
    })
}

async fn insert_approval(
    conn: &mut PgConnection,
    unit: &WriteUnit,
    approval: &ApprovalRecord,
) -> StoreResult<()> {
    checks::approval_fits_unit(unit, approval)?;
    let done = sqlx::query(&format!(
        "INSERT INTO approvals ({APPROVAL_COLUMNS}) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
         ON CONFLICT (id) DO NOTHING"
    ))
    .bind(&approval.id)
    .bind(&approval.thread_id)
    .bind(&approval.owner)
    .bind(&approval.tool_call_id)
    .bind(&approval.tool_name)
    .bind(Json(&approval.arguments))
    .bind(&approval.reason)
    .bind(approval.preview.as_ref().map(Json))
    .bind(Json(&approval.request))
    .bind(approval.status.as_str())
    .bind(&approval.decided_by)
    .bind(&approval.decision_reason)
    .bind(approval.created_at_ms)
    .bind(approval.expires_at_ms)
    .bind(approval.decided_at_ms)
    .execute(&mut *conn)
    .await
    .map_err(|e| unit_error(e, || format!("approval {:?}", approval.id)))?;
    if done.rows_affected() == 0 {
        return Err(checks::approval_exists(&approval.id));
    }
    Ok(())
}

async fn decide_approval(
    conn: &mut PgConnection,
    unit: &WriteUnit,
    decision: Decision<'_>,
) -> StoreResult<()> {
    checks::decision_status(decision.id, decision.status)?;
    // A human decision must come before the deadline; expiry may come late.
    let done = sqlx::query(
        "UPDATE approvals SET status = $3, decided_by = $4, decision_reason = $5, \
         decided_at_ms = $6 \
         WHERE id = $1 AND thread_id = $2 AND status = 'pending' \
           AND ($3 = 'expired' OR expires_at_ms > $6)",
    )
    .bind(decision.id)
    .bind(&unit.thread_id)
    .bind(decision.status.as_str())
    .bind(decision.decided_by)
    .bind(decision.reason)
    .bind(decision.decided_at_ms)
    .execute(&mut *conn)
    .await?;
    if done.rows_affected() == 1 {
        return Ok(());
    }
    let current =
        sqlx::query("SELECT status, expires_at_ms FROM approvals WHERE id = $1 AND thread_id = $2")
            .bind(decision.id)
            .bind(&unit.thread_id)
            .fetch_optional(&mut *conn)
            .await?
            .map(|row| -> StoreResult<(String, i64)> {
                Ok((row.try_get("status")?, row.try_get("expires_at_ms")?))
            })
            .transpose()?;
    Err(checks::approval_not_decided(unit, decision.id, current))
}

/// Append one audit entry; returns its id.
async fn insert_audit(conn: &mut PgConnection, entry: &NewAuditEntry) -> StoreResult<i64> {
    let id = sqlx::query_scalar(
        "INSERT INTO audit_log (at_ms, owner, thread_id, tool_call_id, tool_name, action, \
         operation, verdict, rule, approval_id, outcome, duration_ms, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13::JSONB) RETURNING id",
    )
    .bind(entry.at_ms)
    .bind(&entry.owner)
    .bind(&entry.thread_id)
    .bind(&entry.tool_call_id)
    .bind(&entry.tool_name)
    .bind(&entry.action)
    .bind(&entry.operation)
    .bind(&entry.verdict)
    .bind(&entry.rule)
    .bind(&entry.approval_id)
    .bind(&entry.outcome)
    .bind(entry.duration_ms)
    .bind(entry.detail.as_str())
    .fetch_one(&mut *conn)
    .await
    .map_err(|e| unit_error(e, || format!("audit entry {:?}", entry.action)))?;
    Ok(id)
}

async fn insert_message(
    conn: &mut PgConnection,
    unit: &WriteUnit,
    message: &NewMessage,
    seq: i64,
) -> StoreResult<()> {
    // A tool message's id is toolgate's own, or checked by the run that
    // brings it.
    if !matches!(message.role, Role::Assistant | Role::Tool) {
        let call: Option<String> = sqlx::query_scalar(
            "SELECT id FROM tool_calls \
             WHERE thread_id = $1 AND parent_message_id = $2 AND parent_message_id IS NOT NULL \
             LIMIT 1",
        )
        .bind(&unit.thread_id)
        .bind(&message.id)
        .fetch_optional(&mut *conn)
        .await?;
        if let Some(call) = call {
            return Err(checks::parent_id_taken(message, &call));
        }
    }
    let done = sqlx::query(
        "INSERT INTO messages (thread_id, seq, id, role, content, metadata, tool_call_id, \
         created_at_ms) VALUES ($1, $2, $3, $4, $5, $6::JSONB, $7, $8) \
         ON CONFLICT (thread_id, id) DO NOTHING",
    )
    .bind(&unit.thread_id)
    .bind(seq)
    .bind(&message.id)
    .bind(message.role.as_str())
    .bind(&message.content)
    .bind(message.metadata.as_str())
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
    declare(conn, unit, message).await
}

/// Keep the calls `message` declares; `Redeclared` when the thread
/// records or declares one of their ids with another tool or other
/// arguments (the first declaration of an id is kept).
async fn declare(
    conn: &mut PgConnection,
    unit: &WriteUnit,
    message: &NewMessage,
) -> StoreResult<()> {
    for d in &message.declares {
        let row = sqlx::query(
            "WITH recorded AS ( \
                 SELECT tool_name = $3 AND args = $4::JSONB AS same, parent_message_id \
                 FROM tool_calls WHERE thread_id = $1 AND id = $2), \
             inserted AS ( \
                 INSERT INTO declared_calls (thread_id, call_id, tool_name, args, message_id) \
                 SELECT $1, $2, $3, $4::JSONB, $5 \
                 WHERE NOT EXISTS (SELECT 1 FROM recorded WHERE NOT same) \
                 ON CONFLICT (thread_id, call_id) DO NOTHING RETURNING 1) \
             SELECT (SELECT same FROM recorded) AS recorded, \
                 (SELECT parent_message_id FROM recorded) AS parent, \
                 EXISTS (SELECT 1 FROM inserted) AS inserted",
        )
        .bind(&unit.thread_id)
        .bind(&d.id)
        .bind(&d.tool_name)
        .bind(d.args.as_str())
        .bind(&message.id)
        .fetch_one(&mut *conn)
        .await?;
        if row.try_get::<Option<bool>, _>("recorded")? == Some(false) {
            return Err(checks::redeclared(&d.id, checks::GivenIn::Record));
        }
        if row.try_get::<bool, _>("inserted")? {
            // The first declaration of a call posted under a parent is that
            // parent's (a later one by another message is refused below).
            if let Some(parent) = row.try_get::<Option<String>, _>("parent")?
                && parent != message.id
            {
                return Err(StoreError::Conflict(checks::posted_under_other_parent(
                    &message.id,
                    &d.id,
                    &parent,
                )));
            }
            continue;
        }
        let given = (d.tool_name.as_str(), d.args.as_str());
        match same_as_declared(conn, &unit.thread_id, &d.id, given).await? {
            Some((false, _)) => {
                return Err(checks::redeclared(&d.id, checks::GivenIn::Declaration));
            }
            Some((true, by)) if by != message.id => {
                return Err(StoreError::Conflict(checks::declared_by_other(
                    &message.id,
                    &d.id,
                    &by,
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Whether the thread declares call `id` with `(tool name, arguments' JSON
/// text)`, and the message that declares it; `None` when none does.
async fn same_as_declared(
    conn: &mut PgConnection,
    thread_id: &str,
    id: &str,
    (tool_name, args): (&str, &str),
) -> StoreResult<Option<(bool, String)>> {
    Ok(sqlx::query_as(
        "SELECT tool_name = $3 AND args = $4::JSONB, message_id FROM declared_calls \
         WHERE thread_id = $1 AND call_id = $2",
    )
    .bind(thread_id)
    .bind(id)
    .bind(tool_name)
    .bind(args)
    .fetch_optional(&mut *conn)
    .await?)
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
    let data: Vec<&str> = events.iter().map(NewEvent::logged_data).collect();
    let created: Vec<i64> = events.iter().map(|e| e.created_at_ms).collect();
    let announces: Vec<Option<&str>> = events.iter().map(|e| e.announces.as_deref()).collect();
    sqlx::query(
        "INSERT INTO events (thread_id, seq, event_type, data, created_at_ms, message_id) \
         SELECT $1, u.seq, u.event_type, u.data, u.created_at_ms, u.message_id \
         FROM UNNEST($2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::BIGINT[], $6::TEXT[]) \
             AS u (seq, event_type, data, created_at_ms, message_id)",
    )
    .bind(&unit.thread_id)
    .bind(&seqs)
    .bind(&types)
    .bind(&data)
    .bind(&created)
    .bind(&announces)
    .execute(&mut *conn)
    .await
    .map_err(|e| unit_error(e, || format!("events from seq {first_seq}")))?;
    Ok(events
        .iter()
        .zip(seqs)
        .map(|(event, seq)| event.stored(&unit.thread_id, seq))
        .collect())
}

/// The fast path of [`Store::apply_batch`]: the whole batch in one
/// statement per table (rows bound as arrays and `UNNEST`ed), no savepoints.
/// `None` when some unit would fail: the caller rolls back and goes unit by
/// unit.
async fn apply_plan(
    conn: &mut PgConnection,
    plan: &Plan<'_>,
) -> StoreResult<Option<Vec<UnitReceipt>>> {
    // Create the threads or bump (and lock) them, in apply order, like the
    // per-unit path: every writer locks threads in the same order.
    let ids: Vec<&str> = plan.threads.iter().map(|t| t.id).collect();
    let owners: Vec<&str> = plan.threads.iter().map(|t| t.owner).collect();
    let events: Vec<i64> = plan.threads.iter().map(|t| t.events).collect();
    let messages: Vec<i64> = plan.threads.iter().map(|t| t.messages).collect();
    let calls: Vec<i64> = plan.threads.iter().map(|t| t.calls).collect();
    let now = crate::protocol::now_ms();
    let created: Vec<i64> = plan
        .threads
        .iter()
        .map(|t| t.created_at_ms.unwrap_or(now))
        .collect();
    let returned = sqlx::query(
        "INSERT INTO threads (id, owner, created_at_ms, last_event_seq, last_message_seq, \
             last_call_ordinal) \
         SELECT u.id, u.owner, u.created, u.events, u.messages, u.calls \
         FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::BIGINT[], $5::BIGINT[], $6::BIGINT[]) \
             WITH ORDINALITY AS u (created, id, owner, events, messages, calls, ord) \
         ORDER BY u.ord \
         ON CONFLICT (id) DO UPDATE SET \
             last_event_seq = threads.last_event_seq + excluded.last_event_seq, \
             last_message_seq = threads.last_message_seq + excluded.last_message_seq, \
             last_call_ordinal = threads.last_call_ordinal + excluded.last_call_ordinal \
         RETURNING id, owner, last_event_seq, last_message_seq, last_call_ordinal, \
             deleted_at_ms IS NOT NULL OR closing_at_ms IS NOT NULL AS unusual",
    )
    .bind(&created)
    .bind(&ids)
    .bind(&owners)
    .bind(&events)
    .bind(&messages)
    .bind(&calls)
    .fetch_all(&mut *conn)
    .await?;
    let mut reserved: std::collections::HashMap<String, (String, Reserved)> =
        std::collections::HashMap::with_capacity(returned.len());
    for row in returned {
        if row.try_get::<bool, _>("unusual")? {
            return Ok(None); // a deleted thread, or one closing
        }
        reserved.insert(
            row.try_get("id")?,
            (
                row.try_get("owner")?,
                Reserved {
                    last_event_seq: row.try_get("last_event_seq")?,
                    last_message_seq: row.try_get("last_message_seq")?,
                    last_call_ordinal: row.try_get("last_call_ordinal")?,
                },
            ),
        );
    }
    let mut counters = Vec::with_capacity(plan.threads.len());
    for thread in &plan.threads {
        match reserved.get(thread.id) {
            Some((owner, r)) if owner == thread.owner => counters.push(*r),
            _ => return Ok(None), // another owner's thread
        }
    }
    let rows = plan.rows(&counters);

    if !rows.calls.is_empty() {
        let c = &rows.calls;
        let done = sqlx::query(
            "INSERT INTO tool_calls (thread_id, id, owner, run_id, tool_name, args, status, \
                 created_at_ms, undo_of, ordinal, undo, message_id, finished_at_ms, workspace, \
                 dry_run, instance, parent_message_id, after_message_seq) \
             SELECT u.thread_id, u.id, u.owner, u.run_id, u.tool_name, u.args::JSONB, u.status, \
                 u.created_at_ms, u.undo_of, u.ordinal, u.undo::JSONB, u.message_id, \
                 u.finished_at_ms, u.workspace, u.dry_run, u.instance, u.parent_message_id, \
                 u.after_message_seq \
             FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], \
                 $6::TEXT[], $7::TEXT[], $8::BIGINT[], $9::TEXT[], $10::BIGINT[], \
                 $11::TEXT[], $12::TEXT[], $13::BIGINT[], $14::TEXT[], $15::BIGINT[], \
                 $16::TEXT[], $17::TEXT[], $18::TEXT[], $19::BIGINT[]) \
                 AS u (thread_id, id, owner, run_id, tool_name, args, status, created_at_ms, \
                     undo_of, ordinal, undo, message_id, finished_at_ms, workspace, dry_run, \
                     instance, declared_by, parent_message_id, after_message_seq) \
             WHERE NOT EXISTS (SELECT 1 FROM declared_calls AS d \
                 WHERE d.thread_id = u.thread_id AND d.call_id = u.id \
                     AND (d.tool_name <> u.tool_name OR d.args <> u.args::JSONB \
                         OR d.message_id IS DISTINCT FROM u.declared_by)) \
                 AND (u.declared_by IS NULL OR EXISTS (SELECT 1 FROM declared_calls AS d \
                     WHERE d.thread_id = u.thread_id AND d.call_id = u.id)) \
                 AND NOT EXISTS (SELECT 1 FROM closed_runs AS r \
                     WHERE r.thread_id = u.thread_id AND r.run_id = u.run_id) \
                 AND (u.declared_by IS NOT NULL OR u.parent_message_id IS NULL \
                     OR COALESCE((SELECT m.role FROM messages AS m \
                         WHERE m.thread_id = u.thread_id AND m.id = u.parent_message_id), \
                         'assistant') = 'assistant') \
             ON CONFLICT (thread_id, id) DO NOTHING",
        )
        .bind(c.iter().map(|r| r.thread_id).collect::<Vec<_>>())
        .bind(c.iter().map(|r| r.call.id.as_str()).collect::<Vec<_>>())
        .bind(c.iter().map(|r| r.owner).collect::<Vec<_>>())
        .bind(c.iter().map(|r| r.call.run_id.as_str()).collect::<Vec<_>>())
        .bind(
            c.iter()
                .map(|r| r.call.tool_name.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(c.iter().map(|r| r.call.args.as_str()).collect::<Vec<_>>())
        .bind(c.iter().map(|r| r.status()).collect::<Vec<_>>())
        .bind(c.iter().map(|r| r.call.created_at_ms).collect::<Vec<_>>())
        .bind(
            c.iter()
                .map(|r| r.call.undo_of.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(c.iter().map(|r| r.place.ordinal).collect::<Vec<_>>())
        .bind(
            c.iter()
                .map(|r| r.undo().map(JsonText::as_str))
                .collect::<Vec<_>>(),
        )
        .bind(c.iter().map(|r| r.message_id()).collect::<Vec<_>>())
        .bind(c.iter().map(|r| r.finished_at_ms()).collect::<Vec<_>>())
        .bind(
            c.iter()
                .map(|r| r.call.workspace.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            c.iter()
                .map(|r| i64::from(r.call.dry_run))
                .collect::<Vec<_>>(),
        )
        .bind(
            c.iter()
                .map(|r| r.call.instance.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            c.iter()
                .map(|r| r.call.declared_by.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            c.iter()
                .map(|r| r.call.parent_message_id.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            c.iter()
                .map(|r| r.place.after_message_seq)
                .collect::<Vec<_>>(),
        )
        .execute(&mut *conn)
        .await?;
        if done.rows_affected() != c.len() as u64 {
            // a call already recorded, declared otherwise, of a closed run,
            // or under a parent that is not an assistant's
            return Ok(None);
        }
    }

    if !rows.finishes.is_empty() {
        let f = &rows.finishes;
        let done = sqlx::query(
            "UPDATE tool_calls AS t SET status = u.status, undo = u.undo::JSONB, \
                 message_id = u.message_id, finished_at_ms = u.finished_at_ms \
             FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], \
                 $6::BIGINT[]) \
                 AS u (thread_id, id, status, undo, message_id, finished_at_ms) \
             WHERE t.thread_id = u.thread_id AND t.id = u.id \
                 AND t.status IN ('running', 'pending_approval')",
        )
        .bind(f.iter().map(|r| r.thread_id).collect::<Vec<_>>())
        .bind(f.iter().map(|r| r.finished.id.as_str()).collect::<Vec<_>>())
        .bind(
            f.iter()
                .map(|r| r.finished.status.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            f.iter()
                .map(|r| r.finished.undo.as_ref().map(JsonText::as_str))
                .collect::<Vec<_>>(),
        )
        .bind(
            f.iter()
                .map(|r| r.finished.message_id.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            f.iter()
                .map(|r| r.finished.finished_at_ms)
                .collect::<Vec<_>>(),
        )
        .execute(&mut *conn)
        .await?;
        if done.rows_affected() != f.len() as u64 {
            return Ok(None); // a call not recorded, or not running
        }
    }

    if !rows.messages.is_empty() {
        let m = &rows.messages;
        let done = sqlx::query(
            "INSERT INTO messages (thread_id, seq, id, role, content, metadata, tool_call_id, \
                 created_at_ms) \
             SELECT u.thread_id, u.seq, u.id, u.role, u.content, u.metadata::JSONB, \
                 u.tool_call_id, u.created_at_ms \
             FROM UNNEST($1::TEXT[], $2::BIGINT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], \
                 $6::TEXT[], $7::TEXT[], $8::BIGINT[]) \
                 AS u (thread_id, seq, id, role, content, metadata, tool_call_id, created_at_ms) \
             WHERE u.role IN ('assistant', 'tool') OR (SELECT 1 FROM tool_calls AS c \
                 WHERE c.thread_id = u.thread_id AND c.parent_message_id = u.id \
                     AND c.parent_message_id IS NOT NULL LIMIT 1) IS NULL \
             ON CONFLICT (thread_id, id) DO NOTHING",
        )
        .bind(m.iter().map(|r| r.thread_id).collect::<Vec<_>>())
        .bind(m.iter().map(|r| r.seq).collect::<Vec<_>>())
        .bind(m.iter().map(|r| r.message.id.as_str()).collect::<Vec<_>>())
        .bind(
            m.iter()
                .map(|r| r.message.role.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            m.iter()
                .map(|r| r.message.content.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            m.iter()
                .map(|r| r.message.metadata.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(
            m.iter()
                .map(|r| r.message.tool_call_id.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(
            m.iter()
                .map(|r| r.message.created_at_ms)
                .collect::<Vec<_>>(),
        )
        .execute(&mut *conn)
        .await?;
        if done.rows_affected() != m.len() as u64 {
            // a message id already used, or one a call names as its parent
            return Ok(None);
        }
    }

    if !rows.events.is_empty() {
        let e = &rows.events;
        sqlx::query(
            "INSERT INTO events (thread_id, seq, event_type, data, created_at_ms, message_id) \
             SELECT * FROM UNNEST($1::TEXT[], $2::BIGINT[], $3::TEXT[], $4::TEXT[], \
                 $5::BIGINT[], $6::TEXT[])",
        )
        .bind(e.iter().map(|r| r.thread_id).collect::<Vec<_>>())
        .bind(e.iter().map(|r| r.seq).collect::<Vec<_>>())
        .bind(
            e.iter()
                .map(|r| r.event.event_type.as_str())
                .collect::<Vec<_>>(),
        )
        .bind(e.iter().map(|r| r.event.logged_data()).collect::<Vec<_>>())
        .bind(e.iter().map(|r| r.event.created_at_ms).collect::<Vec<_>>())
        .bind(
            e.iter()
                .map(|r| r.event.announces.as_deref())
                .collect::<Vec<_>>(),
        )
        .execute(&mut *conn)
        .await?;
    }

    let mut audit_ids: Vec<i64> = Vec::new();
    if !rows.audits.is_empty() {
        let a = &rows.audits;
        audit_ids = sqlx::query_scalar(
            "INSERT INTO audit_log (at_ms, owner, thread_id, tool_call_id, tool_name, action, \
                 operation, verdict, rule, approval_id, outcome, duration_ms, detail) \
             SELECT u.at_ms, u.owner, u.thread_id, u.tool_call_id, u.tool_name, u.action, \
                 u.operation, u.verdict, u.rule, u.approval_id, u.outcome, u.duration_ms, \
                 u.detail::JSONB \
             FROM UNNEST($1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], \
                 $6::TEXT[], $7::TEXT[], $8::TEXT[], $9::TEXT[], $10::TEXT[], $11::TEXT[], \
                 $12::BIGINT[], $13::TEXT[]) WITH ORDINALITY \
                 AS u (at_ms, owner, thread_id, tool_call_id, tool_name, action, operation, \
                     verdict, rule, approval_id, outcome, duration_ms, detail, ord) \
             ORDER BY u.ord \
             RETURNING id",
        )
        .bind(a.iter().map(|e| e.at_ms).collect::<Vec<_>>())
        .bind(a.iter().map(|e| e.owner.as_str()).collect::<Vec<_>>())
        .bind(a.iter().map(|e| e.thread_id.as_deref()).collect::<Vec<_>>())
        .bind(
            a.iter()
                .map(|e| e.tool_call_id.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(a.iter().map(|e| e.tool_name.as_deref()).collect::<Vec<_>>())
        .bind(a.iter().map(|e| e.action.as_str()).collect::<Vec<_>>())
        .bind(a.iter().map(|e| e.operation.as_deref()).collect::<Vec<_>>())
        .bind(a.iter().map(|e| e.verdict.as_deref()).collect::<Vec<_>>())
        .bind(a.iter().map(|e| e.rule.as_deref()).collect::<Vec<_>>())
        .bind(
            a.iter()
                .map(|e| e.approval_id.as_deref())
                .collect::<Vec<_>>(),
        )
        .bind(a.iter().map(|e| e.outcome.as_deref()).collect::<Vec<_>>())
        .bind(a.iter().map(|e| e.duration_ms).collect::<Vec<_>>())
        .bind(a.iter().map(|e| e.detail.as_str()).collect::<Vec<_>>())
        .fetch_all(&mut *conn)
        .await?;
        // The sequence hands out increasing ids in insertion (ORDER BY)
        // order; RETURNING's order is unspecified.
        audit_ids.sort_unstable();
    }
    Ok(Some(rows.into_receipts(&audit_ids)))
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn ready(&self) -> StoreResult<()> {
        let ready = self.reads().ready(MIGRATIONS).await;
        self.superseded.note(&ready);
        ready
    }

    async fn thread_owner(&self, thread_id: &str) -> StoreResult<Option<super::ThreadOwner>> {
        self.reads().thread_owner(thread_id).await
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
        let mut conn = self.pool.acquire().await?;
        insert_audit(&mut conn, entry).await
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
        // Every process's watch hears of the change when it commits. A
        // NOTIFY payload holds less than 8000 bytes: a longer owner is told
        // as an empty one (everyone's rules are read again).
        sqlx::query(
            "WITH stored AS ( \
                 INSERT INTO owner_permissions (owner, rules, updated_at_ms) VALUES ($1, $2, $3) \
                 ON CONFLICT (owner) DO UPDATE SET \
                     rules = excluded.rules, updated_at_ms = excluded.updated_at_ms \
                 RETURNING owner) \
             SELECT pg_notify($4, CASE WHEN octet_length(owner) < 7000 THEN owner ELSE '' END) \
             FROM stored",
        )
        .bind(owner)
        .bind(Json(rules))
        .bind(updated_at_ms)
        .bind(RULES_CHANNEL)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn watch_owner_rules(&self) -> StoreResult<Option<RuleChanges>> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(RULES_CHANNEL).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        tokio::spawn(async move {
            loop {
                let told = match listener.try_recv().await {
                    Ok(Some(note)) if note.payload().is_empty() => RulesWatch::Listening,
                    Ok(Some(note)) => RulesWatch::Changed(note.payload().to_string()),
                    // The connection was lost and is back, listening again:
                    // what changed meanwhile went unheard.
                    Ok(None) => RulesWatch::Listening,
                    Err(sqlx::Error::PoolClosed) => return,
                    Err(e) => {
                        tracing::warn!(error = %e, "the watch of permission rules lost its connection");
                        if tx.send(RulesWatch::Lost).await.is_err() {
                            return;
                        }
                        // Listening again (on a new connection) before it says so.
                        if !listen_again(&mut listener, &[RULES_CHANNEL]).await {
                            return;
                        }
                        RulesWatch::Listening
                    }
                };
                if tx.send(told).await.is_err() {
                    return;
                }
            }
        });
        Ok(Some(rx))
    }

    async fn events_after(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<StoredEvent>> {
        self.reads().events_after(thread_id, after, limit).await
    }

    async fn watch_events(&self) -> StoreResult<Option<EventNotices>> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        let channels = [EVENTS_CHANNEL, DELETED_CHANNEL];
        listener.listen_all(channels).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        let token = self.token.clone();
        tokio::spawn(async move {
            loop {
                let told = match listener.try_recv().await {
                    Ok(Some(note)) if note.channel() == DELETED_CHANNEL => {
                        match read_deleted_notice(note.payload()) {
                            Some(told) => told,
                            None => continue,
                        }
                    }
                    Ok(Some(note)) => match read_events_notice(&token, note.payload()) {
                        Some(told) => super::Notice::Events(told),
                        None => continue,
                    },
                    // Back after a lost connection: notices may have been
                    // missed.
                    Ok(None) => super::Notice::Events(None),
                    Err(sqlx::Error::PoolClosed) => return,
                    Err(e) => {
                        tracing::warn!(error = %e, "the watch of other processes' events lost its connection");
                        if !listen_again(&mut listener, &channels).await {
                            return;
                        }
                        super::Notice::Events(None)
                    }
                };
                // A full queue: the subscribers' heartbeats read the log.
                if let Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) = tx.try_send(told) {
                    return;
                }
            }
        });
        Ok(Some(rx))
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
        // Postgres sends every row a query names, also those past the
        // page's bytes: the rows that fit are counted first by their stored
        // size (compressed, so at most as large as the text: the page may
        // still end sooner, by the text), and only those are read.
        let sizes: Vec<i64> = sqlx::query_scalar(
            "SELECT (COALESCE(pg_column_size(content), 0) + COALESCE(pg_column_size(metadata), 0))::BIGINT \
             FROM messages WHERE thread_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3",
        )
        .bind(thread_id)
        .bind(before.unwrap_or(i64::MAX))
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        let mut total = 0usize;
        let fitting = sizes
            .iter()
            .position(|size| {
                total += usize::try_from(*size).unwrap_or(0);
                total >= crate::store::PAGE_BYTES
            })
            .map_or(sizes.len(), |at| at + 1);
        self.reads()
            .messages_before(thread_id, before, fitting as i64)
            .await
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
        self.reads()
            .snapshot(
                thread_id,
                now_ms,
                Some("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"),
            )
            .await
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
        if units.is_empty() {
            return Ok(Vec::new());
        }
        self.superseded.check()?;
        if let Some(plan) = Plan::new(units, super::batch::apply_order(units)) {
            let mut tx = self.batches.begin().await?;
            match apply_plan(&mut tx, &plan).await {
                Ok(Some(receipts)) => {
                    self.notify_events(&mut tx, receipts.iter()).await?;
                    tx.commit().await?;
                    return Ok(receipts.into_iter().map(Ok).collect());
                }
                // A unit would fail (or a statement did): start over unit by
                // unit, which decides each unit's outcome.
                Ok(None) | Err(_) => tx.rollback().await?,
            }
        }
        self.apply_unit_by_unit(units).await
    }

    async fn purge_deleted(&self, thread_id: &str, limit: i64) -> StoreResult<bool> {
        self.superseded.check()?;
        let mut tx = self.pool.begin().await?;
        let deleted: Option<Option<i64>> =
            sqlx::query_scalar("SELECT deleted_at_ms FROM threads WHERE id = $1")
                .bind(thread_id)
                .fetch_optional(&mut *tx)
                .await?;
        if deleted.flatten().is_none() {
            return Ok(false);
        }
        let mut more = false;
        for (table, key) in checks::PURGED_TABLES {
            let removed = sqlx::query(&checks::purge_rows(table, key))
                .bind(thread_id)
                .bind(limit)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            more |= removed as i64 >= limit;
        }
        tx.commit().await?;
        Ok(more)
    }

    async fn unpurged_threads(&self) -> StoreResult<Vec<String>> {
        self.reads().unpurged_threads().await
    }
}

impl PgStore {
    /// Tell the other processes, when `tx` commits, of the events the
    /// batch appends: their subscribers read them from the log at once,
    /// not at their next heartbeat.
    async fn notify_events<'a>(
        &self,
        tx: &mut PgConnection,
        receipts: impl Iterator<Item = &'a UnitReceipt>,
    ) -> StoreResult<()> {
        if let Some(notice) = events_notice(&self.token, receipts) {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(EVENTS_CHANNEL)
                .bind(notice)
                .execute(tx)
                .await?;
        }
        Ok(())
    }

    /// The per-unit path: each unit under its own savepoint.
    async fn apply_unit_by_unit(
        &self,
        units: &[WriteUnit],
    ) -> StoreResult<Vec<StoreResult<UnitReceipt>>> {
        let mut results: Vec<Option<StoreResult<UnitReceipt>>> =
            (0..units.len()).map(|_| None).collect();
        let mut tx = self.batches.begin().await?;
        for index in super::batch::apply_order(units) {
            let mut savepoint = tx.begin().await?;
            match apply_unit(&mut savepoint, &units[index]).await {
                Ok(receipt) => {
                    savepoint.commit().await?;
                    results[index] = Some(Ok(receipt));
                }
                Err(err) if err.is_unit_local() => {
                    savepoint.rollback().await?;
                    results[index] = Some(Err(err));
                }
                // Dropping the transaction rolls everything back.
                Err(err) => return Err(err),
            }
        }
        let committed = results.iter().flatten().filter_map(|r| r.as_ref().ok());
        self.notify_events(&mut tx, committed).await?;
        tx.commit().await?;
        Ok(results.into_iter().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt(events: &[(&str, i64)]) -> UnitReceipt {
        UnitReceipt {
            events: events
                .iter()
                .map(|(thread, seq)| StoredEvent {
                    thread_id: (*thread).to_string(),
                    seq: *seq,
                    event_type: "CUSTOM".into(),
                    data: "{}".into(),
                    created_at_ms: 0,
                    from_message: None,
                })
                .collect(),
            ..UnitReceipt::default()
        }
    }

    #[test]
    fn an_events_notice_names_each_thread_once_with_its_last_event() {
        let receipts = [receipt(&[("a", 3), ("b:1", 7)]), receipt(&[("a", 5)])];
        let notice = events_notice("me", receipts.iter()).unwrap();
        assert_eq!(notice, "me\n5 a\n7 b:1");
        assert_eq!(read_events_notice("me", &notice), None, "its own");
        assert_eq!(
            read_events_notice("other", &notice),
            Some(Some(vec![("a".to_string(), 5), ("b:1".to_string(), 7)]))
        );
        assert_eq!(events_notice("me", [receipt(&[])].iter()), None);
    }

    #[test]
    fn a_notice_too_long_to_list_its_threads_names_none() {
        let threads: Vec<String> = (0..100).map(|i| format!("{i:0>120}")).collect();
        let events: Vec<(&str, i64)> = threads.iter().map(|t| (t.as_str(), 1)).collect();
        let notice = events_notice("me", [receipt(&events)].iter()).unwrap();
        assert_eq!(notice, "me");
        assert_eq!(read_events_notice("other", &notice), Some(None));
    }
}
