//! Durable state: threads, messages, tool calls, the per-thread event log,
//! approvals, the append-only audit log and owners' permission rules.
//!
//! One [`Store`] interface with two implementations (embedded SQLite, the
//! default; Postgres, for production). Writes a request waits for go through
//! the group-commit [`writer::Writer`]: many callers' [`WriteUnit`]s share one
//! transaction, and each caller is answered only after that commit.

mod batch;
pub(crate) mod checks;
mod db_error;
pub mod postgres;
pub mod purge;
mod reads;
pub mod sqlite;
mod sqlite_writes;
mod wal_vfs;
pub mod writer;

pub use checks::DELETE_AT_ONCE;

use std::sync::Arc;

use anyhow::Context as _;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The thread exists and belongs to another owner.
    #[error("thread belongs to another owner")]
    NotOwner,
    /// A unique constraint failed (e.g. a tool call id recorded concurrently).
    #[error("conflict: {0}")]
    Conflict(String),
    /// A call id the thread declares (in an assistant message's
    /// `tool_calls`) or records with one tool and arguments came again with
    /// another tool or other arguments. Unlike [`StoreError::Conflict`],
    /// looking again finds nothing that answers for the call.
    #[error("{0}")]
    Redeclared(String),
    /// A call id recorded in the thread came again as another call:
    /// `field` (`name`, `arguments`, `workspace` or `dry_run`) differs.
    #[error("tool call {id:?} is already recorded in this thread with another {field}")]
    CallConflict { id: String, field: &'static str },
    /// The call's run was rolled back ([`WriteOp::CloseRun`]): it takes no
    /// more calls.
    #[error("run {run_id:?} was rolled back: it takes no more calls")]
    RunClosed { run_id: String },
    /// The record was refused for what the thread holds at its `field`
    /// (a call's `parent_message_id` naming a message of another role
    /// than an assistant's). Unlike [`StoreError::Conflict`], looking
    /// again finds nothing that answers for it.
    #[error("{detail}")]
    Refused { field: &'static str, detail: String },
    /// The thread was deleted (`DELETE /v1/threads/{id}`): it takes no
    /// more writes, and its id is not used again.
    #[error("thread {thread:?} was deleted")]
    ThreadDeleted { thread: String, at_ms: i64 },
    /// The thread is being deleted ([`WriteOp::CloseThread`], since
    /// `since_ms`): it takes no new calls or turns.
    #[error("thread {thread:?} is being deleted: it takes no new calls or messages")]
    ThreadClosing { thread: String, since_ms: i64 },
    /// [`WriteOp::DeleteThread`] met calls still running or waiting for
    /// an approval (their ids and statuses): nothing was deleted.
    #[error("the thread has calls still running or waiting for approval")]
    ThreadBusy { calls: Vec<(String, CallStatus)> },
    /// A referenced row does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration error: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The database holds a migration this build does not have: a newer
    /// toolgate migrated it.
    #[error(
        "the database was migrated by a newer toolgate: its migration {0} is not one this \
         build has. Serve it with that toolgate (or a later one); this one would not \
         know its schema"
    )]
    Newer(i64),
    /// The schema lacks a migration (the database is an older one's).
    #[error("{0} (`toolgate migrate`, or a start of toolgate, applies it)")]
    NotMigrated(String),
    /// The writer task is gone (shutting down).
    #[error("writer unavailable")]
    WriterClosed,
}

pub type StoreResult<T> = Result<T, StoreError>;

/// A migration of a newer toolgate found in the database by
/// [`Store::ready`] (its version; 0: none): from then on the store takes
/// no writes, answered as in an outage, since what this build writes may
/// not be what the newer schema needs (a message without the rows a newer
/// version keeps beside it, say). Stop this process and start the newer
/// toolgate on its data directory, which writes any results kept there.
#[derive(Debug, Default)]
pub(crate) struct Superseded(std::sync::atomic::AtomicI64);

impl Superseded {
    /// Remember what a readiness check found: a newer migration, or none
    /// (any more: it was removed again), or nothing known (another error).
    pub(crate) fn note(&self, ready: &StoreResult<()>) {
        let found = match ready {
            Err(StoreError::Newer(version)) => *version,
            Ok(()) => 0,
            Err(_) => return,
        };
        self.0.store(found, std::sync::atomic::Ordering::Relaxed);
    }

    /// `Newer` once a newer migration was found.
    pub(crate) fn check(&self) -> StoreResult<()> {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            0 => Ok(()),
            version => Err(StoreError::Newer(version)),
        }
    }
}

impl StoreError {
    /// The database could not be reached or used just now (a connection
    /// lost or refused, a full or failing disk, a lock held too long, a
    /// deadlock): the same request may succeed later.
    pub fn is_unavailable(&self) -> bool {
        use sqlx::Error as E;
        match self {
            StoreError::Database(E::Io(_) | E::Tls(_) | E::PoolTimedOut | E::PoolClosed) => true,
            StoreError::Database(E::Database(db)) => {
                db.code().is_some_and(|c| unavailable_code(&c))
            }
            // This process no longer writes to it (see [`Superseded`]).
            StoreError::Newer(_) => true,
            _ => false,
        }
    }

    /// The database refused this data rather than failed: a constraint or
    /// trigger refused a row, a value was out of its type's range, or a
    /// row was too large for an index. The same data will be refused again;
    /// other data (a smaller result, say) may not be.
    pub fn is_refused_data(&self) -> bool {
        use sqlx::error::ErrorKind;
        let StoreError::Database(sqlx::Error::Database(db)) = self else {
            return false;
        };
        !matches!(db.kind(), ErrorKind::Other) || db.code().is_some_and(|c| refused_data_code(&c))
    }

    /// The database raised this error on a statement and it is not one
    /// that clears by itself: refused data, and also what we cannot
    /// classify (a trigger raising an internal error, a broken statement).
    /// Writing the same unit again would fail again.
    pub fn is_raised_on_statement(&self) -> bool {
        matches!(self, StoreError::Database(sqlx::Error::Database(_))) && !self.is_unavailable()
    }

    /// The call's record was refused for what the thread already holds:
    /// its id is another call's (recorded, or declared otherwise), or its
    /// run was rolled back. Nothing of the call is stored, nor will be.
    pub fn refuses_call(&self) -> bool {
        matches!(
            self,
            StoreError::Conflict(_)
                | StoreError::Redeclared(_)
                | StoreError::RunClosed { .. }
                | StoreError::Refused { .. }
                | StoreError::ThreadDeleted { .. }
                | StoreError::ThreadClosing { .. }
        )
    }

