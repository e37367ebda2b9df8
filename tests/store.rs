//! The storage contract, written once and run against both backends: SQLite
//! in a fresh temporary file and Postgres in a freshly created database.
//!
//! Postgres: the admin URL defaults to
//! `postgres://postgres@127.0.0.1:5432/postgres`; `TOOLGATE_TEST_PG`
//! overrides it. Postgres is required: the suite fails without it.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use sqlx::Connection;
use toolgate::engine::{ApprovalSettings, EXPIRY_BATCH, Engine, EngineConfig};
use toolgate::store::postgres::PgStore;
use toolgate::store::sqlite::SqliteStore;
use toolgate::store::writer::{CommitHook, Writer, WriterConfig};
use toolgate::store::{
    ApprovalRecord, ApprovalStatus, AuditEntry, AuditFilter, CallPlacement, CallStatus,
    DeclaredCall, DeletedApproval, DynStore, FinishedToolCall, JsonText, NewAuditEntry, NewEvent,
    NewMessage, NewToolCall, PAGE_BYTES, ResultReference, Role, Store, StoreError, StoreResult,
    StoredEvent, StoredMessage, ThreadOwner, ThreadSnapshot, ThreadSummary, ToolCallRecord,
    UnitReceipt, WriteOp, WriteUnit,
};

// ---------------------------------------------------------------------------
// Harness: where a test's database lives, and how to open it.

/// The process instance the tests' store reads ask about.
const INSTANCE: &str = "test-instance";

const DEFAULT_PG_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// One test's private database. `open()` gives an independent handle (its
/// own pool), as a second process would have.
#[derive(Clone)]
enum Target {
    Sqlite(PathBuf),
    Postgres(String),
}

impl Target {
    async fn open(&self) -> DynStore {
        match self {
            Target::Sqlite(path) => {
                Arc::new(SqliteStore::open_file(path).await.expect("open sqlite"))
            }
            Target::Postgres(url) => {
                Arc::new(PgStore::connect(url).await.expect("connect postgres"))
            }
        }
    }

    /// Run raw SQL against the database, bypassing the store (to stage a
    /// state the store itself never produces).
    async fn execute(&self, sql: &str) {
        self.try_execute(sql).await.unwrap();
    }

    /// Run raw SQL against the (migrated) database; the database's answer.
    async fn try_execute(&self, sql: &str) -> Result<(), sqlx::Error> {
        match self {
            Target::Sqlite(path) => {
                let store = SqliteStore::open_file(path).await.unwrap();
                sqlx::raw_sql(sql).execute(store.pool()).await.map(drop)
            }
            Target::Postgres(url) => {
                let store = PgStore::connect(url).await.unwrap();
                sqlx::raw_sql(sql).execute(store.pool()).await.map(drop)
            }
        }
    }

    /// A number the database answers to `sql`, read without the store.
    async fn count(&self, sql: &str) -> i64 {
        match self {
            Target::Sqlite(path) => {
                let store = SqliteStore::open_file(path).await.unwrap();
                sqlx::query_scalar(sql)
                    .fetch_one(store.pool())
                    .await
                    .unwrap()
            }
            Target::Postgres(url) => {
                let store = PgStore::connect(url).await.unwrap();
                sqlx::query_scalar(sql)
                    .fetch_one(store.pool())
                    .await
                    .unwrap()
            }
        }
    }

    /// Bring the (fresh) database to migration 0001 only, as a release
    /// before the safety features left it, with sqlx's own file-based
    /// migrator (what `sqlx migrate run` would record), then run `sql` on it
    /// without the store.
    async fn stage_at_0001(&self, sql: &str) {
        let only_0001 = tempfile::tempdir().unwrap();
        let (flavour, name) = match self {
            Target::Sqlite(_) => ("sqlite", "0001_init.sql"),
            Target::Postgres(_) => ("postgres", "0001_init.sql"),
        };
        let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(flavour)
            .join(name);
        std::fs::copy(&source, only_0001.path().join(name)).unwrap();
        let migrator = sqlx::migrate::Migrator::new(only_0001.path())
            .await
            .unwrap();
        assert_eq!(migrator.iter().count(), 1);
        match self {
            Target::Sqlite(path) => {
                let options = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .foreign_keys(true);
                let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
                migrator.run(&pool).await.unwrap();
                sqlx::raw_sql(sql).execute(&pool).await.unwrap();
                pool.close().await;
            }
            Target::Postgres(url) => {
                let pool = sqlx::PgPool::connect(url).await.unwrap();
                migrator.run(&pool).await.unwrap();
                sqlx::raw_sql(sql).execute(&pool).await.unwrap();
                pool.close().await;
            }
        }
    }
}

/// Run `behaviour` on its own task, so that a failing test still cleans up:
/// the panic is caught here and re-raised by `finish` after the clean-up.
async fn run_isolated<Fut>(behaviour: Fut) -> Result<(), tokio::task::JoinError>
where
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(behaviour).await
}

fn finish(outcome: Result<(), tokio::task::JoinError>) {
    if let Err(err) = outcome {
        match err.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(err) => panic!("test task failed: {err}"),
        }
    }
}

async fn on_sqlite<F, Fut>(behaviour: F)
where
    F: FnOnce(Target) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let dir = tempfile::tempdir().expect("temp dir");
    let target = Target::Sqlite(dir.path().join("toolgate.db"));
    let outcome = run_isolated(behaviour(target)).await;
    drop(dir);
    finish(outcome);
}

/// `url` with its database name replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map(|i| i + 3).unwrap_or(0);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

async fn on_postgres<F, Fut>(behaviour: F)
where
    F: FnOnce(Target) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let admin_url =
        std::env::var("TOOLGATE_TEST_PG").unwrap_or_else(|_| DEFAULT_PG_ADMIN_URL.to_owned());
    let mut admin = sqlx::PgConnection::connect(&admin_url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot reach Postgres at {admin_url} ({e}); set TOOLGATE_TEST_PG to an admin URL"
            )
        });
    let name = format!("toolgate_test_{}", uuid::Uuid::new_v4().simple());
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .expect("create test database");

    let target = Target::Postgres(with_database(&admin_url, &name));
    let outcome = run_isolated(behaviour(target)).await;

    // Best effort: a leftover database is only clutter.
    if let Err(e) = sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut admin)
        .await
    {
        eprintln!("could not drop test database {name}: {e}");
    }
    let _ = admin.close().await;
    finish(outcome);
}

/// Generates, for every behaviour, one test per backend. `store:` behaviours
/// take one `DynStore`; `target:` behaviours open their own handles.
macro_rules! on_both_backends {
    (store: [$($store:ident),* $(,)?], target: [$($target:ident),* $(,)?] $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $store() {
                    super::on_sqlite(|t| async move { super::$store(t.open().await).await }).await
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $target() {
                    super::on_sqlite(super::$target).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $store() {
                    super::on_postgres(|t| async move { super::$store(t.open().await).await }).await
                }
            )*
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $target() {
                    super::on_postgres(super::$target).await
                }
            )*
        }
    };
}

on_both_backends! {
    store: [
        claiming_a_thread_and_other_owners,
        a_unit_records_a_running_call_and_its_events,
        finishing_a_call_stores_output_message_and_events,
        finishing_a_call_that_is_unknown_or_finished_fails_alone,
        a_duplicate_call_conflicts_alone_and_the_batch_commits,
        a_closed_run_refuses_new_calls,
        a_call_posted_under_a_parent_is_that_messages,
        a_duplicate_message_id_conflicts,
        seqs_are_gap_free_and_per_thread,
        events_after_pages_with_a_limit,
        messages_before_pages_backwards_in_ascending_pages,
        pages_end_early_at_their_byte_budget,
        an_outline_keeps_ids_roles_and_declared_calls_only,
        a_conversation_leaves_out_what_a_results_content_holds,
        an_owners_threads_page_newest_first,
        running_tool_calls_lists_only_unfinished_calls,
        running_tool_calls_are_a_processes_own,
        json_round_trips_exactly,
        a_unit_the_database_rejects_fails_alone,
        ready_reports_a_migrated_database,
        writer_groups_concurrent_writes_and_hooks_before_acks,
        writer_reports_a_unit_failure_to_its_caller_only,
        writer_fails_every_caller_of_a_failed_batch,
        writer_finishes_queued_work_after_every_handle_is_dropped,
        a_pending_call_starts_then_finishes,
        a_denied_pending_call_finishes_without_running,
        approvals_are_listed_and_decided_once,
        expired_approvals_are_listed_across_owners,
        a_backlog_of_expired_approvals_is_cleared_in_one_sweep,
        audit_entries_commit_or_roll_back_with_their_unit,
        audit_filters_and_keyset_pages,
        run_calls_keep_the_recorded_order,
        a_snapshot_its_running_calls_and_open_approvals_are_one_moment,
        a_call_id_means_one_call_in_declarations_and_records,
        a_call_keeps_where_it_was_announced,
        undo_links_are_recorded_once,
        owner_rules_round_trip_and_overwrite,
        a_large_batch_across_threads_commits_in_thread_then_unit_order,
        a_call_recorded_and_finished_in_one_unit_is_stored_as_if_in_two,
        a_failing_unit_in_a_large_batch_fails_alone,
        duplicate_and_dependent_ids_within_one_batch,
        pool_writes_and_batches_interleave,
        a_deleted_thread_keeps_its_owner_and_takes_no_more_writes,
        a_closing_thread_takes_no_new_turns_but_finishes_its_calls,
        a_long_threads_rows_are_purged_after_it_is_gone,
    ],
    target: [
        two_handles_on_one_database_serialise_their_writes,
        two_handles_agree_on_what_a_call_id_means,
        data_survives_reopening,
        a_constraint_violation_rolls_back_only_its_unit,
        the_audit_log_is_append_only,
        pending_work_survives_a_restart_untouched,
        a_0001_database_migrates_with_its_data,
        a_calls_output_is_stored_once_in_its_tool_message,
        a_result_event_is_logged_as_a_reference_to_its_message,
        the_schema_refuses_unknown_roles_and_statuses,
    ],
}

// ---------------------------------------------------------------------------
// Builders.

/// What a JSON text written to the store says, to compare with what it reads.
fn value_of(text: &JsonText) -> Value {
    serde_json::from_str(text.as_str()).expect("the store is given JSON")
}

fn unit(thread: &str, owner: &str, ops: Vec<WriteOp>) -> WriteUnit {
    WriteUnit {
        thread_id: thread.to_owned(),
        owner: owner.to_owned(),
        ops,
    }
}

fn event(event_type: &str, n: i64) -> NewEvent {
    NewEvent {
        event_type: event_type.to_owned(),
        data: format!(r#"{{"type":"{event_type}","n":{n}}}"#).into(),
        created_at_ms: 1_700_000_000_000 + n,
        announces: None,
    }
}

fn events(n: usize) -> WriteOp {
    WriteOp::AppendEvents((0..n as i64).map(|i| event("CUSTOM", i)).collect())
}

fn new_call(id: &str) -> NewToolCall {
    NewToolCall {
        id: id.to_owned(),
        run_id: format!("run-{id}"),
        tool_name: "project_cli".to_owned(),
        args: json!({"module": "calendar", "method": "read", "input": {"day": "2026-04-21"}})
            .into(),
        status: CallStatus::Running,
        undo_of: None,
        workspace: None,
        dry_run: false,
        created_at_ms: 1_700_000_000_000,
        // The process the tests' starts are.
        instance: Some(INSTANCE.into()),
        declared_by: None,
        parent_message_id: None,
    }
}

fn finished(id: &str, status: CallStatus) -> FinishedToolCall {
    FinishedToolCall {
        id: id.to_owned(),
        status,
        undo: Some(json!({"method": "delete", "input": {"id": "evt_1"}}).into()),
        message_id: format!("msg-{id}"),
        finished_at_ms: 1_700_000_000_500,
    }
}

/// The output a test call finishes with.
fn output_of(id: &str, status: CallStatus) -> Value {
    json!({"tool_call_id": id, "status": status.as_str(), "result": {"count": 1}})
}

/// The tool message that carries a call's output.
fn tool_message(end: &FinishedToolCall, output: &Value) -> NewMessage {
    NewMessage {
        id: end.message_id.clone(),
        role: Role::Tool,
        content: output["result"].to_string(),
        metadata: json!({"tool_agent_output": output}).into(),
        tool_call_id: Some(end.id.clone()),
        created_at_ms: end.finished_at_ms,
        declares: Vec::new(),
    }
}

/// The ops that finish a call: its end, then its tool message holding the
/// test output of its id and status.
fn finishing_end(end: FinishedToolCall) -> Vec<WriteOp> {
    let message = tool_message(&end, &output_of(&end.id, end.status));
    vec![
        WriteOp::FinishToolCall(end),
        WriteOp::InsertMessage(message),
    ]
}

fn finishing(id: &str, status: CallStatus) -> Vec<WriteOp> {
    finishing_end(finished(id, status))
}

fn message(id: &str, role: Role, content: &str) -> NewMessage {
    NewMessage {
        id: id.to_owned(),
        role,
        content: content.to_owned(),
        metadata: json!({"n": id}).into(),
        tool_call_id: None,
        created_at_ms: 1_700_000_000_000,
        declares: Vec::new(),
    }
}

async fn apply_one(store: &DynStore, unit: WriteUnit) -> StoreResult<UnitReceipt> {
    let mut results = store.apply_batch(&[unit]).await.expect("batch transaction");
    assert_eq!(results.len(), 1);
    results.remove(0)
}

/// Apply `batch` as one batch; every unit must commit.
async fn apply_all(store: &DynStore, batch: &[WriteUnit]) {
    for result in store.apply_batch(batch).await.expect("batch transaction") {
        result.unwrap();
    }
}

/// Record call `id` as running in thread `t` of alice.
async fn record_running(store: &DynStore, id: &str) {
    apply_one(
        store,
        unit("t", "alice", vec![WriteOp::InsertToolCall(new_call(id))]),
    )
    .await
    .unwrap();
}

fn seqs(events: &[StoredEvent]) -> Vec<i64> {
    events.iter().map(|e| e.seq).collect()
}

/// The owner of thread `thread`, deleted or not.
async fn owner_of(store: &DynStore, thread: &str) -> Option<String> {
    store.thread_owner(thread).await.unwrap().map(|o| o.owner)
}

/// The ids of thread `thread`'s messages, in order.
async fn message_ids(store: &DynStore, thread: &str) -> Vec<String> {
    let messages = store.all_messages(thread).await.unwrap();
    messages.into_iter().map(|m| m.id).collect()
}

fn message_seqs(messages: &[StoredMessage]) -> Vec<i64> {
    messages.iter().map(|m| m.seq).collect()
}

// ---------------------------------------------------------------------------
// Behaviours.

async fn a_deleted_thread_keeps_its_owner_and_takes_no_more_writes(store: DynStore) {
    let content = vec![
        WriteOp::InsertMessage(message("m1", Role::User, "hello")),
        WriteOp::InsertToolCall(new_call("c1")),
        events(3),
    ];
    apply_all(
        &store,
        &[
            unit("t", "alice", content.clone()),
            unit("u", "alice", content.clone()),
        ],
    )
    .await;
    let delete = |thread: &str, at: i64| {
        unit(
            thread,
            "alice",
            vec![WriteOp::DeleteThread { deleted_at_ms: at }],
        )
    };
    // A call still running holds the thread: nothing is deleted.
    let busy = apply_one(&store, delete("t", 10)).await;
    match busy {
        Err(StoreError::ThreadBusy { calls }) => {
            assert_eq!(calls, [("c1".to_string(), CallStatus::Running)])
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(message_ids(&store, "t").await, ["m1"]);
    apply_one(
        &store,
        unit("t", "alice", finishing("c1", CallStatus::Success)),
    )
    .await
    .unwrap();

    // A deletion is its unit's only op.
    let mixed = unit(
        "t",
        "alice",
        vec![WriteOp::DeleteThread { deleted_at_ms: 10 }, events(1)],
    );
    assert!(matches!(
        apply_one(&store, mixed).await,
        Err(StoreError::Conflict(_))
    ));
    let receipt = apply_one(&store, delete("t", 10)).await.unwrap();
    let deleted = receipt.deleted.expect("what went");
    assert_eq!(
        (deleted.messages, deleted.tool_calls, deleted.events),
        (2, 1, 3)
    );
    assert_eq!(receipt.audit_ids.len(), 1);
    assert!(message_ids(&store, "t").await.is_empty());
    assert!(store.tool_call("t", "c1").await.unwrap().is_none());
    assert_eq!(store.events_after("t", 0, 100).await.unwrap().len(), 0);
    assert_eq!(
        store.thread_owner("t").await.unwrap(),
        Some(ThreadOwner {
            owner: "alice".into(),
            deleted_at_ms: Some(10)
        })
    );

    // Every later unit of it fails, alone: in a batch with another
    // thread's unit, that one commits.
    let results = store
        .apply_batch(&[
            unit("t", "alice", vec![events(1)]),
            unit("u", "alice", vec![events(1)]),
        ])
        .await
        .expect("the batch commits");
    assert!(
        matches!(&results[0], Err(StoreError::ThreadDeleted { thread, at_ms: 10 }) if thread == "t"),
        "{:?}",
        results[0]
    );
    assert!(results[1].is_ok(), "{:?}", results[1]);
    assert!(matches!(
        apply_one(&store, delete("t", 20)).await,
        Err(StoreError::ThreadDeleted { at_ms: 10, .. })
    ));
    // Its id stays its owner's: taken by nobody, claimed by nobody.
    assert!(matches!(
        store.claim_thread("t", "alice").await,
        Err(StoreError::ThreadDeleted { .. })
    ));
    assert!(matches!(
        store.claim_thread("t", "bob").await,
        Err(StoreError::NotOwner)
    ));
    assert!(matches!(
        apply_one(&store, unit("t", "bob", vec![events(1)])).await,
        Err(StoreError::NotOwner)
    ));
    // The audit log keeps the entry; the owner's list leaves it out.
    let audit = store.audit(&filter("alice")).await.unwrap();
    assert_eq!(audit[0].action, "thread.deleted");
    assert_eq!(audit[0].thread_id.as_deref(), Some("t"));
    assert_eq!(audit[0].detail["tool_calls"], 1);
    let listed = store.threads_of("alice", None, 10).await.unwrap();
    let ids: Vec<&str> = listed.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["u"]);
    assert_eq!(message_ids(&store, "u").await, ["m1"]);
}

/// A thread of more than `DELETE_AT_ONCE` rows is gone at once when
/// deleted (its owner, counts and audit entry as for any), and its
/// messages, events and calls are removed afterwards by `purge_deleted`,
/// a chunk per transaction; a live thread is never purged.
async fn a_long_threads_rows_are_purged_after_it_is_gone(store: DynStore) {
    let long = toolgate::store::DELETE_AT_ONCE as usize + 100;
    apply_all(
        &store,
        &[
            unit(
                "long",
                "alice",
                vec![
                    WriteOp::InsertMessage(message("m1", Role::User, "hello")),
                    events(long),
                ],
            ),
            unit("live", "alice", vec![events(3)]),
        ],
    )
    .await;
    let receipt = apply_one(
        &store,
        unit(
            "long",
            "alice",
            vec![WriteOp::DeleteThread { deleted_at_ms: 7 }],
        ),
    )
    .await
    .unwrap();
    let deleted = receipt.deleted.expect("what went");
    assert_eq!((deleted.messages, deleted.events), (1, long as i64));
    assert_eq!(
        store
            .thread_owner("long")
            .await
            .unwrap()
            .unwrap()
            .deleted_at_ms,
        Some(7)
    );
    // Left for the purge, and listed as such.
    assert_eq!(store.events_after("long", 0, 10).await.unwrap().len(), 10);
    assert_eq!(store.unpurged_threads().await.unwrap(), ["long"]);
    // A live thread is left alone.
    assert!(!store.purge_deleted("live", 500).await.unwrap());
    assert_eq!(store.events_after("live", 0, 10).await.unwrap().len(), 3);
    let mut chunks = 1;
    while store.purge_deleted("long", 500).await.unwrap() {
        chunks += 1;
    }
    assert_eq!(chunks, long.div_ceil(500));
    assert!(store.events_after("long", 0, 10).await.unwrap().is_empty());
    assert!(message_ids(&store, "long").await.is_empty());
    assert!(store.unpurged_threads().await.unwrap().is_empty());
    assert!(!store.purge_deleted("long", 500).await.unwrap());
    assert_eq!(store.events_after("live", 0, 10).await.unwrap().len(), 3);
}

async fn a_closing_thread_takes_no_new_turns_but_finishes_its_calls(store: DynStore) {
    let content = vec![
        WriteOp::InsertMessage(message("m1", Role::User, "hello")),
        WriteOp::InsertToolCall(new_call("c1")),
    ];
    apply_all(
        &store,
        &[
            unit("t", "alice", content.clone()),
            unit("u", "alice", content),
        ],
    )
    .await;
    let close = |thread: &str, at: i64| {
        unit(
            thread,
            "alice",
            vec![WriteOp::CloseThread { closing_at_ms: at }],
        )
    };
    apply_one(&store, close("t", 5)).await.unwrap();
    // Closing again keeps the first moment.
    apply_one(&store, close("t", 9)).await.unwrap();
    let closing = |result: &StoreResult<UnitReceipt>| matches!(result, Err(StoreError::ThreadClosing { thread, since_ms: 5 }) if thread == "t");

    // No new call, no new turn: alone, and in a batch (where another
    // thread's units still commit, and the closing thread's other units).
    let new_call_of = |id: &str| unit("t", "alice", vec![WriteOp::InsertToolCall(new_call(id))]);
    let refused = apply_one(&store, new_call_of("c2")).await;
    assert!(closing(&refused), "{refused:?}");
    for role in [Role::User, Role::Assistant, Role::System] {
        let turn = unit(
            "t",
            "alice",
            vec![WriteOp::InsertMessage(message("m2", role, "more"))],
        );
        let refused = apply_one(&store, turn).await;
        assert!(closing(&refused), "{role:?}: {refused:?}");
    }
    let results = store
        .apply_batch(&[
            unit("u", "alice", vec![WriteOp::InsertToolCall(new_call("c2"))]),
            new_call_of("c3"),
            unit("t", "alice", vec![events(1)]),
        ])
        .await
        .expect("the batch commits");
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(closing(&results[1]), "{:?}", results[1]);
    assert!(results[2].is_ok(), "{:?}", results[2]);
    assert!(store.tool_call("t", "c3").await.unwrap().is_none());
    assert!(store.tool_call("u", "c2").await.unwrap().is_some());
    // A call waiting for approval is not started (approved) any more.
    let pending = NewToolCall {
        status: CallStatus::PendingApproval,
        ..new_call("p1")
    };
    apply_all(
        &store,
        &[
            unit("v", "alice", vec![WriteOp::InsertToolCall(pending)]),
            close("v", 5),
        ],
    )
    .await;
    let start = unit(
        "v",
        "alice",
        vec![WriteOp::StartPendingCall {
            id: "p1".into(),
            instance: Some(INSTANCE.into()),
        }],
    );
    let refused = apply_one(&store, start).await;
    assert!(
        matches!(refused, Err(StoreError::ThreadClosing { .. })),
        "{refused:?}"
    );
    assert_eq!(
        store.tool_call("v", "p1").await.unwrap().map(|c| c.status),
        Some(CallStatus::PendingApproval)
    );
    // A call it records already is that call, posted again: a conflict,
    // answered from its record.
    let again = apply_one(&store, new_call_of("c1")).await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");

    // What it holds still finishes: the result and its tool message go in.
    apply_one(
        &store,
        unit("t", "alice", finishing("c1", CallStatus::Success)),
    )
    .await
    .unwrap();
    assert_eq!(
        store.tool_call("t", "c1").await.unwrap().map(|c| c.status),
        Some(CallStatus::Success)
    );
    assert_eq!(message_ids(&store, "t").await, ["m1", "msg-c1"]);
    // The other thread was never closed.
    apply_one(
        &store,
        unit(
            "u",
            "alice",
            vec![WriteOp::InsertMessage(message("m2", Role::User, "more"))],
        ),
    )
    .await
    .unwrap();
    // And the closed one is deleted once nothing runs in it.
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::DeleteThread { deleted_at_ms: 12 }],
        ),
    )
    .await
    .unwrap();
    assert!(message_ids(&store, "t").await.is_empty());
}

