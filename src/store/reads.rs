//! The read side of both stores, written once.
//!
//! Both schemas have the same tables and columns and both drivers take `$N`
//! parameters, so the queries are the same text; what differs is how a JSON
//! column comes back (text to parse on SQLite, `JSONB` on Postgres), which
//! [`JsonColumns`] answers per row type. Writes stay per backend: their
//! statements, batching and locking differ.

use futures::TryStreamExt as _;
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::types::Json;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};

use super::{
    ApprovalRecord, ApprovalStatus, AuditEntry, AuditFilter, CallPlacement, CallStatus,
    Declaration, DeclaringMessage, DeletedApproval, PAGE_BYTES, ResultReference, Role, StoreError,
    StoreResult, StoredEvent, StoredMessage, ThreadOwner, ThreadSnapshot, ThreadSummary,
    ToolCallRecord,
};

/// A call's row (as `c`) with its output, read from its tool message (`m`,
/// joined by [`TOOL_CALL_FROM`]) where it is stored; `c.output` holds it only
/// for calls finished by releases that stored it twice.
const TOOL_CALL_COLUMNS: &str = "c.thread_id, c.id, c.owner, c.run_id, c.tool_name, c.args, \
     c.status, COALESCE(c.output, m.metadata -> 'tool_agent_output') AS output, c.undo, \
     c.message_id, c.created_at_ms, c.finished_at_ms, c.undo_of, c.undone_by, c.workspace, \
     c.dry_run, c.parent_message_id";

const TOOL_CALL_FROM: &str = "tool_calls AS c LEFT JOIN messages AS m \
     ON m.thread_id = c.thread_id AND m.id = c.message_id";

pub(super) const APPROVAL_COLUMNS: &str = "id, thread_id, owner, tool_call_id, tool_name, \
     arguments, reason, preview, request, status, decided_by, decision_reason, created_at_ms, \
     expires_at_ms, decided_at_ms";

/// The text of an approvals page: one owner's (`$1`), or every owner's for
/// an approver (`$1` NULL); `$2` an optional status, `$3` the limit.
///
/// Two texts rather than `($1 IS NULL OR owner = $1)`: with that, the
/// planner cannot use the owner's index (SQLite scans and sorts the whole
/// table); every owner's page walks `approvals_created` in order and stops
/// at the limit. CAST: Postgres must know the type of a parameter that may
/// be only compared with NULL.
pub(super) fn approvals_query(
    one_owner: bool,
    one_thread: bool,
    status: Option<ApprovalStatus>,
) -> String {
    let owner_filter = if one_owner {
        "owner = $1"
    } else {
        "CAST($1 AS TEXT) IS NULL"
    };
    // $1 owner, $2 and $3 the cursor, $4 the limit, $5 what the status
    // filter compares with: the status, or the moment deadlines are read at;
    // then the thread, when one is asked for.
    let thread_filter = match (one_thread, status.is_some()) {
        (false, _) => String::new(),
        (true, true) => " AND thread_id = $6".to_string(),
        (true, false) => " AND thread_id = $5".to_string(),
    };
    let page = |filter: &str| {
        format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals \
             WHERE {owner_filter}{thread_filter}{filter} AND (created_at_ms, id) < ($2, $3)"
        )
    };
    let order = "ORDER BY created_at_ms DESC, id DESC LIMIT $4";
    match status {
        None => format!("{} {order}", page("")),
        Some(ApprovalStatus::Pending) => format!(
            "{} {order}",
            page(" AND status = 'pending' AND expires_at_ms > $5")
        ),
        // The recorded expiries and the pending past their deadline, each
        // read in index order and merged.
        Some(ApprovalStatus::Expired) => format!(
            "{} UNION ALL {} {order}",
            page(" AND status = 'expired'"),
            page(" AND status = 'pending' AND expires_at_ms <= $5"),
        ),
        Some(ApprovalStatus::Approved | ApprovalStatus::Denied) => {
            format!("{} {order}", page(" AND status = $5"))
        }
    }
}

/// The newest approval of one call (`approvals_call`).
pub(super) fn approval_of_call_query() -> String {
    format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE thread_id = $1 AND tool_call_id = $2 \
         ORDER BY created_at_ms DESC, id DESC LIMIT 1"
    )
}

const AUDIT_COLUMNS: &str = "id, at_ms, owner, thread_id, tool_call_id, tool_name, action, \
     operation, verdict, rule, approval_id, outcome, duration_ms, detail";

const MESSAGE_COLUMNS: &str =
    "thread_id, seq, id, role, content, metadata, tool_call_id, created_at_ms";

/// How a row type hands back a JSON column.
pub(super) trait JsonColumns {
    fn json(&self, column: &str) -> StoreResult<Value>;
    fn opt_json(&self, column: &str) -> StoreResult<Option<Value>>;
}