    /// The error concerns one unit, not the connection or the database: in
    /// a batch, that unit alone is rolled back (its savepoint) and the
    /// others still commit. A store that cannot roll the unit back alone
    /// fails the batch instead.
    pub fn is_unit_local(&self) -> bool {
        matches!(
            self,
            StoreError::NotOwner
                | StoreError::Conflict(_)
                | StoreError::CallConflict { .. }
                | StoreError::Redeclared(_)
                | StoreError::RunClosed { .. }
                | StoreError::Refused { .. }
                | StoreError::ThreadDeleted { .. }
                | StoreError::ThreadClosing { .. }
                | StoreError::ThreadBusy { .. }
                | StoreError::NotFound(_)
        ) || self.is_raised_on_statement()
    }
}

/// An error code as the backend gave it: a Postgres SQLSTATE (five
/// characters, its first two the class), or a SQLite extended result code
/// in decimal (at most four digits; its low byte is the primary code).
enum ErrorCode<'a> {
    SqlState(&'a str),
    Sqlite(i32),
    Unknown,
}

impl ErrorCode<'_> {
    fn of(code: &str) -> ErrorCode<'_> {
        if code.len() == 5 {
            return ErrorCode::SqlState(code);
        }
        code.parse::<i32>()
            .map_or(ErrorCode::Unknown, |n| ErrorCode::Sqlite(n & 0xff))
    }
}

/// Refused data: SQLSTATE classes 22 (data exception: a NUL in text, a
/// number out of range), 23 (integrity constraint), 54 (program limit: an
/// index row too large) and P0 (raised by a trigger or function); SQLite
/// TOOBIG (18), CONSTRAINT (19, a trigger's RAISE included), MISMATCH (20)
/// and RANGE (25).
fn refused_data_code(code: &str) -> bool {
    match ErrorCode::of(code) {
        ErrorCode::SqlState(s) => ["22", "23", "54", "P0"].iter().any(|c| s.starts_with(c)),
        ErrorCode::Sqlite(primary) => matches!(primary, 18 | 19 | 20 | 25),
        ErrorCode::Unknown => false,
    }
}

/// SQLite said the file is damaged or is no database: CORRUPT (11) and
/// NOTADB (26), with their extended codes.
pub(super) fn damaged_code(code: &str) -> bool {
    matches!(ErrorCode::of(code), ErrorCode::Sqlite(11 | 26))
}

/// A connection that failed or was refused, a database short of a
/// resource, or a transaction the database gave up on for now: SQLSTATE
/// class 08, operator intervention 57P0x, class 53 (a full disk, no
/// memory, too many connections), class 58 (an I/O error), a database not
/// accepting connections (55000), a lock not available (55P03), a
/// read-only transaction (25006: a standby, a database set read-only),
/// class 40 (a
/// serialization failure or a deadlock), and the refusals of a connection
/// by name or credentials: the database does not exist under its name
/// (3D000: renamed, or dropped to be restored), its tables do not (42P01)
/// and class 28 (a login the
/// server does not take, as while a password is rotated); SQLite BUSY,
/// LOCKED, IOERR, FULL and CANTOPEN. Each clears without the data changing.
fn unavailable_code(code: &str) -> bool {
    match ErrorCode::of(code) {
        ErrorCode::SqlState(s) => {
            ["08", "28", "40", "53", "57P", "58"]
                .iter()
                .any(|c| s.starts_with(c))
                // 25006: a read-only transaction (a standby after a
                // failover, default_transaction_read_only): no write can
                // commit until the database takes writes again.
                || ["25006", "55000", "55P03", "3D000"].contains(&s)
                // 42P01: a table is missing: the database was emptied (to
                // be restored, say); a restore or a restart that migrates
                // it again brings the tables back.
                || s == "42P01"
        }
        // BUSY, LOCKED, READONLY (the file or its directory not writable
        // by the service), IOERR, FULL, CANTOPEN.
        ErrorCode::Sqlite(primary) => matches!(primary, 5 | 6 | 8 | 10 | 13 | 14),
        ErrorCode::Unknown => false,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    System,
    /// Instructions from the application's developer (AG-UI and OpenAI
    /// `developer`); a model context treats them as system text where the
    /// vendor has no such role.
    Developer,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
            Role::Developer => "developer",
            Role::Tool => "tool",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "system" => Role::System,
            "developer" => Role::Developer,
            "tool" => Role::Tool,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// Recorded, waiting for a human decision (an approval); not started.
    PendingApproval,
    Running,
    Success,
    Failure,
    Partial,
}

impl CallStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::PendingApproval => "pending_approval",
            CallStatus::Running => "running",
            CallStatus::Success => "success",
            CallStatus::Failure => "failure",
            CallStatus::Partial => "partial",
        }
    }

    pub fn parse(s: &str) -> Option<CallStatus> {
        Some(match s {
            "pending_approval" => CallStatus::PendingApproval,
            "running" => CallStatus::Running,
            "success" => CallStatus::Success,
            "failure" => CallStatus::Failure,
            "partial" => CallStatus::Partial,
            _ => return None,
        })
    }

    /// Whether the call has ended (success, failure or partial): it has an
    /// output and a tool message.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            CallStatus::Success | CallStatus::Failure | CallStatus::Partial
        )
    }
}

/// The keys of a tool message's `metadata.tool_agent_output` that repeat
/// what its `content` holds (the result, and the hints shown from it):
/// [`Store::conversation`] leaves them out.
pub const OUTPUT_KEYS_IN_CONTENT: [&str; 2] = ["result", "ui_hints"];

/// A message as stored. `content` is always text; structure lives in
/// `metadata` (for tool messages: `{"tool_agent_output": …}`; for assistant
/// messages with calls: `{"tool_calls": [{id, name, arguments}]}`).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredMessage {
    pub thread_id: String,
    /// Per-thread position, 1-based, gap-free: the history cursor.
    pub seq: i64,
    pub id: String,
    pub role: Role,
    pub content: String,
    pub metadata: Value,
    /// For tool messages: the call they answer.
    pub tool_call_id: Option<String>,
    pub created_at_ms: i64,
}