async fn claiming_a_thread_and_other_owners(store: DynStore) {
    assert_eq!(store.thread_owner("t1").await.unwrap(), None);
    store.claim_thread("t1", "alice").await.unwrap();
    store.claim_thread("t1", "alice").await.unwrap();
    assert_eq!(owner_of(&store, "t1").await.as_deref(), Some("alice"));
    assert!(matches!(
        store.claim_thread("t1", "bob").await,
        Err(StoreError::NotOwner)
    ));
    assert_eq!(owner_of(&store, "t1").await.as_deref(), Some("alice"));

    // Another owner's unit is refused and leaves nothing behind.
    let refused = apply_one(
        &store,
        unit(
            "t1",
            "bob",
            vec![WriteOp::InsertToolCall(new_call("c1")), events(2)],
        ),
    )
    .await;
    assert!(matches!(refused, Err(StoreError::NotOwner)), "{refused:?}");
    assert_eq!(store.last_event_seq("t1").await.unwrap(), 0);
    assert!(store.tool_call("t1", "c1").await.unwrap().is_none());

    // The owner's unit goes through.
    let receipt = apply_one(&store, unit("t1", "alice", vec![events(1)]))
        .await
        .unwrap();
    assert_eq!(seqs(&receipt.events), [1]);

    // A unit's first write creates the thread for its owner.
    apply_one(&store, unit("t2", "carol", vec![events(1)]))
        .await
        .unwrap();
    assert_eq!(owner_of(&store, "t2").await.as_deref(), Some("carol"));
    store.claim_thread("t2", "carol").await.unwrap();
    assert!(matches!(
        store.claim_thread("t2", "alice").await,
        Err(StoreError::NotOwner)
    ));
}

async fn a_unit_records_a_running_call_and_its_events(store: DynStore) {
    let start = vec![
        event("TOOL_CALL_START", 0),
        event("TOOL_CALL_ARGS", 1),
        event("TOOL_CALL_END", 2),
    ];
    let receipt = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::InsertToolCall(NewToolCall {
                    parent_message_id: Some("msg_parent".into()),
                    ..new_call("call_1")
                }),
                WriteOp::AppendEvents(start.clone()),
            ],
        ),
    )
    .await
    .unwrap();
    assert!(receipt.messages.is_empty());
    let expected: Vec<StoredEvent> = start
        .iter()
        .zip(1..)
        .map(|(e, seq)| StoredEvent {
            thread_id: "t".into(),
            seq,
            event_type: e.event_type.clone(),
            data: e.data.clone(),
            created_at_ms: e.created_at_ms,
            from_message: None,
        })
        .collect();
    assert_eq!(receipt.events, expected);
    assert_eq!(store.events_after("t", 0, 100).await.unwrap(), expected);
    assert_eq!(store.last_event_seq("t").await.unwrap(), 3);

    let call = new_call("call_1");
    assert_eq!(
        store.tool_call("t", "call_1").await.unwrap(),
        Some(ToolCallRecord {
            thread_id: "t".into(),
            id: "call_1".into(),
            owner: "alice".into(),
            run_id: call.run_id,
            tool_name: call.tool_name,
            args: value_of(&call.args),
            status: CallStatus::Running,
            output: None,
            undo: None,
            message_id: None,
            created_at_ms: call.created_at_ms,
            finished_at_ms: None,
            undo_of: None,
            undone_by: None,
            workspace: None,
            dry_run: Some(false),
            parent_message_id: Some("msg_parent".into()),
        })
    );
    assert!(store.tool_call("t", "call_2").await.unwrap().is_none());
    assert!(store.tool_call("other", "call_1").await.unwrap().is_none());

    // Where and how the call runs is kept with it: the same id posted in
    // another sub-workspace, or as a dry run, is another call.
    let mut scoped = new_call("call_w");
    scoped.workspace = Some("proj".into());
    scoped.dry_run = true;
    apply_one(
        &store,
        unit("t", "alice", vec![WriteOp::InsertToolCall(scoped)]),
    )
    .await
    .unwrap();
    let record = store.tool_call("t", "call_w").await.unwrap().unwrap();
    assert_eq!(
        (record.workspace.as_deref(), record.dry_run),
        (Some("proj"), Some(true))
    );
}

async fn finishing_a_call_stores_output_message_and_events(store: DynStore) {
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::InsertToolCall(new_call("call_1")), events(3)],
        ),
    )
    .await
    .unwrap();

    let done = finished("call_1", CallStatus::Success);
    let output = output_of("call_1", CallStatus::Success);
    let tool_message = tool_message(&done, &output);
    let receipt = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::FinishToolCall(done.clone()),
                WriteOp::InsertMessage(tool_message.clone()),
                WriteOp::AppendEvents(vec![event("TOOL_CALL_RESULT", 3)]),
            ],
        ),
    )
    .await
    .unwrap();
    assert_eq!(receipt.messages, [(done.message_id.clone(), 1)]);
    assert_eq!(seqs(&receipt.events), [4]);
    assert_eq!(receipt.events[0].event_type, "TOOL_CALL_RESULT");

    let record = store.tool_call("t", "call_1").await.unwrap().unwrap();
    assert_eq!(record.status, CallStatus::Success);
    assert_eq!(record.output.as_ref(), Some(&output));
    assert_eq!(record.undo, done.undo.as_ref().map(value_of));
    assert_eq!(record.message_id.as_deref(), Some(done.message_id.as_str()));
    assert_eq!(record.finished_at_ms, Some(done.finished_at_ms));
    assert_eq!(record.created_at_ms, new_call("call_1").created_at_ms);

    assert_eq!(
        store.all_messages("t").await.unwrap(),
        [StoredMessage {
            thread_id: "t".into(),
            seq: 1,
            id: tool_message.id,
            role: Role::Tool,
            content: tool_message.content,
            metadata: value_of(&tool_message.metadata),
            tool_call_id: Some("call_1".into()),
            created_at_ms: tool_message.created_at_ms,
        }]
    );
    assert_eq!(
        seqs(&store.events_after("t", 0, 100).await.unwrap()),
        [1, 2, 3, 4]
    );
    assert!(store.running_tool_calls(INSTANCE).await.unwrap().is_empty());

    // Other terminal statuses are stored as given; a call without undo keeps none.
    for (id, status) in [
        ("call_2", CallStatus::Failure),
        ("call_3", CallStatus::Partial),
    ] {
        record_running(&store, id).await;
        let mut end = finished(id, status);
        end.undo = None;
        apply_one(&store, unit("t", "alice", finishing_end(end)))
            .await
            .unwrap();
        let record = store.tool_call("t", id).await.unwrap().unwrap();
        assert_eq!(record.status, status);
        assert_eq!(record.undo, None);
    }
}

async fn finishing_a_call_that_is_unknown_or_finished_fails_alone(store: DynStore) {
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::InsertToolCall(new_call("call_1")), events(1)],
        ),
    )
    .await
    .unwrap();
    apply_one(
        &store,
        unit("t", "alice", finishing("call_1", CallStatus::Success)),
    )
    .await
    .unwrap();

    // Each failing unit also carries its own message and events: all
    // rolled back.
    let with_extras = |id: &str, status: CallStatus| {
        let mut end = finished(id, status);
        end.message_id = format!("msg-{id}-{}", status.as_str());
        let mut ops = vec![events(2)];
        ops.extend(finishing_end(end));
        unit("t", "alice", ops)
    };
    let again = apply_one(&store, with_extras("call_1", CallStatus::Failure)).await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    let unknown = apply_one(&store, with_extras("nope", CallStatus::Success)).await;
    assert!(
        matches!(unknown, Err(StoreError::NotFound(_))),
        "{unknown:?}"
    );
    let running = apply_one(&store, with_extras("call_1", CallStatus::Running)).await;
    assert!(running.is_err(), "{running:?}");
    // The output is its tool message's: an end without it is refused.
    record_running(&store, "call_2").await;
    let mut elsewhere = message("msg-call_2", Role::Tool, "x");
    elsewhere.tool_call_id = Some("call_1".into());
    for ops in [
        vec![
            events(2),
            WriteOp::FinishToolCall(finished("call_2", CallStatus::Success)),
        ],
        // The message of that id answers another call.
        vec![
            WriteOp::FinishToolCall(finished("call_2", CallStatus::Success)),
            WriteOp::InsertMessage(elsewhere),
        ],
    ] {
        let alone = apply_one(&store, unit("t", "alice", ops)).await;
        assert!(matches!(alone, Err(StoreError::Conflict(_))), "{alone:?}");
    }
    assert_eq!(status_of(&store, "t", "call_2").await, CallStatus::Running);

    assert_eq!(store.last_event_seq("t").await.unwrap(), 1);
    let kept = store.all_messages("t").await.unwrap();
    assert_eq!(
        kept.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["msg-call_1"]
    );
    assert_eq!(
        store
            .tool_call("t", "call_1")
            .await
            .unwrap()
            .unwrap()
            .status,
        CallStatus::Success
    );

    // The seqs the failed units reserved are given out again: no gaps.
    let receipt = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                events(1),
                WriteOp::InsertMessage(message("m4", Role::User, "hi")),
            ],
        ),
    )
    .await
    .unwrap();
    assert_eq!(seqs(&receipt.events), [2]);
    assert_eq!(receipt.messages, [("m4".to_owned(), 2)]);
}

async fn a_duplicate_call_conflicts_alone_and_the_batch_commits(store: DynStore) {
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::InsertToolCall(new_call("call_1")), events(1)],
        ),
    )
    .await
    .unwrap();

    let mut duplicate = new_call("call_1");
    duplicate.run_id = "another-run".into();
    let results = store
        .apply_batch(&[
            // Events first, then the duplicate: the whole unit rolls back.
            unit(
                "t",
                "alice",
                vec![events(2), WriteOp::InsertToolCall(duplicate)],
            ),
            unit(
                "t",
                "alice",
                vec![WriteOp::InsertToolCall(new_call("call_2")), events(1)],
            ),
            unit(
                "u",
                "alice",
                vec![WriteOp::InsertToolCall(new_call("call_1")), events(1)],
            ),
            // Two units of one batch racing for one new id: the first wins.
            unit(
                "t",
                "alice",
                vec![WriteOp::InsertToolCall(new_call("call_3"))],
            ),
            unit(
                "t",
                "alice",
                vec![WriteOp::InsertToolCall(new_call("call_3")), events(1)],
            ),
        ])
        .await
        .expect("the batch commits");
    assert_eq!(results.len(), 5);
    assert!(
        matches!(results[0], Err(StoreError::Conflict(_))),
        "{:?}",
        results[0]
    );
    assert_eq!(seqs(&results[1].as_ref().unwrap().events), [2]);
    assert_eq!(seqs(&results[2].as_ref().unwrap().events), [1]);
    assert!(results[3].is_ok(), "{:?}", results[3]);
    assert!(
        matches!(results[4], Err(StoreError::Conflict(_))),
        "{:?}",
        results[4]
    );

    assert_eq!(
        store
            .tool_call("t", "call_1")
            .await
            .unwrap()
            .unwrap()
            .run_id,
        "run-call_1"
    );
    assert!(store.tool_call("t", "call_2").await.unwrap().is_some());
    assert!(store.tool_call("t", "call_3").await.unwrap().is_some());
    assert!(store.tool_call("u", "call_1").await.unwrap().is_some());
    assert_eq!(
        seqs(&store.events_after("t", 0, 100).await.unwrap()),
        [1, 2]
    );
    assert_eq!(store.last_event_seq("t").await.unwrap(), 2);

    // Retrying the same id alone is still a conflict.
    let retry = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::InsertToolCall(new_call("call_2"))],
        ),
    )
    .await;
    assert!(matches!(retry, Err(StoreError::Conflict(_))), "{retry:?}");
}

/// A closed run takes no more calls: its call fails alone (in a batch of
/// several units, the one-statement path included) and calls of other runs
/// and threads still commit; closing again changes nothing.
async fn a_closed_run_refuses_new_calls(store: DynStore) {
    let in_run = |id: &str, run: &str| {
        let mut call = new_call(id);
        call.run_id = run.into();
        WriteOp::InsertToolCall(call)
    };
    let close = |run: &str| WriteOp::CloseRun {
        run_id: run.into(),
        closed_at_ms: 1_700_000_000_100,
    };
    apply_all(
        &store,
        &[unit("t", "alice", vec![in_run("c1", "R"), close("R")])],
    )
    .await;
    // A plain batch (every op the one-statement path takes).
    let results = store
        .apply_batch(&[
            unit("t", "alice", vec![in_run("c2", "R"), events(1)]),
            unit("t", "alice", vec![in_run("c3", "R2"), events(1)]),
            unit("u", "alice", vec![in_run("c4", "R"), events(1)]),
        ])
        .await
        .expect("the batch commits");
    assert!(
        matches!(&results[0], Err(StoreError::RunClosed { run_id }) if run_id == "R"),
        "{:?}",
        results[0]
    );
    assert!(results[1].is_ok(), "{:?}", results[1]);
    assert!(
        results[2].is_ok(),
        "another thread's run R: {:?}",
        results[2]
    );
    assert!(store.tool_call("t", "c2").await.unwrap().is_none());
    assert_eq!(
        seqs(&store.events_after("t", 0, 100).await.unwrap()),
        [1],
        "the refused unit left no event"
    );
    // Alone, and as a pending call; closing again is no error.
    let mut pending = new_call("c5");
    pending.run_id = "R".into();
    pending.status = CallStatus::PendingApproval;
    let alone = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![close("R"), WriteOp::InsertToolCall(pending)],
        ),
    )
    .await;
    assert!(
        matches!(alone, Err(StoreError::RunClosed { .. })),
        "{alone:?}"
    );
    apply_all(&store, &[unit("t", "alice", vec![close("R")])]).await;
    assert!(store.run_closed("t", "R").await.unwrap());
    assert!(!store.run_closed("t", "R2").await.unwrap());
    assert!(!store.run_closed("u", "R").await.unwrap());
    // An id the run already recorded is a conflict (answered from its
    // record), not a refusal.
    let again = apply_one(&store, unit("t", "alice", vec![in_run("c1", "R")])).await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    // What the run recorded before its close stays, and can finish.
    assert_eq!(
        store.run_calls("t", "R").await.unwrap().len(),
        1,
        "the call recorded before the close"
    );
    apply_all(
        &store,
        &[unit("t", "alice", finishing("c1", CallStatus::Success))],
    )
    .await;
}

async fn a_duplicate_message_id_conflicts(store: DynStore) {
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::InsertMessage(message("m1", Role::User, "hello"))],
        ),
    )
    .await
    .unwrap();
    let results = store
        .apply_batch(&[
            unit(
                "t",
                "alice",
                vec![WriteOp::InsertMessage(message(
                    "m1",
                    Role::Assistant,
                    "again",
                ))],
            ),
            unit(
                "t",
                "alice",
                vec![WriteOp::InsertMessage(message("m2", Role::Assistant, "hi"))],
            ),
            // The same message id in another thread is another message.
            unit(
                "u",
                "alice",
                vec![WriteOp::InsertMessage(message("m1", Role::User, "hello"))],
            ),
        ])
        .await
        .unwrap();
    assert!(
        matches!(results[0], Err(StoreError::Conflict(_))),
        "{:?}",
        results[0]
    );
    assert_eq!(
        results[1].as_ref().unwrap().messages,
        [("m2".to_owned(), 2)]
    );
    assert_eq!(
        results[2].as_ref().unwrap().messages,
        [("m1".to_owned(), 1)]
    );
    let history = store.all_messages("t").await.unwrap();
    assert_eq!(message_seqs(&history), [1, 2]);
    assert_eq!(history[0].content, "hello");
}

async fn seqs_are_gap_free_and_per_thread(store: DynStore) {
    let results = store
        .apply_batch(&[
            unit("x", "alice", vec![events(2)]),
            unit(
                "y",
                "bob",
                vec![
                    events(1),
                    WriteOp::InsertMessage(message("y1", Role::User, "a")),
                ],
            ),
            unit("x", "bob", vec![events(5)]), // not bob's thread
            unit(
                "x",
                "alice",
                vec![
                    WriteOp::InsertMessage(message("x1", Role::User, "a")),
                    events(1),
                    WriteOp::InsertMessage(message("x2", Role::Assistant, "b")),
                    events(2),
                ],
            ),
            unit("y", "bob", vec![events(3)]),
        ])
        .await
        .unwrap();
    let receipts: Vec<Option<&UnitReceipt>> = results.iter().map(|r| r.as_ref().ok()).collect();
    assert_eq!(seqs(&receipts[0].unwrap().events), [1, 2]);
    assert_eq!(seqs(&receipts[1].unwrap().events), [1]);
    assert_eq!(receipts[1].unwrap().messages, [("y1".to_owned(), 1)]);
    assert!(matches!(results[2], Err(StoreError::NotOwner)));
    assert_eq!(seqs(&receipts[3].unwrap().events), [3, 4, 5]);
    assert_eq!(
        receipts[3].unwrap().messages,
        [("x1".to_owned(), 1), ("x2".to_owned(), 2)]
    );
    assert_eq!(seqs(&receipts[4].unwrap().events), [2, 3, 4]);
    // Receipt events carry their thread.
    assert!(
        receipts[4]
            .unwrap()
            .events
            .iter()
            .all(|e| e.thread_id == "y")
    );

    // Later batches continue where the last one stopped.
    for _ in 0..3 {
        store
            .apply_batch(&[
                unit("x", "alice", vec![events(1)]),
                unit("y", "bob", vec![events(2)]),
            ])
            .await
            .unwrap()
            .into_iter()
            .for_each(|r| {
                r.unwrap();
            });
    }
    assert_eq!(
        seqs(&store.events_after("x", 0, 1000).await.unwrap()),
        (1..=8).collect::<Vec<_>>()
    );
    assert_eq!(
        seqs(&store.events_after("y", 0, 1000).await.unwrap()),
        (1..=10).collect::<Vec<_>>()
    );
    assert_eq!(store.last_event_seq("x").await.unwrap(), 8);
    assert_eq!(store.last_event_seq("y").await.unwrap(), 10);
    assert_eq!(
        message_seqs(&store.all_messages("x").await.unwrap()),
        [1, 2]
    );
    let x_events = store.events_after("x", 0, 1000).await.unwrap();
    assert!(x_events.iter().all(|e| e.thread_id == "x"));
}

async fn events_after_pages_with_a_limit(store: DynStore) {
    assert!(store.events_after("t", 0, 10).await.unwrap().is_empty());
    assert_eq!(store.last_event_seq("t").await.unwrap(), 0);

    // Data is kept byte for byte (spacing, key order, escapes, unicode).
    let odd = NewEvent {
        event_type: "TEXT_MESSAGE_CONTENT".into(),
        data: "{ \"type\":\"TEXT_MESSAGE_CONTENT\",  \"delta\":\"h\u{e9}llo \\u00e9 \u{1f600}\\n\" , \"z\":1,\"a\":2}".into(),
        created_at_ms: 42,
        announces: None,
    };
    let mut all: Vec<NewEvent> = (1..=9).map(|i| event("CUSTOM", i)).collect();
    all.push(odd.clone());
    apply_one(
        &store,
        unit("t", "alice", vec![WriteOp::AppendEvents(all[..4].to_vec())]),
    )
    .await
    .unwrap();
    apply_one(
        &store,
        unit("t", "alice", vec![WriteOp::AppendEvents(all[4..].to_vec())]),
    )
    .await
    .unwrap();

    assert_eq!(
        seqs(&store.events_after("t", 0, 3).await.unwrap()),
        [1, 2, 3]
    );
    assert_eq!(
        seqs(&store.events_after("t", 3, 3).await.unwrap()),
        [4, 5, 6]
    );
    assert_eq!(
        seqs(&store.events_after("t", 6, 3).await.unwrap()),
        [7, 8, 9]
    );
    let last = store.events_after("t", 9, 3).await.unwrap();
    assert_eq!(seqs(&last), [10]);
    assert_eq!(last[0].data, odd.data);
    assert_eq!(last[0].event_type, odd.event_type);
    assert_eq!(last[0].created_at_ms, 42);
    assert!(store.events_after("t", 10, 3).await.unwrap().is_empty());
    assert!(store.events_after("t", 0, 0).await.unwrap().is_empty());
    assert_eq!(seqs(&store.events_after("t", -5, 2).await.unwrap()), [1, 2]);
    let every = store.events_after("t", 0, 1000).await.unwrap();
    assert_eq!(every.len(), 10);
    for (stored, new) in every.iter().zip(&all) {
        assert_eq!(stored.data, new.data);
    }
    assert_eq!(store.last_event_seq("t").await.unwrap(), 10);
    assert_eq!(store.last_event_seq("unknown").await.unwrap(), 0);
}

