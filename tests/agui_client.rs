//! Interop with the real AG-UI client library, not our reading of the spec:
//! the stock `@ag-ui/client` `HttpAgent` (pinned in tests/agui/package.json)
//! drives `POST /v1/threads/{t}/runs`, and every event of the thread stream
//! is checked with `@ag-ui/core`'s own schemas and the client's enforcement
//! and verification stages. Nothing is fixed up between toolgate and the
//! library: a warning from the client (it strips or translates what it does
//! not accept) fails the test like an error does.
//!
//! Needs Node.js 18+ and npm; `npm ci` runs in tests/agui when its
//! node_modules is missing or stale.

mod common;

use common::node::{Output, SCRIPT_TIMEOUT, node_ready, run_bounded, run_script};
use common::{Backend, TestApp};
use serde_json::{Value, json};

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("array expected: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap_or(""))
        .collect()
}

/// Checks a stream.mjs report: every event passed the schemas, and the
/// client's enforcement and verification took the sequence without a word.
fn assert_stream_valid(out: &Output, what: &str) -> Value {
    let report = out.report();
    assert!(
        out.status.success(),
        "{what}: @ag-ui/core or the client rejected the thread stream\nfailures: {}\nverify: {}\nwarnings: {}\n{}",
        report["failures"],
        report["verify"],
        report["warnings"],
        out.describe()
    );
    assert_eq!(report["failures"], json!([]), "{what}");
    assert_eq!(report["verify"]["ok"], true, "{what}: {}", report["verify"]);
    assert_eq!(report["warnings"], json!([]), "{what}");
    assert_eq!(
        report["verify"]["accepted"], report["count"],
        "{what}: the client let every event through"
    );
    report
}

/// The events naming one tool call at the top level, in stream order
/// (progress CUSTOMs carry the id inside `value` and are not among them).
fn call_events<'a>(events: &'a [Value], call_id: &str) -> Vec<(usize, &'a Value)> {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["toolCallId"] == call_id)
        .collect()
}