/// A row of either backend, read column by column.
pub(super) trait StoreRow: JsonColumns {
    fn text(&self, column: &str) -> StoreResult<String>;
    fn opt_text(&self, column: &str) -> StoreResult<Option<String>>;
    fn int(&self, column: &str) -> StoreResult<i64>;
    fn opt_int(&self, column: &str) -> StoreResult<Option<i64>>;
}

impl<R> StoreRow for R
where
    R: Row + JsonColumns,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'a> &'a str: ColumnIndex<R>,
{
    fn text(&self, column: &str) -> StoreResult<String> {
        Ok(self.try_get(column)?)
    }

    fn opt_text(&self, column: &str) -> StoreResult<Option<String>> {
        Ok(self.try_get(column)?)
    }

    fn int(&self, column: &str) -> StoreResult<i64> {
        Ok(self.try_get(column)?)
    }

    fn opt_int(&self, column: &str) -> StoreResult<Option<i64>> {
        Ok(self.try_get(column)?)
    }
}

/// SQLite keeps JSON as text (checked by `json_valid()` on the way in).
impl JsonColumns for SqliteRow {
    fn json(&self, column: &str) -> StoreResult<Value> {
        parse_json(column, &self.try_get::<String, _>(column)?)
    }

    fn opt_json(&self, column: &str) -> StoreResult<Option<Value>> {
        self.try_get::<Option<String>, _>(column)?
            .map(|text| parse_json(column, &text))
            .transpose()
    }
}

/// Postgres keeps JSON as `JSONB`.
impl JsonColumns for PgRow {
    fn json(&self, column: &str) -> StoreResult<Value> {
        Ok(self.try_get::<Json<Value>, _>(column)?.0)
    }

    fn opt_json(&self, column: &str) -> StoreResult<Option<Value>> {
        Ok(self.try_get::<Option<Json<Value>>, _>(column)?.map(|j| j.0))
    }
}

fn parse_json(column: &str, text: &str) -> StoreResult<Value> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Corrupt(format!("{column} is not valid JSON: {e}")))
}

/// A page of an owner's threads (`$1`), newest first, after the cursor
/// `($2, $3)` (created_at_ms, id), at most `$4`.
pub(super) const THREADS_PAGE: &str = "\
SELECT t.id, t.created_at_ms, t.last_event_seq, t.last_message_seq, \
    (SELECT m.created_at_ms FROM messages AS m \
     WHERE m.thread_id = t.id ORDER BY m.seq DESC LIMIT 1) AS last_message_at_ms \
FROM threads AS t \
WHERE t.owner = $1 AND (t.created_at_ms, t.id) < ($2, $3) AND t.deleted_at_ms IS NULL \
ORDER BY t.created_at_ms DESC, t.id DESC LIMIT $4";

/// The store's queries over one pool.
pub(super) struct Reads<'p, DB: Database> {
    pub pool: &'p Pool<DB>,
}