async fn an_owners_threads_page_newest_first(store: DynStore) {
    let start = toolgate::protocol::now_ms();
    for (thread, owner, ops) in [
        (
            "a",
            "alice",
            vec![WriteOp::InsertMessage(message("m1", Role::User, "x"))],
        ),
        (
            "b",
            "alice",
            vec![
                WriteOp::InsertMessage(message("m1", Role::User, "x")),
                WriteOp::InsertMessage(message("m2", Role::Assistant, "y")),
            ],
        ),
        ("c", "alice", vec![events(2)]),
        (
            "d",
            "bob",
            vec![WriteOp::InsertMessage(message("m1", Role::User, "x"))],
        ),
    ] {
        apply_one(&store, unit(thread, owner, ops)).await.unwrap();
    }
    store.claim_thread("e", "alice").await.unwrap();

    let all = store.threads_of("alice", None, 10).await.unwrap();
    let mut ids: Vec<&str> = all.iter().map(|t| t.id.as_str()).collect();
    let order: Vec<(i64, &str)> = all
        .iter()
        .map(|t| (t.created_at_ms, t.id.as_str()))
        .collect();
    let mut sorted = order.clone();
    sorted.sort_by(|x, y| y.cmp(x));
    assert_eq!(order, sorted, "newest first, then by id");
    ids.sort();
    assert_eq!(ids, ["a", "b", "c", "e"], "bob's thread is not alice's");
    let by_id = |id: &str| all.iter().find(|t| t.id == id).unwrap().clone();
    let b = by_id("b");
    assert_eq!(
        (b.messages, b.last_message_at_ms),
        (2, Some(1_700_000_000_000))
    );
    let c = by_id("c");
    assert_eq!(
        (c.messages, c.last_event_seq, c.last_message_at_ms),
        (0, 2, None)
    );
    assert_eq!(by_id("e").messages, 0);
    // A thread is as old as the first message it holds (recorded before
    // the write reached the store), not younger; one created by events
    // alone dates from its write.
    assert_eq!(by_id("a").created_at_ms, 1_700_000_000_000);
    assert!(by_id("c").created_at_ms >= start);

    // Page by page from a cursor: every thread once, in the same order.
    let mut paged = Vec::new();
    let mut cursor: Option<(i64, String)> = None;
    loop {
        let page = store
            .threads_of(
                "alice",
                cursor.as_ref().map(|(ms, id)| (*ms, id.as_str())),
                3,
            )
            .await
            .unwrap();
        let Some(last) = page.last() else { break };
        cursor = Some((last.created_at_ms, last.id.clone()));
        paged.extend(page);
    }
    assert_eq!(paged, all);
    assert!(
        store
            .threads_of("nobody", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.threads_of("alice", None, 0).await.unwrap().is_empty());
    // In a batch, a new thread dates from the earliest record of its units.
    let at = |id: &str, ms: i64| {
        let mut m = message(id, Role::User, "x");
        m.created_at_ms = ms;
        WriteOp::InsertMessage(m)
    };
    apply_all(
        &store,
        &[
            unit("f", "alice", vec![at("m1", 1_600_000_000_005)]),
            unit("f", "alice", vec![at("m2", 1_600_000_000_003)]),
            unit("g", "alice", vec![events(1)]),
        ],
    )
    .await;
    let listed = store.threads_of("alice", None, 10).await.unwrap();
    let f = listed.iter().find(|t| t.id == "f").unwrap();
    assert_eq!(f.created_at_ms, 1_600_000_000_003);
    assert!(listed.iter().find(|t| t.id == "g").unwrap().created_at_ms >= start);
}

async fn messages_before_pages_backwards_in_ascending_pages(store: DynStore) {
    assert!(
        store
            .messages_before("t", None, 4)
            .await
            .unwrap()
            .is_empty()
    );
    for i in 1..=10 {
        let role = if i % 2 == 1 {
            Role::User
        } else {
            Role::Assistant
        };
        apply_one(
            &store,
            unit(
                "t",
                "alice",
                vec![WriteOp::InsertMessage(message(
                    &format!("m{i}"),
                    role,
                    &format!("text {i}"),
                ))],
            ),
        )
        .await
        .unwrap();
    }
    // Another thread's messages never show up.
    apply_one(
        &store,
        unit(
            "u",
            "alice",
            vec![WriteOp::InsertMessage(message("m1", Role::User, "other"))],
        ),
    )
    .await
    .unwrap();

    let newest = store.messages_before("t", None, 4).await.unwrap();
    assert_eq!(message_seqs(&newest), [7, 8, 9, 10]);
    assert_eq!(newest[0].id, "m7");
    assert_eq!(newest[0].content, "text 7");
    assert_eq!(newest[0].role, Role::User);
    assert_eq!(newest[1].role, Role::Assistant);
    let older = store.messages_before("t", Some(7), 4).await.unwrap();
    assert_eq!(message_seqs(&older), [3, 4, 5, 6]);
    let oldest = store.messages_before("t", Some(3), 4).await.unwrap();
    assert_eq!(message_seqs(&oldest), [1, 2]);
    assert!(
        store
            .messages_before("t", Some(1), 4)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        message_seqs(&store.messages_before("t", Some(100), 2).await.unwrap()),
        [9, 10]
    );
    assert!(
        store
            .messages_before("t", None, 0)
            .await
            .unwrap()
            .is_empty()
    );

    let all = store.all_messages("t").await.unwrap();
    assert_eq!(message_seqs(&all), (1..=10).collect::<Vec<_>>());
    assert_eq!(store.messages_before("t", None, 100).await.unwrap(), all);
    assert!(all.iter().all(|m| m.thread_id == "t"));
}

/// A page of history or of the event log ends early once it holds
/// `PAGE_BYTES` of stored text (at least one row), and the next page goes
/// on where it ended: large results are never read 200 at a time.
async fn pages_end_early_at_their_byte_budget(store: DynStore) {
    let big = "x".repeat(PAGE_BYTES / 3 + 1);
    for i in 1..=7 {
        apply_one(
            &store,
            unit(
                "t",
                "alice",
                vec![
                    WriteOp::InsertMessage(message(&format!("m{i}"), Role::User, &big)),
                    WriteOp::AppendEvents(vec![NewEvent {
                        data: format!(r#"{{"type":"CUSTOM","big":"{big}"}}"#).into(),
                        ..event("CUSTOM", i)
                    }]),
                ],
            ),
        )
        .await
        .unwrap();
    }
    let newest = store.messages_before("t", None, 200).await.unwrap();
    assert_eq!(
        message_seqs(&newest),
        [5, 6, 7],
        "the newest, up to the budget"
    );
    let older = store.messages_before("t", Some(5), 200).await.unwrap();
    assert_eq!(message_seqs(&older), [2, 3, 4]);
    let oldest = store.messages_before("t", Some(2), 200).await.unwrap();
    assert_eq!(message_seqs(&oldest), [1]);
    assert_eq!(
        message_seqs(&store.messages_before("t", None, 2).await.unwrap()),
        [6, 7],
        "the limit still holds"
    );

    let first = store.events_after("t", 0, 64).await.unwrap();
    assert_eq!(seqs(&first), [1, 2, 3]);
    assert!(first.iter().map(|e| e.page_bytes()).sum::<usize>() >= PAGE_BYTES);
    assert_eq!(
        seqs(&store.events_after("t", 3, 64).await.unwrap()),
        [4, 5, 6]
    );
    assert_eq!(seqs(&store.events_after("t", 6, 64).await.unwrap()), [7]);
    // One row larger than the whole budget still makes a page.
    let huge = "y".repeat(PAGE_BYTES + 10);
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::InsertMessage(message("m8", Role::User, &huge))],
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        message_seqs(&store.messages_before("t", None, 200).await.unwrap()),
        [8]
    );
}

async fn an_outline_keeps_ids_roles_and_declared_calls_only(store: DynStore) {
    let calls = json!([{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}]);
    let declaring = NewMessage {
        metadata: json!({"tool_calls": calls, "note": "kept out"}).into(),
        ..message("m2", Role::Assistant, "calling echo")
    };
    let result = NewMessage {
        metadata: json!({"tool_agent_output": {"result": "x".repeat(100_000)}}).into(),
        tool_call_id: Some("c1".into()),
        ..message("m3", Role::Tool, &"y".repeat(100_000))
    };
    // An assistant message without calls, and one whose metadata holds
    // something else under another key.
    let plain = message("m4", Role::Assistant, "done");
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::InsertMessage(message("m1", Role::User, "hello")),
                WriteOp::InsertMessage(declaring),
                WriteOp::InsertMessage(result),
                WriteOp::InsertMessage(plain),
            ],
        ),
    )
    .await
    .unwrap();
    let full = store.all_messages("t").await.unwrap();
    let outlines = store.message_outlines("t").await.unwrap();
    let metadata = [
        json!({}),
        json!({"tool_calls": calls}),
        json!({}),
        json!({}),
    ];
    assert_eq!(outlines.len(), full.len());
    for ((outline, message), metadata) in outlines.iter().zip(&full).zip(metadata) {
        assert_eq!(
            outline,
            &StoredMessage {
                content: String::new(),
                metadata,
                ..message.clone()
            }
        );
    }
    assert_eq!(outlines[2].tool_call_id.as_deref(), Some("c1"));
    assert!(store.message_outlines("nowhere").await.unwrap().is_empty());
}

/// A model context reads a result from its message's `content`: the
/// conversation leaves out of each tool message's output the result and
/// the hints that repeat it, and nothing else of any message.
async fn a_conversation_leaves_out_what_a_results_content_holds(store: DynStore) {
    let output = json!({
        "tool_name": "echo", "tool_call_id": "c1", "tool_call_args": {"text": "hi"},
        "status": "success", "error": null,
        "result": {"text": "y".repeat(100_000)}, "ui_hints": {"body": "y".repeat(100_000)},
    });
    let result = NewMessage {
        metadata: json!({"tool_agent_output": output, "error": "kept"}).into(),
        tool_call_id: Some("c1".into()),
        ..message("m2", Role::Tool, &"y".repeat(100_000))
    };
    // Other messages keep keys of the same names.
    let user = NewMessage {
        metadata: json!({"result": 1, "ui_hints": 2, "tool_agent_output": "text"}).into(),
        ..message("m1", Role::User, "hello")
    };
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::InsertMessage(user), WriteOp::InsertMessage(result)],
        ),
    )
    .await
    .unwrap();
    let full = store.all_messages("t").await.unwrap();
    let conversation = store.conversation("t").await.unwrap();
    assert_eq!(conversation.len(), 2);
    assert_eq!(conversation[0], full[0]);
    assert_eq!(
        conversation[1],
        StoredMessage {
            metadata: json!({
                "tool_agent_output": {
                    "tool_name": "echo", "tool_call_id": "c1",
                    "tool_call_args": {"text": "hi"}, "status": "success", "error": null,
                },
                "error": "kept",
            }),
            ..full[1].clone()
        }
    );
    assert_eq!(conversation[1].content.len(), 100_000);
    assert!(store.conversation("nowhere").await.unwrap().is_empty());
}

/// A process finishes at start-up only the calls it ran, never another
/// live process's, nor one that names no process (recorded by a version
/// from before calls did, which may still be running it); any process
/// finishes every call, of whichever process or none, recorded before a
/// cutoff that no live call can reach.
async fn running_tool_calls_are_a_processes_own(store: DynStore) {
    let of = |id: &str, instance: Option<&str>| {
        WriteOp::InsertToolCall(NewToolCall {
            instance: instance.map(str::to_string),
            ..new_call(id)
        })
    };
    let waiting = NewToolCall {
        status: CallStatus::PendingApproval,
        instance: None,
        ..new_call("w")
    };
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                of("a", Some("A")),
                of("b", Some("B")),
                of("old", None),
                WriteOp::InsertToolCall(waiting),
            ],
        ),
    )
    .await
    .unwrap();
    let ids = |calls: Vec<ToolCallRecord>| {
        let mut ids: Vec<String> = calls.into_iter().map(|c| c.id).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(store.running_tool_calls("A").await.unwrap()), ["a"]);
    assert_eq!(ids(store.running_tool_calls("B").await.unwrap()), ["b"]);
    // Recorded at 1_700_000_000_000: before a cutoff after it, every
    // running call (not the one waiting for approval); none before it.
    let before = |cutoff: i64| {
        let store = store.clone();
        async move { ids(store.running_calls_created_before(cutoff).await.unwrap()) }
    };
    assert_eq!(before(1_700_000_000_001).await, ["a", "b", "old"]);
    assert!(before(1_700_000_000_000).await.is_empty());
    // An approved call is the process's that starts it.
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::StartPendingCall {
                id: "w".into(),
                instance: Some("B".into()),
            }],
        ),
    )
    .await
    .unwrap();
    assert_eq!(ids(store.running_tool_calls("A").await.unwrap()), ["a"]);
    assert_eq!(
        ids(store.running_tool_calls("B").await.unwrap()),
        ["b", "w"]
    );
}

async fn running_tool_calls_lists_only_unfinished_calls(store: DynStore) {
    assert!(store.running_tool_calls(INSTANCE).await.unwrap().is_empty());
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::InsertToolCall(new_call("a")),
                WriteOp::InsertToolCall(new_call("b")),
            ],
        ),
    )
    .await
    .unwrap();
    apply_one(
        &store,
        unit("u", "bob", vec![WriteOp::InsertToolCall(new_call("a"))]),
    )
    .await
    .unwrap();
    apply_one(
        &store,
        unit("t", "alice", finishing("b", CallStatus::Failure)),
    )
    .await
    .unwrap();

    let mut running = store.running_tool_calls(INSTANCE).await.unwrap();
    running.sort_by(|x, y| (&x.thread_id, &x.id).cmp(&(&y.thread_id, &y.id)));
    let expected = |thread: &str, owner: &str| {
        let call = new_call("a");
        ToolCallRecord {
            thread_id: thread.into(),
            id: call.id,
            owner: owner.into(),
            run_id: call.run_id,
            tool_name: call.tool_name,
            args: value_of(&call.args),
            status: CallStatus::Running,
            output: None,
            undo: None,
            message_id: None,
            created_at_ms: call.created_at_ms,
            finished_at_ms: None,
            undo_of: None,
            undone_by: None,
            workspace: None,
            dry_run: Some(false),
            parent_message_id: None,
        }
    };
    assert_eq!(running, [expected("t", "alice"), expected("u", "bob")]);
    // One thread's, in the order they were recorded.
    apply_one(
        &store,
        unit("u", "bob", vec![WriteOp::InsertToolCall(new_call("0"))]),
    )
    .await
    .unwrap();
    let running_in = |thread: &'static str| {
        let store = store.clone();
        async move { store.snapshot(thread, 0).await.unwrap().unfinished }
    };
    assert_eq!(call_ids(&running_in("u").await), ["a", "0"]);
    assert_eq!(call_ids(&running_in("t").await), ["a"]);
    assert!(running_in("nobody").await.is_empty());
    // A snapshot's unfinished calls are those waiting for a person too.
    let waiting = NewToolCall {
        status: CallStatus::PendingApproval,
        ..new_call("p")
    };
    apply_one(
        &store,
        unit("u", "bob", vec![WriteOp::InsertToolCall(waiting)]),
    )
    .await
    .unwrap();
    assert_eq!(call_ids(&running_in("u").await), ["a", "0", "p"]);
    assert_eq!(
        call_ids(&store.running_tool_calls(INSTANCE).await.unwrap())
            .iter()
            .filter(|id| **id == "p")
            .count(),
        0,
        "not running"
    );
}

async fn a_snapshot_its_running_calls_and_open_approvals_are_one_moment(store: DynStore) {
    // Calls start (one event each) and finish (a tool message and one
    // event each) while snapshots are read; every third call is asked
    // about (an approval and one more event) and decided as it finishes
    // (one more event). As of any one moment, the thread's events are its
    // starts and asks plus its finishes and decisions, so a snapshot whose
    // running calls or open approvals were read at another moment than its
    // messages and last event would miss one or count one twice.
    let asked = |i: usize| i % 3 == 1;
    let writes = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..120 {
                let mut start = vec![
                    WriteOp::InsertToolCall(new_call(&format!("c{i}"))),
                    events(1),
                ];
                if asked(i) {
                    start.push(WriteOp::InsertApproval(approval(
                        &format!("ap{i}"),
                        "t",
                        "alice",
                        &format!("c{i}"),
                        1_000 + i as i64,
                    )));
                    start.push(events(1));
                }
                apply_one(&store, unit("t", "alice", start)).await.unwrap();
                if i >= 2 {
                    let mut end = finishing(&format!("c{}", i - 2), CallStatus::Success);
                    end.push(events(1));
                    if asked(i - 2) {
                        end.push(decide(
                            &format!("ap{}", i - 2),
                            ApprovalStatus::Approved,
                            2_000,
                        ));
                        end.push(events(1));
                    }
                    apply_one(&store, unit("t", "alice", end)).await.unwrap();
                }
            }
        })
    };
    let mut read = 0;
    while !writes.is_finished() || read == 0 {
        let snap = store.snapshot("t", 2_000).await.unwrap();
        let finished: Vec<usize> = snap
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .map(|m| m.tool_call_id.as_deref().unwrap()[1..].parse().unwrap())
            .collect();
        let decided = finished.iter().filter(|&&i| asked(i)).count();
        assert_eq!(
            snap.last_event_seq,
            (snap.unfinished.len() + snap.open_approvals.len() + 2 * finished.len() + 2 * decided)
                as i64,
            "running {:?}, open approvals {:?}, {} finished",
            call_ids(&snap.unfinished),
            approval_ids(&snap.open_approvals),
            finished.len()
        );
        // The calls asked about and still running are the ones waiting.
        let waiting: Vec<String> = snap
            .open_approvals
            .iter()
            .map(|a| a.tool_call_id.clone())
            .collect();
        let running_asked: Vec<String> = snap
            .unfinished
            .iter()
            .filter(|c| asked(c.id[1..].parse().unwrap()))
            .map(|c| c.id.clone())
            .collect();
        assert_eq!(waiting, running_asked);
        assert!(
            snap.unfinished.len() <= 3,
            "{:?}",
            call_ids(&snap.unfinished)
        );
        read += 1;
        tokio::task::yield_now().await;
    }
    finish(writes.await);
    let snap = store.snapshot("t", 2_000).await.unwrap();
    assert_eq!(call_ids(&snap.unfinished), ["c118", "c119"]);
    assert_eq!(approval_ids(&snap.open_approvals), ["ap118"]);
    assert_eq!(snap.last_event_seq, 120 + 40 + 118 + 39);
    // Expired at the moment asked for: not open, though not yet swept.
    let later = store.snapshot("t", 1_118 + 60_000).await.unwrap();
    assert!(later.open_approvals.is_empty());
    assert_eq!(later.unfinished.len(), 2);
}

fn approval_ids(approvals: &[ApprovalRecord]) -> Vec<&str> {
    approvals.iter().map(|a| a.id.as_str()).collect()
}

fn tricky_json() -> Value {
    json!({
        "tool_agent_output": {
            "tool_name": "project_cli",
            "status": "success",
            "result": {
                "data": [
                    {"title": "Project sync \u{1f4c5}", "where": "東京 / Zürich / القاهرة",
                     "quote": "she said \"hi\"\\ then\nleft\ttab \u{2028}", "empty": "", "nil": null},
                    [], {}, [[1, [2, [3]]]], true, false
                ],
                "numbers": {
                    "zero": 0, "negative": -1, "i64_min": i64::MIN, "i64_max": i64::MAX,
                    "u64_max": u64::MAX, "half": 0.5, "pi": std::f64::consts::PI, "sum": 0.1 + 0.2,
                    "tiny": 1e-7, "avogadro": 6.02214076e23, "big": 1.0e300,
                    "neg_float": -2.25, "float_int": 10.0
                },
                "key with spaces / and \"quotes\"": {"ü": "ß", "": "empty key"}
            },
            "error": null
        },
        "ui_hints": {"view": "calendar.event_list"}
    })
}

async fn json_round_trips_exactly(store: DynStore) {
    let value = tricky_json();
    let mut msg = message(
        "m1",
        Role::Tool,
        "plain text \u{1f600} with \"quotes\"\nand lines",
    );
    msg.metadata = value.clone().into();
    msg.tool_call_id = Some("call_1".into());
    let mut call = new_call("call_1");
    call.args = value["tool_agent_output"]["result"].clone().into();
    let mut end = finished("call_1", CallStatus::Partial);
    end.message_id = msg.id.clone();
    end.undo = Some(json!([1, "two", {"three": [3.5]}]).into());
    apply_one(
        &store,
        unit("t", "alice", vec![WriteOp::InsertToolCall(call.clone())]),
    )
    .await
    .unwrap();
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::FinishToolCall(end.clone()),
                WriteOp::InsertMessage(msg.clone()),
            ],
        ),
    )
    .await
    .unwrap();

    let stored = store.all_messages("t").await.unwrap().remove(0);
    assert_eq!(stored.metadata, value);
    assert_eq!(stored.content, msg.content);
    assert_eq!(stored.tool_call_id.as_deref(), Some("call_1"));
    // Exact numbers, not merely equal after float conversion.
    let numbers = &stored.metadata["tool_agent_output"]["result"]["numbers"];
    assert_eq!(numbers["i64_min"].as_i64(), Some(i64::MIN));
    assert_eq!(numbers["u64_max"].as_u64(), Some(u64::MAX));
    assert_eq!(numbers["pi"].as_f64(), Some(std::f64::consts::PI));
    assert_eq!(numbers["sum"].as_f64(), Some(0.1 + 0.2));
    assert_eq!(numbers["tiny"].as_f64(), Some(1e-7));

    let record = store.tool_call("t", "call_1").await.unwrap().unwrap();
    assert_eq!(record.args, value_of(&call.args));
    assert_eq!(record.output.as_ref(), Some(&value["tool_agent_output"]));
    assert_eq!(record.undo, end.undo.as_ref().map(value_of));

    // Scalars at the top level, and a JSON null undo (distinct from none).
    for (i, top) in [json!("just a string"), json!(12), json!(null), json!([])]
        .into_iter()
        .enumerate()
    {
        let mut m = message(&format!("s{i}"), Role::Assistant, "");
        m.metadata = top.clone().into();
        apply_one(&store, unit("t", "alice", vec![WriteOp::InsertMessage(m)]))
            .await
            .unwrap();
        let back = store.messages_before("t", None, 1).await.unwrap().remove(0);
        assert_eq!(back.metadata, top);
        assert_eq!(back.content, "");
    }
    record_running(&store, "call_2").await;
    let mut end = finished("call_2", CallStatus::Success);
    end.undo = Some(Value::Null.into());
    apply_one(&store, unit("t", "alice", finishing_end(end)))
        .await
        .unwrap();
    assert_eq!(
        store.tool_call("t", "call_2").await.unwrap().unwrap().undo,
        Some(Value::Null)
    );
}

