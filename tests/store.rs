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
use toolgate::store::postgres::PgStore;
use toolgate::store::sqlite::SqliteStore;
use toolgate::store::writer::{CommitHook, Writer, WriterConfig};
use toolgate::store::{
    CallStatus, DynStore, FinishedToolCall, NewEvent, NewMessage, NewToolCall, Role, Store,
    StoreError, StoreResult, StoredEvent, StoredMessage, ToolCallRecord, UnitReceipt, WriteOp,
    WriteUnit,
};

// ---------------------------------------------------------------------------
// Harness: where a test's database lives, and how to open it.

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
        match self {
            Target::Sqlite(path) => {
                let store = SqliteStore::open_file(path).await.unwrap();
                sqlx::raw_sql(sql).execute(store.pool()).await.unwrap();
            }
            Target::Postgres(url) => {
                let store = PgStore::connect(url).await.unwrap();
                sqlx::raw_sql(sql).execute(store.pool()).await.unwrap();
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
        a_duplicate_message_id_conflicts,
        seqs_are_gap_free_and_per_thread,
        events_after_pages_with_a_limit,
        messages_before_pages_backwards_in_ascending_pages,
        running_tool_calls_lists_only_unfinished_calls,
        json_round_trips_exactly,
        a_unit_the_database_rejects_fails_alone,
        ready_reports_a_migrated_database,
        writer_groups_concurrent_writes_and_hooks_before_acks,
        writer_reports_a_unit_failure_to_its_caller_only,
        writer_fails_every_caller_of_a_failed_batch,
        writer_finishes_queued_work_after_every_handle_is_dropped,
    ],
    target: [
        two_handles_on_one_database_serialise_their_writes,
        data_survives_reopening,
        a_constraint_violation_rolls_back_only_its_unit,
    ],
}

// ---------------------------------------------------------------------------
// Builders.

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
        data: format!(r#"{{"type":"{event_type}","n":{n}}}"#),
        created_at_ms: 1_700_000_000_000 + n,
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
        args: json!({"module": "calendar", "method": "read", "input": {"day": "2026-04-21"}}),
        created_at_ms: 1_700_000_000_000,
    }
}

fn finished(id: &str, status: CallStatus) -> FinishedToolCall {
    FinishedToolCall {
        id: id.to_owned(),
        status,
        output: json!({"tool_call_id": id, "status": status.as_str(), "result": {"count": 1}}),
        undo: Some(json!({"method": "delete", "input": {"id": "evt_1"}})),
        message_id: format!("msg-{id}"),
        finished_at_ms: 1_700_000_000_500,
    }
}

fn message(id: &str, role: Role, content: &str) -> NewMessage {
    NewMessage {
        id: id.to_owned(),
        role,
        content: content.to_owned(),
        metadata: json!({"n": id}),
        tool_call_id: None,
        created_at_ms: 1_700_000_000_000,
    }
}

async fn apply_one(store: &DynStore, unit: WriteUnit) -> StoreResult<UnitReceipt> {
    let mut results = store.apply_batch(&[unit]).await.expect("batch transaction");
    assert_eq!(results.len(), 1);
    results.remove(0)
}

fn seqs(events: &[StoredEvent]) -> Vec<i64> {
    events.iter().map(|e| e.seq).collect()
}

fn message_seqs(messages: &[StoredMessage]) -> Vec<i64> {
    messages.iter().map(|m| m.seq).collect()
}

// ---------------------------------------------------------------------------
// Behaviours.