/// Runs tests/agui/run.mjs (two HttpAgent turns) and returns its report;
/// any error or client warning fails the test.
async fn drive_http_agent(app: &TestApp, thread: &str, run_id: &str) -> Value {
    let out = run_script(app, "run.mjs", &["--thread", thread, "--run-id", run_id]).await;
    let report = out.report();
    assert!(
        out.status.success(),
        "HttpAgent did not accept the run\nwarnings: {}\n{}",
        report["warnings"],
        out.describe()
    );
    assert_eq!(report["warnings"], json!([]), "the client fixed nothing up");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_agent_runs_backend_tools_and_leaves_frontend_calls() {
    node_ready().await;
    let app = TestApp::spawn(Backend::Sqlite).await;
    let thread = "agui-interop-1";
    let run_id = "run-agui-interop-1";

    // A live subscriber during the run: RUN_STARTED plus four events for
    // each of the two backend calls, at least.
    let live = {
        let base = app.base.clone();
        let token = app.token.clone();
        tokio::spawn(async move {
            let args = [
                "stream.mjs",
                "--base",
                &base,
                "--thread",
                thread,
                "--after",
                "0",
                "--min-events",
                "9",
                "--idle-ms",
                "2500",
                "--timeout-ms",
                "30000",
            ];
            run_bounded(
                "node",
                &args,
                &[("TOOLGATE_TOKEN", token.as_str())],
                SCRIPT_TIMEOUT,
            )
            .await
        })
    };

    let report = drive_http_agent(&app, thread, run_id).await;
    let ids = &report["ids"];
    let (user_id, assistant_id) = (
        ids["user"].as_str().unwrap(),
        ids["assistant"].as_str().unwrap(),
    );
    let (echo_id, wait_id, frontend_id) = (
        ids["echo"].as_str().unwrap(),
        ids["wait"].as_str().unwrap(),
        ids["frontend"].as_str().unwrap(),
    );

    // Framing of the run: RUN_STARTED … exactly one RUN_FINISHED, last.
    let types = strs(&report["types"]);
    let events = report["events"].as_array().unwrap();
    assert_eq!(types.first(), Some(&"RUN_STARTED"), "{types:?}");
    assert_eq!(types.last(), Some(&"RUN_FINISHED"), "{types:?}");
    assert_eq!(types.iter().filter(|t| **t == "RUN_FINISHED").count(), 1);
    assert!(!types.contains(&"RUN_ERROR"), "{types:?}");
    assert_eq!(events[0]["threadId"], thread);
    assert_eq!(events[0]["runId"], run_id);
    let finished = &report["runFinished"];
    assert_eq!(finished["threadId"], thread);
    assert_eq!(finished["runId"], run_id);

    // Each backend call: START, END, RESULT in that order, echo first, the
    // start naming the tool and the assistant message that made the call.
    // TOOL_CALL_ARGS is today also sent between START and END; it should
    // not be, since the client already holds these arguments and appends
    // the delta to them (see http_agent_keeps_the_tool_call_arguments_it_sent),
    // so its presence is tolerated here, in its place, and not required.
    // The thread stream below carries the full quartet with the arguments.
    let mut result_at = Vec::new();
    for (call_id, name, args) in [
        (echo_id, "echo", json!({"text": "hi"})),
        (wait_id, "wait", json!({"ms": 50})),
    ] {
        let evs = call_events(events, call_id);
        let kinds: Vec<&str> = evs
            .iter()
            .filter(|(_, e)| e["type"] != "CUSTOM")
            .map(|(_, e)| e["type"].as_str().unwrap())
            .collect();
        let without_args: Vec<&str> = kinds
            .iter()
            .copied()
            .filter(|k| *k != "TOOL_CALL_ARGS")
            .collect();
        assert_eq!(
            without_args,
            ["TOOL_CALL_START", "TOOL_CALL_END", "TOOL_CALL_RESULT"],
            "{name}: {types:?}"
        );
        if kinds.len() == 4 {
            assert_eq!(kinds[1], "TOOL_CALL_ARGS", "{name}: {types:?}");
            let delta: Value = serde_json::from_str(evs[1].1["delta"].as_str().unwrap()).unwrap();
            assert_eq!(delta, args, "{name} arguments");
        }
        let start = evs[0].1;
        assert_eq!(start["toolCallName"], name);
        assert_eq!(start["parentMessageId"], assistant_id);
        result_at.push((evs[0].0, evs.last().unwrap().0));
    }
    assert!(
        result_at[0].1 < result_at[1].0,
        "echo finished before wait started: {types:?}"
    );
    // Progress of `wait`, if any arrived, is CUSTOM tool_call.progress.
    for e in events.iter().filter(|e| e["type"] == "CUSTOM") {
        assert_eq!(e["name"], "tool_call.progress", "{e}");
        assert_eq!(e["value"]["toolCallId"], wait_id, "{e}");
    }

    // The results, as the client handed them to the subscriber.
    let results = report["toolCallResults"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0]["toolCallId"], echo_id);
    assert_eq!(results[0]["content"], "{\"text\":\"hi\"}");
    assert_eq!(results[1]["toolCallId"], wait_id);
    let waited: Value = serde_json::from_str(results[1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(waited["waited_ms"], 50);
    for (r, name) in results.iter().zip(["echo", "wait"]) {
        let meta = &r["metadata"];
        assert_eq!(meta["status"], "success", "{name}: {meta}");
        assert_eq!(meta["toolName"], name, "{meta}");
        assert_eq!(
            meta["ui_schema"]["version"], "ui_schema/1",
            "{name}: {meta}"
        );
        assert_eq!(meta["ui_schema"]["catalog"], "core/1", "{name}: {meta}");
    }

    // The frontend tool's call is left to the application, untouched.
    assert!(
        call_events(events, frontend_id).is_empty(),
        "the frontend call was not executed: {types:?}"
    );
    assert_eq!(
        finished["outcome"],
        json!({"type": "success", "pendingToolCallIds": [frontend_id]})
    );
    assert_eq!(report["finishedParams"]["outcome"], "success");
    assert_eq!(
        report["finishedParams"]["pendingToolCallIds"],
        json!([frontend_id]),
        "the client reads the pending call from the outcome"
    );

    // The agent's messages after the run: its own three, plus one tool
    // message per executed call, with the assistant's tool calls not
    // duplicated.
    let messages = report["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "reasoning", "assistant", "tool", "tool"],
        "{messages:?}"
    );
    assert_eq!(messages[0]["id"], user_id);
    assert_eq!(messages[2]["id"], assistant_id);
    let call_ids: Vec<&str> = messages[2]["toolCalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(call_ids, [echo_id, wait_id, frontend_id], "{}", messages[2]);
    assert_eq!(messages[3]["toolCallId"], echo_id);
    assert_eq!(messages[3]["content"], "{\"text\":\"hi\"}");
    assert_eq!(messages[4]["toolCallId"], wait_id);
    assert_eq!(messages[3]["id"], results[0]["messageId"]);
    assert_eq!(messages[4]["id"], results[1]["messageId"]);
    for (m, r) in messages[3..].iter().zip(results) {
        assert_eq!(
            m["metadata"]["ui_schema"], r["metadata"]["ui_schema"],
            "the client keeps ui_schema on its tool message"
        );
    }

    // Second turn: the application answered its own tool and ran again;
    // toolgate had nothing left to execute.
    let second = &report["second"];
    let answer_id = ids["frontendAnswer"].as_str().unwrap();
    let second_run = ids["secondRun"].as_str().unwrap();
    assert_eq!(
        strs(&second["types"]),
        ["RUN_STARTED", "RUN_FINISHED"],
        "{second}"
    );
    assert_eq!(second["runFinished"]["threadId"], thread);
    assert_eq!(second["runFinished"]["runId"], second_run);
    assert_eq!(second["runFinished"]["outcome"], json!({"type": "success"}));
    assert_eq!(second["finishedParams"]["outcome"], "success");
    assert_eq!(second["finishedParams"]["pendingToolCallIds"], json!([]));

    // The thread recorded the same conversation, the answer last; the
    // model's reasoning is left out.
    let history = app.history(thread).await;
    let roles: Vec<&str> = history
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "tool", "tool"],
        "{history:?}"
    );
    assert_eq!(history[0]["id"], user_id);
    assert_eq!(
        history[0]["content"],
        "Echo hi, wait a little, then ask me."
    );
    assert_eq!(history[1]["id"], assistant_id);
    let recorded: Vec<&str> = history[1]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(recorded, [echo_id, wait_id, frontend_id]);
    assert_eq!(
        history[1]["tool_calls"][0]["arguments"],
        json!({"text": "hi"})
    );
    for (m, (call_id, r)) in history[2..4]
        .iter()
        .zip([echo_id, wait_id].into_iter().zip(results))
    {
        assert_eq!(m["tool_call_id"], call_id);
        assert_eq!(m["id"], r["messageId"]);
        assert_eq!(m["content"], r["content"]);
        assert_eq!(
            m["ui_schema"], r["metadata"]["ui_schema"],
            "same UI live and replayed"
        );
    }
    assert_eq!(history[4]["id"], answer_id);
    assert_eq!(history[4]["tool_call_id"], frontend_id);
    assert_eq!(history[4]["content"], "{\"confirmed\":true}");

    // The thread stream, seen live during the runs, is valid AG-UI.
    let live = live.await.unwrap();
    let live_report = assert_stream_valid(&live, "live thread stream");
    let calls = [
        (echo_id, json!({"text": "hi"})),
        (wait_id, json!({"ms": 50})),
    ];
    assert_thread_stream(&live_report, thread, &calls, false);
    let live_events = live_report["events"].as_array().unwrap();
    assert!(
        call_events(live_events, frontend_id).is_empty(),
        "the frontend call left no trace in the thread's event log"
    );

    // Replayed from the log: valid too, and the same events.
    let replay = run_script(
        &app,
        "stream.mjs",
        &[
            "--thread",
            thread,
            "--after",
            "0",
            "--min-events",
            "9",
            "--idle-ms",
            "2500",
            "--timeout-ms",
            "15000",
        ],
    )
    .await;
    let replay_report = assert_stream_valid(&replay, "replayed thread stream");
    assert_thread_stream(&replay_report, thread, &calls, false);
    assert_eq!(
        replay_report["events"].as_array().unwrap()[1..],
        live_report["events"].as_array().unwrap()[1..],
        "replay and live carry the same logged events"
    );

    // A snapshot instead, with a resume point as a reconnecting EventSource
    // sends it: the snapshot holds the past, nothing is replayed after it.
    let snapshotted = snapshot_stream(&app, thread).await;
    let snapshot_report = assert_stream_valid(&snapshotted, "snapshot stream");
    assert_eq!(
        strs(&snapshot_report["types"]),
        ["RUN_STARTED", "MESSAGES_SNAPSHOT"],
        "{snapshot_report}"
    );
    let snapshot = &snapshot_report["events"][1];
    let snap_roles: Vec<&str> = snapshot["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        snap_roles,
        ["user", "assistant", "tool", "tool", "tool"],
        "{snapshot}"
    );
    for (i, r) in [(2, &results[0]), (3, &results[1])] {
        let m = &snapshot["messages"][i];
        assert_eq!(m["toolCallId"], r["toolCallId"]);
        assert_eq!(m["metadata"]["ui_schema"], r["metadata"]["ui_schema"]);
    }

    app.stop().await;
}

/// A thread whose run carried media parts (a user's image and document, an
/// application's result with an image) gives them back in its snapshot,
/// and `@ag-ui/core`'s schemas and the client's checks take that snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_with_media_parts_is_valid_ag_ui() {
    node_ready().await;
    let app = TestApp::spawn(Backend::Sqlite).await;
    let thread = "agui-media";
    let asked = json!([
        {"type": "text", "text": "is this the right chart?"},
        {"type": "image", "source": {"type": "data", "value": "iVBORw0KGgo=", "mimeType": "image/png"},
         "metadata": {"detail": "high"}},
        {"type": "document", "source": {"type": "url", "value": "https://example.test/q3.pdf"}},
    ]);
    let answered = json!([
        {"type": "text", "text": "cropped"},
        {"type": "image", "source": {"type": "file", "value": "file-9", "provider": "anthropic", "mimeType": "image/jpeg"}},
    ]);
    let input = json!({
        "threadId": thread, "runId": "run_1", "state": {}, "context": [], "forwardedProps": {},
        "tools": [{"name": "crop", "description": "Crop the image.", "parameters": {"type": "object"}}],
        "messages": [
            {"id": "u1", "role": "user", "content": asked},
            {"id": "a1", "role": "assistant", "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "crop", "arguments": "{}"}}]},
            {"id": "t1", "role": "tool", "toolCallId": "c1", "content": answered},
        ]
    });
    let r = app
        .post(&format!("/v1/threads/{thread}/runs"), &input)
        .await;
    assert_eq!(r.status(), 200);
    common::SseReader::new(r).until("RUN_FINISHED").await;

    let snapshotted = snapshot_stream(&app, thread).await;
    let report = assert_stream_valid(&snapshotted, "snapshot with media parts");
    let messages = &report["events"][1]["messages"];
    assert_eq!(messages[0]["content"], asked, "{messages}");
    assert_eq!(messages[2]["content"], answered, "{messages}");
    app.stop().await;
}

/// Reads the thread's stream with a snapshot, resumed from the start as a
/// reconnecting EventSource asks (stream.mjs), until it goes quiet.
async fn snapshot_stream(app: &TestApp, thread: &str) -> Output {
    thread_stream(app, thread, "0", true).await
}

/// Reads the thread's stream from `after` (`none`: no resume point), with
/// a snapshot or without, through stream.mjs, until it goes quiet.
async fn thread_stream(app: &TestApp, thread: &str, after: &str, snapshot: bool) -> Output {
    let snapshot = if snapshot { "true" } else { "false" };
    run_script(
        app,
        "stream.mjs",
        &[
            "--thread",
            thread,
            "--after",
            after,
            "--snapshot",
            snapshot,
            "--min-events",
            "2",
            "--idle-ms",
            "1500",
            "--timeout-ms",
            "10000",
        ],
    )
    .await
}

/// The messages a stream.mjs report says the stock client built, as it
/// built them.
fn built_messages(report: &Value) -> Vec<Value> {
    report["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("the client built messages: {report}"))
        .to_vec()
}

/// A chat backend records an assistant message with its calls and posts
/// each call (with or without the message's id), or posts a call no
/// message declares: a frontend watching live builds, with the stock
/// client, the messages it gets from a snapshot after a reload; each call
/// sits in the message that declared it, an undeclared one in its own.
#[tokio::test]
async fn a_frontend_shows_the_same_messages_live_and_after_a_reload() {
    node_ready().await;
    let app = TestApp::spawn(Backend::Sqlite).await;
    let thread = "declared-live";
    let t = format!("/v1/threads/{thread}");
    let echo = |id: &str| json!({"id": id, "name": "echo", "arguments": {"text": id}});
    for (body, status) in [
        (json!({"id": "u1", "role": "user", "content": "go"}), 201),
        (
            json!({"id": "am1", "role": "assistant", "content": "Let me", "tool_calls": [echo("c1"), echo("c2")]}),
            201,
        ),
    ] {
        let r = app.post(&format!("{t}/messages"), &body).await;
        assert_eq!(r.status(), status);
    }
    let (s, out) = app.call(thread, echo("c1")).await;
    assert_eq!(s, 200, "{out}");
    let mut c2 = echo("c2");
    c2["parent_message_id"] = json!("am1");
    let (s, out) = app.call(thread, c2).await;
    assert_eq!(s, 200, "{out}");
    let r = app
        .post(
            &format!("{t}/messages"),
            &json!({"id": "am2", "role": "assistant", "content": "", "tool_calls": [
                echo("c3"), {"id": "c5", "name": "echo", "arguments": {"txt": "typo"}}]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    // Results recorded after a later message still follow their call.
    let r = app
        .post(
            &format!("{t}/messages"),
            &json!({"id": "u2", "role": "user", "content": "later"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    // Posted as another message's call: refused, naming the right one, and
    // nothing is recorded.
    let mut c3 = echo("c3");
    c3["parent_message_id"] = json!("am1");
    let (s, out) = app.call(thread, c3).await;
    assert_eq!(s, 409, "{out}");
    assert!(
        out["detail"]
            .as_str()
            .unwrap()
            .contains("declared by message \"am2\""),
        "{out}"
    );
    let (s, out) = app.call(thread, echo("c3")).await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["replayed"], false, "run now, not replayed: {out}");
    // A declared call refused before it runs: its failure, with the
    // structured error under `metadata` live and after a reload.
    let (s, out) = app
        .call(
            thread,
            json!({"id": "c5", "name": "echo", "arguments": {"txt": "typo"}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["tool_agent_output"]["status"], "failure", "{out}");
    // A call no message declares: live, the client gives it an assistant
    // message named by the call; the snapshot shows that message too.
    let (s, out) = app.call(thread, echo("c4")).await;
    assert_eq!(s, 200, "{out}");

    let (live, reloaded, shown) = same_live_and_reloaded(&app, thread, "declared calls").await;
    for (call, parent) in [("c1", "am1"), ("c2", "am1"), ("c3", "am2")] {
        let start = live["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["type"] == "TOOL_CALL_START" && e["toolCallId"] == call)
            .unwrap_or_else(|| panic!("{call} announced: {}", live["types"]));
        assert_eq!(start["parentMessageId"], parent, "{start}");
    }
    assert_eq!(
        outline(&shown),
        [
            "user:u1[]",
            "assistant:am1[\"c1\", \"c2\"]",
            "tool:c1",
            "tool:c2",
            // c5, which can never run, was refused as am2 was recorded,
            // before c3 was posted: announced first, shown first.
            "assistant:am2[\"c5\", \"c3\"]",
            "tool:c5",
            "tool:c3",
            "user:u2[]",
            "assistant:c4[\"c4\"]",
            "tool:c4",
        ]
    );
    // The results carry what the live ones did: their tool's name.
    let results: Vec<&Value> = reloaded["events"][1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(results.len(), 5);
    assert!(
        results.iter().all(|m| m["metadata"]["toolName"] == "echo"),
        "{results:?}"
    );
    let failed = results.iter().find(|m| m["toolCallId"] == "c5").unwrap();
    assert_eq!(
        failed["metadata"]["error"]["code"], "INVALID_ARGUMENTS",
        "{failed}"
    );
    app.stop().await;
}

/// Calls no message declares, posted with or without a parent, land where
/// the stock client put them live, also after a reload: in the assistant
/// message their parent names; in a message named by the parent when no
/// message has that id yet (which the message posted later under that id
/// joins); in one of their own, made when they were announced, with their
/// result right after it, however many messages came while they ran; and
/// a call recorded before the message that declares it stays in its own.
async fn undeclared_calls_sit_where_the_client_put_them(backend: Backend) {
    node_ready().await;
    let app = TestApp::spawn(backend).await;
    let thread = "placed-live";
    let t = format!("/v1/threads/{thread}");
    let echo = |id: &str, parent: Option<&str>| {
        let mut call = json!({"id": id, "name": "echo", "arguments": {"text": id}});
        if let Some(parent) = parent {
            call["parent_message_id"] = json!(parent);
        }
        call
    };
    let post = |body: Value| {
        let app = &app;
        let t = &t;
        async move {
            let r = app.post(&format!("{t}/messages"), &body).await;
            assert_eq!(r.status(), 201, "{body}");
        }
    };
    post(json!({"id": "u1", "role": "user", "content": "go"})).await;
    post(json!({"id": "am1", "role": "assistant", "content": "Looking"})).await;
    for call in [
        echo("p1", Some("am1")),
        echo("g1", Some("ghost")),
        echo("g2", Some("ghost")),
    ] {
        let (s, out) = app.call(thread, call).await;
        assert_eq!(s, 200, "{out}");
    }
    // A call that runs while two messages are posted.
    let long = app.call(
        thread,
        json!({"id": "w1", "name": "wait", "arguments": {"ms": 1500}}),
    );
    let meanwhile = async {
        let mut status = Value::Null;
        for _ in 0..200 {
            let r = app.get(&format!("{t}/tool-calls/w1")).await;
            if r.status() == 200 {
                status = r.json::<Value>().await.unwrap()["status"].clone();
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(status, "running");
        post(json!({"id": "u2", "role": "user", "content": "meanwhile"})).await;
        post(json!({"id": "ghost", "role": "assistant", "content": "found it"})).await;
    };
    let ((s, out), ()) = tokio::join!(long, meanwhile);
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["tool_agent_output"]["status"], "success", "{out}");
    // Recorded before the message that declares it.
    let (s, out) = app.call(thread, echo("c9", None)).await;
    assert_eq!(s, 200, "{out}");
    post(json!({"id": "am9", "role": "assistant", "content": "done",
        "tool_calls": [{"id": "c9", "name": "echo", "arguments": {"text": "c9"}}]}))
    .await;

    let (_, _, shown) = same_live_and_reloaded(&app, thread, "undeclared calls").await;
    assert_eq!(
        outline(&shown),
        [
            "user:u1[]",
            "assistant:am1[\"p1\"]",
            "tool:p1",
            "assistant:ghost[\"g1\", \"g2\"]",
            "tool:g1",
            "tool:g2",
            "assistant:w1[\"w1\"]",
            "tool:w1",
            "user:u2[]",
            "assistant:c9[\"c9\"]",
            "tool:c9",
            "assistant:am9[]",
        ]
    );
    let ghost = shown.iter().find(|m| m["id"] == "ghost").unwrap();
    assert_eq!(ghost["content"], "found it", "{ghost}");
    app.stop().await;
}

both_backends!(
    undeclared_calls_sit_where_the_client_put_them,
    a_reload_before_declared_calls_are_posted_shows_them_once,
);

/// A frontend that reloads after an assistant message declared calls and
/// before they are posted gets the calls, with their arguments, in the
/// snapshot; when they are posted, the stream that began with it sends
/// their results and not their announcements again, whose arguments the
/// stock client would add to the ones it holds. It ends up with what a
/// frontend watching all along built.
async fn a_reload_before_declared_calls_are_posted_shows_them_once(backend: Backend) {
    node_ready().await;
    let app = TestApp::spawn(backend).await;
    let thread = "declared-later";
    let echo = |id: &str| json!({"id": id, "name": "echo", "arguments": {"text": id}});
    let r = app
        .post(
            &format!("/v1/threads/{thread}/messages"),
            &json!({"id": "am", "role": "assistant", "content": "", "tool_calls": [echo("e1"), echo("e2")]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let mark = app.data_dir.path().join("snapshot-taken");
    let mark_arg = mark.to_str().unwrap();
    let args = [
        "--thread",
        thread,
        "--after",
        "none",
        "--snapshot",
        "true",
        "--min-events",
        "4",
        "--idle-ms",
        "1500",
        "--timeout-ms",
        "15000",
        "--snapshot-mark",
        mark_arg,
    ];
    let reload = run_script(&app, "stream.mjs", &args);
    let post_calls = async {
        // Once the reload has its snapshot.
        for _ in 0..750 {
            if mark.exists() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(mark.exists(), "the reload got its snapshot");
        for id in ["e1", "e2"] {
            let (s, out) = app.call(thread, echo(id)).await;
            assert_eq!(s, 200, "{out}");
        }
    };
    let (reloaded, ()) = tokio::join!(reload, post_calls);
    let reloaded = assert_stream_valid(&reloaded, "the reload");
    assert_eq!(
        strs(&reloaded["types"]),
        [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "TOOL_CALL_RESULT",
            "TOOL_CALL_RESULT"
        ],
        "{reloaded}"
    );
    let live = thread_stream(&app, thread, "0", false).await;
    let live = assert_stream_valid(&live, "the live stream");
    assert_eq!(built_messages(&live), built_messages(&reloaded));
    let calls = &reloaded["messages"][0]["toolCalls"];
    assert_eq!(
        calls[0]["function"]["arguments"], r#"{"text":"e1"}"#,
        "{calls}"
    );
    assert_eq!(
        calls[1]["function"]["arguments"], r#"{"text":"e2"}"#,
        "{calls}"
    );
    app.stop().await;
}

/// Random conversations (seeded, so a failure repeats): user, system and
/// assistant messages, assistant messages declaring calls (some recorded
/// before the message that declares them), declared calls posted with or
/// without their message's id, calls no message declares posted with no
/// parent, an assistant message's id, or an id no message has yet (some
/// later posted as an assistant message), batches of such calls, a call
/// that runs while a message is posted, one that waits for a person while
/// a message is posted, and AG-UI runs. Each time, the messages the
/// stock client builds from the stream are the ones it gets from a
/// snapshot. Every declared call is posted in the end, and no call shares
/// an id with a message: the two differences the README lists.
#[tokio::test]
async fn random_conversations_look_the_same_live_and_after_a_reload() {
    node_ready().await;
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.permissions.ask = vec!["write_file".into()];
    })
    .await;
    let mut taken = [0; 10];
    let mut denied = 0;
    for seed in [7_u64, 1_234, 98_765, 4_242_424] {
        let thread = format!("random-{seed}");
        let t = format!("/v1/threads/{thread}");
        let say = |id: String, role: &'static str| {
            let (app, t) = (&app, &t);
            async move {
                let body = json!({"id": id, "role": role, "content": id});
                let r = app.post(&format!("{t}/messages"), &body).await;
                assert_eq!(r.status(), 201, "{body}");
            }
        };
        let mut c = Conversation::new(seed);
        let mut steps = Vec::new();
        for _ in 0..30 {
            let step = c.next(10);
            steps.push(step);
            taken[step] += 1;
            let context = format!("seed {seed}, steps {steps:?}");
            match step {
                0 => say(c.fresh("m"), "user").await,
                1 => say(c.fresh("m"), "system").await,
                2 => {
                    let body = c.assistant_message();
                    let r = app.post(&format!("{t}/messages"), &body).await;
                    assert_eq!(r.status(), 201, "{context}: {body}");
                }
                3 | 4 => {
                    let call = match step {
                        3 => c.declared_call(),
                        _ => None,
                    }
                    .unwrap_or_else(|| c.undeclared_call("echo"));
                    let (s, out) = app.call(&thread, call).await;
                    assert_eq!(s, 200, "{context}: {out}");
                }
                5 => {
                    let calls: Vec<Value> = (0..=c.next(3))
                        .map(|_| {
                            match c.next(2) {
                                0 => c.declared_call(),
                                _ => None,
                            }
                            .unwrap_or_else(|| c.undeclared_call("echo"))
                        })
                        .collect();
                    let r = app
                        .post(&format!("{t}/batches"), &json!({"calls": calls}))
                        .await;
                    assert_eq!(r.status(), 200, "{context}");
                    let out: Value = r.json().await.unwrap();
                    for result in out["results"].as_array().unwrap() {
                        assert_eq!(result["status"], 200, "{context}: {out}");
                    }
                }
                6 => {
                    // A call that runs while a message is posted.
                    let call = c.undeclared_call("wait");
                    let posted = say(c.fresh("m"), "user");
                    let ((s, out), ()) = tokio::join!(app.call(&thread, call), posted);
                    assert_eq!(s, 200, "{context}: {out}");
                }
                7 => {
                    // An AG-UI run: a user's message and an assistant's
                    // with calls, which the run makes.
                    let (user, assistant) = (c.fresh("m"), c.fresh("a"));
                    let calls: Vec<Value> = (0..=c.next(2))
                        .map(|_| {
                            let id = c.fresh("c");
                            let arguments = json!({"text": id}).to_string();
                            json!({"id": id, "type": "function",
                                "function": {"name": "echo", "arguments": arguments}})
                        })
                        .collect();
                    c.assistants.push(assistant.clone());
                    let input = json!({"threadId": thread, "runId": c.fresh("run"), "state": {},
                        "tools": [], "context": [], "forwardedProps": {}, "messages": [
                            {"id": user, "role": "user", "content": user},
                            {"id": assistant, "role": "assistant", "content": assistant,
                             "toolCalls": calls}]});
                    let r = app.post(&format!("{t}/runs"), &input).await;
                    assert_eq!(r.status(), 200, "{context}");
                    common::SseReader::new(r).until("RUN_FINISHED").await;
                }
                8 => {
                    // A call that waits for a person, who decides it after
                    // a message was posted: a denied one is a failed
                    // result.
                    let call = c.undeclared_call("write_file");
                    let (s, out) = app.call(&thread, call.clone()).await;
                    assert_eq!(s, 202, "{context}: {out}");
                    say(c.fresh("m"), "user").await;
                    let approval = out["approval"]["id"].as_str().unwrap();
                    let (decision, status) = match c.next(2) {
                        0 => ("approve", "success"),
                        _ => {
                            denied += 1;
                            ("deny", "failure")
                        }
                    };
                    let r = app
                        .post(
                            &format!("/v1/approvals/{approval}/decision"),
                            &json!({"decision": decision}),
                        )
                        .await;
                    assert_eq!(r.status(), 200, "{context}");
                    // It runs once approved; re-posted, it answers when done.
                    let answered = app.call_until_done(&thread, &call).await;
                    assert_eq!(
                        answered["tool_agent_output"]["status"], status,
                        "{context}: {answered}"
                    );
                }
                _ => {
                    // A message under an id calls named as their parent.
                    let body = c.ghost_message();
                    let r = app.post(&format!("{t}/messages"), &body).await;
                    assert_eq!(r.status(), 201, "{context}: {body}");
                }
            }
        }
        while let Some(call) = c.declared_call() {
            let (s, out) = app.call(&thread, call).await;
            assert_eq!(s, 200, "seed {seed}: {out}");
        }
        same_live_and_reloaded(&app, &thread, &format!("seed {seed}, steps {steps:?}")).await;
    }
    assert!(
        taken.iter().all(|&n| n > 0),
        "every kind of step: {taken:?}"
    );
    assert!(denied > 0, "a denied call among them");
    app.stop().await;
}

/// What a random conversation has so far.
struct Conversation {
    rng: u64,
    n: usize,
    assistants: Vec<String>,
    /// Declared and not posted yet: the call and the message declaring it.
    declared: Vec<(Value, String)>,
    /// Posted, declared by no message yet.
    undeclared: Vec<(Value, Option<String>)>,
    /// Named as a parent, no message with the id yet.
    ghosts: Vec<String>,
}

impl Conversation {
    fn new(seed: u64) -> Self {
        Conversation {
            rng: seed,
            n: 0,
            assistants: Vec::new(),
            declared: Vec::new(),
            undeclared: Vec::new(),
            ghosts: Vec::new(),
        }
    }

    /// Below `n`; xorshift64*: enough spread for picking steps.
    fn next(&mut self, n: usize) -> usize {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.n += 1;
        format!("{prefix}{}", self.n)
    }

    fn pick<T>(&mut self, from: &mut Vec<T>) -> Option<T> {
        if from.is_empty() {
            return None;
        }
        let i = self.next(from.len());
        Some(from.remove(i))
    }

    /// A new call no message declares, under no parent, an assistant
    /// message's id or an id no message has yet.
    fn undeclared_call(&mut self, tool: &str) -> Value {
        let id = self.fresh("c");
        let arguments = match tool {
            "wait" => json!({"ms": 40 + self.next(60)}),
            "write_file" => json!({"path": format!("{id}.txt"), "content": id}),
            _ => json!({"text": id}),
        };
        let call = json!({"id": id, "name": tool, "arguments": arguments});
        let mut posted = call.clone();
        match self.next(3) {
            0 if !self.assistants.is_empty() => {
                let i = self.next(self.assistants.len());
                posted["parent_message_id"] = json!(self.assistants[i]);
            }
            1 => {
                let ghost = match self.next(2) {
                    0 if !self.ghosts.is_empty() => {
                        let i = self.next(self.ghosts.len());
                        self.ghosts[i].clone()
                    }
                    _ => {
                        let ghost = self.fresh("g");
                        self.ghosts.push(ghost.clone());
                        ghost
                    }
                };
                posted["parent_message_id"] = json!(ghost);
            }
            _ => {}
        }
        let parent = posted["parent_message_id"].as_str().map(str::to_owned);
        self.undeclared.push((call, parent));
        posted
    }

    /// A declared call nobody has posted, with its message's id or without.
    fn declared_call(&mut self) -> Option<Value> {
        let mut declared = std::mem::take(&mut self.declared);
        let picked = self.pick(&mut declared);
        self.declared = declared;
        let (mut call, by) = picked?;
        if self.next(2) == 0 {
            call["parent_message_id"] = json!(by);
        }
        Some(call)
    }

    /// An assistant message (its text empty or not) under `id`, declaring
    /// up to two new calls and perhaps one posted before.
    fn assistant_message_as(&mut self, id: String) -> Value {
        let mut calls = Vec::new();
        for _ in 0..self.next(3) {
            let call = self.fresh("c");
            let call = json!({"id": call, "name": "echo", "arguments": {"text": call}});
            calls.push(call.clone());
            self.declared.push((call, id.clone()));
        }
        // One posted under no parent or under this message: a call posted
        // under another is that message's.
        let open: Vec<usize> = (0..self.undeclared.len())
            .filter(|&i| self.undeclared[i].1.as_ref().is_none_or(|p| *p == id))
            .collect();
        if self.next(2) == 0 && !open.is_empty() {
            let i = open[self.next(open.len())];
            calls.push(self.undeclared.remove(i).0);
        }
        let content = if self.next(3) == 0 { "" } else { id.as_str() };
        let mut body = json!({"id": id, "role": "assistant", "content": content});
        if !calls.is_empty() {
            body["tool_calls"] = Value::Array(calls);
        }
        self.assistants.push(id);
        body
    }

    fn assistant_message(&mut self) -> Value {
        let id = self.fresh("a");
        self.assistant_message_as(id)
    }

    /// An assistant message under an id calls named as their parent, or a
    /// new one if none is left.
    fn ghost_message(&mut self) -> Value {
        let mut ghosts = std::mem::take(&mut self.ghosts);
        let ghost = self.pick(&mut ghosts);
        self.ghosts = ghosts;
        match ghost {
            Some(id) => self.assistant_message_as(id),
            None => self.assistant_message(),
        }
    }
}

/// The messages the stock client builds from the thread's stream (from the
/// start of its log) and from a snapshot, checked to be the same; with the
/// two stream reports.
async fn same_live_and_reloaded(
    app: &TestApp,
    thread: &str,
    what: &str,
) -> (Value, Value, Vec<Value>) {
    let live = thread_stream(app, thread, "0", false).await;
    let live = assert_stream_valid(&live, "the live stream");
    let reloaded = thread_stream(app, thread, "none", true).await;
    let reloaded = assert_stream_valid(&reloaded, "the snapshot");
    let shown = built_messages(&live);
    let after_reload = built_messages(&reloaded);
    assert_eq!(outline(&shown), outline(&after_reload), "{what}");
    assert_eq!(
        shown, after_reload,
        "{what}\nlive: {}\nreloaded: {}",
        live["messages"], reloaded["messages"]
    );
    (live, reloaded, shown)
}

/// A message list as `role:id[its calls]`, a result as `tool:call`.
fn outline(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| match m["role"].as_str().unwrap() {
            "tool" => format!("tool:{}", m["toolCallId"].as_str().unwrap()),
            role => {
                let calls: Vec<&str> = m["toolCalls"]
                    .as_array()
                    .map(|c| c.iter().map(|c| c["id"].as_str().unwrap()).collect())
                    .unwrap_or_default();
                format!("{role}:{}{calls:?}", m["id"].as_str().unwrap())
            }
        })
        .collect()
}

/// Shape of a thread stream: RUN_STARTED on the thread, (a snapshot), then
/// logged events with increasing ids holding both calls' four events.
fn assert_thread_stream(report: &Value, thread: &str, calls: &[(&str, Value)], snapshot: bool) {
    let types = strs(&report["types"]);
    let events = report["events"].as_array().unwrap();
    assert_eq!(types[0], "RUN_STARTED", "{types:?}");
    assert_eq!(events[0]["threadId"], thread);
    let first_logged = if snapshot {
        assert_eq!(types[1], "MESSAGES_SNAPSHOT", "{types:?}");
        2
    } else {
        1
    };
    assert!(
        !types.contains(&"RUN_FINISHED") && !types.contains(&"RUN_ERROR"),
        "the subscription stays open: {types:?}"
    );
    let ids: Vec<i64> = report["ids"].as_array().unwrap()[first_logged..]
        .iter()
        .map(|i| {
            i.as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("logged events carry numeric ids: {}", report["ids"]))
        })
        .collect();
    assert_eq!(
        ids,
        (1..=ids.len() as i64).collect::<Vec<_>>(),
        "ids count up from 1"
    );
    for (call_id, args) in calls {
        let evs = call_events(events, call_id);
        let kinds: Vec<&str> = evs
            .iter()
            .filter(|(_, e)| e["type"] != "CUSTOM")
            .map(|(_, e)| e["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "TOOL_CALL_START",
                "TOOL_CALL_ARGS",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT"
            ],
            "{call_id}: {types:?}"
        );
        let delta: Value = serde_json::from_str(evs[1].1["delta"].as_str().unwrap()).unwrap();
        assert_eq!(delta, *args, "{call_id} arguments");
    }
    assert!(
        report["heartbeats"].as_u64().unwrap_or(0) >= 1,
        "a heartbeat comment arrived and did not disturb parsing: {}",
        report["heartbeats"]
    );
}

/// The stock HttpAgent (1.0.0) keeps an existing call on TOOL_CALL_START and
/// appends every TOOL_CALL_ARGS delta to the arguments it already holds. The
/// run stream therefore sends no TOOL_CALL_ARGS for the calls the client
/// itself sent; this guards against `{"text":"hi"}{"text":"hi"}` coming back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_agent_keeps_the_tool_call_arguments_it_sent() {
    node_ready().await;
    let app = TestApp::spawn(Backend::Sqlite).await;
    let report = drive_http_agent(&app, "agui-interop-2", "run-agui-interop-2").await;
    let sent = [
        ("echo", json!({"text": "hi"})),
        ("wait", json!({"ms": 50})),
        ("show_confirmation", json!({"question": "Done?"})),
    ];
    for turn in [&report, &report["second"]] {
        let assistant = &turn["messages"][2];
        assert_eq!(assistant["role"], "assistant");
        let calls = assistant["toolCalls"].as_array().unwrap();
        assert_eq!(calls.len(), sent.len(), "{assistant}");
        for (call, (name, args)) in calls.iter().zip(&sent) {
            assert_eq!(call["function"]["name"], *name);
            let text = call["function"]["arguments"].as_str().unwrap();
            let parsed: Value = serde_json::from_str(text).unwrap_or_else(|e| {
                panic!(
                    "the client's copy of the {name} arguments is no longer JSON ({e}): {text:?}"
                )
            });
            assert_eq!(parsed, *args, "{name}");
        }
    }
    app.stop().await;
}

/// The AG-UI interrupt round trip with the stock client: a run paused for
/// an approval and a frontend call ends with the interrupt outcome the
/// client accepts, and the next run's `resume` (approval approved, the
/// frontend call's result as the payload) lets the write run and finishes
/// as a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_agent_resumes_an_interrupted_run() {
    node_ready().await;
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.permissions.ask = vec!["write_file".into()];
    })
    .await;
    let out = run_script(&app, "interrupt.mjs", &["--thread", "agui-resume"]).await;
    let report = out.report();
    assert!(
        out.status.success(),
        "HttpAgent did not take the interrupt and its resume\nwarnings: {}\n{}",
        report["warnings"],
        out.describe()
    );
    let write = report["ids"]["write"].as_str().unwrap();
    let pick = report["ids"]["pick"].as_str().unwrap();
    let finished = &report["first"]["finishedParams"];
    assert_eq!(finished["outcome"], "interrupt", "{report}");
    assert_eq!(finished["event"]["type"], "interrupt", "{report}");
    let asked: Vec<(&str, &str)> = finished["interrupts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["reason"].as_str().unwrap(),
                i["toolCallId"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        asked,
        [("frontend_tool_call", pick), ("approval_required", write)],
        "{report}"
    );
    let second = &report["second"];
    assert_eq!(second["finishedParams"]["outcome"], "success", "{report}");
    assert_eq!(second["results"][0]["toolCallId"], write, "{report}");
    let ws = app.get_json("/v1/workspace").await;
    let saved = std::path::Path::new(ws["root"].as_str().unwrap()).join("colour.txt");
    assert_eq!(std::fs::read_to_string(saved).unwrap(), "teal\n");
    // The frontend call's result is the payload the client resumed with.
    let history = app.history("agui-resume").await;
    let answer = history
        .iter()
        .find(|m| m["tool_call_id"] == pick)
        .unwrap_or_else(|| panic!("a result for {pick}: {history:?}"));
    assert_eq!(answer["content"], r#"{"colour":"teal"}"#);
    app.stop().await;
}