/// Postgres cannot store a NUL character in `TEXT`, nor a `\u0000` escape in
/// `JSONB`; SQLite stores both. Either way the batch commits and the unit
/// either round-trips exactly or leaves nothing behind.
async fn a_unit_the_database_rejects_fails_alone(store: DynStore) {
    let nul_text = message("m1", Role::Tool, "before\0after");
    let mut nul_json = message("m2", Role::Tool, "text");
    nul_json.metadata = json!({"output": "a\u{0}b"}).into();
    let results = store
        .apply_batch(&[
            unit(
                "t1",
                "alice",
                vec![events(1), WriteOp::InsertMessage(nul_text.clone())],
            ),
            unit("t2", "alice", vec![events(1)]),
            unit(
                "t3",
                "alice",
                vec![events(1), WriteOp::InsertMessage(nul_json.clone())],
            ),
            unit("t2", "alice", vec![events(1)]),
        ])
        .await
        .expect("the batch commits");
    assert_eq!(seqs(&results[1].as_ref().unwrap().events), [1]);
    assert_eq!(seqs(&results[3].as_ref().unwrap().events), [2]);
    for (index, thread, sent) in [(0, "t1", &nul_text), (2, "t3", &nul_json)] {
        match &results[index] {
            Ok(_) => {
                let back = store.all_messages(thread).await.unwrap().remove(0);
                assert_eq!(
                    (&back.content, &back.metadata),
                    (&sent.content, &value_of(&sent.metadata))
                );
            }
            Err(StoreError::Database(_)) => {
                assert_eq!(store.last_event_seq(thread).await.unwrap(), 0);
                assert!(store.all_messages(thread).await.unwrap().is_empty());
            }
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    eprintln!(
        "{}: NUL in text stored: {}, \\u0000 in JSON stored: {}",
        store.backend(),
        results[0].is_ok(),
        results[2].is_ok()
    );
}

async fn ready_reports_a_migrated_database(store: DynStore) {
    store.ready().await.unwrap();
    assert!(["sqlite", "postgres"].contains(&store.backend()));
}

/// Counts `apply_batch` calls and optionally fails them all.
struct Observed {
    inner: DynStore,
    batches: AtomicUsize,
    fail: bool,
    /// Panic instead of applying (a store bug): takes the writer down.
    panic: bool,
}

#[async_trait]
impl Store for Observed {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    async fn ready(&self) -> StoreResult<()> {
        self.inner.ready().await
    }
    async fn thread_owner(&self, thread_id: &str) -> StoreResult<Option<ThreadOwner>> {
        self.inner.thread_owner(thread_id).await
    }
    async fn deleted_approval(&self, approval_id: &str) -> StoreResult<Option<DeletedApproval>> {
        self.inner.deleted_approval(approval_id).await
    }

    async fn call_declaration(
        &self,
        thread_id: &str,
        call_id: &str,
    ) -> StoreResult<toolgate::store::Declaration> {
        self.inner.call_declaration(thread_id, call_id).await
    }
    async fn claim_thread(&self, thread_id: &str, owner: &str) -> StoreResult<()> {
        self.inner.claim_thread(thread_id, owner).await
    }
    async fn tool_call(&self, thread_id: &str, id: &str) -> StoreResult<Option<ToolCallRecord>> {
        self.inner.tool_call(thread_id, id).await
    }
    async fn running_tool_calls(&self, instance: &str) -> StoreResult<Vec<ToolCallRecord>> {
        self.inner.running_tool_calls(instance).await
    }
    async fn running_calls_created_before(
        &self,
        cutoff_ms: i64,
    ) -> StoreResult<Vec<ToolCallRecord>> {
        self.inner.running_calls_created_before(cutoff_ms).await
    }
    async fn beat(&self, instance: &str, at_ms: i64) -> StoreResult<()> {
        self.inner.beat(instance, at_ms).await
    }
    async fn running_calls_of_silent(
        &self,
        seen_before_ms: i64,
        except: &str,
    ) -> StoreResult<Vec<ToolCallRecord>> {
        self.inner
            .running_calls_of_silent(seen_before_ms, except)
            .await
    }
    async fn run_calls(&self, thread_id: &str, run_id: &str) -> StoreResult<Vec<ToolCallRecord>> {
        self.inner.run_calls(thread_id, run_id).await
    }
    async fn run_closed(&self, thread_id: &str, run_id: &str) -> StoreResult<bool> {
        self.inner.run_closed(thread_id, run_id).await
    }
    async fn approval(&self, id: &str) -> StoreResult<Option<ApprovalRecord>> {
        self.inner.approval(id).await
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
        self.inner
            .approvals(owner, thread, status, now_ms, before, limit)
            .await
    }
    async fn approval_outlines(
        &self,
        owner: Option<&str>,
        thread: Option<&str>,
        open_at: Option<i64>,
        since_ms: i64,
        limit: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        self.inner
            .approval_outlines(owner, thread, open_at, since_ms, limit)
            .await
    }
    async fn approval_of_call(
        &self,
        thread_id: &str,
        tool_call_id: &str,
    ) -> StoreResult<Option<ApprovalRecord>> {
        self.inner.approval_of_call(thread_id, tool_call_id).await
    }
    async fn open_approvals_of_thread(
        &self,
        thread_id: &str,
        now_ms: i64,
    ) -> StoreResult<Vec<ApprovalRecord>> {
        self.inner.open_approvals_of_thread(thread_id, now_ms).await
    }
    async fn expired_approvals(&self, now_ms: i64, limit: i64) -> StoreResult<Vec<ApprovalRecord>> {
        self.inner.expired_approvals(now_ms, limit).await
    }
    async fn audit(&self, filter: &AuditFilter) -> StoreResult<Vec<AuditEntry>> {
        self.inner.audit(filter).await
    }
    async fn append_audit(&self, entry: &NewAuditEntry) -> StoreResult<i64> {
        self.inner.append_audit(entry).await
    }
    async fn owner_rules(&self, owner: &str) -> StoreResult<Option<Value>> {
        self.inner.owner_rules(owner).await
    }
    async fn put_owner_rules(
        &self,
        owner: &str,
        rules: &Value,
        updated_at_ms: i64,
    ) -> StoreResult<()> {
        self.inner
            .put_owner_rules(owner, rules, updated_at_ms)
            .await
    }
    async fn events_after(
        &self,
        thread_id: &str,
        after: i64,
        limit: i64,
    ) -> StoreResult<Vec<StoredEvent>> {
        self.inner.events_after(thread_id, after, limit).await
    }
    async fn last_event_seq(&self, thread_id: &str) -> StoreResult<i64> {
        self.inner.last_event_seq(thread_id).await
    }
    async fn messages_before(
        &self,
        thread_id: &str,
        before: Option<i64>,
        limit: i64,
    ) -> StoreResult<Vec<StoredMessage>> {
        self.inner.messages_before(thread_id, before, limit).await
    }
    async fn message(&self, thread_id: &str, id: &str) -> StoreResult<Option<StoredMessage>> {
        self.inner.message(thread_id, id).await
    }
    async fn snapshot(&self, thread_id: &str, now_ms: i64) -> StoreResult<ThreadSnapshot> {
        self.inner.snapshot(thread_id, now_ms).await
    }
    async fn all_messages(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>> {
        self.inner.all_messages(thread_id).await
    }

    async fn conversation(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>> {
        self.inner.conversation(thread_id).await
    }
    async fn message_outlines(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>> {
        self.inner.message_outlines(thread_id).await
    }
    async fn call_parents(&self, thread_id: &str) -> StoreResult<Vec<(String, String)>> {
        self.inner.call_parents(thread_id).await
    }
    async fn threads_of(
        &self,
        owner: &str,
        before: Option<(i64, &str)>,
        limit: i64,
    ) -> StoreResult<Vec<ThreadSummary>> {
        self.inner.threads_of(owner, before, limit).await
    }
    async fn purge_deleted(&self, thread_id: &str, limit: i64) -> StoreResult<bool> {
        self.inner.purge_deleted(thread_id, limit).await
    }
    async fn unpurged_threads(&self) -> StoreResult<Vec<String>> {
        self.inner.unpurged_threads().await
    }
    async fn apply_batch(&self, units: &[WriteUnit]) -> StoreResult<Vec<StoreResult<UnitReceipt>>> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        assert!(!self.panic, "the store panics while applying a batch");
        if self.fail {
            return Err(StoreError::Database(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "connection reset while committing",
            ))));
        }
        self.inner.apply_batch(units).await
    }
}

/// A commit hook that records every call.
#[derive(Default)]
struct HookLog {
    calls: AtomicUsize,
    events: Mutex<Vec<StoredEvent>>,
}

impl HookLog {
    fn hook(self: &Arc<Self>) -> CommitHook {
        let log = self.clone();
        Arc::new(move |events: &[StoredEvent]| {
            log.calls.fetch_add(1, Ordering::SeqCst);
            log.events.lock().unwrap().extend_from_slice(events);
        })
    }

    fn saw(&self, event: &StoredEvent) -> bool {
        self.events.lock().unwrap().contains(event)
    }
}

async fn writer_groups_concurrent_writes_and_hooks_before_acks(store: DynStore) {
    let observed = Arc::new(Observed {
        inner: store.clone(),
        batches: AtomicUsize::new(0),
        fail: false,
        panic: false,
    });
    let log = Arc::new(HookLog::default());
    let writer = Writer::spawn(observed.clone(), WriterConfig::default(), log.hook());

    let mut tasks = Vec::new();
    for i in 0..200 {
        let writer = writer.clone();
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            let thread = format!("t{}", i % 10);
            let receipt = writer
                .write(unit(
                    &thread,
                    "alice",
                    vec![
                        WriteOp::InsertToolCall(new_call(&format!("call_{i}"))),
                        WriteOp::AppendEvents(vec![event("TOOL_CALL_START", i)]),
                    ],
                ))
                .await
                .expect("acknowledged");
            assert_eq!(receipt.events.len(), 1);
            // The hook ran before this caller was answered.
            assert!(
                log.saw(&receipt.events[0]),
                "ack before the commit hook saw {:?}",
                receipt.events[0]
            );
            receipt.events[0].clone()
        }));
    }
    let mut acked = Vec::new();
    for task in tasks {
        acked.push(task.await.unwrap());
    }

    let batches = observed.batches.load(Ordering::SeqCst);
    let hook_calls = log.calls.load(Ordering::SeqCst);
    eprintln!("200 concurrent writes took {batches} batches");
    assert_eq!(hook_calls, batches, "one hook call per committed batch");
    assert!(batches < 200, "writes were not grouped ({batches} batches)");
    assert_eq!(log.events.lock().unwrap().len(), 200);

    for t in 0..10 {
        let thread = format!("t{t}");
        let stored = store.events_after(&thread, 0, 1000).await.unwrap();
        assert_eq!(seqs(&stored), (1..=20).collect::<Vec<_>>(), "{thread}");
        // Hook order is commit order: per thread, seqs ascend.
        let hooked: Vec<i64> = log
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.thread_id == thread)
            .map(|e| e.seq)
            .collect();
        assert_eq!(hooked, (1..=20).collect::<Vec<_>>(), "{thread}");
    }
    for i in 0..200 {
        let call = store
            .tool_call(&format!("t{}", i % 10), &format!("call_{i}"))
            .await
            .unwrap();
        assert_eq!(call.map(|c| c.status), Some(CallStatus::Running));
    }
    acked.sort_by(|a, b| (&a.thread_id, a.seq).cmp(&(&b.thread_id, b.seq)));
    acked.dedup();
    assert_eq!(acked.len(), 200);
}

async fn writer_reports_a_unit_failure_to_its_caller_only(store: DynStore) {
    let log = Arc::new(HookLog::default());
    // Linger so that the units below share batches.
    let config = WriterConfig {
        linger: Duration::from_millis(20),
        ..WriterConfig::default()
    };
    let writer = Writer::spawn(store.clone(), config, log.hook());
    writer
        .write(unit(
            "t",
            "alice",
            vec![WriteOp::InsertToolCall(new_call("dup"))],
        ))
        .await
        .unwrap();

    let mut tasks = Vec::new();
    for i in 0..20 {
        let writer = writer.clone();
        tasks.push(tokio::spawn(async move {
            let id = if i % 5 == 0 {
                "dup".to_owned()
            } else {
                format!("call_{i}")
            };
            let sent = unit(
                "t",
                "alice",
                vec![events(1), WriteOp::InsertToolCall(new_call(&id))],
            );
            (sent.clone(), writer.write_or_return(sent).await)
        }));
    }
    let mut ok = 0;
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await.unwrap() {
            (_, Ok(receipt)) => {
                assert!(i % 5 != 0);
                assert!(log.saw(&receipt.events[0]));
                ok += 1;
            }
            // A unit rolled back alone comes back with its error.
            (sent, Err((StoreError::Conflict(_), Some(back)))) => {
                assert!(i % 5 == 0);
                assert_eq!(back, sent);
            }
            (_, Err(other)) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(ok, 16);
    // Only committed events reached the hook, and they are all there is.
    let stored = store.events_after("t", 0, 1000).await.unwrap();
    assert_eq!(seqs(&stored), (1..=16).collect::<Vec<_>>());
    let mut hooked = log.events.lock().unwrap().clone();
    hooked.sort_by_key(|e| e.seq);
    assert_eq!(hooked, stored);
}

async fn writer_fails_every_caller_of_a_failed_batch(store: DynStore) {
    let failing = Arc::new(Observed {
        inner: store.clone(),
        batches: AtomicUsize::new(0),
        fail: true,
        panic: false,
    });
    let log = Arc::new(HookLog::default());
    let writer = Writer::spawn(failing.clone(), WriterConfig::default(), log.hook());
    let mut tasks = Vec::new();
    for i in 0..50 {
        let writer = writer.clone();
        tasks.push(tokio::spawn(async move {
            let sent = unit(
                "t",
                "alice",
                vec![
                    WriteOp::InsertToolCall(new_call(&format!("c{i}"))),
                    events(1),
                ],
            );
            (sent.clone(), writer.write_or_return(sent).await)
        }));
    }
    for task in tasks {
        // Each caller gets the error and its own unit back, to write again.
        match task.await.unwrap() {
            (sent, Err((StoreError::Database(sqlx::Error::Io(e)), Some(back)))) => {
                assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
                assert_eq!(back, sent);
            }
            (_, other) => panic!("a caller of a failed batch got {other:?}"),
        }
    }
    assert!(failing.batches.load(Ordering::SeqCst) >= 1);
    assert_eq!(
        log.calls.load(Ordering::SeqCst),
        0,
        "no commit hook for a failed batch"
    );
    assert!(store.events_after("t", 0, 100).await.unwrap().is_empty());
    assert!(store.running_tool_calls(INSTANCE).await.unwrap().is_empty());

    // A hook that panics does not cost the callers their acknowledgement.
    let panicking: CommitHook =
        Arc::new(|_: &[StoredEvent]| panic!("hook failure (expected by the test)"));
    let writer = Writer::spawn(store.clone(), WriterConfig::default(), panicking);
    let receipt = writer
        .write(unit("t", "alice", vec![events(1)]))
        .await
        .unwrap();
    assert_eq!(seqs(&receipt.events), [1]);
    let receipt = writer
        .write(unit("t", "alice", vec![events(1)]))
        .await
        .unwrap();
    assert_eq!(seqs(&receipt.events), [2]);
}

async fn writer_finishes_queued_work_after_every_handle_is_dropped(store: DynStore) {
    let log = Arc::new(HookLog::default());
    let writer = Writer::spawn(store.clone(), WriterConfig::default(), log.hook());
    // Queue units, then stop waiting for them and drop the last handle.
    let mut pending = Vec::new();
    for i in 0..10 {
        let mut write = Box::pin(writer.write(unit(
            "t",
            "alice",
            vec![
                WriteOp::InsertToolCall(new_call(&format!("c{i}"))),
                events(1),
            ],
        )));
        // Poll once: the unit is queued (the channel has room), the ack is not in.
        tokio::select! {
            biased;
            _ = &mut write => {}
            _ = std::future::ready(()) => {}
        }
        pending.push(write);
    }
    drop(pending);
    drop(writer);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        if store.last_event_seq("t").await.unwrap() == 10 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "queued units were lost"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(store.running_tool_calls(INSTANCE).await.unwrap().len(), 10);
}

async fn two_handles_on_one_database_serialise_their_writes(target: Target) {
    // Two pools onto one database, as two toolgate processes would have,
    // writing batches that touch the same threads in opposite orders.
    let a = target.open().await;
    let b = target.open().await;
    let run = |store: DynStore, threads: [&'static str; 2], tag: &'static str| {
        tokio::spawn(async move {
            for round in 0..25 {
                let units: Vec<WriteUnit> = threads
                    .iter()
                    .map(|t| {
                        unit(
                            t,
                            "alice",
                            vec![
                                WriteOp::InsertToolCall(new_call(&format!("{tag}{round}"))),
                                events(2),
                                WriteOp::InsertMessage(message(
                                    &format!("{tag}{round}"),
                                    Role::Tool,
                                    "ok",
                                )),
                            ],
                        )
                    })
                    .collect();
                for result in store.apply_batch(&units).await.expect("batch commits") {
                    result.expect("unit commits");
                }
            }
        })
    };
    let first = run(a.clone(), ["p", "q"], "a");
    let second = run(b.clone(), ["q", "p"], "b");
    first.await.unwrap();
    second.await.unwrap();

    for thread in ["p", "q"] {
        assert_eq!(
            seqs(&a.events_after(thread, 0, 1000).await.unwrap()),
            (1..=100).collect::<Vec<_>>()
        );
        assert_eq!(
            message_seqs(&b.all_messages(thread).await.unwrap()),
            (1..=50).collect::<Vec<_>>()
        );
        assert_eq!(b.last_event_seq(thread).await.unwrap(), 100);
    }
}

async fn two_handles_agree_on_what_a_call_id_means(target: Target) {
    // Two toolgate processes on one database, one recording a message that
    // declares a call while the other records a call under the same id with
    // other arguments (or declares it otherwise): each pair ends with one
    // of the two kept and the other refused, never both. The writer locks
    // the thread before it checks the thread's calls.
    let a = target.open().await;
    let b = target.open().await;
    let declare = |message_id: String, call_id: String, n: i64| {
        unit(
            "t",
            "alice",
            vec![WriteOp::InsertMessage(declaring(
                &message_id,
                &[(&call_id, "echo", json!({ "n": n }))],
            ))],
        )
    };
    for round in 0..30 {
        let call_id = format!("c{round}");
        let first = declare(format!("m{round}"), call_id.clone(), 1);
        let second = if round % 2 == 0 {
            unit(
                "t",
                "alice",
                vec![WriteOp::InsertToolCall(echo_call(
                    &call_id,
                    json!({"n": 2}),
                ))],
            )
        } else {
            declare(format!("m{round}b"), call_id.clone(), 2)
        };
        let (x, y) = tokio::join!(apply_one(&a, first), apply_one(&b, second));
        let kept = [&x, &y].iter().filter(|r| r.is_ok()).count();
        assert_eq!(kept, 1, "round {round}: {x:?} / {y:?}");
        let refused = if x.is_ok() { &y } else { &x };
        assert!(is_redeclared(refused), "round {round}: {refused:?}");
    }
    // What is kept agrees: a recorded call is never also declared otherwise.
    for round in (0..30).step_by(2) {
        let call_id = format!("c{round}");
        let recorded = a.tool_call("t", &call_id).await.unwrap();
        let declared = b.message("t", &format!("m{round}")).await.unwrap();
        assert!(
            recorded.is_some() != declared.is_some(),
            "round {round}: call {recorded:?}, message {declared:?}"
        );
    }
}

async fn data_survives_reopening(target: Target) {
    let store = target.open().await;
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::InsertToolCall(new_call("c")),
                events(3),
                WriteOp::InsertMessage(message("m", Role::User, "hi")),
            ],
        ),
    )
    .await
    .unwrap();
    drop(store);
    // Opening again runs the (already applied) migrations again: a no-op.
    let store = target.open().await;
    store.ready().await.unwrap();
    assert_eq!(store.last_event_seq("t").await.unwrap(), 3);
    assert_eq!(store.running_tool_calls(INSTANCE).await.unwrap().len(), 1);
    assert_eq!(store.all_messages("t").await.unwrap().len(), 1);
    assert_eq!(owner_of(&store, "t").await.as_deref(), Some("alice"));
}

async fn a_constraint_violation_rolls_back_only_its_unit(target: Target) {
    // A real database error inside a unit (here a stray event row taking the
    // next seq) rolls back to the unit's savepoint; the batch goes on.
    let store = target.open().await;
    apply_one(&store, unit("t", "alice", vec![events(1)]))
        .await
        .unwrap();
    target
        .execute(
            "INSERT INTO events (thread_id, seq, event_type, data, created_at_ms) \
             VALUES ('t', 2, 'STRAY', '{}', 0)",
        )
        .await;
    let results = store
        .apply_batch(&[
            unit(
                "t",
                "alice",
                vec![WriteOp::InsertToolCall(new_call("c1")), events(1)],
            ),
            unit(
                "u",
                "alice",
                vec![WriteOp::InsertToolCall(new_call("c1")), events(1)],
            ),
        ])
        .await
        .expect("the batch commits");
    assert!(
        matches!(results[0], Err(StoreError::Conflict(_))),
        "{:?}",
        results[0]
    );
    assert_eq!(seqs(&results[1].as_ref().unwrap().events), [1]);
    assert!(store.tool_call("t", "c1").await.unwrap().is_none());
    assert!(store.tool_call("u", "c1").await.unwrap().is_some());
    assert_eq!(store.last_event_seq("t").await.unwrap(), 1);
}

// ---------------------------------------------------------------------------
// Safety features: pending calls, approvals, audit log, runs, undo, rules.

fn pending_call(id: &str) -> NewToolCall {
    NewToolCall {
        status: CallStatus::PendingApproval,
        ..new_call(id)
    }
}

fn approval(id: &str, thread: &str, owner: &str, call: &str, created: i64) -> ApprovalRecord {
    ApprovalRecord {
        id: id.to_owned(),
        thread_id: thread.to_owned(),
        owner: owner.to_owned(),
        tool_call_id: call.to_owned(),
        tool_name: "bash".to_owned(),
        arguments: json!({"command": "rm -rf build/"}),
        reason: "requires_checkpoint".to_owned(),
        preview: Some(json!({"would_delete": ["build/a.o", "build/b.o"]})),
        request: json!({"call": {"id": call, "name": "bash"}, "observer": null}),
        status: ApprovalStatus::Pending,
        decided_by: None,
        decision_reason: None,
        created_at_ms: created,
        expires_at_ms: created + 60_000,
        decided_at_ms: None,
    }
}

fn decide(id: &str, status: ApprovalStatus, at: i64) -> WriteOp {
    WriteOp::DecideApproval {
        id: id.to_owned(),
        status,
        decided_by: Some("operator".to_owned()),
        reason: Some(format!("decided {}", status.as_str())),
        decided_at_ms: at,
    }
}

fn audit_entry(owner: &str, thread: Option<&str>, action: &str, at_ms: i64) -> NewAuditEntry {
    NewAuditEntry {
        at_ms,
        owner: owner.to_owned(),
        thread_id: thread.map(str::to_owned),
        tool_call_id: None,
        tool_name: None,
        action: action.to_owned(),
        operation: None,
        verdict: None,
        rule: None,
        approval_id: None,
        outcome: None,
        duration_ms: None,
        detail: json!({}).into(),
    }
}

fn filter(owner: &str) -> AuditFilter {
    AuditFilter {
        owner: owner.to_owned(),
        limit: 100,
        ..AuditFilter::default()
    }
}

fn audit_ids(entries: &[AuditEntry]) -> Vec<i64> {
    entries.iter().map(|e| e.id).collect()
}

fn call_ids(calls: &[ToolCallRecord]) -> Vec<&str> {
    calls.iter().map(|c| c.id.as_str()).collect()
}

async fn status_of(store: &DynStore, thread: &str, id: &str) -> CallStatus {
    store
        .tool_call(thread, id)
        .await
        .unwrap()
        .expect("call recorded")
        .status
}