async fn claiming_a_thread_and_other_owners(store: DynStore) {
    assert_eq!(store.thread_owner("t1").await.unwrap(), None);
    store.claim_thread("t1", "alice").await.unwrap();
    store.claim_thread("t1", "alice").await.unwrap();
    assert_eq!(
        store.thread_owner("t1").await.unwrap().as_deref(),
        Some("alice")
    );
    assert!(matches!(
        store.claim_thread("t1", "bob").await,
        Err(StoreError::NotOwner)
    ));
    assert_eq!(
        store.thread_owner("t1").await.unwrap().as_deref(),
        Some("alice")
    );

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
    assert_eq!(
        store.thread_owner("t2").await.unwrap().as_deref(),
        Some("carol")
    );
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
                WriteOp::InsertToolCall(new_call("call_1")),
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
            args: call.args,
            status: CallStatus::Running,
            output: None,
            undo: None,
            message_id: None,
            created_at_ms: call.created_at_ms,
            finished_at_ms: None,
        })
    );
    assert!(store.tool_call("t", "call_2").await.unwrap().is_none());
    assert!(store.tool_call("other", "call_1").await.unwrap().is_none());
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
    let tool_message = NewMessage {
        id: done.message_id.clone(),
        role: Role::Tool,
        content: r#"{"count":1}"#.into(),
        metadata: json!({"tool_agent_output": done.output}),
        tool_call_id: Some("call_1".into()),
        created_at_ms: done.finished_at_ms,
    };
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
    assert_eq!(record.output.as_ref(), Some(&done.output));
    assert_eq!(record.undo, done.undo);
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
            metadata: tool_message.metadata,
            tool_call_id: Some("call_1".into()),
            created_at_ms: tool_message.created_at_ms,
        }]
    );
    assert_eq!(
        seqs(&store.events_after("t", 0, 100).await.unwrap()),
        [1, 2, 3, 4]
    );
    assert!(store.running_tool_calls().await.unwrap().is_empty());

    // Other terminal statuses are stored as given; a call without undo keeps none.
    for (id, status) in [
        ("call_2", CallStatus::Failure),
        ("call_3", CallStatus::Partial),
    ] {
        apply_one(
            &store,
            unit("t", "alice", vec![WriteOp::InsertToolCall(new_call(id))]),
        )
        .await
        .unwrap();
        let mut end = finished(id, status);
        end.undo = None;
        apply_one(
            &store,
            unit("t", "alice", vec![WriteOp::FinishToolCall(end)]),
        )
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
        unit(
            "t",
            "alice",
            vec![WriteOp::FinishToolCall(finished(
                "call_1",
                CallStatus::Success,
            ))],
        ),
    )
    .await
    .unwrap();

    // Each failing unit also carries a message and events: all rolled back.
    let with_extras = |op: WriteOp, msg_id: &str| {
        unit(
            "t",
            "alice",
            vec![
                events(2),
                WriteOp::InsertMessage(message(msg_id, Role::Tool, "x")),
                op,
            ],
        )
    };
    let again = apply_one(
        &store,
        with_extras(
            WriteOp::FinishToolCall(finished("call_1", CallStatus::Failure)),
            "m1",
        ),
    )
    .await;
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
    let unknown = apply_one(
        &store,
        with_extras(
            WriteOp::FinishToolCall(finished("nope", CallStatus::Success)),
            "m2",
        ),
    )
    .await;
    assert!(
        matches!(unknown, Err(StoreError::NotFound(_))),
        "{unknown:?}"
    );
    let running = apply_one(
        &store,
        with_extras(
            WriteOp::FinishToolCall(finished("call_1", CallStatus::Running)),
            "m3",
        ),
    )
    .await;
    assert!(running.is_err(), "{running:?}");

    assert_eq!(store.last_event_seq("t").await.unwrap(), 1);
    assert!(store.all_messages("t").await.unwrap().is_empty());
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
    assert_eq!(receipt.messages, [("m4".to_owned(), 1)]);
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

async fn running_tool_calls_lists_only_unfinished_calls(store: DynStore) {
    assert!(store.running_tool_calls().await.unwrap().is_empty());
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
        unit(
            "t",
            "alice",
            vec![WriteOp::FinishToolCall(finished("b", CallStatus::Failure))],
        ),
    )
    .await
    .unwrap();

    let mut running = store.running_tool_calls().await.unwrap();
    running.sort_by(|x, y| (&x.thread_id, &x.id).cmp(&(&y.thread_id, &y.id)));
    let expected = |thread: &str, owner: &str| {
        let call = new_call("a");
        ToolCallRecord {
            thread_id: thread.into(),
            id: call.id,
            owner: owner.into(),
            run_id: call.run_id,
            tool_name: call.tool_name,
            args: call.args,
            status: CallStatus::Running,
            output: None,
            undo: None,
            message_id: None,
            created_at_ms: call.created_at_ms,
            finished_at_ms: None,
        }
    };
    assert_eq!(running, [expected("t", "alice"), expected("u", "bob")]);
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
    msg.metadata = value.clone();
    msg.tool_call_id = Some("call_1".into());
    let mut call = new_call("call_1");
    call.args = value["tool_agent_output"]["result"].clone();
    let mut end = finished("call_1", CallStatus::Partial);
    end.output = value.clone();
    end.undo = Some(json!([1, "two", {"three": [3.5]}]));
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
    assert_eq!(record.args, call.args);
    assert_eq!(record.output, Some(value));
    assert_eq!(record.undo, end.undo);

    // Scalars at the top level, and a JSON null undo (distinct from none).
    for (i, top) in [json!("just a string"), json!(12), json!(null), json!([])]
        .into_iter()
        .enumerate()
    {
        let mut m = message(&format!("s{i}"), Role::Assistant, "");
        m.metadata = top.clone();
        apply_one(&store, unit("t", "alice", vec![WriteOp::InsertMessage(m)]))
            .await
            .unwrap();
        let back = store.messages_before("t", None, 1).await.unwrap().remove(0);
        assert_eq!(back.metadata, top);
        assert_eq!(back.content, "");
    }
    apply_one(
        &store,
        unit(
            "t",
            "alice",
            vec![WriteOp::InsertToolCall(new_call("call_2"))],
        ),
    )
    .await
    .unwrap();
    let mut end = finished("call_2", CallStatus::Success);
    end.undo = Some(Value::Null);
    apply_one(
        &store,
        unit("t", "alice", vec![WriteOp::FinishToolCall(end)]),
    )
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
    nul_json.metadata = json!({"output": "a\u{0}b"});
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
                    (&sent.content, &sent.metadata)
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
}