/// A thread as of one moment (see [`Store::snapshot`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadSnapshot {
    /// Every message, ascending.
    pub messages: Vec<StoredMessage>,
    /// The id of the thread's last event, 0 before the first.
    pub last_event_seq: i64,
    /// The calls not finished yet (`running`, or `pending_approval`: asked
    /// about and not decided), in the order they were recorded.
    pub unfinished: Vec<ToolCallRecord>,
    /// The approvals still waiting for a decision and not yet expired at
    /// the `now_ms` the snapshot was read for, oldest first (as
    /// [`Store::open_approvals_of_thread`] orders them).
    pub open_approvals: Vec<ApprovalRecord>,
    /// Where each call was announced, in the order the calls were recorded
    /// (which is the order they were announced in).
    pub placements: Vec<CallPlacement>,
}

/// Where a call was announced among its thread's messages: what a client
/// watching live made of its `TOOL_CALL_START`, so that a snapshot shows
/// the call where that client put it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallPlacement {
    pub id: String,
    /// The `parentMessageId` its announcement named.
    pub parent_message_id: Option<String>,
    /// The thread's last message seq when its announcement was logged (0
    /// before the first message); `None` for a call recorded before
    /// toolgate kept it.
    pub after_message_seq: Option<i64>,
}

/// One of an owner's threads, as `GET /v1/threads` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSummary {
    pub id: String,
    pub created_at_ms: i64,
    /// The id of the thread's last event (0 before the first): where a
    /// stream opened with `?after=` this value starts live.
    pub last_event_seq: i64,
    /// How many messages the thread holds (their seqs are 1..=messages).
    pub messages: i64,
    /// When the last message was stored; `None` while there is none.
    pub last_message_at_ms: Option<i64>,
}

/// A JSON document as the store writes it, serialized once where it is
/// built: the group-commit writer, the one thread every write waits for,
/// binds the text instead of walking a `Value` tree.
///
/// Valid JSON by construction: made only by serializing a value, and
/// checked when deserialized (a unit read back from the spool), so the
/// SQLite writer can leave the schema's `json_valid()` checks aside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JsonText(String);

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        serde_json::from_str::<serde::de::IgnoredAny>(&text)
            .map_err(|e| serde::de::Error::custom(format!("not a JSON document: {e}")))?;
        Ok(JsonText(text))
    }
}

impl JsonText {
    /// The JSON text of `value`.
    pub fn of(value: &impl Serialize) -> JsonText {
        JsonText(serde_json::to_string(value).expect("JSON documents serialize"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<Value> for JsonText {
    fn from(value: Value) -> JsonText {
        JsonText::of(&value)
    }
}

impl From<&Value> for JsonText {
    fn from(value: &Value) -> JsonText {
        JsonText::of(value)
    }
}

/// A message to insert; the store assigns `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewMessage {
    pub id: String,
    pub role: Role,
    pub content: String,
    pub metadata: JsonText,
    pub tool_call_id: Option<String>,
    pub created_at_ms: i64,
    /// The calls an assistant message declares (its `tool_calls`), kept
    /// in the thread's table of declared calls: a call id declared, or
    /// recorded, with another tool or other arguments fails the unit with
    /// [`StoreError::Redeclared`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub declares: Vec<DeclaredCall>,
}

/// What a thread's assistant messages say of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Declaration {
    /// The message that declares the call, if one does.
    pub by: Option<DeclaringMessage>,
    /// Whether any message of the thread declares a call.
    pub thread_declares: bool,
}

/// The message that declares a call, and the call as it declares it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeclaringMessage {
    pub message_id: String,
    /// The tool's canonical name (see [`DeclaredCall`]).
    pub tool_name: String,
    pub args: Value,
}

/// A call an assistant message declares: its id, the tool's name (its
/// canonical name, when the name was an alias of a registered tool) and
/// its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeclaredCall {
    pub id: String,
    pub tool_name: String,
    pub args: JsonText,
}

/// An event of the thread's log. `data` is the complete AG-UI event JSON text
/// exactly as streamed (stored as text so a replay is byte-identical); it is
/// shared, not copied, between the unit that wrote it, the receipt, the bus
/// and every subscriber (a result event can be megabytes).
///
/// An event read back from the log that was stored as a reference to its
/// tool message ([`NewEvent::announces`]) has an empty `data` and the
/// message's output in `from_message`, to be rebuilt from
/// (`engine::logged_event_data`).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub thread_id: String,
    /// Per-thread position, 1-based, gap-free: the SSE `id:`.
    pub seq: i64,
    pub event_type: String,
    pub data: Arc<str>,
    pub created_at_ms: i64,
    pub from_message: Option<ResultReference>,
}

/// The most stored text one page of history or of replayed events holds:
/// a page ends early, after the row that reaches it (a page holds at least
/// one row, whatever its size), and the next page goes on from there.
/// Without it, a page of 200 large results would be held whole in memory,
/// several times over while it is answered.
pub const PAGE_BYTES: usize = 4 * 1024 * 1024;

/// About how many bytes `value` takes as JSON text (its strings, numbers
/// and keys, without escapes): what a page counts against [`PAGE_BYTES`],
/// without writing the text out.
pub fn json_bytes(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 20,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => items.iter().map(|v| json_bytes(v) + 1).sum::<usize>() + 2,
        Value::Object(map) => {
            map.iter()
                .map(|(k, v)| k.len() + 4 + json_bytes(v))
                .sum::<usize>()
                + 2
        }
    }
}

impl StoredEvent {
    /// Its size as counted against [`PAGE_BYTES`].
    pub fn page_bytes(&self) -> usize {
        self.data.len()
            + self
                .from_message
                .as_ref()
                .map_or(0, |r| json_bytes(&r.output))
    }
}

impl ApprovalRecord {
    /// Its status at `now_ms`: a pending approval at or past its deadline
    /// can no longer be decided, so it is expired, whether or not the
    /// expiry sweeper has recorded its call's result yet.
    pub fn status_at(&self, now_ms: i64) -> ApprovalStatus {
        if self.status == ApprovalStatus::Pending && self.expires_at_ms <= now_ms {
            ApprovalStatus::Expired
        } else {
            self.status
        }
    }

    /// Its size as counted against [`PAGE_BYTES`]: the call's arguments
    /// (twice: in its request too) and the preview.
    pub fn page_bytes(&self) -> usize {
        self.reason.len()
            + json_bytes(&self.arguments)
            + self.preview.as_ref().map_or(0, json_bytes)
            + json_bytes(&self.request)
    }
}

impl StoredMessage {
    /// Its size as counted against [`PAGE_BYTES`].
    pub fn page_bytes(&self) -> usize {
        self.content.len() + json_bytes(&self.metadata)
    }
}