impl<DB> Reads<'_, DB>
where
    DB: Database,
    DB::Row: JsonColumns,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'a> &'a str: ColumnIndex<DB::Row>,
    usize: ColumnIndex<DB::Row>,
{
    /// Every migration in `migrations` is recorded as applied.
    pub async fn ready(&self, migrations: &[(i64, &str, &str)]) -> StoreResult<()> {
        let applied: Vec<i64> =
            match sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                .fetch_all(self.pool)
                .await
            {
                Ok(applied) => applied,
                Err(e) if no_such_table(&e) => {
                    return Err(StoreError::NotMigrated(
                        "the database has none of toolgate's tables (emptied, or being \
                         restored)"
                            .into(),
                    ));
                }
                Err(e) => return Err(e.into()),
            };
        for &(version, description, _) in migrations {
            if !applied.contains(&version) {
                return Err(StoreError::NotMigrated(format!(
                    "migration {version} ({description}) is not applied"
                )));
            }
        }
        // A newer toolgate migrated it since this process started.
        match applied
            .iter()
            .filter(|v| !migrations.iter().any(|(known, _, _)| known == *v))
            .max()
        {
            Some(&newer) => Err(StoreError::Newer(newer)),
            None => Ok(()),
        }
    }

    pub async fn unpurged_threads(&self) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(super::checks::UNPURGED_THREADS)
            .fetch_all(self.pool)
            .await?)
    }

    pub async fn thread_owner(&self, thread_id: &str) -> StoreResult<Option<ThreadOwner>> {
        let row = sqlx::query("SELECT owner, deleted_at_ms FROM threads WHERE id = $1")
            .bind(thread_id)
            .fetch_optional(self.pool)
            .await?;
        row.map(|row| {
            Ok(ThreadOwner {
                owner: row.text("owner")?,
                deleted_at_ms: row.opt_int("deleted_at_ms")?,
            })
        })
        .transpose()
    }

    pub async fn deleted_approval(
        &self,
        approval_id: &str,
    ) -> StoreResult<Option<DeletedApproval>> {
        let row = sqlx::query(
            "SELECT t.id, t.owner, t.deleted_at_ms FROM audit_log AS a \
             JOIN threads AS t ON t.id = a.thread_id \
             WHERE a.approval_id = $1 AND t.deleted_at_ms IS NOT NULL LIMIT 1",
        )
        .bind(approval_id)
        .fetch_optional(self.pool)
        .await?;
        row.map(|row| {
            Ok(DeletedApproval {
                thread_id: row.text("id")?,
                owner: row.text("owner")?,
                deleted_at_ms: row.int("deleted_at_ms")?,
            })
        })
        .transpose()
    }

    pub async fn call_declaration(
        &self,
        thread_id: &str,
        call_id: &str,
    ) -> StoreResult<Declaration> {
        // The last column: some message declaring a call in the thread.
        type Row = (
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let (message_id, tool_name, args, any): Row = sqlx::query_as(
            "SELECT d.message_id, d.tool_name, CAST(d.args AS TEXT), \
                 (SELECT message_id FROM declared_calls WHERE thread_id = $1 LIMIT 1) \
             FROM (SELECT 1) AS one LEFT JOIN declared_calls AS d \
                 ON d.thread_id = $1 AND d.call_id = $2",
        )
        .bind(thread_id)
        .bind(call_id)
        .fetch_one(self.pool)
        .await?;
        let by = match (message_id, tool_name, args) {
            (Some(message_id), Some(tool_name), Some(args)) => Some(DeclaringMessage {
                message_id,
                tool_name,
                args: serde_json::from_str(&args).map_err(|e| {
                    StoreError::Corrupt(format!("declared call {call_id:?}'s arguments: {e}"))
                })?,
            }),
            _ => None,
        };
        Ok(Declaration {
            by,
            thread_declares: any.is_some(),
        })
    }

    pub async fn claim_thread(&self, thread_id: &str, owner: &str) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO threads (id, owner, created_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (id) DO NOTHING",
        )
        .bind(thread_id)
        .bind(owner)
        .bind(crate::protocol::now_ms())
        .execute(self.pool)
        .await?;
        match self.thread_owner(thread_id).await? {
            Some(existing) if existing.owner != owner => Err(StoreError::NotOwner),
            Some(ThreadOwner {
                deleted_at_ms: Some(at_ms),
                ..
            }) => Err(StoreError::ThreadDeleted {
                thread: thread_id.to_string(),
                at_ms,
            }),
            Some(_) => Ok(()),
            None => Err(StoreError::NotFound(format!("thread {thread_id:?}"))),
        }
    }

    pub async fn tool_call(
        &self,
        thread_id: &str,
        id: &str,
    ) -> StoreResult<Option<ToolCallRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {TOOL_CALL_COLUMNS} FROM {TOOL_CALL_FROM} WHERE c.thread_id = $1 AND c.id = $2"
        ))
        .bind(thread_id)
        .bind(id)
        .fetch_optional(self.pool)
        .await?;
        row.as_ref().map(tool_call_from_row).transpose()
    }

    pub async fn running_tool_calls(&self, instance: &str) -> StoreResult<Vec<ToolCallRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {TOOL_CALL_COLUMNS} FROM {TOOL_CALL_FROM} WHERE c.status = 'running' \
             AND c.instance = $1 \
             ORDER BY c.created_at_ms, c.thread_id, c.id"
        ))
        .bind(instance)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(tool_call_from_row).collect()
    }

    pub async fn running_calls_created_before(
        &self,
        cutoff_ms: i64,
    ) -> StoreResult<Vec<ToolCallRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {TOOL_CALL_COLUMNS} FROM {TOOL_CALL_FROM} WHERE c.status = 'running' \
             AND c.created_at_ms < $1 \
             ORDER BY c.created_at_ms, c.thread_id, c.id"
        ))
        .bind(cutoff_ms)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(tool_call_from_row).collect()
    }

    /// Process `instance` is alive at `at_ms` (a write, on the pool, like
    /// the reads: it needs no group commit).
    pub async fn beat(&self, instance: &str, at_ms: i64) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO instances (id, seen_at_ms) VALUES ($1, $2) \
             ON CONFLICT (id) DO UPDATE SET seen_at_ms = excluded.seen_at_ms",
        )
        .bind(instance)
        .bind(at_ms)
        .execute(self.pool)
        .await?;
        Ok(())
    }

    pub async fn running_calls_of_silent(
        &self,
        seen_before_ms: i64,
        except: &str,
    ) -> StoreResult<Vec<ToolCallRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {TOOL_CALL_COLUMNS} FROM {TOOL_CALL_FROM} \
             JOIN instances AS i ON i.id = c.instance \
             WHERE c.status = 'running' AND i.seen_at_ms < $1 AND i.id <> $2 \
             ORDER BY c.created_at_ms, c.thread_id, c.id"
        ))
        .bind(seen_before_ms)
        .bind(except)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(tool_call_from_row).collect()
    }

    pub async fn run_calls(
        &self,
        thread_id: &str,
        run_id: &str,
    ) -> StoreResult<Vec<ToolCallRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {TOOL_CALL_COLUMNS} FROM {TOOL_CALL_FROM} \
             WHERE c.thread_id = $1 AND c.run_id = $2 ORDER BY c.ordinal"
        ))
        .bind(thread_id)
        .bind(run_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(tool_call_from_row).collect()
    }

    pub async fn run_closed(&self, thread_id: &str, run_id: &str) -> StoreResult<bool> {
        let row = sqlx::query("SELECT 1 FROM closed_runs WHERE thread_id = $1 AND run_id = $2")
            .bind(thread_id)
            .bind(run_id)
            .fetch_optional(self.pool)
            .await?;
        Ok(row.is_some())
    }

    pub async fn approval(&self, id: &str) -> StoreResult<Option<ApprovalRecord>> {
        let row = sqlx::query(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.pool)
        .await?;
        row.as_ref().map(approval_from_row).transpose()
    }

    pub async fn approval_of_call(
        &self,
        thread_id: &str,
        tool_call_id: &str,
    ) -> StoreResult<Option<ApprovalRecord>> {
        let row = sqlx::query(&approval_of_call_query())
            .bind(thread_id)
            .bind(tool_call_id)
            .fetch_optional(self.pool)
            .await?;
        row.as_ref().map(approval_from_row).transpose()
    }

    pub async fn approvals(
        &self,
        owner: Option<&str>,
        thread: Option<&str>,
        status: Option<ApprovalStatus>,
        now_ms: i64,
        before: Option<(i64, &str)>,
        limit: i64,
    ) -> StoreResult<Vec<ApprovalRecord>> {
        if limit <= 0 {
            return Ok(Vec::new());
        }
        let (before_ms, before_id) = before.unwrap_or((i64::MAX, ""));
        let query = approvals_query(owner.is_some(), thread.is_some(), status);
        let query = sqlx::query(&query)
            .bind(owner)
            .bind(before_ms)
            .bind(before_id)
            .bind(limit);
        let query = match status {
            None => query,
            Some(ApprovalStatus::Pending | ApprovalStatus::Expired) => query.bind(now_ms),
            Some(status) => query.bind(status.as_str()),
        };
        let query = match thread {
            Some(thread) => query.bind(thread),
            None => query,
        };
        let mut rows = query.fetch(self.pool);
        up_to_page_bytes(&mut rows, approval_from_row, ApprovalRecord::page_bytes).await
    }

    pub async fn approval_outlines(
        &self,
        owner: Option<&str>,
        thread: Option<&str>,
        open_at: Option<i64>,
        since_ms: i64,
        limit: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        // $1 owner, $2 thread, $3 since, $4 the moment deadlines are read
        // at, $5 the limit: each bound whether it filters or not.
        let owner_filter = if owner.is_some() {
            "owner = $1"
        } else {
            "CAST($1 AS TEXT) IS NULL"
        };
        let thread_filter = if thread.is_some() {
            "thread_id = $2"
        } else {
            "CAST($2 AS TEXT) IS NULL"
        };
        let open_filter = if open_at.is_some() {
            "status = 'pending' AND expires_at_ms > $4"
        } else {
            "CAST($4 AS BIGINT) IS NOT NULL"
        };
        let rows: Vec<(String, i64)> = sqlx::query_as(&format!(
            "SELECT id, created_at_ms FROM approvals \
             WHERE {owner_filter} AND {thread_filter} AND created_at_ms >= $3 AND {open_filter} \
             ORDER BY created_at_ms, id LIMIT $5"
        ))
        .bind(owner)
        .bind(thread)
        .bind(since_ms)
        .bind(open_at.unwrap_or(0))
        .bind(limit)
        .fetch_all(self.pool)
        .await?;
        Ok(rows)
    }

    pub async fn open_approvals_of_thread(
        &self,
        thread_id: &str,
        now_ms: i64,
    ) -> StoreResult<Vec<ApprovalRecord>> {
        let mut conn = self.pool.acquire().await?;
        Self::open_approvals(&mut conn, thread_id, now_ms).await
    }

    /// The approvals of `thread_id` still pending and not expired at
    /// `now_ms`, oldest first, read on `conn` (so a transaction can read
    /// them with the rest of its moment).
    async fn open_approvals(
        conn: &mut DB::Connection,
        thread_id: &str,
        now_ms: i64,
    ) -> StoreResult<Vec<ApprovalRecord>> {
        // `approvals_call` leads with the thread: the thread's approvals,
        // few beside its calls, are read and sorted here.
        let rows = sqlx::query(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals \
             WHERE thread_id = $1 AND status = 'pending' AND expires_at_ms > $2 \
             ORDER BY created_at_ms, id"
        ))
        .bind(thread_id)
        .bind(now_ms)
        .fetch_all(conn)
        .await?;
        rows.iter().map(approval_from_row).collect()
    }

    pub async fn expired_approvals(
        &self,
        now_ms: i64,
        limit: i64,
    ) -> StoreResult<Vec<ApprovalRecord>> {
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
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(approval_from_row).collect()
    }

    pub async fn owner_rules(&self, owner: &str) -> StoreResult<Option<Value>> {
        let row = sqlx::query("SELECT rules FROM owner_permissions WHERE owner = $1")
            .bind(owner)
            .fetch_optional(self.pool)
            .await?;
        row.map(|row| row.json("rules")).transpose()
    }

    pub async fn events_after(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<StoredEvent>> {
        if limit <= 0 {
            return Ok(Vec::new());
        }
        // A result event stored as a reference comes with its message's
        // output, to be rebuilt from.
        let mut rows = sqlx::query(
            "SELECT e.thread_id, e.seq, e.event_type, e.data, e.created_at_ms, e.message_id, \
                 m.metadata -> 'tool_agent_output' AS output \
             FROM events AS e LEFT JOIN messages AS m \
                 ON m.thread_id = e.thread_id AND m.id = e.message_id \
             WHERE e.thread_id = $1 AND e.seq > $2 ORDER BY e.seq LIMIT $3",
        )
        .bind(thread_id)
        .bind(after)
        .bind(limit)
        .fetch(self.pool);
        up_to_page_bytes(&mut rows, event_from_row, StoredEvent::page_bytes).await
    }

    pub async fn last_event_seq(&self, thread_id: &str) -> StoreResult<i64> {
        let seq: Option<i64> =
            sqlx::query_scalar("SELECT last_event_seq FROM threads WHERE id = $1")
                .bind(thread_id)
                .fetch_optional(self.pool)
                .await?;
        Ok(seq.unwrap_or(0))
    }

    pub async fn messages_before(
        &self,
        thread_id: &str,
        before: Option<i64>,
        limit: i64,
    ) -> StoreResult<Vec<StoredMessage>> {
        if limit <= 0 {
            return Ok(Vec::new());
        }
        let query = format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE thread_id = $1 AND seq < $2 \
             ORDER BY seq DESC LIMIT $3"
        );
        let mut rows = sqlx::query(&query)
            .bind(thread_id)
            .bind(before.unwrap_or(i64::MAX))
            .bind(limit)
            .fetch(self.pool);
        let mut page =
            up_to_page_bytes(&mut rows, message_from_row, StoredMessage::page_bytes).await?;
        drop(rows);
        page.reverse();
        Ok(page)
    }

    pub async fn threads_of(
        &self,
        owner: &str,
        before: Option<(i64, &str)>,
        limit: i64,
    ) -> StoreResult<Vec<ThreadSummary>> {
        if limit <= 0 {
            return Ok(Vec::new());
        }
        // The row-value comparison lets a page start in
        // `threads_owner_created` at its cursor; the last message's time
        // comes from the messages' primary key, one probe per listed thread.
        let (before_ms, before_id) = before.unwrap_or((i64::MAX, ""));
        let rows = sqlx::query(THREADS_PAGE)
            .bind(owner)
            .bind(before_ms)
            .bind(before_id)
            .bind(limit)
            .fetch_all(self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(ThreadSummary {
                    id: row.text("id")?,
                    created_at_ms: row.int("created_at_ms")?,
                    last_event_seq: row.int("last_event_seq")?,
                    messages: row.int("last_message_seq")?,
                    last_message_at_ms: row.opt_int("last_message_at_ms")?,
                })
            })
            .collect()
    }

    pub async fn message(&self, thread_id: &str, id: &str) -> StoreResult<Option<StoredMessage>> {
        let row = sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE thread_id = $1 AND id = $2"
        ))
        .bind(thread_id)
        .bind(id)
        .fetch_optional(self.pool)
        .await?;
        row.as_ref().map(message_from_row).transpose()
    }

    /// The whole conversation, the thread's last event id, its unfinished
    /// calls and its open approvals, read in one transaction as of one
    /// moment, so a call started or finished (or an approval asked for or
    /// decided) meanwhile is in all of them or in none. `isolation`, when
    /// given, is the statement that makes the transaction's reads see one
    /// moment (Postgres reads each statement as of its own start by
    /// default; a SQLite read transaction keeps the moment of its first
    /// read).
    pub async fn snapshot(
        &self,
        thread_id: &str,
        now_ms: i64,
        isolation: Option<&str>,
    ) -> StoreResult<ThreadSnapshot> {
        let mut tx = self.pool.begin().await?;
        if let Some(isolation) = isolation {
            sqlx::query(isolation).execute(&mut *tx).await?;
        }
        let text = format!(
            "SELECT s.last_event_seq AS snapshot_last_event_seq, {MESSAGE_COLUMNS} \
             FROM (SELECT last_event_seq FROM threads WHERE id = $1) AS s \
             LEFT JOIN messages ON messages.thread_id = $1 \
             ORDER BY seq"
        );
        // Each row read as it arrives: a whole thread's rows are never
        // held beside its messages.
        let mut last_event_seq = 0;
        let mut messages = Vec::new();
        let mut rows = sqlx::query(&text).bind(thread_id).fetch(&mut *tx);
        while let Some(row) = rows.try_next().await? {
            last_event_seq = row.int("snapshot_last_event_seq")?;
            // The thread's row alone: no messages yet.
            if row.opt_int("seq")?.is_some() {
                messages.push(message_from_row(&row)?);
            }
        }
        drop(rows);
        let unfinished = sqlx::query(&format!(
            "SELECT {TOOL_CALL_COLUMNS} FROM {TOOL_CALL_FROM} \
             WHERE c.status IN ('running', 'pending_approval') AND c.thread_id = $1 \
             ORDER BY c.ordinal"
        ))
        .bind(thread_id)
        .fetch_all(&mut *tx)
        .await?;
        let placements = sqlx::query(
            "SELECT id, parent_message_id, after_message_seq FROM tool_calls \
             WHERE thread_id = $1 ORDER BY ordinal",
        )
        .bind(thread_id)
        .fetch_all(&mut *tx)
        .await?;
        let open_approvals = Self::open_approvals(&mut tx, thread_id, now_ms).await?;
        tx.commit().await?;
        Ok(ThreadSnapshot {
            messages,
            last_event_seq,
            unfinished: unfinished
                .iter()
                .map(tool_call_from_row)
                .collect::<StoreResult<_>>()?,
            open_approvals,
            placements: placements
                .iter()
                .map(|row| {
                    Ok(CallPlacement {
                        id: row.text("id")?,
                        parent_message_id: row.opt_text("parent_message_id")?,
                        after_message_seq: row.opt_int("after_message_seq")?,
                    })
                })
                .collect::<StoreResult<_>>()?,
        })
    }

    pub async fn all_messages(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>> {
        self.every_message(thread_id, message_from_row).await
    }

    pub async fn conversation(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>> {
        self.every_message(thread_id, |row| {
            let mut message = message_from_row(row)?;
            if let Some(output) = message
                .metadata
                .get_mut("tool_agent_output")
                .and_then(Value::as_object_mut)
            {
                for key in super::OUTPUT_KEYS_IN_CONTENT {
                    output.remove(key);
                }
            }
            Ok(message)
        })
        .await
    }

    /// Every message of the thread, ascending, each row read as it
    /// arrives (a whole thread's rows are never held at once).
    async fn every_message(
        &self,
        thread_id: &str,
        read: impl Fn(&DB::Row) -> StoreResult<StoredMessage>,
    ) -> StoreResult<Vec<StoredMessage>> {
        let text =
            format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE thread_id = $1 ORDER BY seq");
        let mut rows = sqlx::query(&text).bind(thread_id).fetch(self.pool);
        let mut messages = Vec::new();
        while let Some(row) = rows.try_next().await? {
            messages.push(read(&row)?);
        }
        Ok(messages)
    }

    pub async fn call_parents(&self, thread_id: &str) -> StoreResult<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT id, parent_message_id FROM tool_calls \
             WHERE thread_id = $1 AND parent_message_id IS NOT NULL ORDER BY ordinal",
        )
        .bind(thread_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter()
            .map(|row| Ok((row.text("id")?, row.text("parent_message_id")?)))
            .collect()
    }

    pub async fn message_outlines(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>> {
        // Both dialects read `->` as "this key's JSON, or NULL".
        let rows = sqlx::query(
            "SELECT thread_id, seq, id, role, tool_call_id, created_at_ms, \
             CASE WHEN role = 'assistant' THEN metadata -> 'tool_calls' END AS tool_calls \
             FROM messages WHERE thread_id = $1 ORDER BY seq",
        )
        .bind(thread_id)
        .fetch_all(self.pool)
        .await?;
        rows.iter().map(outline_from_row).collect()
    }
}

/// The audit query for `filter` (`None` for an empty page). The caller runs
/// it on its pool and reads the rows with [`audit_entries`]: generic code
/// cannot run a built query, whose arguments borrow the builder.
/// The query named a table the database does not have (Postgres 42P01;
/// SQLite says so only in words).
fn no_such_table(e: &sqlx::Error) -> bool {
    e.as_database_error().is_some_and(|db| {
        db.code().as_deref() == Some("42P01") || db.message().starts_with("no such table")
    })
}

pub(super) fn audit_query<DB>(filter: &AuditFilter) -> Option<sqlx::QueryBuilder<'_, DB>>
where
    DB: Database,
    for<'q> String: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
{
    if filter.limit <= 0 {
        return None;
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
    Some(query)
}

pub(super) fn audit_entries(rows: &[impl StoreRow]) -> StoreResult<Vec<AuditEntry>> {
    rows.iter().map(audit_from_row).collect()
}

fn tool_call_from_row(row: &impl StoreRow) -> StoreResult<ToolCallRecord> {
    let status = row.text("status")?;
    Ok(ToolCallRecord {
        thread_id: row.text("thread_id")?,
        id: row.text("id")?,
        owner: row.text("owner")?,
        run_id: row.text("run_id")?,
        tool_name: row.text("tool_name")?,
        args: row.json("args")?,
        status: CallStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown tool call status {status:?}")))?,
        output: row.opt_json("output")?,
        undo: row.opt_json("undo")?,
        message_id: row.opt_text("message_id")?,
        created_at_ms: row.int("created_at_ms")?,
        finished_at_ms: row.opt_int("finished_at_ms")?,
        undo_of: row.opt_text("undo_of")?,
        workspace: row.opt_text("workspace")?,
        dry_run: row.opt_int("dry_run")?.map(|flag| flag != 0),
        undone_by: row.opt_text("undone_by")?,
        parent_message_id: row.opt_text("parent_message_id")?,
    })
}

fn approval_from_row(row: &impl StoreRow) -> StoreResult<ApprovalRecord> {
    let status = row.text("status")?;
    Ok(ApprovalRecord {
        id: row.text("id")?,
        thread_id: row.text("thread_id")?,
        owner: row.text("owner")?,
        tool_call_id: row.text("tool_call_id")?,
        tool_name: row.text("tool_name")?,
        arguments: row.json("arguments")?,
        reason: row.text("reason")?,
        preview: row.opt_json("preview")?,
        request: row.json("request")?,
        status: ApprovalStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown approval status {status:?}")))?,
        decided_by: row.opt_text("decided_by")?,
        decision_reason: row.opt_text("decision_reason")?,
        created_at_ms: row.int("created_at_ms")?,
        expires_at_ms: row.int("expires_at_ms")?,
        decided_at_ms: row.opt_int("decided_at_ms")?,
    })
}

fn audit_from_row(row: &impl StoreRow) -> StoreResult<AuditEntry> {
    Ok(AuditEntry {
        id: row.int("id")?,
        at_ms: row.int("at_ms")?,
        owner: row.text("owner")?,
        thread_id: row.opt_text("thread_id")?,
        tool_call_id: row.opt_text("tool_call_id")?,
        tool_name: row.opt_text("tool_name")?,
        action: row.text("action")?,
        operation: row.opt_text("operation")?,
        verdict: row.opt_text("verdict")?,
        rule: row.opt_text("rule")?,
        approval_id: row.opt_text("approval_id")?,
        outcome: row.opt_text("outcome")?,
        duration_ms: row.opt_int("duration_ms")?,
        detail: row.json("detail")?,
    })
}

fn message_from_row(row: &impl StoreRow) -> StoreResult<StoredMessage> {
    message_with(row, row.text("content")?, row.json("metadata")?)
}

/// A message of [`Reads::message_outlines`]: no content, and of the
/// metadata only the tool calls.
fn outline_from_row(row: &impl StoreRow) -> StoreResult<StoredMessage> {
    let mut metadata = serde_json::Map::new();
    if let Some(calls) = row.opt_json("tool_calls")? {
        metadata.insert("tool_calls".into(), calls);
    }
    message_with(row, String::new(), Value::Object(metadata))
}

/// A message row's own columns, with `content` and `metadata` as given.
fn message_with(
    row: &impl StoreRow,
    content: String,
    metadata: Value,
) -> StoreResult<StoredMessage> {
    let role = row.text("role")?;
    Ok(StoredMessage {
        thread_id: row.text("thread_id")?,
        seq: row.int("seq")?,
        id: row.text("id")?,
        role: Role::parse(&role)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown message role {role:?}")))?,
        content,
        metadata,
        tool_call_id: row.opt_text("tool_call_id")?,
        created_at_ms: row.int("created_at_ms")?,
    })
}

/// The rows of `rows`, read one by one, up to and including the one that
/// brings the page to [`PAGE_BYTES`]: the rest are never read.
async fn up_to_page_bytes<R, T>(
    rows: &mut (impl futures::Stream<Item = Result<R, sqlx::Error>> + Unpin),
    read: impl Fn(&R) -> StoreResult<T>,
    bytes_of: impl Fn(&T) -> usize,
) -> StoreResult<Vec<T>> {
    let mut page = Vec::new();
    let mut bytes = 0;
    while let Some(row) = rows.try_next().await? {
        let item = read(&row)?;
        bytes += bytes_of(&item);
        page.push(item);
        if bytes >= PAGE_BYTES {
            break;
        }
    }
    Ok(page)
}

fn event_from_row(row: &impl StoreRow) -> StoreResult<StoredEvent> {
    let seq = row.int("seq")?;
    let from_message = match row.opt_text("message_id")? {
        Some(message_id) => {
            let output = row.opt_json("output")?.ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "event {seq} refers to message {message_id:?}, which holds no output"
                ))
            })?;
            Some(ResultReference { message_id, output })
        }
        None => None,
    };
    Ok(StoredEvent {
        thread_id: row.text("thread_id")?,
        seq,
        event_type: row.text("event_type")?,
        data: row.text("data")?.into(),
        created_at_ms: row.int("created_at_ms")?,
        from_message,
    })
}