#[async_trait]
impl Store for Observed {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    async fn ready(&self) -> StoreResult<()> {
        self.inner.ready().await
    }
    async fn thread_owner(&self, thread_id: &str) -> StoreResult<Option<String>> {
        self.inner.thread_owner(thread_id).await
    }
    async fn claim_thread(&self, thread_id: &str, owner: &str) -> StoreResult<()> {
        self.inner.claim_thread(thread_id, owner).await
    }
    async fn tool_call(&self, thread_id: &str, id: &str) -> StoreResult<Option<ToolCallRecord>> {
        self.inner.tool_call(thread_id, id).await
    }
    async fn running_tool_calls(&self) -> StoreResult<Vec<ToolCallRecord>> {
        self.inner.running_tool_calls().await
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
    async fn all_messages(&self, thread_id: &str) -> StoreResult<Vec<StoredMessage>> {
        self.inner.all_messages(thread_id).await
    }
    async fn apply_batch(&self, units: &[WriteUnit]) -> StoreResult<Vec<StoreResult<UnitReceipt>>> {
        self.batches.fetch_add(1, Ordering::SeqCst);
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
            writer
                .write(unit(
                    "t",
                    "alice",
                    vec![events(1), WriteOp::InsertToolCall(new_call(&id))],
                ))
                .await
        }));
    }
    let mut ok = 0;
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await.unwrap() {
            Ok(receipt) => {
                assert!(i % 5 != 0);
                assert!(log.saw(&receipt.events[0]));
                ok += 1;
            }
            Err(StoreError::Conflict(_)) => assert!(i % 5 == 0),
            Err(other) => panic!("unexpected {other:?}"),
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
    });
    let log = Arc::new(HookLog::default());
    let writer = Writer::spawn(failing.clone(), WriterConfig::default(), log.hook());
    let mut tasks = Vec::new();
    for i in 0..50 {
        let writer = writer.clone();
        tasks.push(tokio::spawn(async move {
            writer
                .write(unit(
                    "t",
                    "alice",
                    vec![
                        WriteOp::InsertToolCall(new_call(&format!("c{i}"))),
                        events(1),
                    ],
                ))
                .await
        }));
    }
    for task in tasks {
        match task.await.unwrap() {
            Err(StoreError::Database(sqlx::Error::Io(e))) => {
                assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset)
            }
            other => panic!("a caller of a failed batch got {other:?}"),
        }
    }
    assert!(failing.batches.load(Ordering::SeqCst) >= 1);
    assert_eq!(
        log.calls.load(Ordering::SeqCst),
        0,
        "no commit hook for a failed batch"
    );
    assert!(store.events_after("t", 0, 100).await.unwrap().is_empty());
    assert!(store.running_tool_calls().await.unwrap().is_empty());

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
    assert_eq!(store.running_tool_calls().await.unwrap().len(), 10);
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
    assert_eq!(store.running_tool_calls().await.unwrap().len(), 1);
    assert_eq!(store.all_messages("t").await.unwrap().len(), 1);
    assert_eq!(
        store.thread_owner("t").await.unwrap().as_deref(),
        Some("alice")
    );
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

/// A writer whose task is gone answers `WriterClosed`.
#[test]
fn writing_after_the_writer_task_is_gone_is_writer_closed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolgate.db");
    let first = tokio::runtime::Runtime::new().unwrap();
    let writer = first.block_on(async {
        let store: DynStore = Arc::new(SqliteStore::open_file(&path).await.unwrap());
        Writer::spawn(
            store,
            WriterConfig::default(),
            Arc::new(|_: &[StoredEvent]| {}),
        )
    });
    drop(first); // shuts the writer task down
    let second = tokio::runtime::Runtime::new().unwrap();
    let result = second.block_on(writer.write(unit("t", "alice", vec![events(1)])));
    assert!(
        matches!(result, Err(StoreError::WriterClosed)),
        "{result:?}"
    );
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