/// What a tool result's event, stored as a reference, is rebuilt from: its
/// tool message's id and `metadata.tool_agent_output`.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultReference {
    pub message_id: String,
    pub output: Value,
}

/// An event to append; the store assigns `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    pub event_type: String,
    pub data: Arc<str>,
    pub created_at_ms: i64,
    /// For a TOOL_CALL_RESULT: the tool message it announces, which the
    /// same unit must insert (else the unit fails with `Conflict`). The log
    /// then keeps only that reference, not `data`: the event's JSON is
    /// rebuilt from the message's output when the log is read. The receipt
    /// and the bus still carry `data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub announces: Option<String>,
}

impl NewEvent {
    /// The event as appended at `seq` of `thread_id` (its data shared).
    pub(crate) fn stored(&self, thread_id: &str, seq: i64) -> StoredEvent {
        StoredEvent {
            thread_id: thread_id.to_owned(),
            seq,
            event_type: self.event_type.clone(),
            data: Arc::clone(&self.data),
            created_at_ms: self.created_at_ms,
            from_message: None,
        }
    }

    /// What the log's `data` column keeps: nothing for an event stored as
    /// a reference to its message.
    pub(crate) fn logged_data(&self) -> &str {
        if self.announces.is_some() {
            ""
        } else {
            &self.data
        }
    }
}

/// The idempotency and undo record of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRecord {
    pub thread_id: String,
    pub id: String,
    pub owner: String,
    pub run_id: String,
    pub tool_name: String,
    pub args: Value,
    pub status: CallStatus,
    /// The full ToolAgentOutput once finished: the `tool_agent_output` of
    /// its tool message's metadata, where it is stored (once); calls
    /// finished by releases that also kept a copy in the call's row are
    /// read from that copy.
    pub output: Option<Value>,
    pub undo: Option<Value>,
    /// The tool message holding the result, once finished.
    pub message_id: Option<String>,
    pub created_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    /// The id of the call (same thread) this call undoes, if it is an undo.
    pub undo_of: Option<String>,
    /// The id of the call that undid this one ([`WriteOp::MarkUndone`]).
    pub undone_by: Option<String>,
    /// The sub-workspace the call works in; `None`: the owner's main one.
    pub workspace: Option<String>,
    /// Whether it was a dry run; `None` for calls recorded before this was
    /// (then neither it nor `workspace` is known).
    pub dry_run: Option<bool>,
    /// The message its announcement named as its parent
    /// ([`NewToolCall::parent_message_id`]).
    pub parent_message_id: Option<String>,
}

/// A new call, recorded before it executes (write-ahead): `running`, or
/// `pending_approval` when it must wait for a decision first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewToolCall {
    pub id: String,
    pub run_id: String,
    pub tool_name: String,
    pub args: JsonText,
    /// [`CallStatus::Running`] or [`CallStatus::PendingApproval`]; any other
    /// status fails the unit with `Conflict`.
    pub status: CallStatus,
    /// The id of the call (same thread) this call undoes.
    pub undo_of: Option<String>,
    /// The sub-workspace the call works in; `None`: the owner's main one.
    #[serde(default)]
    pub workspace: Option<String>,
    /// A preview, not the call itself.
    #[serde(default)]
    pub dry_run: bool,
    pub created_at_ms: i64,
    /// The process running the call (its data directory's instance id):
    /// a starting process finishes only its own calls left `running`.
    #[serde(default)]
    pub instance: Option<String>,
    /// The assistant message of the thread that declares this call, as the
    /// caller found it (`None`: no message declares it). The unit fails with
    /// [`StoreError::Conflict`] when the thread declares the call otherwise
    /// by the time it commits (a message recorded since): the caller looks
    /// again, so a call is announced under the message that declares it.
    #[serde(default)]
    pub declared_by: Option<String>,
    /// The message its announcement names as its parent: the assistant
    /// message that declares it, or the `parent_message_id` it was posted
    /// with.
    #[serde(default)]
    pub parent_message_id: Option<String>,
}

/// The end of a call: its status, undo record and the id of the tool
/// message that carries its output. That message (`tool_call_id` = this
/// call) must be inserted by the same unit: its `metadata.tool_agent_output`
/// is the call's output ([`ToolCallRecord::output`]), stored only there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinishedToolCall {
    pub id: String,
    pub status: CallStatus,
    pub undo: Option<JsonText>,
    pub message_id: String,
    pub finished_at_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    Expired,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
        }
    }

    pub fn parse(s: &str) -> Option<ApprovalStatus> {
        Some(match s {
            "pending" => ApprovalStatus::Pending,
            "approved" => ApprovalStatus::Approved,
            "denied" => ApprovalStatus::Denied,
            "expired" => ApprovalStatus::Expired,
            _ => return None,
        })
    }
}

/// A request for a human decision on one call (the checkpoint gate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// Globally unique.
    pub id: String,
    pub thread_id: String,
    pub owner: String,
    pub tool_call_id: String,
    pub tool_name: String,
    pub arguments: Value,
    /// Why it needs approval: the matching rule, or `"requires_checkpoint"`.
    pub reason: String,
    /// The dry-run preview, when the tool offers one.
    pub preview: Option<Value>,
    /// What the engine needs to resume the call (opaque to the store).
    pub request: Value,
    pub status: ApprovalStatus,
    pub decided_by: Option<String>,
    pub decision_reason: Option<String>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub decided_at_ms: Option<i64>,
}

/// One entry of the append-only audit log, as stored (and as `GET
/// /v1/audit` returns it).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AuditEntry {
    /// Assigned by the store: global, increasing in insertion order (ids of
    /// rolled-back entries may be skipped).
    pub id: i64,
    pub at_ms: i64,
    pub owner: String,
    pub thread_id: Option<String>,
    pub tool_call_id: Option<String>,
    pub tool_name: Option<String>,
    /// What happened: `call.executed`, `call.refused`, `approval.requested`,
    /// `approval.decided`, `call.undo`, `run.rolled_back`, …
    pub action: String,
    /// The tool's `audit_operation`.
    pub operation: Option<String>,
    /// The permission verdict: `allow`, `ask` or `deny`.
    pub verdict: Option<String>,
    /// The rule that decided the verdict.
    pub rule: Option<String>,
    pub approval_id: Option<String>,
    pub outcome: Option<String>,
    pub duration_ms: Option<i64>,
    #[schema(value_type = Object)]
    pub detail: Value,
}