async fn a_pending_call_starts_then_finishes(store: DynStore) {
    let receipt = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::InsertToolCall(pending_call("c1")),
                WriteOp::InsertApproval(approval("ap1", "t", "alice", "c1", 1_000)),
                events(1),
            ],
        ),
    )
    .await
    .unwrap();
    assert_eq!(seqs(&receipt.events), [1]);
    let record = store.tool_call("t", "c1").await.unwrap().unwrap();
    assert_eq!(record.status, CallStatus::PendingApproval);
    assert_eq!(record.finished_at_ms, None);
    assert!(!CallStatus::PendingApproval.is_finished());
    // Waiting for a decision is not running.
    assert!(store.running_tool_calls(INSTANCE).await.unwrap().is_empty());

    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                decide("ap1", ApprovalStatus::Approved, 2_000),
                WriteOp::StartPendingCall {
                    id: "c1".into(),
                    instance: Some(INSTANCE.into()),
                },
            ],
        ),
    )
    .await
    .unwrap();
    assert_eq!(status_of(&store, "t", "c1").await, CallStatus::Running);
    assert_eq!(
        call_ids(&store.running_tool_calls(INSTANCE).await.unwrap()),
        ["c1"]
    );

    // Starting twice is a conflict, and takes the rest of its unit with it.
    let again = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                events(1),
                WriteOp::StartPendingCall {
                    id: "c1".into(),
                    instance: Some(INSTANCE.into()),
                },
            ],
        ),
    )
    .await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    assert_eq!(store.last_event_seq("t").await.unwrap(), 1);
    let unknown = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::StartPendingCall {
                id: "nope".into(),
                instance: Some(INSTANCE.into()),
            }],
        ),
    )
    .await;
    assert!(
        matches!(unknown, Err(StoreError::NotFound(_))),
        "{unknown:?}"
    );
    // Another thread's call is not found from this thread.
    let elsewhere = apply_one(
        &store,
        unit(
            "u",
            "alice",
            vec![WriteOp::StartPendingCall {
                id: "c1".into(),
                instance: Some(INSTANCE.into()),
            }],
        ),
    )
    .await;
    assert!(
        matches!(elsewhere, Err(StoreError::NotFound(_))),
        "{elsewhere:?}"
    );

    apply_one(
        &store,
        unit("t", "alice", finishing("c1", CallStatus::Success)),
    )
    .await
    .unwrap();
    assert_eq!(status_of(&store, "t", "c1").await, CallStatus::Success);
    let finished_start = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::StartPendingCall {
                id: "c1".into(),
                instance: Some(INSTANCE.into()),
            }],
        ),
    )
    .await;
    assert!(
        matches!(finished_start, Err(StoreError::Conflict(_))),
        "{finished_start:?}"
    );
    assert!(store.running_tool_calls(INSTANCE).await.unwrap().is_empty());
}

async fn a_denied_pending_call_finishes_without_running(store: DynStore) {
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::InsertToolCall(pending_call("c1")),
                WriteOp::InsertApproval(approval("ap1", "t", "alice", "c1", 1_000)),
            ],
        ),
    )
    .await
    .unwrap();
    // Deny: the decision, the call's end, its message and an audit entry.
    let mut end = finished("c1", CallStatus::Failure);
    end.undo = None;
    let denial = json!({"status": "failure", "error": {"code": "DENIED"}});
    let receipt = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                decide("ap1", ApprovalStatus::Denied, 2_000),
                WriteOp::FinishToolCall(end.clone()),
                WriteOp::InsertMessage(tool_message(&end, &denial)),
                WriteOp::AppendAudit(audit_entry("alice", Some("t"), "approval.decided", 2_000)),
            ],
        ),
    )
    .await
    .unwrap();
    assert_eq!(receipt.audit_ids.len(), 1);
    let record = store.tool_call("t", "c1").await.unwrap().unwrap();
    assert_eq!(record.status, CallStatus::Failure);
    assert_eq!(record.output, Some(denial));
    assert_eq!(record.finished_at_ms, Some(end.finished_at_ms));
    assert_eq!(
        store.approval("ap1").await.unwrap().unwrap().status,
        ApprovalStatus::Denied
    );

    // A finished call neither starts nor finishes again (with a new message).
    let mut again = finished("c1", CallStatus::Success);
    again.message_id = "msg-c1-again".into();
    for ops in [
        vec![WriteOp::StartPendingCall {
            id: "c1".into(),
            instance: Some(INSTANCE.into()),
        }],
        finishing_end(again),
    ] {
        let refused = apply_one(&store, unit("t", "alice", ops)).await;
        assert!(
            matches!(refused, Err(StoreError::Conflict(_))),
            "{refused:?}"
        );
    }

    // Calls are recorded only as running or pending; pending is no end.
    let mut done_call = new_call("c2");
    done_call.status = CallStatus::Success;
    let refused = apply_one(
        &store,
        unit("t", "alice", vec![WriteOp::InsertToolCall(done_call)]),
    )
    .await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert!(store.tool_call("t", "c2").await.unwrap().is_none());
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::InsertToolCall(pending_call("c3"))],
        ),
    )
    .await
    .unwrap();
    let refused = apply_one(
        &store,
        unit("t", "alice", finishing("c3", CallStatus::PendingApproval)),
    )
    .await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert_eq!(
        status_of(&store, "t", "c3").await,
        CallStatus::PendingApproval
    );
}

async fn approvals_are_listed_and_decided_once(store: DynStore) {
    let a1 = approval("ap1", "t", "alice", "c1", 1_000);
    let a2 = approval("ap2", "t", "alice", "c2", 3_000);
    let mut a3 = approval("ap3", "u", "alice", "c1", 2_000);
    a3.preview = None;
    a3.reason = "ask: bash(rm *)".into();
    let b1 = approval("bp1", "v", "bob", "c1", 4_000);
    for (thread, owner, record) in [
        ("t", "alice", &a1),
        ("t", "alice", &a2),
        ("u", "alice", &a3),
        ("v", "bob", &b1),
    ] {
        apply_one(
            &store,
            unit(
                thread,
                owner,
                vec![
                    WriteOp::InsertToolCall(pending_call(&record.tool_call_id)),
                    WriteOp::InsertApproval(record.clone()),
                ],
            ),
        )
        .await
        .unwrap();
    }
    assert_eq!(store.approval("ap3").await.unwrap().as_ref(), Some(&a3));
    assert_eq!(store.approval("ap1").await.unwrap().as_ref(), Some(&a1));
    assert!(store.approval("nope").await.unwrap().is_none());

    // A duplicate id conflicts, even in another thread; the unit rolls back.
    let duplicate = apply_one(
        &store,
        unit(
            "w",
            "alice",
            vec![
                WriteOp::InsertToolCall(pending_call("c9")),
                WriteOp::InsertApproval(approval("ap1", "w", "alice", "c9", 9_000)),
            ],
        ),
    )
    .await;
    assert!(
        matches!(duplicate, Err(StoreError::Conflict(_))),
        "{duplicate:?}"
    );
    assert!(store.tool_call("w", "c9").await.unwrap().is_none());
    assert_eq!(store.approval("ap1").await.unwrap().as_ref(), Some(&a1));
    // An approval must belong to its unit's thread and owner.
    for stray in [
        approval("ap8", "other", "alice", "c1", 1),
        approval("ap8", "t", "mallory", "c1", 1),
    ] {
        let refused = apply_one(
            &store,
            unit("t", "alice", vec![WriteOp::InsertApproval(stray)]),
        )
        .await;
        assert!(
            matches!(refused, Err(StoreError::Conflict(_))),
            "{refused:?}"
        );
    }
    assert!(store.approval("ap8").await.unwrap().is_none());

    // Newest first; filtered by status; limited; owners kept apart.
    let ids = |records: Vec<ApprovalRecord>| -> Vec<String> {
        records.into_iter().map(|r| r.id).collect()
    };
    assert_eq!(
        ids(store
            .approvals(Some("alice"), None, None, 0, None, 10)
            .await
            .unwrap()),
        ["ap2", "ap3", "ap1"]
    );
    assert_eq!(
        ids(store
            .approvals(Some("alice"), None, None, 0, None, 2)
            .await
            .unwrap()),
        ["ap2", "ap3"]
    );
    assert!(
        store
            .approvals(Some("alice"), None, None, 0, None, 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        ids(store
            .approvals(Some("bob"), None, None, 0, None, 10)
            .await
            .unwrap()),
        ["bp1"]
    );
    assert!(
        store
            .approvals(Some("carol"), None, None, 0, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Every owner's (an approver's list), in the same order.
    assert_eq!(
        ids(store
            .approvals(None, None, None, 0, None, 10)
            .await
            .unwrap()),
        ["bp1", "ap2", "ap3", "ap1"]
    );
    // A page starts after the previous page's last (time, id).
    assert_eq!(
        ids(store
            .approvals(Some("alice"), None, None, 0, Some((3_000, "ap2")), 10)
            .await
            .unwrap()),
        ["ap3", "ap1"]
    );
    assert_eq!(
        ids(store
            .approvals(None, None, None, 0, Some((2_000, "ap3")), 10)
            .await
            .unwrap()),
        ["ap1"]
    );
    assert!(
        store
            .approvals(Some("alice"), None, None, 0, Some((1_000, "ap1")), 10)
            .await
            .unwrap()
            .is_empty()
    );
    // One thread's, with or without a status (its number follows).
    assert_eq!(
        ids(store
            .approvals(Some("alice"), Some("t"), None, 0, None, 10)
            .await
            .unwrap()),
        ["ap2", "ap1"]
    );
    assert_eq!(
        ids(store
            .approvals(None, Some("u"), None, 0, None, 10)
            .await
            .unwrap()),
        ["ap3"]
    );
    assert_eq!(
        ids(store
            .approvals(
                Some("alice"),
                Some("t"),
                Some(ApprovalStatus::Pending),
                0,
                None,
                10
            )
            .await
            .unwrap()),
        ["ap2", "ap1"]
    );
    assert!(
        store
            .approvals(Some("bob"), Some("t"), None, 0, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Outlines (an approvals stream's look): ids and moments only, oldest
    // first, by owner, thread, moment and deadline, limited.
    let outline = |pairs: &[(&str, i64)]| -> Vec<(String, i64)> {
        pairs.iter().map(|(id, at)| (id.to_string(), *at)).collect()
    };
    assert_eq!(
        store
            .approval_outlines(Some("alice"), None, None, i64::MIN, 10)
            .await
            .unwrap(),
        outline(&[("ap1", 1_000), ("ap3", 2_000), ("ap2", 3_000)])
    );
    assert_eq!(
        store
            .approval_outlines(None, None, None, 2_500, 10)
            .await
            .unwrap(),
        outline(&[("ap2", 3_000), ("bp1", 4_000)])
    );
    assert_eq!(
        store
            .approval_outlines(Some("alice"), Some("t"), None, 0, 10)
            .await
            .unwrap(),
        outline(&[("ap1", 1_000), ("ap2", 3_000)])
    );
    assert_eq!(
        store
            .approval_outlines(None, None, None, 0, 2)
            .await
            .unwrap(),
        outline(&[("ap1", 1_000), ("ap3", 2_000)])
    );
    // Open at a moment: before its deadline (a minute after it was asked).
    assert_eq!(
        store
            .approval_outlines(None, None, Some(61_500), 0, 10)
            .await
            .unwrap(),
        outline(&[("ap3", 2_000), ("ap2", 3_000), ("bp1", 4_000)])
    );
    assert!(
        store
            .approval_outlines(Some("carol"), None, Some(0), 0, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A call's approval is found by its thread and call id.
    assert_eq!(
        store.approval_of_call("u", "c1").await.unwrap().as_ref(),
        Some(&a3)
    );
    assert_eq!(
        store.approval_of_call("t", "c1").await.unwrap().as_ref(),
        Some(&a1)
    );
    assert!(store.approval_of_call("t", "c3").await.unwrap().is_none());
    assert!(store.approval_of_call("w", "c1").await.unwrap().is_none());
    // A thread's open approvals: its own, oldest first, none past expiry.
    let open = |thread: &'static str, now: i64| {
        let store = store.clone();
        async move { ids(store.open_approvals_of_thread(thread, now).await.unwrap()) }
    };
    assert_eq!(open("t", 0).await, ["ap1", "ap2"]);
    assert_eq!(open("u", 0).await, ["ap3"]);
    assert_eq!(open("v", 0).await, ["bp1"]);
    assert!(open("w", 0).await.is_empty());
    assert_eq!(open("t", a1.expires_at_ms - 1).await, ["ap1", "ap2"]);
    assert_eq!(open("t", a1.expires_at_ms).await, ["ap2"]);
    assert!(open("t", a2.expires_at_ms).await.is_empty());

    // Decide: the fields are stored, and a second decision conflicts.
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![decide("ap1", ApprovalStatus::Approved, 1_500)],
        ),
    )
    .await
    .unwrap();
    let decided = store.approval("ap1").await.unwrap().unwrap();
    assert_eq!(
        decided,
        ApprovalRecord {
            status: ApprovalStatus::Approved,
            decided_by: Some("operator".into()),
            decision_reason: Some("decided approved".into()),
            decided_at_ms: Some(1_500),
            ..a1.clone()
        }
    );
    for second in [
        ApprovalStatus::Denied,
        ApprovalStatus::Approved,
        ApprovalStatus::Expired,
    ] {
        let twice = apply_one(
            &store,
            unit("t", "alice", vec![events(1), decide("ap1", second, 1_600)]),
        )
        .await;
        assert!(matches!(twice, Err(StoreError::Conflict(_))), "{twice:?}");
    }
    assert_eq!(store.approval("ap1").await.unwrap().unwrap(), decided);
    assert_eq!(store.last_event_seq("t").await.unwrap(), 0);
    assert_eq!(open("t", 0).await, ["ap2"]);

    // Two decisions racing in one batch: the first wins, the second conflicts.
    let results = store
        .apply_batch(&[
            unit(
                "t",
                "alice",
                vec![decide("ap2", ApprovalStatus::Denied, 3_100)],
            ),
            unit(
                "t",
                "alice",
                vec![decide("ap2", ApprovalStatus::Approved, 3_200)],
            ),
        ])
        .await
        .unwrap();
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(
        matches!(results[1], Err(StoreError::Conflict(_))),
        "{:?}",
        results[1]
    );
    assert_eq!(
        store.approval("ap2").await.unwrap().unwrap().status,
        ApprovalStatus::Denied
    );
    assert!(open("t", 0).await.is_empty());

    // Deciding "pending" is no decision; unknown ids and other threads'
    // approvals are not found.
    let pending = apply_one(
        &store,
        unit(
            "u",
            "alice",
            vec![decide("ap3", ApprovalStatus::Pending, 2_500)],
        ),
    )
    .await;
    assert!(
        matches!(pending, Err(StoreError::Conflict(_))),
        "{pending:?}"
    );
    let unknown = apply_one(
        &store,
        unit(
            "u",
            "alice",
            vec![decide("nope", ApprovalStatus::Approved, 2_500)],
        ),
    )
    .await;
    assert!(
        matches!(unknown, Err(StoreError::NotFound(_))),
        "{unknown:?}"
    );
    let elsewhere = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![decide("ap3", ApprovalStatus::Approved, 2_500)],
        ),
    )
    .await;
    assert!(
        matches!(elsewhere, Err(StoreError::NotFound(_))),
        "{elsewhere:?}"
    );

    // Approving (or denying) at or after the deadline fails, even before the
    // sweeper marked it; expiring then works, once.
    for late in [ApprovalStatus::Approved, ApprovalStatus::Denied] {
        let refused = apply_one(
            &store,
            unit("u", "alice", vec![decide("ap3", late, a3.expires_at_ms)]),
        )
        .await;
        assert!(
            matches!(refused, Err(StoreError::Conflict(_))),
            "{refused:?}"
        );
    }
    assert_eq!(
        store.approval("ap3").await.unwrap().unwrap().status,
        ApprovalStatus::Pending
    );
    apply_one(
        &store,
        unit(
            "u",
            "alice",
            vec![WriteOp::DecideApproval {
                id: "ap3".into(),
                status: ApprovalStatus::Expired,
                decided_by: None,
                reason: None,
                decided_at_ms: a3.expires_at_ms + 5,
            }],
        ),
    )
    .await
    .unwrap();
    let expired = store.approval("ap3").await.unwrap().unwrap();
    assert_eq!(expired.status, ApprovalStatus::Expired);
    assert_eq!(expired.decided_by, None);
    assert_eq!(expired.decided_at_ms, Some(a3.expires_at_ms + 5));
    let approve_after_expiry = apply_one(
        &store,
        unit(
            "u",
            "alice",
            vec![decide("ap3", ApprovalStatus::Approved, 2_100)],
        ),
    )
    .await;
    assert!(
        matches!(approve_after_expiry, Err(StoreError::Conflict(_))),
        "{approve_after_expiry:?}"
    );

    assert_eq!(
        ids(store
            .approvals(
                Some("alice"),
                None,
                Some(ApprovalStatus::Pending),
                0,
                None,
                10
            )
            .await
            .unwrap()),
        Vec::<String>::new()
    );
    assert_eq!(
        ids(store
            .approvals(
                Some("alice"),
                None,
                Some(ApprovalStatus::Approved),
                0,
                None,
                10
            )
            .await
            .unwrap()),
        ["ap1"]
    );
    assert_eq!(
        ids(store
            .approvals(
                Some("alice"),
                None,
                Some(ApprovalStatus::Denied),
                0,
                None,
                10
            )
            .await
            .unwrap()),
        ["ap2"]
    );
    assert_eq!(
        ids(store
            .approvals(
                Some("alice"),
                None,
                Some(ApprovalStatus::Expired),
                0,
                None,
                10
            )
            .await
            .unwrap()),
        ["ap3"]
    );
    assert_eq!(
        ids(store
            .approvals(
                Some("bob"),
                None,
                Some(ApprovalStatus::Pending),
                0,
                None,
                10
            )
            .await
            .unwrap()),
        ["bp1"]
    );

    // Listed at a moment: a pending approval at or past its deadline can no
    // longer be decided, so it is listed as expired, with the recorded
    // expiries, in one order, before the sweeper records it.
    let a4 = approval("ap4", "u", "alice", "c4", 2_500); // due at 62_500
    let a5 = approval("ap5", "u", "alice", "c5", 1_500); // due at 61_500
    for record in [&a4, &a5] {
        apply_one(
            &store,
            unit(
                "u",
                "alice",
                vec![
                    WriteOp::InsertToolCall(pending_call(&record.tool_call_id)),
                    WriteOp::InsertApproval(record.clone()),
                ],
            ),
        )
        .await
        .unwrap();
    }
    let listed = |status: ApprovalStatus, now: i64, before: Option<(i64, &'static str)>, limit| {
        let store = store.clone();
        async move {
            ids(store
                .approvals(Some("alice"), None, Some(status), now, before, limit)
                .await
                .unwrap())
        }
    };
    use ApprovalStatus::{Expired, Pending};
    assert_eq!(listed(Pending, 61_499, None, 10).await, ["ap4", "ap5"]);
    assert_eq!(listed(Expired, 61_499, None, 10).await, ["ap3"]);
    assert_eq!(listed(Pending, 61_500, None, 10).await, ["ap4"]);
    assert_eq!(listed(Expired, 61_500, None, 10).await, ["ap3", "ap5"]);
    assert!(listed(Pending, 62_500, None, 10).await.is_empty());
    assert_eq!(
        listed(Expired, 62_500, None, 10).await,
        ["ap4", "ap3", "ap5"]
    );
    // Paged across both kinds.
    assert_eq!(listed(Expired, 62_500, None, 2).await, ["ap4", "ap3"]);
    assert_eq!(
        listed(Expired, 62_500, Some((2_000, "ap3")), 2).await,
        ["ap5"]
    );
    // Every status but the filter's own is untouched by the moment.
    assert_eq!(
        listed(ApprovalStatus::Approved, 62_500, None, 10).await,
        ["ap1"]
    );
    let every = store
        .approvals(Some("alice"), None, None, 62_500, None, 10)
        .await
        .unwrap();
    let at = |id: &str| {
        every
            .iter()
            .find(|a| a.id == id)
            .map(|a| (a.status, a.status_at(62_500), a.status_at(61_000)))
    };
    // The record keeps what is stored; `status_at` tells the moment's.
    assert_eq!(at("ap4"), Some((Pending, Expired, Pending)));
    assert_eq!(at("ap3"), Some((Expired, Expired, Expired)));
    assert_eq!(
        at("ap1").map(|(stored, _, _)| stored),
        Some(ApprovalStatus::Approved)
    );
}

/// A backlog of approvals past their deadline (many asked at once, or a
/// process down when they expired) is cleared by one sweep, not a batch
/// per tick: each ends expired, its call failed with `APPROVAL_EXPIRED`.
async fn a_backlog_of_expired_approvals_is_cleared_in_one_sweep(store: DynStore) {
    let spool = tempfile::tempdir().unwrap();
    let writer = Writer::spawn(store.clone(), WriterConfig::default(), Arc::new(|_| {}));
    let engine = Engine::new(
        Arc::new(toolgate::tools::Registry::new()),
        store.clone(),
        writer,
        EngineConfig {
            tool_timeout: Duration::from_secs(10),
            announce_after: Duration::ZERO,
            approvals: ApprovalSettings {
                enabled: true,
                ttl: Duration::from_secs(60),
                owners_approve: true,
            },
            permissions: Default::default(),
            result_spool: toolgate::engine::spool::Spool::open(spool.path()).unwrap(),
            instance: INSTANCE.into(),
            shared_database: false,
        },
    );
    let backlog = 2 * EXPIRY_BATCH as usize + 50;
    for i in 0..backlog {
        let thread = format!("t{}", i % 7);
        let record = approval(
            &format!("ap{i}"),
            &thread,
            "alice",
            &format!("c{i}"),
            1_000 + i as i64,
        );
        apply_one(
            &store,
            unit(
                &thread,
                "alice",
                vec![
                    WriteOp::InsertToolCall(pending_call(&record.tool_call_id)),
                    WriteOp::InsertApproval(record),
                ],
            ),
        )
        .await
        .unwrap();
    }
    // One not yet due stays pending.
    let mut later = approval("later", "t0", "alice", "c_later", 1_000);
    later.expires_at_ms = i64::MAX;
    apply_one(
        &store,
        unit(
            "t0",
            "alice",
            vec![
                WriteOp::InsertToolCall(pending_call("c_later")),
                WriteOp::InsertApproval(later),
            ],
        ),
    )
    .await
    .unwrap();

    assert_eq!(engine.expire_due().await.unwrap(), backlog);
    assert!(
        store
            .expired_approvals(i64::MAX - 1, 10)
            .await
            .unwrap()
            .is_empty()
    );
    // Recorded, not only listed so (as of moment 0, only stored expiries count).
    let recorded = store
        .approvals(
            Some("alice"),
            None,
            Some(ApprovalStatus::Expired),
            0,
            None,
            1_000,
        )
        .await
        .unwrap();
    assert_eq!(recorded.len(), backlog);
    for i in [0, EXPIRY_BATCH as usize, backlog - 1] {
        let call = store
            .tool_call(&format!("t{}", i % 7), &format!("c{i}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(call.status, CallStatus::Failure, "c{i}");
        let output = call.output.expect("a result");
        assert_eq!(output["error"]["code"], "APPROVAL_EXPIRED", "c{i}");
    }
    assert_eq!(
        store.approval("later").await.unwrap().unwrap().status,
        ApprovalStatus::Pending
    );
    // Nothing is left for the next sweep.
    assert_eq!(engine.expire_due().await.unwrap(), 0);
}

async fn expired_approvals_are_listed_across_owners(store: DynStore) {
    // Deadlines: a 61_000, b 62_000, c 63_000 (decided), d 64_000, e 70_000.
    let mut records = Vec::new();
    for (id, thread, owner, created) in [
        ("d", "t1", "alice", 4_000),
        ("b", "t2", "bob", 2_000),
        ("a", "t1", "alice", 1_000),
        ("c", "t3", "carol", 3_000),
        ("e", "t2", "bob", 10_000),
    ] {
        let record = approval(id, thread, owner, &format!("call_{id}"), created);
        apply_one(
            &store,
            unit(
                thread,
                owner,
                vec![
                    WriteOp::InsertToolCall(pending_call(&record.tool_call_id)),
                    WriteOp::InsertApproval(record.clone()),
                ],
            ),
        )
        .await
        .unwrap();
        records.push(record);
    }
    apply_one(
        &store,
        unit(
            "t3",
            "carol",
            vec![decide("c", ApprovalStatus::Denied, 3_500)],
        ),
    )
    .await
    .unwrap();

    let ids = |records: Vec<ApprovalRecord>| -> Vec<String> {
        records.into_iter().map(|r| r.id).collect()
    };
    assert!(
        store
            .expired_approvals(60_999, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        ids(store.expired_approvals(61_000, 10).await.unwrap()),
        ["a"]
    );
    assert_eq!(
        ids(store.expired_approvals(65_000, 10).await.unwrap()),
        ["a", "b", "d"]
    );
    assert_eq!(
        ids(store.expired_approvals(65_000, 2).await.unwrap()),
        ["a", "b"]
    );
    assert!(store.expired_approvals(65_000, 0).await.unwrap().is_empty());
    let all = store.expired_approvals(i64::MAX, 10).await.unwrap();
    assert_eq!(ids(all.clone()), ["a", "b", "d", "e"]);
    // Full records, with what the sweeper needs to write in their thread.
    assert_eq!(all[1], records[1]);

    // The sweeper expires one; it leaves the list.
    apply_one(
        &store,
        unit(
            "t1",
            "alice",
            vec![decide("a", ApprovalStatus::Expired, 65_000)],
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        ids(store.expired_approvals(65_000, 10).await.unwrap()),
        ["b", "d"]
    );
}

async fn audit_entries_commit_or_roll_back_with_their_unit(store: DynStore) {
    let mut executed = audit_entry("alice", Some("t"), "call.executed", 1_000);
    executed.tool_call_id = Some("c1".into());
    executed.tool_name = Some("bash".into());
    executed.operation = Some("shell.exec".into());
    executed.verdict = Some("allow".into());
    executed.rule = Some("allow: bash(ls *)".into());
    executed.outcome = Some("success".into());
    executed.duration_ms = Some(12);
    executed.detail = tricky_json().into();
    let receipt = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::InsertToolCall(new_call("c1")),
                WriteOp::AppendAudit(executed.clone()),
                events(1),
                WriteOp::AppendAudit(audit_entry("alice", None, "note", 1_001)),
            ],
        ),
    )
    .await
    .unwrap();
    assert_eq!(receipt.audit_ids.len(), 2);
    assert!(receipt.audit_ids[0] < receipt.audit_ids[1]);
    let stored = store.audit(&filter("alice")).await.unwrap();
    assert_eq!(
        audit_ids(&stored),
        [receipt.audit_ids[1], receipt.audit_ids[0]]
    );
    assert_eq!(
        stored[1],
        AuditEntry {
            id: receipt.audit_ids[0],
            at_ms: executed.at_ms,
            owner: executed.owner.clone(),
            thread_id: executed.thread_id.clone(),
            tool_call_id: executed.tool_call_id.clone(),
            tool_name: executed.tool_name.clone(),
            action: executed.action.clone(),
            operation: executed.operation.clone(),
            verdict: executed.verdict.clone(),
            rule: executed.rule.clone(),
            approval_id: None,
            outcome: executed.outcome.clone(),
            duration_ms: executed.duration_ms,
            detail: value_of(&executed.detail),
        }
    );
    assert_eq!(stored[0].thread_id, None);

    // A unit that fails after its audit entry leaves no entry behind, in a
    // batch whose other units (and their entries) commit.
    let results = store
        .apply_batch(&[
            unit(
                "t",
                "alice",
                vec![
                    WriteOp::AppendAudit(audit_entry("alice", Some("t"), "call.executed", 2_000)),
                    WriteOp::InsertToolCall(new_call("c1")), // duplicate
                ],
            ),
            unit(
                "u",
                "alice",
                vec![WriteOp::AppendAudit(audit_entry(
                    "alice",
                    Some("u"),
                    "call.refused",
                    2_001,
                ))],
            ),
            unit(
                "t",
                "bob", // not bob's thread
                vec![WriteOp::AppendAudit(audit_entry(
                    "bob",
                    Some("t"),
                    "x",
                    2_002,
                ))],
            ),
        ])
        .await
        .unwrap();
    assert!(
        matches!(results[0], Err(StoreError::Conflict(_))),
        "{:?}",
        results[0]
    );
    assert_eq!(results[1].as_ref().unwrap().audit_ids.len(), 1);
    assert!(
        matches!(results[2], Err(StoreError::NotOwner)),
        "{:?}",
        results[2]
    );
    let after = store.audit(&filter("alice")).await.unwrap();
    assert_eq!(after.len(), 3);
    assert_eq!(after[0].action, "call.refused");
    assert!(after.iter().all(|e| e.at_ms != 2_000));
    assert!(store.audit(&filter("bob")).await.unwrap().is_empty());

    // An entry must name its unit's owner, and its thread if any.
    for stray in [
        audit_entry("mallory", Some("t"), "x", 3_000),
        audit_entry("alice", Some("elsewhere"), "x", 3_000),
    ] {
        let refused = apply_one(
            &store,
            unit("t", "alice", vec![WriteOp::AppendAudit(stray)]),
        )
        .await;
        assert!(
            matches!(refused, Err(StoreError::Conflict(_))),
            "{refused:?}"
        );
    }
    assert_eq!(store.audit(&filter("alice")).await.unwrap().len(), 3);
    assert!(store.audit(&filter("mallory")).await.unwrap().is_empty());

    // Thread-less actions are appended on their own.
    let id = store
        .append_audit(&audit_entry("alice", None, "rules.updated", 4_000))
        .await
        .unwrap();
    let newest = store.audit(&filter("alice")).await.unwrap().remove(0);
    assert_eq!((newest.id, newest.action.as_str()), (id, "rules.updated"));
    assert!(id > after[0].id);
}

async fn audit_filters_and_keyset_pages(store: DynStore) {
    // 30 entries for alice over two threads, three tools, three actions;
    // a few for bob.
    for i in 0..30i64 {
        let thread = if i % 2 == 0 { "t" } else { "u" };
        let mut entry = audit_entry(
            "alice",
            Some(thread),
            ["call.executed", "call.refused", "approval.requested"][(i % 3) as usize],
            1_000 + i,
        );
        entry.tool_name = Some(["bash", "read_file", "project_cli"][(i % 3) as usize].to_owned());
        entry.tool_call_id = Some(format!("c{}", i / 5));
        entry.detail = json!({"i": i}).into();
        apply_one(
            &store,
            unit(thread, "alice", vec![WriteOp::AppendAudit(entry)]),
        )
        .await
        .unwrap();
    }
    for i in 0..3i64 {
        let mut entry = audit_entry("bob", Some("v"), "call.executed", 1_000 + i);
        entry.tool_name = Some("bash".into());
        apply_one(&store, unit("v", "bob", vec![WriteOp::AppendAudit(entry)]))
            .await
            .unwrap();
    }
    let is = |entries: &[AuditEntry]| -> Vec<i64> {
        entries
            .iter()
            .map(|e| e.detail["i"].as_i64().unwrap())
            .collect()
    };

    let all = store.audit(&filter("alice")).await.unwrap();
    assert_eq!(is(&all), (0..30).rev().collect::<Vec<_>>());
    assert!(all.windows(2).all(|w| w[0].id > w[1].id));
    assert_eq!(store.audit(&filter("bob")).await.unwrap().len(), 3);

    let with = |f: AuditFilter| {
        let store = store.clone();
        async move { store.audit(&f).await.unwrap() }
    };
    let by_thread = with(AuditFilter {
        thread_id: Some("u".into()),
        ..filter("alice")
    })
    .await;
    assert_eq!(
        is(&by_thread),
        (0..30).rev().filter(|i| i % 2 == 1).collect::<Vec<_>>()
    );
    let by_tool = with(AuditFilter {
        tool_name: Some("read_file".into()),
        ..filter("alice")
    })
    .await;
    assert_eq!(
        is(&by_tool),
        (0..30).rev().filter(|i| i % 3 == 1).collect::<Vec<_>>()
    );
    let by_action = with(AuditFilter {
        action: Some("approval.requested".into()),
        ..filter("alice")
    })
    .await;
    assert_eq!(
        is(&by_action),
        (0..30).rev().filter(|i| i % 3 == 2).collect::<Vec<_>>()
    );
    let by_call = with(AuditFilter {
        tool_call_id: Some("c2".into()),
        ..filter("alice")
    })
    .await;
    assert_eq!(is(&by_call), [14, 13, 12, 11, 10]);
    let window = with(AuditFilter {
        since_ms: Some(1_010),
        until_ms: Some(1_014),
        ..filter("alice")
    })
    .await;
    assert_eq!(is(&window), [13, 12, 11, 10]);
    let combined = with(AuditFilter {
        thread_id: Some("t".into()),
        tool_name: Some("bash".into()),
        since_ms: Some(1_003),
        ..filter("alice")
    })
    .await;
    assert_eq!(is(&combined), [24, 18, 12, 6]);
    // Another owner's filter never sees alice's entries, whatever else matches.
    let foreign = with(AuditFilter {
        thread_id: Some("t".into()),
        ..filter("bob")
    })
    .await;
    assert!(foreign.is_empty());
    assert!(
        with(AuditFilter {
            limit: 0,
            ..filter("alice")
        })
        .await
        .is_empty()
    );

    // Keyset pages of 7, newest first, with and without a filter.
    let mut pages = Vec::new();
    let mut before = None;
    loop {
        let page = with(AuditFilter {
            before_id: before,
            limit: 7,
            ..filter("alice")
        })
        .await;
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 7);
        before = Some(page.last().unwrap().id);
        pages.push(is(&page));
    }
    assert_eq!(pages.len(), 5);
    assert_eq!(pages[0], [29, 28, 27, 26, 25, 24, 23]);
    assert_eq!(pages.concat(), (0..30).rev().collect::<Vec<_>>());
    let first = with(AuditFilter {
        thread_id: Some("t".into()),
        limit: 4,
        ..filter("alice")
    })
    .await;
    assert_eq!(is(&first), [28, 26, 24, 22]);
    let second = with(AuditFilter {
        thread_id: Some("t".into()),
        limit: 4,
        before_id: Some(first.last().unwrap().id),
        ..filter("alice")
    })
    .await;
    assert_eq!(is(&second), [20, 18, 16, 14]);
}

async fn the_audit_log_is_append_only(target: Target) {
    let store = target.open().await;
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::AppendAudit(audit_entry(
                "alice",
                Some("t"),
                "call.executed",
                1,
            ))],
        ),
    )
    .await
    .unwrap();
    for sql in [
        "UPDATE audit_log SET outcome = 'forged'",
        "UPDATE audit_log SET owner = 'mallory' WHERE action = 'call.executed'",
        "DELETE FROM audit_log",
        "DELETE FROM audit_log WHERE owner = 'alice'",
    ] {
        let refused = target.try_execute(sql).await;
        let message = match &refused {
            Err(sqlx::Error::Database(db)) => db.message().to_owned(),
            other => panic!("{sql}: {other:?}"),
        };
        assert!(
            message.contains("audit log is append-only"),
            "{sql}: {message}"
        );
    }
    if let Target::Postgres(_) = target {
        let refused = target.try_execute("TRUNCATE audit_log").await;
        assert!(refused.is_err(), "TRUNCATE: {refused:?}");
    }
    let entries = store.audit(&filter("alice")).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].outcome, None);
    // Inserting is what the log is for.
    target
        .execute(
            "INSERT INTO audit_log (at_ms, owner, action, detail) \
             VALUES (2, 'alice', 'manual', '{}')",
        )
        .await;
    assert_eq!(store.audit(&filter("alice")).await.unwrap().len(), 2);
}

