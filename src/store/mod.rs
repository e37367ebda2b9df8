//! Durable state: threads, messages, tool calls and the per-thread event log.
//!
//! One [`Store`] interface with two implementations (embedded SQLite, the
//! default; Postgres, for production). Writes a request waits for go through
//! the group-commit [`writer::Writer`]: many callers' [`WriteUnit`]s share one
//! transaction, and each caller is answered only after that commit.

pub mod postgres;
pub mod sqlite;
pub mod writer;

use std::sync::Arc;

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
    /// A referenced row does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migration error: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The writer task is gone (shutting down).
    #[error("writer unavailable")]
    WriterClosed,
}

pub type StoreResult<T> = Result<T, StoreError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    System,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
            Role::Tool => "tool",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "system" => Role::System,
            "tool" => Role::Tool,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    Running,
    Success,
    Failure,
    Partial,
}

impl CallStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Running => "running",
            CallStatus::Success => "success",
            CallStatus::Failure => "failure",
            CallStatus::Partial => "partial",
        }
    }

    pub fn parse(s: &str) -> Option<CallStatus> {
        Some(match s {
            "running" => CallStatus::Running,
            "success" => CallStatus::Success,
            "failure" => CallStatus::Failure,
            "partial" => CallStatus::Partial,
            _ => return None,
        })
    }
}

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

/// A message to insert; the store assigns `seq`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    pub id: String,
    pub role: Role,
    pub content: String,
    pub metadata: Value,
    pub tool_call_id: Option<String>,
    pub created_at_ms: i64,
}

/// An event of the thread's log. `data` is the complete AG-UI event JSON text
/// exactly as streamed (stored as text so a replay is byte-identical).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub thread_id: String,
    /// Per-thread position, 1-based, gap-free: the SSE `id:`.
    pub seq: i64,
    pub event_type: String,
    pub data: String,
    pub created_at_ms: i64,
}

/// An event to append; the store assigns `seq`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub event_type: String,
    pub data: String,
    pub created_at_ms: i64,
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
    /// The full ToolAgentOutput once finished.
    pub output: Option<Value>,
    pub undo: Option<Value>,
    /// The tool message holding the result, once finished.
    pub message_id: Option<String>,
    pub created_at_ms: i64,
    pub finished_at_ms: Option<i64>,
}

/// A new call, recorded `running` before it executes (write-ahead).
#[derive(Debug, Clone, PartialEq)]
pub struct NewToolCall {
    pub id: String,
    pub run_id: String,
    pub tool_name: String,
    pub args: Value,
    pub created_at_ms: i64,
}

/// The end of a call: its status, output, undo record and the id of the tool
/// message that carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishedToolCall {
    pub id: String,
    pub status: CallStatus,
    pub output: Value,
    pub undo: Option<Value>,
    pub message_id: String,
    pub finished_at_ms: i64,
}

/// One operation of a [`WriteUnit`], applied in order.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    /// Insert the tool call as `running`. A duplicate (thread, id) fails the
    /// unit with [`StoreError::Conflict`].
    InsertToolCall(NewToolCall),
    /// Mark a running call finished. Fails with `NotFound` if it is not
    /// recorded, `Conflict` if it is no longer running.
    FinishToolCall(FinishedToolCall),
    /// Append a message; a duplicate (thread, id) fails with `Conflict`.
    InsertMessage(NewMessage),
    /// Append events to the thread's log, in order.
    AppendEvents(Vec<NewEvent>),
}

/// Everything one caller needs written atomically, for one thread. The
/// thread is created for `owner` on first write; a thread of another owner
/// fails the unit with [`StoreError::NotOwner`]. A failing unit is rolled back
/// alone (savepoint); the other units of the same batch still commit.
#[derive(Debug, Clone, PartialEq)]
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
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Which backend this is (`sqlite` or `postgres`), for `/readyz`.
    fn backend(&self) -> &'static str;

    /// Database reachable and every migration applied.
    async fn ready(&self) -> StoreResult<()>;

    /// Owner of a thread, `None` if the thread does not exist.
    async fn thread_owner(&self, thread_id: &str) -> StoreResult<Option<String>>;

    /// Create the thread for `owner` if absent. Fails with `NotOwner` if it
    /// exists for someone else.
    async fn claim_thread(&self, thread_id: &str, owner: &str) -> StoreResult<()>;

    async fn tool_call(&self, thread_id: &str, id: &str) -> StoreResult<Option<ToolCallRecord>>;

    /// Every call still `running` (left by a crash when called at start-up).
    async fn running_tool_calls(&self) -> StoreResult<Vec<ToolCallRecord>>;

    /// Events with `seq > after`, ascending, at most `limit`.
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
    /// order.
    async fn messages_before(
        &self,
        thread_id: &str,
        before: Option<i64>,
        limit: i64,
    ) -> StoreResult<Vec<StoredMessage>>;

    /// The whole conversation, ascending.
    async fn all_messages(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>>;

    /// Apply a batch of units in ONE transaction (each unit under its own
    /// savepoint). Returns one result per unit, in order. `Err` means the
    /// transaction as a whole failed (nothing committed).
    async fn apply_batch(&self, units: &[WriteUnit]) -> StoreResult<Vec<StoreResult<UnitReceipt>>>;
}

pub type DynStore = Arc<dyn Store>;

/// Open the store named by `database_url` (a `postgres://` URL) or, when
/// absent, the SQLite file `toolgate.db` in `data_dir`; run migrations.
pub async fn open(
    database_url: Option<&str>,
    data_dir: &std::path::Path,
) -> anyhow::Result<DynStore> {
    match database_url {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            Ok(Arc::new(postgres::PgStore::connect(url).await?))
        }
        Some(url) if url.starts_with("sqlite:") => {
            Ok(Arc::new(sqlite::SqliteStore::connect_url(url).await?))
        }
        Some(other) => anyhow::bail!(
            "DATABASE_URL must start with postgres://, postgresql:// or sqlite: (got a URL starting with {:?})",
            other.split(':').next().unwrap_or("")
        ),
        None => {
            std::fs::create_dir_all(data_dir)?;
            Ok(Arc::new(
                sqlite::SqliteStore::open_file(&data_dir.join("toolgate.db")).await?,
            ))
        }
    }
}