/// An audit entry to append; the store assigns `id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewAuditEntry {
    pub at_ms: i64,
    pub owner: String,
    pub thread_id: Option<String>,
    pub tool_call_id: Option<String>,
    pub tool_name: Option<String>,
    pub action: String,
    pub operation: Option<String>,
    pub verdict: Option<String>,
    pub rule: Option<String>,
    pub approval_id: Option<String>,
    pub outcome: Option<String>,
    pub duration_ms: Option<i64>,
    pub detail: JsonText,
}

/// Which audit entries [`Store::audit`] returns: those of `owner` matching
/// every field that is set, newest first, at most `limit`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AuditFilter {
    /// Required: entries of other owners are never returned.
    pub owner: String,
    pub thread_id: Option<String>,
    pub tool_name: Option<String>,
    pub action: Option<String>,
    pub tool_call_id: Option<String>,
    /// `at_ms >= since_ms`.
    pub since_ms: Option<i64>,
    /// `at_ms < until_ms`.
    pub until_ms: Option<i64>,
    /// Keyset cursor: only entries with `id < before_id` (pass the smallest
    /// id of the previous page).
    pub before_id: Option<i64>,
    pub limit: i64,
}

/// One operation of a [`WriteUnit`], applied in order.
///
/// Every op acts inside the unit's thread: calls and approvals of other
/// threads are not found. An op whose record names another thread or owner
/// than its unit fails the unit with `Conflict`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WriteOp {
    /// Insert the tool call with its status (`running` or
    /// `pending_approval`). A duplicate (thread, id) fails the unit with
    /// [`StoreError::Conflict`]; an id the thread declares (an assistant
    /// message's `tool_calls`) with another tool or other arguments fails
    /// it with [`StoreError::Redeclared`]. The call gets the thread's next
    /// ordinal (the order of [`Store::run_calls`]). A call of a run closed
    /// by [`WriteOp::CloseRun`] fails it with [`StoreError::RunClosed`],
    /// and any new call of a thread closed by [`WriteOp::CloseThread`]
    /// with [`StoreError::ThreadClosing`].
    InsertToolCall(NewToolCall),
    /// Mark a `running` or `pending_approval` call finished (a denied or
    /// expired call is finished without ever running). Fails with `NotFound`
    /// if it is not recorded, `Conflict` if it is already finished, the
    /// given status is not a terminal one or the unit does not insert the
    /// call's tool message.
    FinishToolCall(FinishedToolCall),
    /// Start an approved call: `pending_approval` → `running`. `NotFound` if
    /// it is not recorded, `Conflict` if it is not pending.
    StartPendingCall {
        id: String,
        /// The process that runs it ([`NewToolCall::instance`]).
        instance: Option<String>,
    },
    /// Record that call `id` was undone by call `undone_by`. `NotFound` if
    /// it is not recorded, `Conflict` if it is already marked undone.
    MarkUndone { id: String, undone_by: String },
    /// [`WriteOp::MarkUndone`] where it holds: nothing when call `id` is
    /// not recorded or is marked undone already (a change a tool took
    /// back, whose call may have been undone otherwise meanwhile).
    MarkUndoneIfOpen { id: String, undone_by: String },
    /// Append a message; a duplicate (thread, id) fails with `Conflict`.
    /// Its declared calls are kept; one the thread already declares or
    /// records with another tool or other arguments fails the unit with
    /// [`StoreError::Redeclared`]. A user, assistant or system message of
    /// a thread closed by [`WriteOp::CloseThread`] fails it with
    /// [`StoreError::ThreadClosing`] (a tool message, a call's result,
    /// goes in).
    InsertMessage(NewMessage),
    /// Append events to the thread's log, in order.
    AppendEvents(Vec<NewEvent>),
    /// Record an approval request. Its thread and owner must be the unit's;
    /// a duplicate id fails with `Conflict`.
    InsertApproval(ApprovalRecord),
    /// Decide a pending approval: `status` is `Approved`, `Denied` or
    /// `Expired`. `NotFound` if the thread has no such approval, `Conflict`
    /// if it is no longer pending (decided twice, or already expired). A
    /// human decision (`Approved`/`Denied`) at or after `expires_at_ms` is a
    /// `Conflict` as well, even before the sweeper marked it expired.
    DecideApproval {
        id: String,
        status: ApprovalStatus,
        decided_by: Option<String>,
        reason: Option<String>,
        decided_at_ms: i64,
    },
    /// Append an audit entry, committed with the rest of the unit. Its owner
    /// must be the unit's, its thread (if any) the unit's thread.
    AppendAudit(NewAuditEntry),
    /// Close run `run_id` of the thread (it is being rolled back): from this
    /// commit on, no call of it is recorded. Closing a closed run again
    /// changes nothing.
    CloseRun { run_id: String, closed_at_ms: i64 },
    /// Close the thread for its deletion: from this commit on it takes no
    /// new call ([`WriteOp::InsertToolCall`]), starts no approved one
    /// ([`WriteOp::StartPendingCall`]) and takes no new user, assistant
    /// or system message, while the calls it holds still finish. Closing
    /// a closing thread again keeps when it was first closed.
    CloseThread { closing_at_ms: i64 },
    /// Delete what the thread holds: its messages, events, calls,
    /// approvals, declared calls and closed runs (a thread of more than
    /// [`checks::DELETE_AT_ONCE`] messages, events and calls together keeps
    /// those three until [`Store::purge_deleted`] removes them, a chunk
    /// at a time, unseen meanwhile: every read of a thread asks for it
    /// first, and the deleted one is gone). Its row stays, stamped
    /// `deleted_at_ms`: the id stays the owner's, and every later unit of
    /// the thread fails with [`StoreError::ThreadDeleted`] (this one too,
    /// when it was deleted already). A call still `running` or
    /// `pending_approval` fails the unit with [`StoreError::ThreadBusy`].
    /// It is its unit's only op; it appends its own audit entry
    /// (`thread.deleted`, counting what went), and the receipt's `deleted`
    /// counts it too.
    DeleteThread { deleted_at_ms: i64 },
}

/// Everything one caller needs written atomically, for one thread. The
/// thread is created for `owner` on first write; a thread of another owner
/// fails the unit with [`StoreError::NotOwner`]. A failing unit is rolled back
/// alone (savepoint); the other units of the same batch still commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteUnit {
    pub thread_id: String,
    pub owner: String,
    pub ops: Vec<WriteOp>,
}

/// What a committed unit was assigned.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UnitReceipt {
    /// The appended events with their sequence numbers, in order.
    pub events: Vec<StoredEvent>,
    /// (message id, seq) of each inserted message, in order.
    pub messages: Vec<(String, i64)>,
    /// The ids of the appended audit entries, in order.
    pub audit_ids: Vec<i64>,
    /// What [`WriteOp::DeleteThread`] removed.
    pub deleted: Option<DeletedContent>,
}