/// An assistant message `id` declaring `calls` (id, tool, arguments).
fn declaring(id: &str, calls: &[(&str, &str, Value)]) -> NewMessage {
    let listed: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "name": name, "arguments": args}))
        .collect();
    NewMessage {
        metadata: json!({ "tool_calls": listed }).into(),
        declares: calls
            .iter()
            .map(|(id, name, args)| DeclaredCall {
                id: (*id).to_owned(),
                tool_name: (*name).to_owned(),
                args: args.into(),
            })
            .collect(),
        ..message(id, Role::Assistant, "")
    }
}

fn echo_call(id: &str, args: Value) -> NewToolCall {
    NewToolCall {
        tool_name: "echo".into(),
        args: args.into(),
        ..new_call(id)
    }
}

fn is_redeclared<T: std::fmt::Debug>(result: &StoreResult<T>) -> bool {
    matches!(result, Err(StoreError::Redeclared(_)))
}

/// A call's record keeps the thread's last message seq when it commits,
/// which is where its announcement sits among the messages (a snapshot
/// places the call there), and the parent it named: on the batch path,
/// unit by unit, and when recorded and finished in one unit.
async fn a_call_keeps_where_it_was_announced(store: DynStore) {
    let alice = |ops| unit("t", "alice", ops);
    let say = |id: &str| alice(vec![WriteOp::InsertMessage(message(id, Role::User, id))]);
    let recorded_and_finished = |id: &str| {
        let mut ops = vec![WriteOp::InsertToolCall(new_call(id))];
        ops.extend(finishing(id, CallStatus::Success));
        alice(ops)
    };
    // Before any message, recorded and finished in one unit: after 0.
    apply_one(&store, recorded_and_finished("c0"))
        .await
        .unwrap();
    // In one batch, after the message before it (seq 2); its result is 3.
    apply_all(&store, &[say("m2"), recorded_and_finished("c1")]).await;
    // Unit by unit (a unit of the batch fails), under a parent: after 4.
    let under = NewToolCall {
        parent_message_id: Some("m4".into()),
        ..new_call("c2")
    };
    let assistant = alice(vec![WriteOp::InsertMessage(message(
        "m4",
        Role::Assistant,
        "m4",
    ))]);
    let results = store
        .apply_batch(&[
            assistant,
            say("m2"),
            alice(vec![WriteOp::InsertToolCall(under)]),
        ])
        .await
        .unwrap();
    assert!(
        matches!(results[1], Err(StoreError::Conflict(_))),
        "{results:?}"
    );
    assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
    apply_one(&store, say("m5")).await.unwrap();
    // Running or finished, in the order recorded.
    record_running(&store, "c3").await;
    apply_one(&store, alice(finishing("c2", CallStatus::Success)))
        .await
        .unwrap();

    let snapshot = store.snapshot("t", 0).await.unwrap();
    let placed = |id: &str, parent: Option<&str>, after: i64| CallPlacement {
        id: id.into(),
        parent_message_id: parent.map(str::to_owned),
        after_message_seq: Some(after),
    };
    assert_eq!(
        snapshot.placements,
        [
            placed("c0", None, 0),
            placed("c1", None, 2),
            placed("c2", Some("m4"), 4),
            placed("c3", None, 5),
        ]
    );
    // The messages those seqs name (a result by its call).
    let at: Vec<(i64, &str)> = snapshot
        .messages
        .iter()
        .map(|m| (m.seq, m.tool_call_id.as_deref().unwrap_or(&m.id)))
        .collect();
    assert_eq!(
        at,
        [
            (1, "c0"),
            (2, "m2"),
            (3, "c1"),
            (4, "m4"),
            (5, "m5"),
            (6, "c2")
        ]
    );
}

/// A call posted under a parent is that message's, as the store keeps
/// it: a message of another role cannot take the parent's id, a call
/// cannot name a message of another role as its parent (one recorded
/// since the request was checked), and no other assistant message can
/// declare the call first; on the batch path and unit by unit.
async fn a_call_posted_under_a_parent_is_that_messages(store: DynStore) {
    let alice = |ops| unit("t", "alice", ops);
    let say = |id: &str, role: Role| alice(vec![WriteOp::InsertMessage(message(id, role, id))]);
    let under = |id: &str, parent: &str| {
        alice(vec![WriteOp::InsertToolCall(NewToolCall {
            parent_message_id: Some(parent.into()),
            ..echo_call(id, json!({"text": id}))
        })])
    };
    let conflict = |result: &StoreResult<UnitReceipt>, says: &str| match result {
        Err(StoreError::Conflict(what)) => assert!(what.contains(says), "{what}"),
        other => panic!("{other:?}"),
    };
    apply_one(&store, under("c1", "p")).await.unwrap();
    let roles = [Role::User, Role::System, Role::Developer];
    for (i, role) in roles.into_iter().enumerate() {
        let refused = apply_one(&store, say("p", role)).await;
        conflict(&refused, "is the parent_message_id of tool call \"c1\"");
        // In a batch: that unit alone.
        let results = store
            .apply_batch(&[say(&format!("ok{i}"), Role::User), say("p", role)])
            .await
            .unwrap();
        results[0].as_ref().unwrap();
        conflict(&results[1], "is the parent_message_id of tool call \"c1\"");
    }
    apply_one(&store, say("p", Role::Assistant)).await.unwrap();

    apply_one(&store, say("q", Role::User)).await.unwrap();
    // Refused, not a conflict: looking again finds nothing that answers.
    let refused = |result: &StoreResult<UnitReceipt>| match result {
        Err(StoreError::Refused { field, detail }) => {
            assert_eq!(*field, "parent_message_id");
            assert!(
                detail.contains("which this thread recorded as a user message"),
                "{detail}"
            );
        }
        other => panic!("{other:?}"),
    };
    refused(&apply_one(&store, under("c2", "q")).await);
    let results = store
        .apply_batch(&[say("r", Role::User), under("c3", "q")])
        .await
        .unwrap();
    results[0].as_ref().unwrap();
    refused(&results[1]);
    assert!(store.tool_call("t", "c2").await.unwrap().is_none());
    assert!(store.tool_call("t", "c3").await.unwrap().is_none());

    apply_one(&store, under("c4", "pz")).await.unwrap();
    let declare = |id: &str| {
        alice(vec![WriteOp::InsertMessage(declaring(
            id,
            &[("c4", "echo", json!({"text": "c4"}))],
        ))])
    };
    conflict(
        &apply_one(&store, declare("py")).await,
        "only message \"pz\" can declare it, not \"py\"",
    );
    apply_one(&store, declare("pz")).await.unwrap();
    // Declared again by another message: the call is pz's alone.
    conflict(
        &apply_one(&store, declare("pa")).await,
        "is already declared by message \"pz\"",
    );
    // And for a call declared first, never posted.
    let declare_new = |id: &str| {
        alice(vec![WriteOp::InsertMessage(declaring(
            id,
            &[("c5", "echo", json!({"text": "c5"}))],
        ))])
    };
    apply_one(&store, declare_new("d1")).await.unwrap();
    conflict(
        &apply_one(&store, declare_new("d2")).await,
        "tool call \"c5\" is already declared by message \"d1\"",
    );
    let ids = message_ids(&store, "t").await;
    assert_eq!(ids, ["ok0", "ok1", "ok2", "p", "q", "r", "pz", "d1"]);
}

async fn a_call_id_means_one_call_in_declarations_and_records(store: DynStore) {
    let alice = |ops| unit("t", "alice", ops);
    let declare = |id: &str, calls: &[(&str, &str, Value)]| {
        alice(vec![WriteOp::InsertMessage(declaring(id, calls))])
    };
    let declared_call = |id: &str, tool: &str, args: Value, declared_by: Option<&str>| {
        alice(vec![WriteOp::InsertToolCall(NewToolCall {
            tool_name: tool.into(),
            declared_by: declared_by.map(str::to_owned),
            ..echo_call(id, args)
        })])
    };
    let call = |id: &str, tool: &str, args: Value| declared_call(id, tool, args, None);
    apply_one(
        &store,
        declare(
            "m1",
            &[("c1", "echo", json!({"a": 1})), ("c2", "wait", json!({}))],
        ),
    )
    .await
    .unwrap();

    // Another message giving c1 other arguments, or another tool, is
    // refused, and nothing of its unit is kept.
    for calls in [
        [("c9", "echo", json!({})), ("c1", "echo", json!({"a": 2}))],
        [("c9", "echo", json!({})), ("c1", "wait", json!({"a": 1}))],
    ] {
        let refused = apply_one(&store, declare("m2", &calls)).await;
        assert!(is_redeclared(&refused), "{refused:?}");
        assert!(format!("{:?}", refused).contains("already declared"));
    }
    assert_eq!(store.all_messages("t").await.unwrap().len(), 1);
    // The same call declared again by another message is refused too: a
    // call is the one message's that made it.
    let refused = apply_one(
        &store,
        declare(
            "m2",
            &[("c9", "echo", json!({})), ("c1", "echo", json!({"a": 1}))],
        ),
    )
    .await;
    assert!(
        matches!(&refused, Err(StoreError::Conflict(what))
            if what.starts_with("tool call \"c1\" is already declared by message \"m1\"")),
        "{refused:?}"
    );
    assert_eq!(store.all_messages("t").await.unwrap().len(), 1);
    // c9, refused with the units above, is free.
    apply_one(&store, declare("m2", &[("c9", "echo", json!({}))]))
        .await
        .unwrap();

    // A call posted under a declared id must be the declared call.
    for refused in [
        call("c1", "echo", json!({"a": 2})),
        call("c1", "wait", json!({"a": 1})),
    ] {
        let refused = apply_one(&store, refused).await;
        assert!(is_redeclared(&refused), "{refused:?}");
    }
    assert!(store.tool_call("t", "c1").await.unwrap().is_none());
    // And it is recorded only as the call its message declares: posted as
    // declared by no message (looked up before the message was recorded),
    // or by another, it is a conflict, and its poster looks again.
    for (declared_by, conflict) in [
        (None, "tool call \"c1\" is declared by message \"m1\""),
        (Some("m2"), "tool call \"c1\" is declared by message \"m1\""),
    ] {
        let refused = apply_one(
            &store,
            declared_call("c1", "echo", json!({"a": 1}), declared_by),
        )
        .await;
        assert!(
            matches!(&refused, Err(StoreError::Conflict(what)) if what.starts_with(conflict)),
            "{refused:?}"
        );
    }
    let refused = apply_one(&store, declared_call("c10", "echo", json!({}), Some("m1"))).await;
    assert!(
        matches!(&refused, Err(StoreError::Conflict(what))
            if what == "tool call \"c10\" is not declared by message \"m1\""),
        "{refused:?}"
    );
    assert!(store.tool_call("t", "c1").await.unwrap().is_none());
    apply_one(
        &store,
        declared_call("c1", "echo", json!({"a": 1}), Some("m1")),
    )
    .await
    .unwrap();
    // Another thread's ids are its own.
    apply_one(
        &store,
        unit(
            "t2",
            "alice",
            vec![WriteOp::InsertToolCall(echo_call("c2", json!({"x": 1})))],
        ),
    )
    .await
    .unwrap();

    // A call recorded first: a declaration must match the record.
    apply_one(&store, call("c3", "echo", json!({"b": [1, 2]})))
        .await
        .unwrap();
    let refused = apply_one(
        &store,
        declare("m3", &[("c3", "echo", json!({"b": [2, 1]}))]),
    )
    .await;
    assert!(is_redeclared(&refused), "{refused:?}");
    assert!(format!("{:?}", refused).contains("already recorded"));
    apply_one(
        &store,
        declare("m3", &[("c3", "echo", json!({"b": [1, 2]}))]),
    )
    .await
    .unwrap();

    // In one batch, each unit is checked against those before it: the
    // batch's other units commit.
    let results = store
        .apply_batch(&[
            call("c4", "echo", json!({"z": 1})),
            declare("m4", &[("c4", "echo", json!({"z": 2}))]),
            declare("m5", &[("c5", "echo", json!({"q": 1}))]),
            call("c5", "echo", json!({"q": 2})),
            call("c6", "echo", json!({})),
            declared_call("c7", "echo", json!({}), Some("m5")),
            declared_call("c5", "echo", json!({"q": 1}), None),
        ])
        .await
        .unwrap();
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(is_redeclared(&results[1]), "{:?}", results[1]);
    assert!(results[2].is_ok(), "{:?}", results[2]);
    assert!(is_redeclared(&results[3]), "{:?}", results[3]);
    assert!(results[4].is_ok(), "{:?}", results[4]);
    assert!(
        matches!(&results[5], Err(StoreError::Conflict(what))
            if what == "tool call \"c7\" is not declared by message \"m5\""),
        "{:?}",
        results[5]
    );
    assert!(
        matches!(&results[6], Err(StoreError::Conflict(what)) if what.contains("\"m5\"")),
        "{:?}",
        results[6]
    );
    assert!(store.tool_call("t", "c5").await.unwrap().is_none());
    assert!(store.tool_call("t", "c7").await.unwrap().is_none());
    // A batch whose every unit goes in: declared and undeclared calls,
    // each as looked up.
    let results = store
        .apply_batch(&[
            declared_call("c2", "wait", json!({}), Some("m1")),
            declared_call("c5", "echo", json!({"q": 1}), Some("m5")),
            call("c8", "echo", json!({})),
        ])
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    for id in ["c2", "c5", "c8"] {
        assert!(store.tool_call("t", id).await.unwrap().is_some(), "{id}");
    }
    let ids = message_ids(&store, "t").await;
    assert_eq!(ids, ["m1", "m2", "m3", "m5"]);
}