#[cfg(test)]
mod tests {
    use sqlx::Row;

    use super::approvals_query;
    use crate::store::ApprovalStatus;
    use crate::store::sqlite::SqliteStore;

    /// SQLite's plan for an approvals page, one line per step.
    async fn plan(
        store: &SqliteStore,
        one_owner: bool,
        one_thread: bool,
        status: Option<ApprovalStatus>,
    ) -> String {
        let sql = format!(
            "EXPLAIN QUERY PLAN {}",
            approvals_query(one_owner, one_thread, status)
        );
        let query = sqlx::query(&sql)
            .bind(one_owner.then_some("alice"))
            .bind(1_700_000_000_000_i64)
            .bind("apr_1")
            .bind(50_i64);
        let query = match status {
            None => query,
            Some(ApprovalStatus::Pending | ApprovalStatus::Expired) => {
                query.bind(1_700_000_000_000_i64)
            }
            Some(status) => query.bind(status.as_str()),
        };
        let query = if one_thread { query.bind("t") } else { query };
        let rows = query.fetch_all(store.pool()).await.unwrap();
        rows.iter()
            .map(|r| r.get::<String, _>("detail"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[tokio::test]
    async fn approval_pages_read_an_index_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_file(&dir.path().join("db.sqlite"))
            .await
            .unwrap();
        for status in [
            None,
            Some(ApprovalStatus::Pending),
            Some(ApprovalStatus::Approved),
            Some(ApprovalStatus::Expired),
        ] {
            let every_owner = plan(&store, false, false, status).await;
            assert!(every_owner.contains("approvals_created"), "{every_owner}");
            let one_owner = plan(&store, true, false, status).await;
            assert!(one_owner.contains("approvals_owner"), "{one_owner}");
            for plan in [every_owner, one_owner] {
                assert!(!plan.contains("TEMP B-TREE"), "sorted afresh: {plan}");
                assert!(!plan.starts_with("SCAN approvals\n"), "{plan}");
            }
            // One thread's (its owner checked apart): looked up by the
            // thread; a thread's approvals are few, sorted as read.
            let one_thread = plan(&store, false, true, status).await;
            assert!(one_thread.contains("thread_id=?"), "{one_thread}");
            assert!(!one_thread.starts_with("SCAN approvals\n"), "{one_thread}");
        }
        // A call's approval is looked up, not searched for.
        let rows = sqlx::query(&format!(
            "EXPLAIN QUERY PLAN {}",
            super::approval_of_call_query()
        ))
        .bind("t")
        .bind("c1")
        .fetch_all(store.pool())
        .await
        .unwrap();
        let plan: Vec<String> = rows.iter().map(|r| r.get("detail")).collect();
        assert!(
            plan[0].contains("approvals_call (thread_id=? AND tool_call_id=?)"),
            "{plan:?}"
        );
    }

    /// A page of an owner's threads starts in their index at its cursor
    /// and reads it in order: no scan of every thread, no sort.
    #[tokio::test]
    async fn thread_pages_read_the_owners_index_from_the_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_file(&dir.path().join("db.sqlite"))
            .await
            .unwrap();
        let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {}", super::THREADS_PAGE))
            .bind("alice")
            .bind(1_700_000_000_000_i64)
            .bind("t9")
            .bind(51_i64)
            .fetch_all(store.pool())
            .await
            .unwrap();
        let plan = rows
            .iter()
            .map(|r| r.get::<String, _>("detail"))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            plan.contains("threads_owner_created (owner=? AND"),
            "{plan}"
        );
        assert!(!plan.contains("TEMP B-TREE"), "sorted afresh: {plan}");
    }
}