/// How much a thread held when it was deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct DeletedContent {
    pub messages: i64,
    pub events: i64,
    pub tool_calls: i64,
    pub approvals: i64,
}

/// Who owns a thread, and whether it was deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadOwner {
    pub owner: String,
    /// When [`WriteOp::DeleteThread`] emptied it; `None` while it lives.
    pub deleted_at_ms: Option<i64>,
}

/// An approval whose thread was deleted (its row went with the thread),
/// as the audit log remembers it: [`Store::deleted_approval`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedApproval {
    pub thread_id: String,
    /// The thread's owner, whose approval it was.
    pub owner: String,
    pub deleted_at_ms: i64,
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Which backend this is (`sqlite` or `postgres`), for `/readyz`.
    fn backend(&self) -> &'static str;

    /// Database reachable and every migration applied.
    async fn ready(&self) -> StoreResult<()>;

    /// Owner of a thread (and when it was deleted, if it was), `None` if
    /// the thread does not exist.
    async fn thread_owner(&self, thread_id: &str) -> StoreResult<Option<ThreadOwner>>;

    /// Approval `approval_id` when it was one of a thread since deleted
    /// (the approval's row gone with it, its audit entries kept); `None`
    /// for an approval that still is, or never was.
    async fn deleted_approval(&self, approval_id: &str) -> StoreResult<Option<DeletedApproval>>;

    /// What the assistant messages of `thread_id` say of call `call_id`.
    async fn call_declaration(&self, thread_id: &str, call_id: &str) -> StoreResult<Declaration>;

    /// Create the thread for `owner` if absent. Fails with `NotOwner` if it
    /// exists for someone else, `ThreadDeleted` if it was deleted.
    async fn claim_thread(&self, thread_id: &str, owner: &str) -> StoreResult<()>;

    async fn tool_call(&self, thread_id: &str, id: &str) -> StoreResult<Option<ToolCallRecord>>;

    /// Every call still `running` that process `instance` ran: left by a
    /// crash when called at start-up. Calls in `pending_approval` are not
    /// listed: they never started, and survive a restart untouched.
    async fn running_tool_calls(&self, instance: &str) -> StoreResult<Vec<ToolCallRecord>>;

    /// Every call still `running`, of any process or none, recorded before
    /// `cutoff_ms`.
    async fn running_calls_created_before(
        &self,
        cutoff_ms: i64,
    ) -> StoreResult<Vec<ToolCallRecord>>;

    /// Process `instance` is alive at `at_ms` ([`Store::running_calls_of_silent`]).
    async fn beat(&self, instance: &str, at_ms: i64) -> StoreResult<()>;

    /// Every call still `running` whose process, other than `except`, was
    /// last seen alive before `seen_before_ms` (a process with no
    /// heartbeat, from before them, is not judged here).
    async fn running_calls_of_silent(
        &self,
        seen_before_ms: i64,
        except: &str,
    ) -> StoreResult<Vec<ToolCallRecord>>;

    /// The calls of run `run_id` in the thread, in the order they were
    /// recorded (stable even for calls recorded in the same millisecond or
    /// the same unit).
    async fn run_calls(&self, thread_id: &str, run_id: &str) -> StoreResult<Vec<ToolCallRecord>>;

    /// Whether run `run_id` of the thread was closed ([`WriteOp::CloseRun`]).
    async fn run_closed(&self, thread_id: &str, run_id: &str) -> StoreResult<bool>;

    /// One approval by id (any thread, any owner: the caller checks the
    /// owner), `None` if unknown.
    async fn approval(&self, id: &str) -> StoreResult<Option<ApprovalRecord>>;

    /// The approvals of `owner` (of every owner when `None`: what an
    /// approver sees), of `thread` only when given, only those with
    /// `status` at `now_ms` when given (see
    /// [`ApprovalRecord::status_at`]: a pending approval past its deadline
    /// is listed as expired), newest first (by `created_at_ms`, then id),
    /// older than `before` (a `(created_at_ms, id)` of the previous page's
    /// last) when given, at most `limit`, and no more once they hold
    /// [`PAGE_BYTES`] (at least one).
    async fn approvals(
        &self,
        owner: Option<&str>,
        thread: Option<&str>,
        status: Option<ApprovalStatus>,
        now_ms: i64,
        before: Option<(i64, &str)>,
        limit: i64,
    ) -> StoreResult<Vec<ApprovalRecord>>;

    /// The id and `created_at_ms` of approvals (of `owner`, or every
    /// owner's; of `thread`, or every thread's) asked at `since_ms` or
    /// later, oldest first, at most `limit`: only those still open at
    /// `open_at` (pending, before their deadline) when given. No more than
    /// these two columns: an approvals stream compares them every second.
    async fn approval_outlines(
        &self,
        owner: Option<&str>,
        thread: Option<&str>,
        open_at: Option<i64>,
        since_ms: i64,
        limit: i64,
    ) -> StoreResult<Vec<(String, i64)>>;

    /// The newest approval asked for call `tool_call_id` of `thread_id`,
    /// `None` if it never waited for one.
    async fn approval_of_call(
        &self,
        thread_id: &str,
        tool_call_id: &str,
    ) -> StoreResult<Option<ApprovalRecord>>;

    /// The approvals of `thread_id` still waiting for a decision and not
    /// yet expired at `now_ms` (`expires_at_ms > now_ms`), oldest first (by
    /// `created_at_ms`, then id). Read by the thread's index, so a run's
    /// check of its thread costs what the thread holds, not what its owner
    /// has pending elsewhere.
    async fn open_approvals_of_thread(
        &self,
        thread_id: &str,
        now_ms: i64,
    ) -> StoreResult<Vec<ApprovalRecord>>;

    /// Pending approvals of every owner with `expires_at_ms <= now_ms`, the
    /// longest expired first, at most `limit` (for the expiry sweeper, which
    /// decides each one `Expired` in a unit of its thread).
    async fn expired_approvals(&self, now_ms: i64, limit: i64) -> StoreResult<Vec<ApprovalRecord>>;

    /// Audit entries matching `filter`, newest first (by id).
    async fn audit(&self, filter: &AuditFilter) -> StoreResult<Vec<AuditEntry>>;

    /// Append one audit entry on its own, for actions that change nothing
    /// thread-scoped (e.g. an owner's rules); returns its id. Entries that
    /// record a unit's writes go in the unit ([`WriteOp::AppendAudit`]).
    async fn append_audit(&self, entry: &NewAuditEntry) -> StoreResult<i64>;

    /// The permission rules of `owner` as last stored, `None` if never set.
    async fn owner_rules(&self, owner: &str) -> StoreResult<Option<Value>>;

    /// Store (insert or replace) the permission rules of `owner`.
    async fn put_owner_rules(
        &self,
        owner: &str,
        rules: &Value,
        updated_at_ms: i64,
    ) -> StoreResult<()>;

    /// Where the database tells of the rule changes committed by any
    /// process (Postgres: `LISTEN`), what it tells, as they commit; `None`
    /// where it cannot.
    async fn watch_owner_rules(&self) -> StoreResult<Option<RuleChanges>> {
        Ok(None)
    }

    /// Where the database tells of the events other processes commit
    /// (Postgres: `LISTEN`, one notice per committed batch), what it tells,
    /// as they commit; `None` where it cannot (SQLite: one process).
    async fn watch_events(&self) -> StoreResult<Option<EventNotices>> {
        Ok(None)
    }

    /// Events with `seq > after`, ascending, at most `limit`, and no more
    /// once they hold [`PAGE_BYTES`] (at least one).
    async fn events_after(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<StoredEvent>>;

    /// Highest event seq of the thread (0 when none).
    async fn last_event_seq(&self, thread_id: &str) -> StoreResult<i64>;

    /// One page of history: the `limit` messages with `seq < before` (all
    /// when `before` is `None`) closest to `before`, returned in ascending
    /// order; fewer when they reach [`PAGE_BYTES`] (the newest of them are
    /// kept, at least one).
    async fn messages_before(
        &self,
        thread_id: &str,
        before: Option<i64>,
        limit: i64,
    ) -> StoreResult<Vec<StoredMessage>>;

    /// The threads of `owner`, newest first (by `created_at_ms`, then id,
    /// both descending), only those that sort after the `(created_at_ms,
    /// id)` cursor `before` when given, at most `limit`.
    async fn threads_of(
        &self,
        owner: &str,
        before: Option<(i64, &str)>,
        limit: i64,
    ) -> StoreResult<Vec<ThreadSummary>>;

    /// One message by its id in the thread, `None` if there is none.
    async fn message(&self, thread_id: &str, id: &str) -> StoreResult<Option<StoredMessage>>;

    /// The whole conversation, the thread's last event id, its unfinished
    /// calls and its open approvals (not expired at `now_ms`), all as of
    /// one moment: what a `MESSAGES_SNAPSHOT` holds, where the stream after
    /// it starts, the calls announced before that event whose results it
    /// will carry, and the calls still waiting for a person.
    async fn snapshot(&self, thread_id: &str, now_ms: i64) -> StoreResult<ThreadSnapshot>;

    /// The whole conversation, ascending.
    async fn all_messages(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>>;

    /// The whole conversation, ascending, as a model context reads it: a
    /// tool message's `tool_agent_output` without the keys
    /// [`OUTPUT_KEYS_IN_CONTENT`] names (its `content` holds the result), so
    /// a thread of large results is held once rather than three times.
    async fn conversation(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>>;

    /// The conversation's outline, ascending: every message without its
    /// `content`, and with nothing of its `metadata` but an assistant
    /// message's `tool_calls`. What the checks of a new turn read (which
    /// calls the thread declares and answers, which message ids it holds)
    /// without the results' text and outputs, a thread's bulk.
    async fn message_outlines(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>>;

    /// Each call of the thread posted under a parent, with that parent's
    /// id (`parent_message_id`), in the order the calls were recorded.
    async fn call_parents(&self, thread_id: &str) -> StoreResult<Vec<(String, String)>>;

    /// Apply a batch of units in ONE transaction (each unit under its own
    /// savepoint). Returns one result per unit, in order. `Err` means the
    /// transaction as a whole failed (nothing committed).
    ///
    /// The SQLite store does the work synchronously on the calling thread
    /// (the group-commit writer calls it on a thread of its own); other
    /// callers should expect it to block for the length of a transaction.
    async fn apply_batch(&self, units: &[WriteUnit]) -> StoreResult<Vec<StoreResult<UnitReceipt>>>;

    /// Remove at most `limit` rows of each of the messages, events and
    /// calls that [`WriteOp::DeleteThread`] left of the deleted thread
    /// `thread_id`, in a transaction of their own; whether some may remain.
    /// A thread not deleted is left alone (`false`).
    async fn purge_deleted(&self, thread_id: &str, limit: i64) -> StoreResult<bool>;

    /// The deleted threads whose rows are still to be purged, the longest
    /// deleted first (a process stopped before it finished).
    async fn unpurged_threads(&self) -> StoreResult<Vec<String>>;
}

pub type DynStore = Arc<dyn Store>;

/// What a database's watch of owners' permission rules tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RulesWatch {
    /// This owner's rules changed.
    Changed(String),
    /// Some rules may have changed unseen: the watch has just (re)started
    /// listening, or was told of an owner it cannot name.
    Listening,
    /// The watch has stopped listening (its connection is gone): until it
    /// says `Listening` again, changes go unseen.
    Lost,
}

/// What another process's commit told of its threads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Each thread with the last seq it committed, or `None` for any
    /// thread (a notice too long to list them, or the watch's connection
    /// back after missing some).
    Events(Option<Vec<(String, i64)>>),
    /// The thread was deleted at `at_ms` (by any process, this one too).
    Deleted { thread: String, at_ms: i64 },
}

/// The receiving end of the notices of other processes' commits.
pub type EventNotices = tokio::sync::mpsc::Receiver<Notice>;

/// The receiving end of a [`RulesWatch`].
pub type RuleChanges = tokio::sync::mpsc::Receiver<RulesWatch>;

/// Is this `sqlite:` URL a database in memory, this process's alone?
pub fn is_in_memory(url: &str) -> bool {
    url.starts_with("sqlite:") && (url.contains(":memory:") || url.contains("mode=memory"))
}

/// The embedded migrations' error, with a database a newer toolgate
/// migrated told apart.
pub(crate) fn migration_error(e: sqlx::migrate::MigrateError) -> StoreError {
    match e {
        sqlx::migrate::MigrateError::VersionMissing(version) => StoreError::Newer(version),
        other => StoreError::Migrate(other),
    }
}

/// The last migration of each backend this build has (SQLite, Postgres).
pub fn schema_versions() -> (i64, i64) {
    let last = |migrations: &[(i64, &str, &str)]| migrations.last().map_or(0, |m| m.0);
    (last(sqlite::MIGRATIONS), last(postgres::MIGRATIONS))
}

/// Open the store named by `database_url` (a `postgres://` URL) or, when
/// absent, the SQLite file `toolgate.db` in `storage.data_dir`; run
/// migrations. A SQLite file's WAL is copied back into it every
/// `storage.sqlite_checkpoint_ms`; a Postgres request waits
/// `storage.database_wait_secs` for a connection.
pub async fn open(
    database_url: Option<&str>,
    storage: &crate::config::StorageSettings,
) -> anyhow::Result<DynStore> {
    let (data_dir, sqlite_checkpoint) = (&storage.data_dir, storage.sqlite_checkpoint());
    match database_url {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            let wait = std::time::Duration::from_secs(storage.database_wait_secs);
            let store = postgres::PgStore::connect_with(url, wait)
                .await
                .with_context(|| {
                    format!(
                        "cannot open the Postgres database {} (DATABASE_URL)",
                        postgres::describe_target(url)
                    )
                })?;
            Ok(Arc::new(store))
        }
        Some(url) if url.starts_with("sqlite:") => Ok(Arc::new(
            sqlite::SqliteStore::connect_url_with(url, sqlite_checkpoint)
                .await
                .with_context(|| format!("cannot open the SQLite database {url} (DATABASE_URL)"))?,
        )),
        Some(other) => {
            // Only a scheme is repeated: text with none may be anything
            // pasted there, a password included.
            let scheme = other
                .split_once("://")
                .map(|(scheme, _)| scheme)
                .filter(|s| {
                    !s.is_empty()
                        && s.len() <= 32
                        && s.chars()
                            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                });
            match scheme {
                Some(scheme) => anyhow::bail!(
                    "DATABASE_URL must start with postgres://, postgresql:// or sqlite: (it starts with {scheme}://)"
                ),
                None => anyhow::bail!(
                    "DATABASE_URL must start with postgres://, postgresql:// or sqlite: (it has no scheme; its text is not repeated here)"
                ),
            }
        }
        None => {
            crate::private_dir(data_dir).with_context(|| {
                format!("cannot create the data directory {}", data_dir.display())
            })?;
            let file = data_dir.join("toolgate.db");
            Ok(Arc::new(
                sqlite::SqliteStore::open_file_with(&file, sqlite_checkpoint)
                    .await
                    .with_context(|| {
                        format!("cannot open the SQLite database {}", file.display())
                    })?,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each file of `migrations/<backend>` is embedded, under the version
    /// and description its name gives, in order, and nothing else is.
    #[test]
    fn every_migration_file_is_embedded_in_order() {
        for (backend, embedded) in [
            ("sqlite", sqlite::MIGRATIONS),
            ("postgres", postgres::MIGRATIONS),
        ] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(backend);
            let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|entry| {
                    let path = entry.unwrap().path();
                    let name = path.file_name().unwrap().to_string_lossy().into_owned();
                    (name, std::fs::read_to_string(&path).unwrap())
                })
                .collect();
            files.sort();
            let named: Vec<(String, String)> = embedded
                .iter()
                .map(|(version, description, sql)| {
                    let name = format!("{version:04}_{}.sql", description.replace(' ', "_"));
                    (name, (*sql).to_owned())
                })
                .collect();
            assert_eq!(files, named, "{backend}");
        }
    }

    /// A `JsonText` read back (from the spool) is a JSON document or
    /// nothing: the SQLite writer does not check it again.
    #[test]
    fn json_text_is_json_whichever_way_it_is_made() {
        let made = JsonText::of(&serde_json::json!({"a": [1, "two"]}));
        let text = serde_json::to_string(&made).unwrap();
        assert_eq!(serde_json::from_str::<JsonText>(&text).unwrap(), made);
        for broken in [r#""{\"a\": ""#, r#""not json""#, r#""""#, r#""[1, 2] 3""#] {
            let err = serde_json::from_str::<JsonText>(broken).unwrap_err();
            assert!(
                err.to_string().contains("not a JSON document"),
                "{broken}: {err}"
            );
        }
        assert!(serde_json::from_str::<JsonText>(r#""null""#).is_ok());
    }

    #[test]
    fn error_codes_are_read_by_their_backend() {
        // Postgres SQLSTATEs.
        for refused in ["22021", "22P02", "23505", "23514", "54000", "P0001"] {
            assert!(refused_data_code(refused), "{refused}");
            assert!(!unavailable_code(refused), "{refused}");
        }
        for unavailable in [
            "08006", "57P01", "53100", "53200", "53300", "58030", "55000", "55P03", "40001",
            "25006", "40P01", "3D000", "28000", "28P01", "42P01",
        ] {
            assert!(unavailable_code(unavailable), "{unavailable}");
            assert!(!refused_data_code(unavailable), "{unavailable}");
        }
        // CORRUPT, CORRUPT_INDEX (779), NOTADB: a damaged file; BUSY and a
        // SQLSTATE are not.
        for damaged in ["11", "779", "26"] {
            assert!(damaged_code(damaged), "{damaged}");
        }
        for other in ["5", "1034", "11000", "26000"] {
            assert!(!damaged_code(other), "{other}");
        }
        // A syntax error (42601) is toolgate's own fault, not an outage.
        for neither in ["42601", "XX000", "55006"] {
            assert!(
                !refused_data_code(neither) && !unavailable_code(neither),
                "{neither}"
            );
        }
        // SQLite extended codes: CONSTRAINT_TRIGGER (1811), CONSTRAINT_CHECK
        // (275), TOOBIG (18); BUSY (5), IOERR_FSYNC (1034), and 2314
        // (IOERR_DIR_FSYNC), which would read as a SQLSTATE of class 23;
        // FULL (13), READONLY (8) and READONLY_DIRECTORY (1544).
        for refused in ["1811", "275", "18"] {
            assert!(refused_data_code(refused), "{refused}");
            assert!(!unavailable_code(refused), "{refused}");
        }
        for unavailable in ["5", "1034", "2314", "13", "8", "1544"] {
            assert!(unavailable_code(unavailable), "{unavailable}");
            assert!(!refused_data_code(unavailable), "{unavailable}");
        }
        assert!(
            !refused_data_code("1") && !unavailable_code("1"),
            "SQLITE_ERROR"
        );
        assert!(!refused_data_code("") && !unavailable_code("abc"));
    }
}