async fn run_calls_keep_the_recorded_order(store: DynStore) {
    // Same millisecond everywhere; ids not in alphabetical order.
    let call = |id: &str, run: &str| NewToolCall {
        run_id: run.to_owned(),
        ..new_call(id)
    };
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::InsertToolCall(call("zeta", "r1")),
                WriteOp::InsertToolCall(call("alpha", "r1")),
                WriteOp::InsertToolCall(call("other", "r2")),
            ],
        ),
    )
    .await
    .unwrap();
    // A failing unit reserves ordinals and gives them back.
    let failed = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::InsertToolCall(call("ghost", "r1")),
                WriteOp::InsertToolCall(call("zeta", "r1")),
            ],
        ),
    )
    .await;
    assert!(matches!(failed, Err(StoreError::Conflict(_))), "{failed:?}");
    let results = store
        .apply_batch(&[
            unit(
                "t",
                "alice",
                vec![WriteOp::InsertToolCall(call("mid", "r1"))],
            ),
            unit(
                "u",
                "alice",
                vec![WriteOp::InsertToolCall(call("beta", "r1"))],
            ),
            unit(
                "t",
                "alice",
                vec![WriteOp::InsertToolCall(pending_call_in("aaa", "r1"))],
            ),
        ])
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    apply_one(
        &store,
        unit("t", "alice", finishing("alpha", CallStatus::Success)),
    )
    .await
    .unwrap();
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::InsertToolCall(call("last", "r1"))],
        ),
    )
    .await
    .unwrap();

    let run = store.run_calls("t", "r1").await.unwrap();
    assert_eq!(call_ids(&run), ["zeta", "alpha", "mid", "aaa", "last"]);
    assert_eq!(run[1].status, CallStatus::Success);
    assert_eq!(run[3].status, CallStatus::PendingApproval);
    assert_eq!(
        call_ids(&store.run_calls("t", "r2").await.unwrap()),
        ["other"]
    );
    assert_eq!(
        call_ids(&store.run_calls("u", "r1").await.unwrap()),
        ["beta"]
    );
    assert!(store.run_calls("t", "r3").await.unwrap().is_empty());
    assert!(store.run_calls("nowhere", "r1").await.unwrap().is_empty());
}

fn pending_call_in(id: &str, run: &str) -> NewToolCall {
    NewToolCall {
        run_id: run.to_owned(),
        ..pending_call(id)
    }
}

async fn undo_links_are_recorded_once(store: DynStore) {
    record_running(&store, "c1").await;
    apply_one(
        &store,
        unit("t", "alice", finishing("c1", CallStatus::Success)),
    )
    .await
    .unwrap();
    let undo_call = NewToolCall {
        undo_of: Some("c1".into()),
        ..new_call("undo_c1")
    };
    apply_one(
        &store,
        unit("t", "alice", vec![WriteOp::InsertToolCall(undo_call)]),
    )
    .await
    .unwrap();
    let mut end = finished("undo_c1", CallStatus::Success);
    end.undo = None;
    let mut ops = finishing_end(end);
    ops.extend([
        WriteOp::MarkUndone {
            id: "c1".into(),
            undone_by: "undo_c1".into(),
        },
        WriteOp::AppendAudit(audit_entry("alice", Some("t"), "call.undone", 5)),
    ]);
    apply_one(&store, unit("t", "alice", ops)).await.unwrap();
    let undone = store.tool_call("t", "c1").await.unwrap().unwrap();
    assert_eq!(undone.undone_by.as_deref(), Some("undo_c1"));
    assert_eq!(undone.undo_of, None);
    assert_eq!(undone.status, CallStatus::Success);
    let undoing = store.tool_call("t", "undo_c1").await.unwrap().unwrap();
    assert_eq!(undoing.undo_of.as_deref(), Some("c1"));
    assert_eq!(undoing.undone_by, None);

    // Twice: a conflict, rolling back the rest of the unit.
    let twice = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::AppendAudit(audit_entry("alice", Some("t"), "call.undone", 6)),
                WriteOp::MarkUndone {
                    id: "c1".into(),
                    undone_by: "another".into(),
                },
            ],
        ),
    )
    .await;
    assert!(matches!(twice, Err(StoreError::Conflict(_))), "{twice:?}");
    assert_eq!(
        store
            .tool_call("t", "c1")
            .await
            .unwrap()
            .unwrap()
            .undone_by
            .as_deref(),
        Some("undo_c1")
    );
    assert_eq!(store.audit(&filter("alice")).await.unwrap().len(), 1);
    for (thread, id) in [("t", "nope"), ("u", "c1")] {
        let unknown = apply_one(
            &store,
            unit(
                thread,
                "alice",
                vec![WriteOp::MarkUndone {
                    id: id.into(),
                    undone_by: "x".into(),
                }],
            ),
        )
        .await;
        assert!(
            matches!(unknown, Err(StoreError::NotFound(_))),
            "{unknown:?}"
        );
    }
}

/// Writes outside the writer (thread claims, owner rules, audit appends)
/// run on other connections than the writer's batches; under contention
/// both wait for each other's locks rather than fail.
async fn pool_writes_and_batches_interleave(store: DynStore) {
    let writer = Writer::spawn(store.clone(), WriterConfig::default(), Arc::new(|_| {}));
    let mut tasks = Vec::new();
    for i in 0..60 {
        let writer = writer.clone();
        tasks.push(tokio::spawn(async move {
            writer
                .write(unit(
                    &format!("batch-{}", i % 6),
                    "alice",
                    vec![
                        WriteOp::InsertToolCall(new_call(&format!("call_{i}"))),
                        WriteOp::AppendEvents(vec![event("TOOL_CALL_START", i)]),
                    ],
                ))
                .await
                .map(drop)
        }));
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let owner = format!("owner-{i}");
            store.claim_thread(&format!("claimed-{i}"), &owner).await?;
            store
                .put_owner_rules(&owner, &json!({"allow": [format!("echo({i})")]}), i)
                .await?;
            store
                .append_audit(&audit_entry(&owner, None, "rules_changed", i))
                .await
                .map(drop)
        }));
    }
    for task in tasks {
        task.await.unwrap().expect("every write succeeds");
    }
    for i in 0..6 {
        assert_eq!(
            store.last_event_seq(&format!("batch-{i}")).await.unwrap(),
            10
        );
    }
    for i in [0, 59] {
        let owner = format!("owner-{i}");
        assert_eq!(
            owner_of(&store, &format!("claimed-{i}")).await,
            Some(owner.clone())
        );
        assert!(store.owner_rules(&owner).await.unwrap().is_some());
        assert_eq!(store.audit(&filter(&owner)).await.unwrap().len(), 1);
    }
}

async fn owner_rules_round_trip_and_overwrite(store: DynStore) {
    assert_eq!(store.owner_rules("alice").await.unwrap(), None);
    let rules = json!({
        "deny": ["bash(rm -rf /*)"],
        "ask": ["bash(git push *)", "write_file(/etc/**)"],
        "allow": ["read_file(**)"],
        "whitelist": null,
        "note": "ünïcode \u{1f512}"
    });
    store.put_owner_rules("alice", &rules, 1_000).await.unwrap();
    assert_eq!(
        store.owner_rules("alice").await.unwrap(),
        Some(rules.clone())
    );
    assert_eq!(store.owner_rules("bob").await.unwrap(), None);

    let replaced = json!({"allow": [], "deny": ["*"]});
    store
        .put_owner_rules("alice", &replaced, 2_000)
        .await
        .unwrap();
    assert_eq!(store.owner_rules("alice").await.unwrap(), Some(replaced));
    store
        .put_owner_rules("bob", &json!([]), 2_000)
        .await
        .unwrap();
    assert_eq!(store.owner_rules("bob").await.unwrap(), Some(json!([])));
    assert_ne!(store.owner_rules("alice").await.unwrap(), Some(json!([])));
}

async fn pending_work_survives_a_restart_untouched(target: Target) {
    let store = target.open().await;
    let record = approval("ap1", "t", "alice", "c1", 1_000);
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::InsertToolCall(pending_call("c1")),
                WriteOp::InsertApproval(record.clone()),
                WriteOp::InsertToolCall(new_call("c2")),
                WriteOp::AppendAudit(audit_entry("alice", Some("t"), "approval.requested", 1)),
            ],
        ),
    )
    .await
    .unwrap();
    let before = store.tool_call("t", "c1").await.unwrap().unwrap();
    drop(store);

    let store = target.open().await;
    store.ready().await.unwrap();
    // Start-up recovery sees only the call that was running.
    assert_eq!(
        call_ids(&store.running_tool_calls(INSTANCE).await.unwrap()),
        ["c2"]
    );
    assert_eq!(store.tool_call("t", "c1").await.unwrap(), Some(before));
    assert_eq!(store.approval("ap1").await.unwrap(), Some(record.clone()));
    assert_eq!(
        store
            .approvals(
                Some("alice"),
                None,
                Some(ApprovalStatus::Pending),
                0,
                None,
                10
            )
            .await
            .unwrap(),
        [record]
    );
    assert_eq!(store.audit(&filter("alice")).await.unwrap().len(), 1);
    // And the approval can still be decided and the call started.
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                decide("ap1", ApprovalStatus::Approved, 2_000),
                WriteOp::StartPendingCall {
                    id: "c1".into(),
                    instance: Some(INSTANCE.into()),
                },
            ],
        ),
    )
    .await
    .unwrap();
    assert_eq!(store.running_tool_calls(INSTANCE).await.unwrap().len(), 2);
}

async fn the_schema_refuses_unknown_roles_and_statuses(target: Target) {
    // The database itself refuses a role or status the service does not
    // know (SQLite writes these checks as comparisons, Postgres as lists:
    // the same values pass on both).
    let store = target.open().await;
    target
        .execute("INSERT INTO threads (id, owner, created_at_ms) VALUES ('t', 'alice', 1)")
        .await;
    let message = |seq: i64, role: &str| {
        format!(
            "INSERT INTO messages (thread_id, seq, id, role, content, metadata, created_at_ms) \
             VALUES ('t', {seq}, 'm{seq}', '{role}', 'x', '{{}}', 1)"
        )
    };
    let roles = ["user", "assistant", "system", "developer", "tool"];
    for (seq, role) in roles.iter().enumerate() {
        target.execute(&message(seq as i64 + 1, role)).await;
    }
    for bad in ["bogus", "User", "", "Developer"] {
        assert!(
            target.try_execute(&message(10, bad)).await.is_err(),
            "role {bad:?} was stored"
        );
    }
    let call = |n: i64, status: &str| {
        format!(
            "INSERT INTO tool_calls (thread_id, id, owner, run_id, tool_name, args, status, \
                 created_at_ms, ordinal) \
             VALUES ('t', 'c{n}', 'alice', 'r', 'echo', '{{}}', '{status}', 1, {n})"
        )
    };
    let statuses = [
        "pending_approval",
        "running",
        "success",
        "failure",
        "partial",
    ];
    for (n, status) in statuses.iter().enumerate() {
        target.execute(&call(n as i64 + 1, status)).await;
    }
    for bad in ["done", "Running", ""] {
        assert!(
            target.try_execute(&call(10, bad)).await.is_err(),
            "status {bad:?} was stored"
        );
    }
    let roles: Vec<Role> = store
        .all_messages("t")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.role)
        .collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::System,
            Role::Developer,
            Role::Tool
        ]
    );
    let mut stored: Vec<CallStatus> = Vec::new();
    for n in 1..=5 {
        stored.push(status_of(&store, "t", &format!("c{n}")).await);
    }
    assert_eq!(
        stored,
        [
            CallStatus::PendingApproval,
            CallStatus::Running,
            CallStatus::Success,
            CallStatus::Failure,
            CallStatus::Partial
        ]
    );
}

/// The call's row keeps no copy of the output; every read of the call
/// (by id, by run, after a restart) takes it from the tool message, whether
/// the call was finished alone, with its write-ahead, or in a large batch.
async fn a_calls_output_is_stored_once_in_its_tool_message(target: Target) {
    let store = target.open().await;
    apply_one(&store, write_ahead("t", "apart")).await.unwrap();
    apply_one(&store, result_of("t", "apart")).await.unwrap();
    let fused = |call: &str| {
        let mut unit = write_ahead("t", call);
        unit.ops.extend(result_of("t", call).ops);
        unit
    };
    apply_one(&store, fused("fused")).await.unwrap();
    let batch: Vec<WriteUnit> = (0..20).map(|i| fused(&format!("b{i}"))).collect();
    apply_all(&store, &batch).await;

    assert_eq!(
        target
            .count("SELECT COUNT(*) FROM tool_calls WHERE output IS NOT NULL")
            .await,
        0
    );
    let reopened = target.open().await;
    for call in ["apart", "fused", "b0", "b19"] {
        let record = reopened.tool_call("t", call).await.unwrap().unwrap();
        assert_eq!(record.status, CallStatus::Success, "{call}");
        assert_eq!(
            record.output,
            Some(output_of(call, CallStatus::Success)),
            "{call}"
        );
    }
    let run = reopened.run_calls("t", "run-t").await.unwrap();
    assert_eq!(run.len(), 22);
    assert!(
        run.iter()
            .all(|r| r.output == Some(output_of(&r.id, CallStatus::Success))),
        "{run:?}"
    );
}

/// A TOOL_CALL_RESULT that announces its tool message is logged as that
/// reference alone: the receipt (which the bus publishes) carries its data,
/// the log keeps no copy and reads back the message's output to rebuild it
/// from, alone or in a large batch. Without its message in the unit it is
/// refused.
async fn a_result_event_is_logged_as_a_reference_to_its_message(target: Target) {
    let store = target.open().await;
    let result_of_call = |call: &str| {
        let result = NewEvent {
            announces: Some(format!("msg-{call}")),
            ..event("TOOL_CALL_RESULT", 9)
        };
        let mut ops = finishing(call, CallStatus::Success);
        ops.push(WriteOp::AppendEvents(vec![event("CUSTOM", 8), result]));
        unit("t", "alice", ops)
    };
    record_running(&store, "c1").await;
    let receipt = apply_one(&store, result_of_call("c1")).await.unwrap();
    assert_eq!(receipt.events[1].data, event("TOOL_CALL_RESULT", 9).data);
    assert_eq!(receipt.events[1].from_message, None);

    let calls: Vec<String> = (0..12).map(|i| format!("b{i}")).collect();
    for call in &calls {
        record_running(&store, call).await;
    }
    let batch: Vec<WriteUnit> = calls.iter().map(|c| result_of_call(c)).collect();
    apply_all(&store, &batch).await;

    assert_eq!(
        target
            .count("SELECT COUNT(*) FROM events WHERE message_id IS NOT NULL AND data = ''")
            .await,
        13
    );
    let logged = target.open().await.events_after("t", 0, 100).await.unwrap();
    assert_eq!(logged.len(), 26);
    for (pair, call) in logged
        .chunks(2)
        .zip(std::iter::once("c1").chain(calls.iter().map(String::as_str)))
    {
        assert_eq!(pair[0].data, event("CUSTOM", 8).data);
        assert_eq!(pair[0].from_message, None);
        assert_eq!(&*pair[1].data, "");
        assert_eq!(pair[1].event_type, "TOOL_CALL_RESULT");
        assert_eq!(
            pair[1].from_message,
            Some(ResultReference {
                message_id: format!("msg-{call}"),
                output: output_of(call, CallStatus::Success),
            })
        );
    }

    let orphan = NewEvent {
        announces: Some("msg-elsewhere".into()),
        ..event("TOOL_CALL_RESULT", 10)
    };
    let refused = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![events(1), WriteOp::AppendEvents(vec![orphan])],
        ),
    )
    .await;
    assert!(
        matches!(refused, Err(StoreError::Conflict(_))),
        "{refused:?}"
    );
    assert_eq!(store.last_event_seq("t").await.unwrap(), 26);
}

async fn a_0001_database_migrates_with_its_data(target: Target) {
    // A database left by the release before the safety features: two calls
    // in one millisecond (ids out of order), one still running.
    target
        .stage_at_0001(
            "INSERT INTO threads (id, owner, created_at_ms, last_event_seq, last_message_seq) \
             VALUES ('t', 'alice', 1, 2, 1), ('u', 'bob', 1, 0, 3); \
             INSERT INTO tool_calls (thread_id, id, owner, run_id, tool_name, args, status, \
                 output, undo, message_id, created_at_ms, finished_at_ms) VALUES \
             ('t', 'b', 'alice', 'r1', 'echo', '{\"x\":1}', 'success', '{\"ok\":true}', \
                 '{\"method\":\"delete\"}', 'm1', 100, 150), \
             ('t', 'a', 'alice', 'r1', 'echo', '{\"x\":2}', 'running', NULL, NULL, NULL, 100, NULL), \
             ('t', 'c', 'alice', 'r1', 'echo', '{}', 'failure', '{}', NULL, NULL, 90, 95), \
             ('u', 'a', 'bob', 'r9', 'echo', '{}', 'running', NULL, NULL, NULL, 5, NULL); \
             INSERT INTO messages (thread_id, seq, id, role, content, metadata, tool_call_id, \
                 created_at_ms) VALUES ('t', 1, 'm1', 'tool', '{\"ok\":true}', '{}', 'b', 150), \
             ('u', 1, 'a1', 'assistant', '', '{\"tool_calls\":[{\"id\":\"d\",\"name\":\"echo\",\
                 \"arguments\":{\"x\":3}},{\"id\":\"e\",\"name\":\"echo\",\"arguments\":{}}]}', \
                 NULL, 3), \
             ('u', 2, 'a2', 'assistant', '', '{\"tool_calls\":[{\"id\":\"d\",\"name\":\"echo\",\
                 \"arguments\":{\"x\":4}},{\"id\":\"f\",\"name\":\"sleep\",\
                 \"arguments\":{\"ms\":1}}]}', NULL, 4), \
             ('u', 3, 's1', 'system', 'be brief', '{}', NULL, 5); \
             INSERT INTO events (thread_id, seq, event_type, data, created_at_ms) VALUES \
             ('t', 1, 'CUSTOM', '{}', 1), ('t', 2, 'CUSTOM', '{}', 2);",
        )
        .await;

    let store = target.open().await;
    store.ready().await.unwrap();
    let kept = store.all_messages("t").await.unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(
        (
            kept[0].id.as_str(),
            kept[0].seq,
            kept[0].role,
            kept[0].content.as_str()
        ),
        ("m1", 1, Role::Tool, r#"{"ok":true}"#)
    );
    assert_eq!(kept[0].tool_call_id.as_deref(), Some("b"));
    let b = store.tool_call("t", "b").await.unwrap().unwrap();
    assert_eq!(b.status, CallStatus::Success);
    assert_eq!(b.args, json!({"x": 1}));
    assert_eq!(b.output, Some(json!({"ok": true})));
    assert_eq!(b.undo, Some(json!({"method": "delete"})));
    assert_eq!((b.undo_of, b.undone_by), (None, None));
    assert_eq!(b.finished_at_ms, Some(150));
    // Recorded before calls named their process: still running, for any
    // process to finish once none could still be running them.
    let mut running = store.running_calls_created_before(i64::MAX).await.unwrap();
    running.sort_by(|x, y| x.thread_id.cmp(&y.thread_id));
    assert_eq!(
        running
            .iter()
            .map(|c| (c.thread_id.as_str(), c.id.as_str()))
            .collect::<Vec<_>>(),
        [("t", "a"), ("u", "a")]
    );
    // Old calls are numbered by (created_at_ms, id); new ones follow.
    assert_eq!(
        call_ids(&store.run_calls("t", "r1").await.unwrap()),
        ["c", "a", "b"]
    );
    let receipt = apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![
                WriteOp::InsertToolCall(pending_call_in("0new", "r1")),
                events(1),
                WriteOp::InsertMessage(message("m2", Role::User, "hi")),
                WriteOp::AppendAudit(audit_entry("alice", Some("t"), "approval.requested", 1)),
                WriteOp::InsertApproval(approval("ap1", "t", "alice", "0new", 1)),
            ],
        ),
    )
    .await
    .unwrap();
    assert_eq!(seqs(&receipt.events), [3]);
    assert_eq!(receipt.messages, [("m2".to_owned(), 2)]);
    assert_eq!(
        call_ids(&store.run_calls("t", "r1").await.unwrap()),
        ["c", "a", "b", "0new"]
    );
    assert_eq!(
        status_of(&store, "t", "0new").await,
        CallStatus::PendingApproval
    );
    apply_one(
        &store,
        unit("u", "bob", vec![WriteOp::InsertToolCall(new_call("z"))]),
    )
    .await
    .unwrap();
    assert_eq!(call_ids(&store.run_calls("u", "r9").await.unwrap()), ["a"]);
    // The calls old messages declared are known: the first declaration of
    // an id holds.
    let refused = apply_one(
        &store,
        unit(
            "u",
            "bob",
            vec![WriteOp::InsertToolCall(echo_call("d", json!({"x": 4})))],
        ),
    )
    .await;
    assert!(is_redeclared(&refused), "{refused:?}");
    // Each is recorded as declared by the message that first declared it.
    for (id, args) in [("d", json!({"x": 3})), ("e", json!({}))] {
        apply_one(
            &store,
            unit(
                "u",
                "bob",
                vec![WriteOp::InsertToolCall(NewToolCall {
                    declared_by: Some("a1".into()),
                    ..echo_call(id, args)
                })],
            ),
        )
        .await
        .unwrap();
    }
    // A built-in tool an old message named by its alias (`sleep`) is
    // declared under its own name, as new declarations are.
    let wait = |ms: i64| {
        unit(
            "u",
            "bob",
            vec![WriteOp::InsertToolCall(NewToolCall {
                tool_name: "wait".into(),
                declared_by: Some("a2".into()),
                ..echo_call("f", json!({ "ms": ms }))
            })],
        )
    };
    assert!(is_redeclared(&apply_one(&store, wait(2)).await));
    apply_one(&store, wait(1)).await.unwrap();
    // Old messages keep their roles.
    let roles: Vec<Role> = store
        .all_messages("u")
        .await
        .unwrap()
        .iter()
        .map(|m| m.role)
        .collect();
    assert_eq!(roles, [Role::Assistant, Role::Assistant, Role::System]);
    assert!(target.try_execute("DELETE FROM audit_log").await.is_err());
    drop(store);
    // Reopening a migrated database applies nothing twice.
    let store = target.open().await;
    store.ready().await.unwrap();
    assert_eq!(store.audit(&filter("alice")).await.unwrap().len(), 1);
}

// ---------------------------------------------------------------------------
// Backend-specific and backend-independent.

/// A SQLite commit is durable: WAL journal, `synchronous=FULL`; writers
/// wait for the lock; foreign keys are enforced.
#[tokio::test]
async fn sqlite_file_settings() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open_file(&dir.path().join("toolgate.db"))
        .await
        .unwrap();
    let mut conn = store.pool().acquire().await.unwrap();
    let pragma = |name: &'static str| format!("PRAGMA {name}");
    let journal: String = sqlx::query_scalar(&pragma("journal_mode"))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(journal, "wal");
    let synchronous: i64 = sqlx::query_scalar(&pragma("synchronous"))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(synchronous, 2, "FULL");
    let foreign_keys: i64 = sqlx::query_scalar(&pragma("foreign_keys"))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(foreign_keys, 1);
    let busy_timeout: i64 = sqlx::query_scalar(&pragma("busy_timeout"))
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert!(busy_timeout >= 1000, "{busy_timeout}");
}

/// `DATABASE_URL=sqlite:…` works, in memory too (the pool must keep the
/// in-memory database alive across its connections).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_urls_open_files_and_memory() {
    let dir = tempfile::tempdir().unwrap();
    let file_url = format!("sqlite://{}", dir.path().join("via-url.db").display());
    for url in [file_url.as_str(), "sqlite::memory:"] {
        let store: DynStore = Arc::new(SqliteStore::connect_url(url).await.unwrap());
        store.ready().await.unwrap();
        let writer = Writer::spawn(
            store.clone(),
            WriterConfig::default(),
            Arc::new(|_: &[StoredEvent]| {}),
        );
        let mut tasks = Vec::new();
        for i in 0..20 {
            let writer = writer.clone();
            tasks.push(tokio::spawn(async move {
                writer
                    .write(unit(
                        "t",
                        "alice",
                        vec![
                            WriteOp::InsertMessage(message(&format!("m{i}"), Role::User, "hi")),
                            events(1),
                        ],
                    ))
                    .await
                    .unwrap()
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(store.last_event_seq("t").await.unwrap(), 20, "{url}");
        assert_eq!(store.all_messages("t").await.unwrap().len(), 20, "{url}");
    }
    assert!(dir.path().join("via-url.db").exists());
}

/// A SQLite file toolgate creates, by `DATABASE_URL` (anywhere, perhaps
/// in a directory others can read) or in the data directory, is the
/// service user's alone, and so are its `-wal` and `-shm` files; a file
/// that exists keeps the mode its operator gave it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_file_toolgate_creates_is_its_own() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let by_url = dir.path().join("via-url.db");
    let by_path = dir.path().join("by-path.db");
    let kept = dir.path().join("kept.db");
    std::fs::write(&kept, b"").unwrap();
    std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o640)).unwrap();
    let stores: Vec<DynStore> = vec![
        Arc::new(
            SqliteStore::connect_url(&format!("sqlite://{}", by_url.display()))
                .await
                .unwrap(),
        ),
        Arc::new(SqliteStore::open_file(&by_path).await.unwrap()),
        Arc::new(
            SqliteStore::connect_url(&format!("sqlite:{}", kept.display()))
                .await
                .unwrap(),
        ),
    ];
    for store in &stores {
        store.ready().await.unwrap();
    }
    for file in [&by_url, &by_path] {
        for suffix in ["", "-wal", "-shm"] {
            let path = std::path::PathBuf::from(format!("{}{suffix}", file.display()));
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
    assert_eq!(mode(&kept), 0o640);
}

/// A writer whose thread is gone (a store that panicked) answers
/// `WriterClosed`, to the callers of the batch and to every later one.
#[test]
fn writing_after_the_writer_task_is_gone_is_writer_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.db");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let store: DynStore = Arc::new(SqliteStore::open_file(&path).await.unwrap());
        let panicking = Arc::new(Observed {
            inner: store,
            batches: AtomicUsize::new(0),
            fail: false,
            panic: true,
        });
        let writer = Writer::spawn(
            panicking.clone(),
            WriterConfig::default(),
            Arc::new(|_: &[StoredEvent]| {}),
        );
        for _ in 0..2 {
            let result = writer.write(unit("t", "alice", vec![events(1)])).await;
            assert!(
                matches!(result, Err(StoreError::WriterClosed)),
                "{result:?}"
            );
        }
        assert_eq!(panicking.batches.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn with_database_replaces_only_the_database_name() {
    assert_eq!(
        with_database("postgres://u@h:5432/postgres", "x"),
        "postgres://u@h:5432/x"
    );
    assert_eq!(
        with_database("postgres://u@h:5432", "x"),
        "postgres://u@h:5432/x"
    );
    assert_eq!(
        with_database("postgres://u@h/db?sslmode=disable", "x"),
        "postgres://u@h/x?sslmode=disable"
    );
}

// ---------------------------------------------------------------------------
// Large batches (the set-based fast path of apply_batch, and its fallback).

fn audit_in(thread: &str, call: &str, at_ms: i64) -> NewAuditEntry {
    let mut entry = audit_entry("alice", Some(thread), "call.executed", at_ms);
    entry.tool_call_id = Some(call.to_owned());
    entry
}

/// A write-ahead unit: the call, 3 events, an audit entry.
fn write_ahead(thread: &str, call: &str) -> WriteUnit {
    let mut c = new_call(call);
    c.run_id = format!("run-{thread}");
    unit(
        thread,
        "alice",
        vec![
            WriteOp::InsertToolCall(c),
            WriteOp::AppendEvents(vec![
                event("TOOL_CALL_START", 1),
                event("TOOL_CALL_ARGS", 2),
                event("TOOL_CALL_END", 3),
            ]),
            WriteOp::AppendAudit(audit_in(thread, call, 1)),
        ],
    )
}

/// A result unit: finish, tool message, 1 event, an audit entry.
fn result_of(thread: &str, call: &str) -> WriteUnit {
    let mut ops = finishing(call, CallStatus::Success);
    ops.extend([
        WriteOp::AppendEvents(vec![event("TOOL_CALL_RESULT", 4)]),
        WriteOp::AppendAudit(audit_in(thread, call, 2)),
    ]);
    unit(thread, "alice", ops)
}

/// A read-only call's record and result in one unit (the engine's single
/// transaction), in a large batch and alone: stored exactly as when the two
/// halves commit apart.
async fn a_call_recorded_and_finished_in_one_unit_is_stored_as_if_in_two(store: DynStore) {
    let fused = |thread: &str, call: &str| {
        let mut unit = write_ahead(thread, call);
        unit.ops.extend(result_of(thread, call).ops);
        unit
    };
    for (i, c) in ["a", "b"].iter().enumerate() {
        apply_one(&store, write_ahead("two", c)).await.unwrap();
        apply_one(&store, result_of("two", c)).await.unwrap();
        if i == 0 {
            apply_one(&store, fused("one", c)).await.unwrap();
        }
    }
    let batch: Vec<WriteUnit> = (0..40)
        .map(|i| fused(if i == 7 { "one" } else { "many" }, &format!("m{i}")))
        .collect();
    apply_all(&store, &batch).await;
    apply_one(&store, fused("one", "b")).await.unwrap();

    for (thread, call) in [("one", "a"), ("one", "b"), ("many", "m3")] {
        let got = store.tool_call(thread, call).await.unwrap().unwrap();
        let want = store
            .tool_call("two", if call == "m3" { "a" } else { call })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.status, CallStatus::Success, "{thread}/{call}");
        if call != "m3" {
            assert_eq!(got.output, want.output);
            assert_eq!(got.undo, want.undo);
            assert_eq!(got.message_id, want.message_id);
        } else {
            assert_eq!(got.message_id.as_deref(), Some("msg-m3"));
        }
        assert_eq!(got.finished_at_ms, want.finished_at_ms);
        assert_eq!(got.args, want.args);
    }
    // Recorded order (ordinals) as committed.
    let order = |records: Vec<toolgate::store::ToolCallRecord>| {
        records.into_iter().map(|r| r.id).collect::<Vec<_>>()
    };
    assert_eq!(
        order(store.run_calls("one", "run-one").await.unwrap()),
        ["a", "m7", "b"]
    );
    let many: Vec<String> = (0..40)
        .filter(|&i| i != 7)
        .map(|i| format!("m{i}"))
        .collect();
    assert_eq!(
        order(store.run_calls("many", "run-many").await.unwrap()),
        many
    );
    // Nothing is left running, and each thread's log is 4 events per call.
    assert!(store.running_tool_calls(INSTANCE).await.unwrap().is_empty());
    assert_eq!(store.last_event_seq("one").await.unwrap(), 12);
    assert_eq!(store.last_event_seq("many").await.unwrap(), 4 * 39);
}

/// Per thread, the units of `units` in batch order, as (unit index).
fn indices_of(units: &[WriteUnit], thread: &str) -> Vec<usize> {
    (0..units.len())
        .filter(|&i| units[i].thread_id == thread)
        .collect()
}

async fn a_large_batch_across_threads_commits_in_thread_then_unit_order(store: DynStore) {
    let threads = ["t-c", "t-a", "t-d", "t-b"];
    // A thread that already has history: its seqs continue.
    apply_one(&store, write_ahead("t-b", "old")).await.unwrap();
    apply_one(&store, result_of("t-b", "old")).await.unwrap();

    // 64 units, threads interleaved.
    let calls: Vec<(String, String)> = (0..64)
        .map(|i| (threads[i % 4].to_owned(), format!("call-{i}")))
        .collect();
    let batch: Vec<WriteUnit> = calls.iter().map(|(t, c)| write_ahead(t, c)).collect();
    let receipts: Vec<UnitReceipt> = store
        .apply_batch(&batch)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap())
        .collect();

    // Per thread: 3 seqs per unit, contiguous in unit order, after history.
    for thread in threads {
        let before = if thread == "t-b" { 4 } else { 0 };
        let mine = indices_of(&batch, thread);
        let got: Vec<i64> = mine
            .iter()
            .flat_map(|&i| seqs(&receipts[i].events))
            .collect();
        let want: Vec<i64> = (before + 1..=before + 3 * mine.len() as i64).collect();
        assert_eq!(got, want, "{thread}");
        for &i in &mine {
            assert!(receipts[i].events.iter().all(|e| e.thread_id == thread));
            assert_eq!(
                receipts[i]
                    .events
                    .iter()
                    .map(|e| e.event_type.as_str())
                    .collect::<Vec<_>>(),
                ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
            );
            assert!(receipts[i].messages.is_empty());
        }
        // The stored log is what the receipts say.
        let stored = store.events_after(thread, before, 1000).await.unwrap();
        let receipted: Vec<StoredEvent> = mine
            .iter()
            .flat_map(|&i| receipts[i].events.clone())
            .collect();
        assert_eq!(stored, receipted, "{thread}");
        assert_eq!(
            store.last_event_seq(thread).await.unwrap(),
            before + 3 * mine.len() as i64
        );
        // Ordinals: the calls of the run in unit order.
        let run = store
            .run_calls(thread, &format!("run-{thread}"))
            .await
            .unwrap();
        let history = if thread == "t-b" { vec!["old"] } else { vec![] };
        let want_calls: Vec<&str> = history
            .into_iter()
            .chain(mine.iter().map(|&i| calls[i].1.as_str()))
            .collect();
        assert_eq!(call_ids(&run), want_calls, "{thread}");
    }

    // Audit ids: one per unit, increasing in apply order (by thread, then
    // unit), and stored as receipted.
    let mut apply_order: Vec<usize> = (0..batch.len()).collect();
    apply_order.sort_by(|&a, &b| batch[a].thread_id.cmp(&batch[b].thread_id));
    let ids: Vec<i64> = apply_order
        .iter()
        .map(|&i| {
            assert_eq!(receipts[i].audit_ids.len(), 1);
            receipts[i].audit_ids[0]
        })
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    let mut listed = filter("alice");
    listed.action = Some("call.executed".into());
    listed.limit = 1000;
    let entries = store.audit(&listed).await.unwrap();
    for &i in &apply_order {
        let id = receipts[i].audit_ids[0];
        let entry = entries.iter().find(|e| e.id == id).expect("stored");
        assert_eq!(entry.tool_call_id.as_deref(), Some(calls[i].1.as_str()));
        assert_eq!(entry.thread_id.as_deref(), Some(calls[i].0.as_str()));
    }

    // The results of all 64 calls in one batch, in another order.
    let mut results: Vec<WriteUnit> = calls.iter().map(|(t, c)| result_of(t, c)).collect();
    results.reverse();
    let receipts: Vec<UnitReceipt> = store
        .apply_batch(&results)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    for thread in threads {
        let (events_before, messages_before) = if thread == "t-b" { (4, 1) } else { (0, 0) };
        let mine = indices_of(&results, thread);
        let n = mine.len() as i64;
        let got_messages: Vec<(String, i64)> = mine
            .iter()
            .flat_map(|&i| receipts[i].messages.clone())
            .collect();
        let want_messages: Vec<(String, i64)> = mine
            .iter()
            .zip(messages_before + 1..)
            .map(|(&i, seq)| (format!("msg-{}", call_of(&results[i])), seq))
            .collect();
        assert_eq!(got_messages, want_messages, "{thread}");
        let got_events: Vec<i64> = mine
            .iter()
            .flat_map(|&i| seqs(&receipts[i].events))
            .collect();
        let first = events_before + 3 * n + 1;
        assert_eq!(
            got_events,
            (first..first + n).collect::<Vec<_>>(),
            "{thread}"
        );
        let stored = store.all_messages(thread).await.unwrap();
        assert_eq!(
            message_seqs(&stored),
            (1..=messages_before + n).collect::<Vec<_>>()
        );
        for &i in &mine {
            let call = call_of(&results[i]);
            let record = store.tool_call(thread, &call).await.unwrap().unwrap();
            assert_eq!(record.status, CallStatus::Success);
            assert_eq!(record.message_id, Some(format!("msg-{call}")));
            assert_eq!(record.output, Some(output_of(&call, CallStatus::Success)));
            assert_eq!(receipts[i].audit_ids.len(), 1);
        }
    }
    assert!(store.running_tool_calls(INSTANCE).await.unwrap().is_empty());
}

/// The call id a write-ahead or result unit is about.
fn call_of(unit: &WriteUnit) -> String {
    match &unit.ops[0] {
        WriteOp::InsertToolCall(call) => call.id.clone(),
        WriteOp::FinishToolCall(finished) => finished.id.clone(),
        other => panic!("not a call unit: {other:?}"),
    }
}

/// Whether an error is the one a test expects.
type ErrorCheck = fn(&StoreError) -> bool;

async fn a_failing_unit_in_a_large_batch_fails_alone(store: DynStore) {
    claim(&store, "t-bob", "bob").await;
    apply_one(&store, write_ahead("t-a", "recorded"))
        .await
        .unwrap();
    let threads = ["t-a", "t-b", "t-c"];

    // Each failure in the middle of a batch of 30 good units: the others
    // commit with gap-free seqs, the failing one gets its error alone.
    let failures: Vec<(WriteUnit, ErrorCheck)> = vec![
        (write_ahead("t-bob", "x"), |e| {
            matches!(e, StoreError::NotOwner)
        }),
        (write_ahead("t-a", "recorded"), |e| {
            matches!(e, StoreError::Conflict(_))
        }),
        (result_of("t-b", "never-recorded"), |e| {
            matches!(e, StoreError::NotFound(_))
        }),
        (
            unit(
                "t-c",
                "alice",
                vec![
                    events(2),
                    WriteOp::AppendAudit(audit_entry("bob", Some("t-c"), "call.executed", 1)),
                ],
            ),
            |e| matches!(e, StoreError::Conflict(_)),
        ),
    ];
    let mut round = 0;
    for (bad, is_expected) in failures {
        round += 1;
        let mut batch: Vec<WriteUnit> = (0..30)
            .map(|i| write_ahead(threads[i % 3], &format!("r{round}-call-{i}")))
            .collect();
        batch.insert(15, bad);
        let last_before: Vec<i64> = futures_last_seqs(&store, &threads).await;
        let results = store.apply_batch(&batch).await.expect("the batch commits");
        assert_eq!(results.len(), 31);
        let err = results[15].as_ref().expect_err("the bad unit fails");
        assert!(is_expected(err), "round {round}: {err:?}");
        for (i, result) in results.iter().enumerate() {
            if i != 15 {
                assert!(result.is_ok(), "round {round}, unit {i}: {result:?}");
            }
        }
        for (thread, before) in threads.iter().zip(last_before) {
            let got: Vec<i64> = indices_of(&batch, thread)
                .into_iter()
                .filter(|&i| i != 15)
                .flat_map(|i| seqs(&results[i].as_ref().unwrap().events))
                .collect();
            let after = store.last_event_seq(thread).await.unwrap();
            assert_eq!(got, (before + 1..=after).collect::<Vec<_>>(), "{thread}");
            assert_eq!(
                seqs(&store.events_after(thread, 0, 10_000).await.unwrap()),
                (1..=after).collect::<Vec<_>>(),
                "{thread}"
            );
        }
    }
    assert!(store.tool_call("t-bob", "x").await.unwrap().is_none());
    assert_eq!(store.last_event_seq("t-bob").await.unwrap(), 0);
}

async fn futures_last_seqs(store: &DynStore, threads: &[&str]) -> Vec<i64> {
    let mut out = Vec::new();
    for thread in threads {
        out.push(store.last_event_seq(thread).await.unwrap());
    }
    out
}

async fn claim(store: &DynStore, thread: &str, owner: &str) {
    store.claim_thread(thread, owner).await.unwrap();
}

async fn duplicate_and_dependent_ids_within_one_batch(store: DynStore) {
    // The same call id twice, the same message id twice, one call finished
    // twice, one finished before it is recorded, one recorded then finished
    // by a later unit: exactly the per-unit outcomes.
    let mut dup_message = message("m-dup", Role::User, "again");
    dup_message.metadata = json!({"second": true}).into();
    let batch = vec![
        write_ahead("t", "c1"),
        write_ahead("t", "c1"),
        unit(
            "t",
            "alice",
            vec![WriteOp::InsertMessage(message(
                "m-dup",
                Role::User,
                "first",
            ))],
        ),
        unit("t", "alice", vec![WriteOp::InsertMessage(dup_message)]),
        result_of("t", "c1"),
        unit("t", "alice", finishing("c1", CallStatus::Failure)),
        result_of("t", "c2"),
        write_ahead("t", "c2"),
    ];
    let results = store.apply_batch(&batch).await.unwrap();
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(
        matches!(results[1], Err(StoreError::Conflict(_))),
        "{:?}",
        results[1]
    );
    assert_eq!(results[2].as_ref().unwrap().messages, [("m-dup".into(), 1)]);
    assert!(
        matches!(results[3], Err(StoreError::Conflict(_))),
        "{:?}",
        results[3]
    );
    assert_eq!(
        results[4].as_ref().unwrap().messages,
        [("msg-c1".into(), 2)]
    );
    assert!(
        matches!(results[5], Err(StoreError::Conflict(_))),
        "{:?}",
        results[5]
    );
    assert!(
        matches!(results[6], Err(StoreError::NotFound(_))),
        "{:?}",
        results[6]
    );
    assert!(results[7].is_ok(), "{:?}", results[7]);

    assert_eq!(seqs(&results[0].as_ref().unwrap().events), [1, 2, 3]);
    assert_eq!(seqs(&results[4].as_ref().unwrap().events), [4]);
    assert_eq!(seqs(&results[7].as_ref().unwrap().events), [5, 6, 7]);
    assert_eq!(
        seqs(&store.events_after("t", 0, 100).await.unwrap()),
        [1, 2, 3, 4, 5, 6, 7]
    );
    assert_eq!(status_of(&store, "t", "c1").await, CallStatus::Success);
    assert_eq!(status_of(&store, "t", "c2").await, CallStatus::Running);
    let messages = store.all_messages("t").await.unwrap();
    assert_eq!(message_seqs(&messages), [1, 2]);
    assert_eq!(messages[0].content, "first");
    assert_eq!(
        call_ids(&store.run_calls("t", "run-t").await.unwrap()),
        ["c1", "c2"]
    );

    // A call recorded and finished by later units of one batch: no
    // failure, so the fast path applies it.
    let results = store
        .apply_batch(&[write_ahead("t", "c3"), result_of("t", "c3")])
        .await
        .unwrap();
    assert_eq!(seqs(&results[0].as_ref().unwrap().events), [8, 9, 10]);
    assert_eq!(seqs(&results[1].as_ref().unwrap().events), [11]);
    assert_eq!(
        results[1].as_ref().unwrap().messages,
        [("msg-c3".into(), 3)]
    );
    assert_eq!(status_of(&store, "t", "c3").await, CallStatus::Success);
}
