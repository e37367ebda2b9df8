//! The backbone end to end, on both backends: a tool call in, a stored,
//! streamed, replayable result out.

mod common;

use std::time::Duration;

use common::{Backend, Refusal, TestApp, assert_agui_conformant};
use serde_json::{Value, json};

async fn tool_call_in_three_shapes(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let shapes = [
        json!({"id": "call_n", "name": "echo", "arguments": {"text": "hi"}}),
        json!({"id": "call_o", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"hi\"}"}}),
        json!({"type": "tool_use", "id": "call_a", "name": "echo", "input": {"text": "hi"}}),
    ];
    for body in shapes {
        let (status, out) = app.call("t1", body.clone()).await;
        assert_eq!(status, 200, "{out}");
        let id = body["id"].as_str().unwrap();
        assert_eq!(out["tool_agent_output"]["tool_call_id"], id);
        assert_eq!(out["tool_agent_output"]["tool_name"], "echo");
        assert_eq!(out["tool_agent_output"]["status"], "success");
        assert_eq!(out["tool_agent_output"]["result"], json!({"text": "hi"}));
        assert_eq!(
            out["tool_agent_output"]["tool_call_args"],
            json!({"text": "hi"})
        );
        assert!(
            out["tool_agent_output"].get("ui_hints").is_none(),
            "hints stay internal"
        );
        // The model gets the complete JSON text of the result.
        assert_eq!(out["tool_response"]["content"], "{\"text\":\"hi\"}");
        assert_eq!(out["ui_schema"]["version"], "ui_schema/1");
        assert_eq!(out["ui_schema"]["catalog"], "core/1");
        assert_eq!(out["replayed"], false);
    }
    let history = app.history("t1").await;
    assert_eq!(history.len(), 3);
    assert!(history.iter().all(|m| m["role"] == "tool"));
}

async fn live_stream_and_history_carry_the_same_ui(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let mut sse = app.events("t2", "", None).await;
    let first = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(first.kind(), "RUN_STARTED");
    assert_eq!(first.data["threadId"], "t2");
    assert!(first.id.is_none());

    let (status, out) = app
        .call(
            "t2",
            json!({"id": "c1", "name": "echo", "arguments": {"text": "hello"}}),
        )
        .await;
    assert_eq!(status, 200);
    let frames = sse.until("TOOL_CALL_RESULT").await;
    let kinds: Vec<&str> = frames.iter().map(|f| f.kind()).collect();
    assert_eq!(
        kinds,
        [
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT"
        ]
    );
    let ids: Vec<i64> = frames.iter().map(|f| f.id.unwrap()).collect();
    assert_eq!(ids, [1, 2, 3, 4]);
    for f in &frames {
        assert_agui_conformant(f);
    }
    assert_eq!(frames[0].data["toolCallName"], "echo");
    assert_eq!(frames[1].data["delta"], "{\"text\":\"hello\"}");
    let result = &frames[3].data;
    assert_eq!(result["toolCallId"], "c1");
    assert_eq!(result["role"], "tool");
    assert_eq!(result["content"], out["tool_response"]["content"]);
    assert_eq!(result["messageId"], out["message_id"]);
    assert_eq!(result["metadata"]["status"], "success");
    // LF-only framing.
    assert!(!sse.transcript.contains('\r'));

    let live_ui = serde_json::to_string(&result["metadata"]["ui_schema"]).unwrap();
    let history = app.history("t2").await;
    let replay_ui = serde_json::to_string(&history[0]["ui_schema"]).unwrap();
    assert_eq!(
        live_ui, replay_ui,
        "history replays the live ui_schema byte for byte"
    );
    assert_eq!(history[0]["content"], out["tool_response"]["content"]);
    assert_eq!(history[0]["tool_call_id"], "c1");

    // The log keeps the result event as a reference to its tool message; a
    // resume rebuilds it, byte for byte the event streamed live.
    let mut resumed = app.events("t2", "?after=3", None).await;
    assert_eq!(
        resumed.next(Duration::from_secs(5)).await.unwrap().kind(),
        "RUN_STARTED"
    );
    let replayed = resumed.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(replayed.id, Some(4));
    assert_eq!(
        replayed.raw, frames[3].raw,
        "a resume replays the live TOOL_CALL_RESULT byte for byte"
    );
}

/// A file read is stored once in its message's metadata: the hints point
/// into the result instead of copying the text, and the code block the
/// live answer, the stream, a resume and the history show is the file's
/// text without the line numbers the model sees.
async fn a_file_read_is_stored_once_and_shown_alike_everywhere(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let line = "unique-line-of-the-stored-file\twith a tab";
    let text = format!("{line}\n").repeat(40);
    app.put_file("notes.txt", &text);
    let mut sse = app.events("rf", "", None).await;
    let (status, out) = app
        .call(
            "rf",
            json!({"id": "r1", "name": "read_file", "arguments": {"path": "notes.txt"}}),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    let shown = text.trim_end_matches('\n');
    assert_eq!(out["ui_schema"]["data"]["code"], shown, "{out}");
    assert!(
        out["tool_response"]["content"]
            .as_str()
            .unwrap()
            .contains(r"     1\tunique-line"),
        "the model sees numbered lines (in JSON text): {out}"
    );
    let live = sse.until("TOOL_CALL_RESULT").await.pop().unwrap();
    assert_eq!(live.data["metadata"]["ui_schema"], out["ui_schema"]);
    let history = app.history("rf").await;
    assert_eq!(history[0]["ui_schema"], out["ui_schema"]);
    let mut resumed = app.events("rf", "?after=0", None).await;
    let replayed = resumed.until("TOOL_CALL_RESULT").await.pop().unwrap();
    assert_eq!(replayed.raw, live.raw, "a resume replays the live event");

    let message_id = out["message_id"].as_str().unwrap();
    let stored = app.stored_metadata(message_id).await;
    assert_eq!(
        stored.matches("unique-line-of-the-stored-file").count(),
        40,
        "each line once, in the result: {stored}"
    );
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(
        stored["tool_agent_output"]["ui_hints"]["code"],
        json!({"result": "/content", "numbered": true})
    );
}

async fn resume_replays_exactly_what_was_missed(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for i in 0..3 {
        let (s, _) = app.call("t3", json!({"id": format!("c{i}"), "name": "echo", "arguments": {"text": i.to_string()}})).await;
        assert_eq!(s, 200);
    }
    // 3 calls × 4 events. Resume after 6 → events 7..=12, nothing else;
    // 6 is c1's TOOL_CALL_ARGS, inside the group its START (5) opened, so
    // the stream opens that group again first, with no id (the client's
    // resume point stays), and every event comes inside its group.
    let mut sse = app.events("t3", "", Some("6")).await;
    assert_eq!(
        sse.next(Duration::from_secs(5)).await.unwrap().kind(),
        "RUN_STARTED"
    );
    let mut frames = vec![];
    while let Some(f) = sse.next(Duration::from_millis(700)).await {
        frames.push(f);
    }
    assert_eq!(
        (
            frames[0].kind(),
            frames[0].id,
            &frames[0].data["toolCallId"]
        ),
        ("TOOL_CALL_START", None, &json!("c1"))
    );
    let ids: Vec<i64> = frames[1..].iter().map(|f| f.id.unwrap()).collect();
    assert_eq!(ids, (7..=12).collect::<Vec<_>>());
    assert_groups_close(&frames);

    let mut sse = app.events("t3", "?after=10", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let f = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!((f.kind(), f.id), ("TOOL_CALL_START", None));
    assert_eq!(f.data["toolCallName"], "echo");
    let f = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(f.id, Some(11));
    assert_eq!(f.kind(), "TOOL_CALL_END");
    // A resume point between groups opens none.
    let mut sse = app.events("t3", "?after=8", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let f = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!((f.kind(), f.id), ("TOOL_CALL_START", Some(9)));

    let mut sse = app.events("t3", "?snapshot=true", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let snap = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(snap.kind(), "MESSAGES_SNAPSHOT");
    let messages = snap.data["messages"].as_array().unwrap();
    // Each call no message declares comes in an assistant message of its
    // own, named by the call, as a stock client builds it live.
    assert_eq!(messages.len(), 6);
    assert_eq!(messages[0]["role"], "assistant");
    assert_eq!(messages[0]["id"], "c0");
    assert_eq!(messages[0]["toolCalls"][0]["id"], "c0");
    assert_eq!(messages[0]["toolCalls"][0]["function"]["name"], "echo");
    assert_eq!(messages[1]["role"], "tool");
    assert_eq!(messages[1]["toolCallId"], "c0");
    assert_eq!(
        messages[1]["metadata"]["ui_schema"]["version"],
        "ui_schema/1"
    );
    // The snapshot stands for the past: nothing is replayed after it.
    assert!(sse.next(Duration::from_millis(500)).await.is_none());
    // …but new events arrive live.
    app.call(
        "t3",
        json!({"id": "c9", "name": "echo", "arguments": {"text": "new"}}),
    )
    .await;
    assert_eq!(sse.next(Duration::from_secs(5)).await.unwrap().id, Some(13));

    // A snapshot with a resume point too (an EventSource reconnecting to a
    // `?snapshot=true` URL): the snapshot holds everything, so the events
    // after the resume point are not replayed on top of it.
    let mut sse = app.events("t3", "?snapshot=true", Some("4")).await;
    assert_eq!(
        sse.next(Duration::from_secs(5)).await.unwrap().kind(),
        "RUN_STARTED"
    );
    let snap = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(snap.kind(), "MESSAGES_SNAPSHOT");
    assert_eq!(snap.data["messages"].as_array().unwrap().len(), 8);
    assert!(sse.next(Duration::from_millis(500)).await.is_none());

    // These calls were posted with no assistant message declaring them; the
    // rebuilt context gives their results the turn a vendor's API requires.
    let context = app.get_json("/v1/threads/t3/context?format=openai").await;
    let messages = context["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["assistant", "tool", "tool", "tool", "tool"],
        "{context}"
    );
    let asked: Vec<&str> = messages[0]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(asked, ["c0", "c1", "c2", "c9"]);
    assert_eq!(
        messages[0]["tool_calls"][3]["function"],
        json!({"name": "echo", "arguments": "{\"text\":\"new\"}"})
    );
}

/// Every TOOL_CALL_ARGS/END and TEXT_MESSAGE_CONTENT/END of a stream comes
/// inside the group its START opened in that stream, as AG-UI clients
/// check, and a group is opened once.
fn assert_groups_close(frames: &[common::Frame]) {
    let mut open = std::collections::HashSet::new();
    for f in frames {
        let id = f.data["toolCallId"]
            .as_str()
            .or(f.data["messageId"].as_str())
            .unwrap_or_default()
            .to_string();
        match f.kind() {
            "TOOL_CALL_START" | "TEXT_MESSAGE_START" => {
                assert!(open.insert(id), "opened twice: {f:?}");
            }
            "TOOL_CALL_ARGS" | "TEXT_MESSAGE_CONTENT" => {
                assert!(open.contains(&id), "outside its group: {f:?}");
            }
            "TOOL_CALL_END" | "TEXT_MESSAGE_END" => {
                assert!(open.remove(&id), "closes no group: {f:?}");
            }
            _ => {}
        }
    }
}

async fn idempotent_calls_run_once(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let call = json!({"id": "same", "name": "echo", "arguments": {"text": "once"}});
    let (s1, first) = app.call("t4", call.clone()).await;
    let (s2, second) = app.call("t4", call).await;
    assert_eq!((s1, s2), (200, 200));
    assert_eq!(second["replayed"], true);
    assert_eq!(first["message_id"], second["message_id"]);
    assert_eq!(first["tool_response"], second["tool_response"]);
    assert_eq!(first["ui_schema"], second["ui_schema"]);
    assert_eq!(app.history("t4").await.len(), 1, "one tool message");
    let mut sse = app.events("t4", "", Some("0")).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let mut count = 0;
    while sse.next(Duration::from_millis(500)).await.is_some() {
        count += 1;
    }
    assert_eq!(count, 4, "events of one execution only");

    let (status, problem) = app
        .call(
            "t4",
            json!({"id": "same", "name": "echo", "arguments": {"text": "different"}}),
        )
        .await;
    assert_eq!(status, 409, "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("other arguments"),
        "{problem}"
    );
    assert_eq!(problem["errors"][0]["field"], "arguments", "{problem}");
    // The answer names what differs.
    for (call, field) in [
        (
            json!({"id": "same", "name": "wait", "arguments": {"ms": 1}}),
            "name",
        ),
        (
            json!({"id": "same", "name": "echo", "arguments": {"text": "once"}, "dry_run": true}),
            "dry_run",
        ),
        (
            json!({"id": "same", "name": "echo", "arguments": {"text": "once"}, "workspace": "sub"}),
            "workspace",
        ),
        // A call that would be refused on its own (an unknown tool,
        // arguments outside the schema) is still another call under a
        // recorded id: a 409, not a 422 saying to correct it and post it
        // again under this id.
        (
            json!({"id": "same", "name": "no_such_tool", "arguments": {"text": "once"}}),
            "name",
        ),
        (
            json!({"id": "same", "name": "echo", "arguments": {"text": 1}}),
            "arguments",
        ),
    ] {
        let (status, problem) = app.call("t4", call).await;
        assert_eq!(status, 409, "{field}: {problem}");
        assert_eq!(problem["errors"][0]["field"], field, "{problem}");
    }
    assert_eq!(app.history("t4").await.len(), 1, "still one tool message");

    // Concurrent duplicates: one execution, every caller gets the outcome.
    let posts = (0..8).map(|_| {
        app.call(
            "t4",
            json!({"id": "race", "name": "wait", "arguments": {"ms": 200}}),
        )
    });
    let results = futures::future::join_all(posts).await;
    let message_ids: std::collections::HashSet<String> = results
        .iter()
        .map(|(s, b)| {
            assert_eq!(*s, 200, "{b}");
            b["message_id"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(message_ids.len(), 1);
    assert_eq!(app.history("t4").await.len(), 2);
}

async fn messages_context_and_text_events(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let mut sse = app.events("t5", "", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let r = app
        .post(
            "/v1/threads/t5/messages",
            &json!({"role": "system", "content": "be brief"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = app
        .post(
            "/v1/threads/t5/messages",
            &json!({"role": "developer", "content": "prefer tools"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = app
        .post(
            "/v1/threads/t5/messages",
            &json!({"id": "u1", "role": "user", "content": "echo hi"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body, json!({"id": "u1", "seq": 3}));
    // Posted again (a retry after a timeout): the first post's answer,
    // nothing recorded or streamed twice. Another message under the same
    // id is a conflict.
    let again = json!({"id": "u1", "role": "user", "content": "echo hi"});
    let r = app.post("/v1/threads/t5/messages", &again).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body, json!({"id": "u1", "seq": 3, "replayed": true}));
    for other in [
        json!({"id": "u1", "role": "user", "content": "echo bye"}),
        json!({"id": "u1", "role": "system", "content": "echo hi"}),
    ] {
        let r = app.post("/v1/threads/t5/messages", &other).await;
        assert_eq!(r.status(), 409, "{other}");
    }
    let r = app
        .post(
            "/v1/threads/t5/messages",
            // As OpenAI returns a turn that calls tools: `content: null`.
            &json!({"id": "a1", "role": "assistant", "content": null,
                    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"hi\"}"}}]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let (s, _) = app.call("t5", json!({"id": "call_1", "name": "echo", "arguments": {"text": "hi"}, "parent_message_id": "a1"})).await;
    assert_eq!(s, 200);

    let frames = sse.until("TOOL_CALL_RESULT").await;
    let kinds: Vec<&str> = frames.iter().map(|f| f.kind()).collect();
    assert_eq!(
        kinds,
        [
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            // the assistant message is empty: no CONTENT event with an empty delta
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
        ]
    );
    for f in &frames {
        assert_agui_conformant(f);
        assert!(
            f.data.get("metadata").is_none() || f.kind() == "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_* carry no ui data"
        );
    }
    let started: Vec<&Value> = frames
        .iter()
        .filter(|f| f.kind() == "TEXT_MESSAGE_START")
        .map(|f| &f.data["role"])
        .collect();
    assert_eq!(started, ["system", "developer", "user", "assistant"]);
    assert_eq!(frames[11].data["parentMessageId"], "a1");

    let openai = app.get_json("/v1/threads/t5/context?format=openai").await;
    assert_eq!(
        openai["messages"],
        json!([
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": "prefer tools"},
            {"role": "user", "content": "echo hi"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"hi\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"text\":\"hi\"}"},
        ])
    );
    let anthropic = app
        .get_json("/v1/threads/t5/context?format=anthropic")
        .await;
    assert_eq!(anthropic["system"], "be brief\n\nprefer tools");
    assert_eq!(
        anthropic["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "echo hi"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "echo", "input": {"text": "hi"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "{\"text\":\"hi\"}", "is_error": false}]},
        ])
    );
    let history = app.history("t5").await;
    let roles: Vec<&str> = history
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "developer", "user", "assistant", "tool"]);
    assert_eq!(history[3]["tool_calls"][0]["name"], "echo");

    let dup = app
        .post(
            "/v1/threads/t5/messages",
            &json!({"id": "u1", "role": "user", "content": "again"}),
        )
        .await;
    assert_eq!(dup.status(), 409);
    let p: Value = dup.json().await.unwrap();
    assert_eq!(p["errors"][0]["pointer"], "/id", "{p}");
}

/// An AG-UI run's `developer` message is kept as `developer`: the
/// snapshot and the history give it back with the role it was sent with,
/// the OpenAI context keeps the role and the Anthropic one reads it as
/// system text; the run posted again with it is the same turn.
/// An AG-UI run runs the calls of its last assistant message; a call of an
/// earlier one that can never run (an unknown tool, arguments text cut
/// short) has its refusal recorded with it, as `/messages` records it, so
/// the model reads it in its context. It read a stand-in saying the call
/// was not posted.
async fn a_runs_earlier_calls_that_can_never_run_are_refused(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let call = |id: &str, name: &str, arguments: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}});
    let input = json!({
        "threadId": "earlier", "runId": "run_1", "state": {}, "tools": [], "context": [],
        "forwardedProps": {},
        "messages": [
            {"id": "u1", "role": "user", "content": "go"},
            {"id": "a1", "role": "assistant", "toolCalls": [
                call("x1", "no_such_tool", "{}"), call("x2", "echo", "{\"text\": \"cu")]},
            {"id": "u2", "role": "user", "content": "again"},
            {"id": "a2", "role": "assistant", "toolCalls": [call("x3", "echo", "{\"text\": \"ok\"}")]}
        ]
    });
    let r = app.post("/v1/threads/earlier/runs", &input).await;
    assert_eq!(r.status(), 200);
    let frames = common::SseReader::new(r).until("RUN_FINISHED").await;
    assert!(frames.iter().all(|f| f.kind() != "RUN_ERROR"));
    let context = app
        .get_json("/v1/threads/earlier/context?format=anthropic")
        .await;
    let results: Vec<(Value, Value, String)> = context["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| {
            let text = b["content"].as_str().unwrap().to_string();
            (b["tool_use_id"].clone(), b["is_error"].clone(), text)
        })
        .collect();
    assert_eq!(results.len(), 3, "{context}");
    assert_eq!((&results[0].0, &results[0].1), (&json!("x1"), &json!(true)));
    assert!(results[0].2.contains("TOOL_NOT_FOUND"), "{results:?}");
    assert_eq!((&results[1].0, &results[1].1), (&json!("x2"), &json!(true)));
    assert!(results[1].2.contains("is not valid JSON"), "{results:?}");
    assert_eq!(
        (&results[2].0, &results[2].1),
        (&json!("x3"), &json!(false))
    );
}

async fn a_runs_developer_message_keeps_its_role(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let input = json!({
        "threadId": "dev", "runId": "run_1", "state": {}, "tools": [], "context": [],
        "forwardedProps": {},
        "messages": [
            {"id": "s1", "role": "system", "content": "be brief"},
            {"id": "d1", "role": "developer", "content": "answer in French"},
            {"id": "u1", "role": "user", "content": "hi"}
        ]
    });
    for attempt in ["first", "again"] {
        let r = app.post("/v1/threads/dev/runs", &input).await;
        assert_eq!(r.status(), 200, "{attempt}");
        let frames = common::SseReader::new(r).until("RUN_FINISHED").await;
        assert!(frames.iter().all(|f| f.kind() != "RUN_ERROR"), "{attempt}");
    }
    let mut sse = app.events("dev", "?snapshot=true", None).await;
    let snapshot = sse.until("MESSAGES_SNAPSHOT").await.pop().unwrap();
    assert_agui_conformant(&snapshot);
    assert_eq!(
        snapshot.data["messages"],
        json!([
            {"id": "s1", "role": "system", "content": "be brief"},
            {"id": "d1", "role": "developer", "content": "answer in French"},
            {"id": "u1", "role": "user", "content": "hi"}
        ])
    );
    let roles: Vec<Value> = app
        .history("dev")
        .await
        .iter()
        .map(|m| m["role"].clone())
        .collect();
    assert_eq!(roles, ["system", "developer", "user"]);
    let openai = app.get_json("/v1/threads/dev/context?format=openai").await;
    assert_eq!(
        openai["messages"][1],
        json!({"role": "developer", "content": "answer in French"})
    );
    let anthropic = app
        .get_json("/v1/threads/dev/context?format=anthropic")
        .await;
    assert_eq!(anthropic["system"], "be brief\n\nanswer in French");
    assert_eq!(
        anthropic["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    );
}

/// A run posted again (a client's retry) does not execute its calls twice:
/// each is replayed under the assistant message that carries it, with the
/// result the first run stored.
async fn a_retried_run_replays_its_calls_under_their_message(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let input = json!({
        "threadId": "rr", "runId": "run_1", "state": {}, "tools": [], "context": [],
        "forwardedProps": {},
        "messages": [
            {"id": "u1", "role": "user", "content": "echo it"},
            {"id": "a1", "role": "assistant", "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"once\"}"}}]}
        ]
    });
    let mut results = Vec::new();
    for attempt in ["first", "retry"] {
        let resp = app.post("/v1/threads/rr/runs", &input).await;
        assert_eq!(resp.status(), 200, "{attempt}");
        let frames = common::SseReader::new(resp).until("RUN_FINISHED").await;
        for f in &frames {
            assert_agui_conformant(f);
        }
        // A run stream leaves out TOOL_CALL_ARGS: the client sent them.
        let kinds: Vec<&str> = frames.iter().map(|f| f.kind()).collect();
        assert_eq!(
            kinds,
            [
                "RUN_STARTED",
                "TOOL_CALL_START",
                "TOOL_CALL_END",
                "TOOL_CALL_RESULT",
                "RUN_FINISHED"
            ],
            "{attempt}"
        );
        assert_eq!(frames[1].data["toolCallId"], "c1", "{attempt}");
        assert_eq!(frames[1].data["parentMessageId"], "a1", "{attempt}");
        results.push(
            frames[1..4]
                .iter()
                .map(|f| f.data.clone())
                .collect::<Vec<_>>(),
        );
    }
    // The retry shows the call as recorded: the same events, with the
    // moments they were recorded at, as the thread's log and the call's
    // record have them.
    assert_eq!(results[0], results[1]);
    let mut log = app.events("rr", "?after=0", None).await;
    let logged: Vec<Value> = log
        .until("TOOL_CALL_RESULT")
        .await
        .into_iter()
        .filter(|f| ["TOOL_CALL_START", "TOOL_CALL_END", "TOOL_CALL_RESULT"].contains(&f.kind()))
        .map(|f| f.data)
        .collect();
    assert_eq!(logged, results[1]);
    let record = app.get_json("/v1/threads/rr/tool-calls/c1").await;
    assert_eq!(record["created_at_ms"], results[1][0]["timestamp"]);
    assert_eq!(record["created_at_ms"], results[1][1]["timestamp"]);
    assert_eq!(record["finished_at_ms"], results[1][2]["timestamp"]);

    // A call recorded before the run's message declared it: the run shows
    // it as it was announced, with no parent.
    let (s, out) = app
        .call(
            "rr2",
            json!({"id": "c1", "name": "echo", "arguments": {"text": "once"}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    let mut later = input.clone();
    later["threadId"] = json!("rr2");
    let resp = app.post("/v1/threads/rr2/runs", &later).await;
    assert_eq!(resp.status(), 200);
    let frames = common::SseReader::new(resp).until("RUN_FINISHED").await;
    let start = frames
        .iter()
        .find(|f| f.kind() == "TOOL_CALL_START")
        .expect("the call shown");
    let mut log = app.events("rr2", "?after=0", None).await;
    let logged = log.until("TOOL_CALL_START").await.pop().unwrap();
    assert_eq!(start.data, logged.data);
    assert!(
        start.data.get("parentMessageId").is_none(),
        "{:?}",
        start.data
    );
    let tools: Vec<Value> = app
        .history("rr")
        .await
        .into_iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tools.len(), 1, "executed once: {tools:?}");
}

/// What a run records, every watcher of the thread sees, and the context
/// rebuilt from it is one both vendors accept: the run's text messages
/// stream as posted messages do, a call whose arguments are not a JSON object
/// shows the same arguments everywhere, and a frontend's result sent
/// without the turn that asked for it still gets a named call.
async fn a_runs_messages_reach_watchers_and_a_valid_context(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let run = |messages: Value| {
        json!({"threadId": "rw", "runId": "run_1", "state": {}, "tools": [], "context": [],
               "forwardedProps": {}, "messages": messages})
    };
    // The same id twice in one input is refused before anything is stored.
    let r = app
        .post(
            "/v1/threads/rw/runs",
            &run(json!([{"id": "m", "role": "user", "content": "a"},
                        {"id": "m", "role": "user", "content": "b"}])),
        )
        .await;
    assert_eq!(r.status(), 422);
    let p: Value = r.json().await.unwrap();
    assert!(
        p["detail"].as_str().unwrap().contains("earlier message"),
        "{p}"
    );
    assert_eq!(app.get("/v1/threads/rw/history").await.status(), 404);

    let mut sse = app.events("rw", "", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let r = app
        .post(
            "/v1/threads/rw/runs",
            &run(json!([
                {"id": "u1", "role": "user", "content": "do it"},
                {"id": "t0", "role": "tool", "toolCallId": "fe0", "content": "picked"},
                {"id": "a1", "role": "assistant", "content": "on it", "toolCalls": [
                    {"id": "k1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"hi\"}"}},
                    {"id": "k2", "type": "function", "function": {"name": "echo", "arguments": "not json"}}]}
            ])),
        )
        .await;
    assert_eq!(r.status(), 200);
    let run_frames = common::SseReader::new(r).until("RUN_FINISHED").await;
    assert!(
        run_frames
            .iter()
            .all(|f| !f.kind().starts_with("TEXT_MESSAGE")),
        "the run's own stream does not send its client's messages back"
    );
    let mut watched = sse.until("TOOL_CALL_RESULT").await;
    watched.extend(sse.until("TOOL_CALL_RESULT").await);
    for f in &watched {
        assert_agui_conformant(f);
    }
    let seen: Vec<(String, Value)> = watched
        .iter()
        .map(|f| {
            let id = ["messageId", "toolCallId"]
                .iter()
                .find_map(|k| f.data.get(*k))
                .cloned()
                .unwrap_or(Value::Null);
            (f.kind().to_string(), id)
        })
        .collect();
    let expected: Vec<(String, Value)> = [
        ("TEXT_MESSAGE_START", "u1"),
        ("TEXT_MESSAGE_CONTENT", "u1"),
        ("TEXT_MESSAGE_END", "u1"),
        ("TEXT_MESSAGE_START", "a1"),
        ("TEXT_MESSAGE_CONTENT", "a1"),
        ("TEXT_MESSAGE_END", "a1"),
        ("TOOL_CALL_START", "k1"),
        ("TOOL_CALL_ARGS", "k1"),
        ("TOOL_CALL_END", "k1"),
        ("TOOL_CALL_RESULT", "k1"),
        ("TOOL_CALL_START", "k2"),
        ("TOOL_CALL_ARGS", "k2"),
        ("TOOL_CALL_END", "k2"),
        ("TOOL_CALL_RESULT", "k2"),
    ]
    .iter()
    .map(|(k, id)| (k.to_string(), json!(id)))
    .collect();
    // A result event is compared by its call. The frontend's result is in
    // the history, not in the stream, which never started its call.
    let seen: Vec<(String, Value)> = seen
        .into_iter()
        .zip(&watched)
        .map(|((kind, id), f)| match kind.as_str() {
            "TOOL_CALL_RESULT" => (kind, f.data["toolCallId"].clone()),
            _ => (kind, id),
        })
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(watched[1].data["delta"], "do it");
    assert_eq!(watched[3].data["role"], "assistant");

    // One representation of k2's arguments: the stream's, the history's,
    // the call's own record and both contexts.
    let raw = json!({"_raw": "not json"});
    assert_eq!(watched[11].data["delta"], raw.to_string());
    let history = app.history("rw").await;
    assert!(
        history
            .iter()
            .any(|m| m["id"] == "t0" && m["content"] == "picked"),
        "{history:?}"
    );
    let a1 = history.iter().find(|m| m["id"] == "a1").unwrap();
    assert_eq!(a1["tool_calls"][1]["arguments"], raw, "{a1}");
    let view = app.get_json("/v1/threads/rw/tool-calls/k2").await;
    assert_eq!(view["arguments"], raw, "{view}");
    let error = &view["outcome"]["tool_agent_output"]["error"];
    assert_eq!(error["code"], "INVALID_ARGUMENTS", "{view}");
    // The refusal /tool-calls gives such text: where, and what to do.
    assert_eq!(
        error["hint"], "send the arguments as one JSON object",
        "{view}"
    );
    assert_eq!(error["errors"][0]["path"], "", "{view}");
    let openai = app.get_json("/v1/threads/rw/context?format=openai").await;
    let calls: Vec<&Value> = openai["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["tool_calls"].as_array())
        .flatten()
        .collect();
    assert_eq!(calls.len(), 3, "{openai}");
    for c in &calls {
        assert!(c["function"]["name"].is_string(), "{openai}");
        assert!(c["function"]["arguments"].is_string(), "{openai}");
    }
    assert_eq!(calls[0]["id"], "fe0");
    assert_eq!(calls[0]["function"]["name"], "unrecorded_tool");
    assert_eq!(calls[2]["function"]["arguments"], raw.to_string());
    let anthropic = app
        .get_json("/v1/threads/rw/context?format=anthropic")
        .await;
    let uses: Vec<&Value> = anthropic["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap())
        .filter(|b| b["type"] == "tool_use")
        .collect();
    assert_eq!(uses.len(), 3, "{anthropic}");
    for u in &uses {
        assert!(u["name"].is_string(), "{anthropic}");
        assert!(u["input"].is_object(), "{anthropic}");
    }
    assert_eq!(uses[2]["input"], raw);
}

async fn history_pages_backwards_with_cursors(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for i in 1..=7 {
        let r = app
            .post(
                "/v1/threads/t6/messages",
                &json!({"id": format!("m{i}"), "role": "user", "content": format!("n{i}")}),
            )
            .await;
        assert_eq!(r.status(), 201);
    }
    let page1 = app.get_json("/v1/threads/t6/history?limit=3").await;
    let ids = |p: &Value| {
        p["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(&page1), ["m5", "m6", "m7"]);
    let c = page1["next_cursor"].as_str().unwrap();
    let page2 = app
        .get_json(&format!("/v1/threads/t6/history?limit=3&before={c}"))
        .await;
    assert_eq!(ids(&page2), ["m2", "m3", "m4"]);
    let c = page2["next_cursor"].as_str().unwrap();
    let page3 = app
        .get_json(&format!("/v1/threads/t6/history?limit=3&before={c}"))
        .await;
    assert_eq!(ids(&page3), ["m1"]);
    assert!(page3.get("next_cursor").is_none());
}

/// `GET /v1/threads` lists the caller's threads, newest first, page by
/// page, each with its message count and the last event id to resume its
/// stream from; another owner's threads never show, and bad paging
/// parameters are refused.
async fn an_owner_lists_their_threads_page_by_page(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for (i, thread) in ["l1", "l2", "l3", "l4", "l5"].iter().enumerate() {
        for n in 0..=i {
            let r = app
                .post(
                    &format!("/v1/threads/{thread}/messages"),
                    &json!({"role": "user", "content": format!("n{n}")}),
                )
                .await;
            assert_eq!(r.status(), 201);
        }
        // Threads made in one millisecond still page in a stable order.
        if i % 2 == 1 {
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    }
    let (s, _) = app
        .call(
            "l5",
            json!({"id": "c", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200);
    // Another owner's thread.
    let r = app
        .post_as(
            &app.token_for("someone-else"),
            "/v1/threads/theirs/messages",
            &json!({"role": "user", "content": "private"}),
        )
        .await;
    assert_eq!(r.status(), 201);

    let mut seen = Vec::new();
    let mut path = "/v1/threads?limit=2".to_string();
    loop {
        let page = app.get_json(&path).await;
        let threads = page["threads"].as_array().unwrap().clone();
        assert!(threads.len() <= 2, "{page}");
        seen.extend(threads);
        match page["next_cursor"].as_str() {
            Some(c) => path = format!("/v1/threads?limit=2&before={c}"),
            None => break,
        }
    }
    let ids: Vec<&str> = seen.iter().map(|t| t["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["l5", "l4", "l3", "l2", "l1"], "{seen:?}");
    let l5 = &seen[0];
    assert_eq!(
        l5["messages"], 6,
        "five user messages and a tool result: {l5}"
    );
    // Three TEXT_MESSAGE events per message, four for the echo call.
    assert_eq!(l5["last_event_id"], 5 * 3 + 4, "{l5}");
    assert!(l5["last_message_at_ms"].as_i64().unwrap() >= l5["created_at_ms"].as_i64().unwrap());
    assert_eq!(seen[4]["messages"], 1);
    // The last event id is where a stream picks up with nothing missed.
    let last = l5["last_event_id"].as_i64().unwrap();
    let r = app
        .get(&format!("/v1/threads/l5/events?after={}", last + 1))
        .await;
    assert_eq!(r.status(), 400, "one past the last is in the future");

    // The other owner sees theirs alone.
    let r = app
        .client
        .get(app.url("/v1/threads"))
        .bearer_auth(app.token_for("someone-else"))
        .send()
        .await
        .unwrap();
    let page: Value = r.json().await.unwrap();
    let theirs: Vec<&str> = page["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(theirs, ["theirs"]);

    for bad in [
        "/v1/threads?limit=0",
        "/v1/threads?limit=201",
        "/v1/threads?before=garbage",
        "/v1/threads?before=12:bad%20id",
        "/v1/threads?before=:l1",
    ] {
        let r = app.get(bad).await;
        assert_eq!(r.status(), 400, "{bad}");
    }
}

/// Streams opened with `?snapshot=true` while results keep committing:
/// every result is in the snapshot or streamed after it, never both and
/// never neither.
async fn a_snapshot_and_the_stream_after_it_never_overlap(backend: Backend) {
    const CALLS: usize = 120;
    let app = std::sync::Arc::new(TestApp::spawn(backend).await);
    let (s, _) = app
        .call(
            "snap",
            json!({"id": "c0", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200);
    let poster = {
        let app = app.clone();
        tokio::spawn(async move {
            for i in 1..CALLS {
                let (s, out) = app
                    .call(
                        "snap",
                        json!({"id": format!("c{i}"), "name": "echo", "arguments": {"text": "x"}}),
                    )
                    .await;
                assert_eq!(s, 200, "{out}");
            }
        })
    };
    let mut watchers = Vec::new();
    for _ in 0..12 {
        let mut sse = app.events("snap", "?snapshot=true", None).await;
        watchers.push(tokio::spawn(async move {
            let mut seen: Vec<String> = Vec::new();
            while seen.len() < CALLS {
                let Some(f) = sse.next(Duration::from_secs(10)).await else {
                    break;
                };
                match f.kind() {
                    "MESSAGES_SNAPSHOT" => seen.extend(
                        f.data["messages"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter_map(|m| m["toolCallId"].as_str().map(str::to_string)),
                    ),
                    "TOOL_CALL_RESULT" => {
                        seen.push(f.data["toolCallId"].as_str().unwrap().to_string())
                    }
                    _ => {}
                }
            }
            seen
        }));
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    poster.await.unwrap();
    for watcher in watchers {
        let seen = watcher.await.unwrap();
        let distinct: std::collections::HashSet<&String> = seen.iter().collect();
        assert_eq!(distinct.len(), seen.len(), "a result came twice: {seen:?}");
        assert_eq!(seen.len(), CALLS, "a result is missing: {seen:?}");
    }
}

/// A snapshot shows running calls as it shows finished ones: d1 in the
/// assistant message declaring it, w1 (posted to /tool-calls alone, by an
/// alias) in a message of its own made where it was announced, before the
/// user message posted while it runs; neither is announced again, and
/// their results follow. A running call the snapshot cannot show (its id
/// is a message's) is announced again right after it, without ids.
async fn a_snapshot_shows_running_calls_where_they_were_announced(backend: Backend) {
    let app = std::sync::Arc::new(TestApp::spawn(backend).await);
    let r = app
        .post(
            "/v1/threads/sr/messages",
            &json!({"role": "assistant", "tool_calls": [
                {"id": "d1", "name": "wait", "arguments": {"ms": 1500}}]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let r = app
        .post(
            "/v1/threads/sr/messages",
            &json!({"id": "x1", "role": "user", "content": "first"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let mut calls = Vec::new();
    for call in [
        json!({"id": "d1", "name": "wait", "arguments": {"ms": 1500}}),
        json!({"id": "w1", "name": "sleep", "arguments": {"ms": 1500}}),
        json!({"id": "x1", "name": "wait", "arguments": {"ms": 1500}}),
    ] {
        let app = app.clone();
        calls.push(tokio::spawn(async move { app.call("sr", call).await.0 }));
    }
    for id in ["d1", "w1", "x1"] {
        let mut status = Value::Null;
        for _ in 0..100 {
            let r = app.get(&format!("/v1/threads/sr/tool-calls/{id}")).await;
            if r.status() == 200 {
                status = r.json::<Value>().await.unwrap()["status"].clone();
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(status, "running", "{id}");
    }
    let r = app
        .post(
            "/v1/threads/sr/messages",
            &json!({"id": "u2", "role": "user", "content": "meanwhile"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let mut sse = app.events("sr", "?snapshot=true", None).await;
    let mut seen = Vec::new();
    let mut snapshot = Value::Null;
    while let Some(f) = sse.next(Duration::from_secs(10)).await {
        let call = f.data["toolCallId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        seen.push((f.kind().to_string(), call));
        match f.kind() {
            "MESSAGES_SNAPSHOT" => snapshot = f.data["messages"].clone(),
            "TOOL_CALL_START" => {
                assert_eq!(f.id, None, "not a logged event: no resume point");
                assert_eq!(f.data["toolCallName"], "wait");
            }
            "TOOL_CALL_ARGS" => assert_eq!(f.data["delta"], r#"{"ms":1500}"#),
            _ => {}
        }
        let results = seen
            .iter()
            .filter(|(kind, _)| kind == "TOOL_CALL_RESULT")
            .count();
        if results == 3 {
            break;
        }
    }
    // The snapshot: each call where the client put it live.
    let outline: Vec<String> = snapshot
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let calls: Vec<String> = m["toolCalls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| format!("{}:{}", c["id"].as_str().unwrap(), c["function"]["name"]))
                .collect();
            format!("{}:{}{calls:?}", m["role"].as_str().unwrap(), m["id"])
        })
        .collect();
    assert_eq!(outline.len(), 4, "{snapshot}");
    assert!(outline[0].starts_with("assistant:"), "{outline:?}");
    assert_eq!(
        [
            &outline[0][outline[0].find('[').unwrap()..],
            &outline[1],
            &outline[2],
            &outline[3]
        ],
        [
            r#"["d1:\"wait\""]"#,
            r#"user:"x1"[]"#,
            r#"assistant:"w1"["w1:\"wait\""]"#,
            r#"user:"u2"[]"#,
        ],
        "{snapshot}"
    );
    let kinds: Vec<(&str, &str)> = seen
        .iter()
        .map(|(k, c)| (k.as_str(), c.as_str()))
        // Progress reports aside.
        .filter(|(k, _)| !["RUN_STARTED", "CUSTOM"].contains(k))
        .collect();
    assert_eq!(
        kinds.get(..4),
        Some(
            &[
                ("MESSAGES_SNAPSHOT", ""),
                ("TOOL_CALL_START", "x1"),
                ("TOOL_CALL_ARGS", "x1"),
                ("TOOL_CALL_END", "x1"),
            ][..]
        ),
        "{kinds:?}"
    );
    let mut rest = kinds[4..].to_vec();
    rest.sort();
    assert_eq!(
        rest,
        [
            ("TOOL_CALL_RESULT", "d1"),
            ("TOOL_CALL_RESULT", "w1"),
            ("TOOL_CALL_RESULT", "x1")
        ],
        "{kinds:?}"
    );
    for call in calls {
        assert_eq!(call.await.unwrap(), 200);
    }
}

async fn failures_are_data_with_an_error_template(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.tools.timeout_secs = 1).await;
    let (status, out) = app
        .call(
            "t7",
            json!({"id": "slow", "name": "wait", "arguments": {"ms": 5000}}),
        )
        .await;
    assert_eq!(
        status, 200,
        "a tool failure is a result, not a request error: {out}"
    );
    let output = &out["tool_agent_output"];
    assert_eq!(output["status"], "failure");
    assert_eq!(output["error"]["code"], "TIMEOUT");
    assert_eq!(output["error"]["retryable"], true);
    assert_eq!(output["result"], Value::Null);
    let content: Value =
        serde_json::from_str(out["tool_response"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["error"]["code"], "TIMEOUT");
    let ui = &out["ui_schema"];
    let types: Vec<&str> = ui["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert!(types.contains(&"Badge"), "generic error template: {ui}");
    assert!(
        ui["fallback_text"]
            .as_str()
            .unwrap()
            .contains("did not finish"),
        "{ui}"
    );
}

async fn progress_of_long_tools_streams_as_custom_events(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let mut sse = app.events("t8", "", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let (s, _) = app
        .call(
            "t8",
            json!({"id": "w", "name": "sleep", "arguments": {"ms": 300}}),
        )
        .await;
    assert_eq!(s, 200);
    let frames = sse.until("TOOL_CALL_RESULT").await;
    let progress: Vec<&Value> = frames
        .iter()
        .filter(|f| f.kind() == "CUSTOM")
        .map(|f| &f.data)
        .collect();
    assert!(!progress.is_empty());
    for p in &progress {
        assert_eq!(p["name"], "tool_call.progress");
        assert_eq!(p["value"]["toolCallId"], "w");
    }
    let result = frames.last().unwrap();
    assert_eq!(
        result.data["metadata"]["toolName"], "wait",
        "aliases resolve to the tool"
    );
    let start = frames
        .iter()
        .find(|f| f.kind() == "TOOL_CALL_START")
        .unwrap();
    assert_eq!(
        start.data["toolCallName"], "wait",
        "a call no message declares is announced under its tool's own name, as the \
         snapshot and the history show it"
    );
    let ids: Vec<i64> = frames.iter().map(|f| f.id.unwrap()).collect();
    assert!(
        ids.windows(2).all(|w| w[1] == w[0] + 1),
        "gap-free ordered ids: {ids:?}"
    );
}

/// A caller that hangs up while its call runs does not cut the call: it
/// finishes, is stored and streamed, and the same id then replays it.
async fn a_caller_that_hangs_up_does_not_cut_the_call(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let mut sse = app.events("t9", "", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    // The client gives up well after the server has the request, and well
    // before the call ends, even on a loaded machine.
    let call = json!({"id": "gone", "name": "wait", "arguments": {"ms": 2000}});
    let hung_up = app
        .client
        .post(app.url("/v1/threads/t9/tool-calls"))
        .bearer_auth(&app.token)
        .json(&call)
        .timeout(Duration::from_millis(400))
        .send()
        .await;
    assert!(
        hung_up.as_ref().is_err_and(|e| e.is_timeout()),
        "the client gave up before the call ended: {hung_up:?}"
    );
    let frames = sse.until("TOOL_CALL_RESULT").await;
    let result = frames.last().unwrap();
    assert_eq!(result.data["toolCallId"], "gone");
    assert_eq!(
        result.data["metadata"]["status"], "success",
        "{}",
        result.data
    );
    let (status, replay) = app.call("t9", call).await;
    assert_eq!(status, 200, "{replay}");
    assert_eq!(replay["replayed"], true);
    assert_eq!(replay["message_id"], result.data["messageId"]);
}

/// The log keeps each TOOL_CALL_RESULT as a reference to its tool message
/// and a resume rebuilds it: byte for byte the event streamed live, for a
/// success carrying awkward text and numbers and for a failure with its
/// error.
async fn resumed_results_are_the_live_ones_byte_for_byte(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.tools.timeout_secs = 1).await;
    let mut live = app.events("t9", "", None).await;
    assert_eq!(
        live.next(Duration::from_secs(5)).await.unwrap().kind(),
        "RUN_STARTED"
    );
    let text = "Zürich \"quoted\" \\ tab\t line\n \u{1f4c5} \u{2028} </script>";
    let numbers = json!([f64::MAX, 5e-324, 0.1, 2.5e-8, u64::MAX, i64::MIN, -0.0]);
    let calls = [
        json!({"id": "ok", "name": "echo", "arguments": {"text": text, "n": numbers}}),
        json!({"id": "slow", "name": "wait", "arguments": {"ms": 5000}}),
    ];
    let mut streamed = Vec::new();
    for call in calls {
        let (status, out) = app.call("t9", call).await;
        assert_eq!(status, 200, "{out}");
        streamed.push(live.until("TOOL_CALL_RESULT").await.pop().unwrap());
    }
    assert_eq!(streamed[1].data["metadata"]["error"]["code"], "TIMEOUT");
    // Postgres's jsonb has one zero: a negative zero is 0.0 from the start,
    // live and stored alike, on both backends; and a tool gets a whole
    // number as the integer it is, so echo gives back 0.
    let content = streamed[0].data["content"].as_str().unwrap();
    assert!(content.contains("-9223372036854775808,0]"), "{content}");

    let mut resumed = app.events("t9", "?after=0", None).await;
    let mut replayed = Vec::new();
    for _ in 0..2 {
        replayed.push(resumed.until("TOOL_CALL_RESULT").await.pop().unwrap());
    }
    for (live, again) in streamed.iter().zip(&replayed) {
        assert_eq!(again.id, live.id);
        assert_eq!(again.raw, live.raw);
    }
}

/// Numbers at the edges of what JSON carries survive storage: Postgres
/// jsonb keeps a number as an exact decimal and prints it in full (f64::MAX
/// comes back as 309 digits), and reading it back must give the same
/// number, or history fails and a re-post looks like a conflict.
async fn extreme_numbers_survive_storage(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let t = "/v1/threads/numbers";
    let numbers = json!([
        f64::MAX,
        f64::MIN,
        f64::MIN_POSITIVE,
        5e-324,
        1e300,
        -1e-300,
        0.1,
        2.5e-8,
        123456789012345678901234567890.0,
        u64::MAX,
        i64::MIN,
    ]);
    let call = json!({"id": "n1", "name": "echo", "arguments": {"text": "x", "n": numbers}});
    let first = app.post(&format!("{t}/tool-calls"), &call).await;
    assert_eq!(first.status(), 200);
    let first: Value = first.json().await.unwrap();
    let message = json!({
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "n2", "name": "echo", "arguments": {"text": "y", "n": numbers}}],
    });
    let r = app.post(&format!("{t}/messages"), &message).await;
    assert_eq!(r.status(), 201);
    // Read back: the replay, the history and the rebuilt context.
    let again = app.post(&format!("{t}/tool-calls"), &call).await;
    assert_eq!(again.status(), 200, "a re-post replays, no conflict");
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["replayed"], true);
    assert_eq!(again["tool_agent_output"], first["tool_agent_output"]);
    assert_eq!(again["tool_agent_output"]["tool_call_args"]["n"], numbers);
    let history = app.history("numbers").await;
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[0]["ui_schema"], first["ui_schema"]);
    assert_eq!(history[1]["tool_calls"][0]["arguments"]["n"], numbers);
    for format in ["openai", "anthropic"] {
        let resp = app.get(&format!("{t}/context?format={format}")).await;
        assert_eq!(resp.status(), 200, "{format}");
    }

    // A negative zero (jsonb has one zero) is read as 0.0 wherever a
    // request holds it, so every backend keeps and shows the same call,
    // and a re-post matches what was stored.
    let zero_sign = |v: &Value| v.as_f64().map(f64::is_sign_negative);
    let call = json!({"id": "z1", "name": "echo", "arguments": {"text": "z", "n": -0.0}});
    let (s, out) = app.call("numbers", call.clone()).await;
    assert_eq!(s, 200, "{out}");
    let (s, out) = app.call("numbers", call).await;
    assert_eq!((s, &out["replayed"]), (200, &json!(true)), "{out}");
    let record = app.get_json(&format!("{t}/tool-calls/z1")).await;
    assert_eq!(
        zero_sign(&record["arguments"]["n"]),
        Some(false),
        "{record}"
    );
    let message = json!({"role": "assistant", "content": null,
        "tool_calls": [{"id": "z2", "type": "function",
            "function": {"name": "echo", "arguments": "{\"text\": \"z\", \"n\": -0.0}"}}]});
    assert_eq!(
        app.post(&format!("{t}/messages"), &message).await.status(),
        201
    );
    let history = app.history("numbers").await;
    let declared = &history.last().unwrap()["tool_calls"][0]["arguments"]["n"];
    assert_eq!(zero_sign(declared), Some(false), "{history:?}");

    // A whole number past 2^53 written as a float (`1e16`) is read as the
    // integer it is, which jsonb gives back (it prints `1e16` in full): a
    // re-post matches what was stored, a call declared so can be posted
    // as declared, and history shows what the live answer did.
    let whole = json!([1e16, -1e18, 1.5e19]);
    let as_integers = json!([
        10_000_000_000_000_000u64,
        -1_000_000_000_000_000_000i64,
        15_000_000_000_000_000_000u64
    ]);
    let call = json!({"id": "w1", "name": "echo", "arguments": {"text": "w", "n": whole}});
    let (s, live) = app.call("numbers", call.clone()).await;
    assert_eq!(s, 200, "{live}");
    assert_eq!(
        live["tool_agent_output"]["result"]["n"], as_integers,
        "{live}"
    );
    let (s, again) = app.call("numbers", call).await;
    assert_eq!((s, &again["replayed"]), (200, &json!(true)), "{again}");
    assert_eq!(again["ui_schema"], live["ui_schema"]);
    let message = json!({"id": "wm", "role": "assistant", "content": "",
        "tool_calls": [{"id": "w2", "name": "echo", "arguments": {"text": "w", "n": whole}}]});
    assert_eq!(
        app.post(&format!("{t}/messages"), &message).await.status(),
        201
    );
    assert_eq!(
        app.post(&format!("{t}/messages"), &message).await.status(),
        200
    );
    let (s, out) = app
        .call(
            "numbers",
            json!({"id": "w2", "name": "echo", "arguments": {"text": "w", "n": whole}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    let history = app.history("numbers").await;
    let stored = history
        .iter()
        .find(|m| m["tool_call_id"] == "w1")
        .expect("w1's result");
    assert_eq!(stored["ui_schema"], live["ui_schema"], "{stored}");
}

/// The database refuses one call's result (a trigger): that call is
/// finished as a `RESULT_NOT_STORED` failure, with its record, and the
/// calls committed beside it are not affected.
async fn a_refused_result_finishes_its_call_as_a_failure(backend: Backend) {
    a_result_turned_down_finishes_its_call(backend, Refusal::Data).await
}

/// The same when the database fails on one call's result with an error
/// nobody can classify (a trigger raising an internal error): the call is
/// not left open, and its batch commits without it.
async fn a_result_the_database_fails_on_finishes_its_call_as_a_failure(backend: Backend) {
    a_result_turned_down_finishes_its_call(backend, Refusal::Failure).await
}

async fn a_result_turned_down_finishes_its_call(backend: Backend, how: Refusal) {
    let app = TestApp::spawn(backend).await;
    app.refuse_messages_holding("poison-pill", how).await;
    let poisoned = json!({"id": "p1", "name": "echo", "arguments": {"text": "poison-pill"}});
    let mut others = Vec::new();
    for i in 0..12 {
        let url = app.url(&format!("/v1/threads/beside-{i}/tool-calls"));
        let body = json!({"id": format!("c{i}"), "name": "echo", "arguments": {"text": "fine"}});
        let request = app.client.post(&url).bearer_auth(&app.token).json(&body);
        others.push(tokio::spawn(request.send()));
    }
    let (status, first) = app.call("refused", poisoned.clone()).await;
    assert_eq!(status, 200, "{first}");
    let output = &first["tool_agent_output"];
    assert_eq!(output["status"], "failure", "{first}");
    assert_eq!(output["error"]["code"], "RESULT_NOT_STORED", "{first}");
    assert_eq!(output["error"]["retryable"], false, "{first}");
    assert_eq!(output["tool_call_args"]["text"], "poison-pill");
    assert!(
        !first["tool_response"]["content"]
            .as_str()
            .unwrap()
            .contains("poison-pill"),
        "{first}"
    );
    for other in others {
        let resp = other.await.unwrap().unwrap();
        assert_eq!(resp.status(), 200);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["tool_agent_output"]["status"], "success", "{body}");
    }
    // The call is finished: a re-post answers with the stored failure.
    let (status, again) = app.call("refused", poisoned).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["tool_agent_output"], first["tool_agent_output"]);
    assert_eq!(again["ui_schema"], first["ui_schema"]);
    let history = app.history("refused").await;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["tool_call_id"], "p1");
    assert_eq!(history[0]["ui_schema"], first["ui_schema"]);
    // A message the database refuses is a 422; one it fails on, a 500.
    // Nothing of it is kept either way.
    let message = json!({"role": "user", "content": "a poison-pill"});
    let resp = app.post("/v1/threads/refused/messages", &message).await;
    let problem: Value = match how {
        Refusal::Data => {
            assert_eq!(resp.status(), 422);
            let problem: Value = resp.json().await.unwrap();
            assert_eq!(problem["title"], "Refused by the database", "{problem}");
            problem
        }
        Refusal::Failure => {
            assert_eq!(resp.status(), 500);
            resp.json().await.unwrap()
        }
        Refusal::DiskFull => unreachable!("this test refuses data, or fails on it"),
    };
    assert!(
        !problem.to_string().contains("test trigger"),
        "a database's message stays in the server's log: {problem}"
    );
    assert_eq!(app.history("refused").await.len(), 1);
    // The stream carries the call's outcome.
    let mut sse = app.events("refused", "?after=0", None).await;
    let frames = sse.until("TOOL_CALL_RESULT").await;
    let result = frames.last().unwrap();
    assert_eq!(result.data["toolCallId"], "p1");
    assert!(
        result.data["content"]
            .as_str()
            .unwrap()
            .contains("RESULT_NOT_STORED"),
        "{:?}",
        result.data
    );
}

/// Asserts a problem answer: its status, and a detail that says `says`.
async fn refused(r: reqwest::Response, status: u16, says: &str) -> Value {
    assert_eq!(r.status(), status);
    let p: Value = r.json().await.unwrap();
    assert!(p["detail"].as_str().unwrap().contains(says), "{p}");
    p
}

/// [`refused`], naming `pointer` in its `errors`.
async fn refused_at(r: reqwest::Response, status: u16, says: &str, pointer: &str) {
    let p = refused(r, status, says).await;
    assert_eq!(p["errors"][0]["pointer"], pointer, "{p}");
}

/// A recorded assistant turn comes back from a client that built its
/// messages from the thread's stream or snapshot: its calls in the order
/// they were posted, and with a call toolgate placed in it (posted with it
/// as `parent_message_id`). The run goes on; a call the turn never had is
/// still refused.
async fn a_recorded_turn_comes_back_as_the_stream_showed_it(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let r = app
        .post(
            "/v1/threads/rt/messages",
            &json!({"id": "a1", "role": "assistant", "tool_calls": [
                {"id": "x", "name": "echo", "arguments": {"text": "x"}},
                {"id": "y", "name": "echo", "arguments": {"text": "y"}}]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    for (id, text) in [("y", "y"), ("x", "x")] {
        let (s, out) = app
            .call(
                "rt",
                json!({"id": id, "name": "echo", "arguments": {"text": text}}),
            )
            .await;
        assert_eq!(s, 200, "{out}");
    }
    let (s, out) = app
        .call(
            "rt",
            json!({"id": "p", "name": "echo", "arguments": {"text": "p"}, "parent_message_id": "a1"}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    let call = |id: &str| {
        json!({"id": id, "type": "function",
               "function": {"name": "echo", "arguments": format!("{{\"text\":\"{id}\"}}")}})
    };
    // The results as the stream carried them (their own message ids).
    let results: Vec<Value> = app
        .history("rt")
        .await
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            json!({"id": m["id"], "role": "tool", "toolCallId": m["tool_call_id"],
                   "content": m["content"]})
        })
        .collect();
    assert_eq!(results.len(), 3);
    let run = |calls: Vec<Value>, run_id: &str| {
        let mut messages = vec![json!({"id": "a1", "role": "assistant", "toolCalls": calls})];
        messages.extend(results.iter().cloned());
        messages.push(json!({"id": format!("u_{run_id}"), "role": "user", "content": "and now?"}));
        json!({"threadId": "rt", "runId": run_id, "state": {}, "tools": [], "context": [],
               "forwardedProps": {}, "messages": messages})
    };
    // As the stream showed it: y, x (posted in that order), then p.
    let r = app
        .post(
            "/v1/threads/rt/runs",
            &run(vec![call("y"), call("x"), call("p")], "r1"),
        )
        .await;
    assert_eq!(r.status(), 200);
    let frames = common::SseReader::new(r).until("RUN_FINISHED").await;
    assert!(frames.iter().all(|f| f.kind() != "RUN_ERROR"), "{frames:?}");
    // A call the turn never had, or one of its calls left out, is not it.
    for calls in [
        vec![call("x"), call("y"), call("p"), call("z")],
        vec![call("x"), call("p")],
    ] {
        refused_at(
            app.post("/v1/threads/rt/runs", &run(calls, "r2")).await,
            409,
            "other tool calls",
            "/messages/0/id",
        )
        .await;
    }
}

/// The same run posted several times at once (a client's retry racing
/// its first try): every one finishes as a retry would, with the call's
/// one outcome, and the thread holds each message and result once.
async fn identical_runs_at_once_all_finish(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let input = json!({"threadId": "same-run", "runId": "r1", "state": {}, "tools": [], "context": [],
        "forwardedProps": {}, "messages": [
            {"id": "u1", "role": "user", "content": "echo it"},
            {"id": "a1", "role": "assistant", "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"x\"}"}}]}]});
    let runs = (0..4).map(|_| async {
        let r = app.post("/v1/threads/same-run/runs", &input).await;
        assert_eq!(r.status(), 200);
        let mut sse = common::SseReader::new(r);
        let mut frames = Vec::new();
        while let Some(frame) = sse.next(Duration::from_secs(10)).await {
            frames.push(frame);
        }
        frames
    });
    for frames in futures::future::join_all(runs).await {
        let last = frames.last().unwrap();
        assert_eq!(last.kind(), "RUN_FINISHED", "{:?}", last.data);
        let result = frames.iter().find(|f| f.kind() == "TOOL_CALL_RESULT");
        assert_eq!(
            result.map(|f| f.data["content"].clone()),
            Some(json!("{\"text\":\"x\"}")),
            "{frames:?}"
        );
    }
    let ids: Vec<Value> = app
        .history("same-run")
        .await
        .iter()
        .map(|m| m["id"].clone())
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert_eq!(ids[..2], [json!("u1"), json!("a1")], "{ids:?}");
}

/// A run takes fields AG-UI may add (a newer client keeps working) but
/// names them in a `CUSTOM` event right after `RUN_STARTED`, so a misspelt
/// `resume` is not dropped without a word; a run without such fields has
/// no such event.
async fn a_run_names_the_fields_it_does_not_know(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let input = |run: &str, extra: Value| {
        let mut input = json!({"threadId": "rf", "runId": run, "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [
                {"id": format!("u-{run}"), "role": "user", "content": "echo it"},
                {"id": format!("a-{run}"), "role": "assistant", "toolCalls": [
                    {"id": format!("c-{run}"), "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"x\"}"}}]}]});
        for (key, value) in extra.as_object().unwrap() {
            input[key] = value.clone();
        }
        input
    };
    let mut misspelt = input(
        "r1",
        json!({"Resume": [{"interruptId": "i", "status": "cancelled"}]}),
    );
    misspelt["messages"][1]["tool_calls"] = json!([]);
    let r = app.post("/v1/threads/rf/runs", &misspelt).await;
    assert_eq!(r.status(), 200);
    let frames = common::SseReader::new(r).until("RUN_FINISHED").await;
    let kinds: Vec<&str> = frames.iter().map(|f| f.kind()).collect();
    assert_eq!(kinds[..2], ["RUN_STARTED", "CUSTOM"], "{kinds:?}");
    let warning = &frames[1].data;
    assert_eq!(warning["name"], "run.fields_ignored", "{warning}");
    assert_eq!(
        warning["value"]["fields"],
        json!(["/Resume", "/messages/1/tool_calls"]),
        "{warning}"
    );
    assert_eq!(warning["value"]["count"], 2, "{warning}");
    // The run went on without them.
    assert!(kinds.contains(&"TOOL_CALL_RESULT"), "{kinds:?}");
    assert_eq!(
        frames.last().unwrap().data["outcome"]["type"],
        "success",
        "{frames:?}"
    );
    let r = app
        .post("/v1/threads/rf/runs", &input("r2", json!({})))
        .await;
    let frames = common::SseReader::new(r).until("RUN_FINISHED").await;
    assert!(frames.iter().all(|f| f.kind() != "CUSTOM"), "{frames:?}");
}

/// A message and the events announcing it carry one moment: a message
/// declaring many calls was stamped in its events before they were checked
/// and in its record after (1-3 ms apart).
async fn a_message_and_its_events_have_one_moment(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let mut sse = app.events("mt", "", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let big = "x".repeat(4_000);
    for m in 0..3 {
        let calls: Vec<Value> = (0..64)
            .map(|i| {
                json!({"id": format!("m{m}c{i}"), "name": "write_file",
                            "arguments": {"path": format!("f{i}.txt"), "content": big}})
            })
            .collect();
        let r = app
            .post(
                "/v1/threads/mt/messages",
                &json!({"id": format!("m{m}"), "role": "assistant", "content": "", "tool_calls": calls}),
            )
            .await;
        assert_eq!(r.status(), 201);
    }
    let history = app.history("mt").await;
    for (m, message) in history.iter().enumerate() {
        let frames = sse.until("TEXT_MESSAGE_START").await;
        let start = frames.last().unwrap();
        assert_eq!(start.data["messageId"], format!("m{m}"));
        assert_eq!(start.data["timestamp"], message["created_at_ms"], "{m}");
    }
}

async fn a_declared_call_runs_only_as_declared(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let turn = |calls: Value| json!({"role": "assistant", "tool_calls": calls});
    let r = app
        .post(
            "/v1/threads/dd/messages",
            &turn(json!([
                {"id": "c1", "name": "echo", "arguments": {"text": "one"}},
                {"id": "s1", "name": "sleep", "arguments": {"ms": 1}}])),
        )
        .await;
    assert_eq!(r.status(), 201);
    // The backend posts c1 with what the model did not ask for: the
    // context would show a call that never ran. Nothing is recorded.
    // The refusal names what differs, as for a recorded id.
    for (other, field) in [
        (
            json!({"id": "c1", "name": "echo", "arguments": {"text": "two"}}),
            "arguments",
        ),
        (
            json!({"id": "c1", "name": "wait", "arguments": {"ms": 1}}),
            "name",
        ),
        (
            json!({"id": "s1", "name": "wait", "arguments": {"ms": 2}}),
            "arguments",
        ),
    ] {
        let p = refused(
            app.post("/v1/threads/dd/tool-calls", &other).await,
            409,
            "already declared",
        )
        .await;
        assert_eq!(p["errors"][0]["field"], field, "{p}");
    }
    // Refused before it runs: a read-only tool posted under a declared id
    // does not run first (a wait of 30 s, the tests' cap, would hold the
    // answer back).
    let long = json!({"id": "c1", "name": "wait", "arguments": {"ms": 30000}});
    let answered = tokio::time::timeout(
        Duration::from_secs(20),
        app.post("/v1/threads/dd/tool-calls", &long),
    )
    .await
    .expect("refused before the wait runs");
    refused(answered, 409, "already declared").await;
    let r = app.get("/v1/threads/dd/tool-calls/c1").await;
    assert_eq!(r.status(), 404);
    // The declared calls run; a tool declared by its alias is the same tool.
    for declared in [
        json!({"id": "c1", "name": "echo", "arguments": {"text": "one"}}),
        json!({"id": "s1", "name": "wait", "arguments": {"ms": 1}}),
    ] {
        let (s, body) = app.call("dd", declared).await;
        assert_eq!(s, 200, "{body}");
    }
    // The model's context shows the call as the model made it, under the
    // alias, as the history does.
    let openai = app.get_json("/v1/threads/dd/context?format=openai").await;
    let names: Vec<&Value> = openai["messages"][0]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["function"]["name"])
        .collect();
    assert_eq!(names, [&json!("echo"), &json!("sleep")], "{openai}");
    let anthropic = app
        .get_json("/v1/threads/dd/context?format=anthropic")
        .await;
    assert_eq!(
        anthropic["messages"][1]["content"][1]["name"], "sleep",
        "{anthropic}"
    );
    let history = app.history("dd").await;
    assert_eq!(history[0]["tool_calls"][1]["name"], "sleep", "{history:?}");
    // The live stream named it so too, though it was posted as `wait`: a
    // stock client names it the same live and after a reload (it
    // announced `wait`, and the snapshot said `sleep`).
    let mut log = app.events("dd", "?after=0", None).await;
    let mut started: Vec<(Value, Value)> = Vec::new();
    while !started.iter().any(|(id, _)| id == "s1") {
        started.extend(
            log.until("TOOL_CALL_START")
                .await
                .into_iter()
                .filter(|f| f.kind() == "TOOL_CALL_START")
                .map(|f| (f.data["toolCallId"].clone(), f.data["toolCallName"].clone())),
        );
    }
    let mut reload = app.events("dd", "?snapshot=true", None).await;
    let frames = reload.until("MESSAGES_SNAPSHOT").await;
    let snapshot = frames.last().unwrap();
    assert!(
        started.contains(&(json!("s1"), json!("sleep"))),
        "{started:?}"
    );
    assert_eq!(
        snapshot.data["messages"][0]["toolCalls"][1]["function"]["name"], "sleep",
        "{}",
        snapshot.data
    );

    // Two messages at once declaring one id differently: one is recorded,
    // the other refused, never both.
    let posts = (0..12).flat_map(|i| {
        ["x", "y"].map(|text| {
            let body = turn(json!([{"id": format!("r{i}"), "name": "echo",
                                    "arguments": {"text": text}}]));
            let app = &app;
            async move { app.post("/v1/threads/dd/messages", &body).await.status() }
        })
    });
    let statuses = futures::future::join_all(posts).await;
    for (i, pair) in statuses.chunks(2).enumerate() {
        let mut pair: Vec<u16> = pair.iter().map(|s| s.as_u16()).collect();
        pair.sort();
        assert_eq!(pair, [201, 409], "r{i}");
    }
    let declared = app
        .history("dd")
        .await
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    assert_eq!(declared, 1 + 12);
}

/// An Anthropic backend with extended thinking records the turn's
/// thinking blocks with the message: the Anthropic context gives them back
/// first in that turn, signatures intact (the API refuses a tool loop's
/// turn without them); the OpenAI context leaves them out; the history
/// shows them. A retry must carry the same blocks.
async fn an_assistant_turns_thinking_is_kept_for_anthropic(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let user = json!({"id": "u1", "role": "user", "content": "echo hi"});
    assert_eq!(
        app.post("/v1/threads/th/messages", &user).await.status(),
        201
    );
    let thinking = json!([
        {"type": "thinking", "thinking": "The user wants an echo.", "signature": "EqQBCkYIBxgC"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"}
    ]);
    let turn = json!({"id": "a1", "role": "assistant", "content": "Echoing.",
        "thinking": thinking,
        "tool_calls": [{"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"text": "hi"}}]});
    assert_eq!(
        app.post("/v1/threads/th/messages", &turn).await.status(),
        201
    );
    let (s, out) = app
        .call(
            "th",
            json!({"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"text": "hi"}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    let anthropic = app
        .get_json("/v1/threads/th/context?format=anthropic")
        .await;
    let blocks = &anthropic["messages"][1]["content"];
    assert_eq!(anthropic["messages"][1]["role"], "assistant", "{anthropic}");
    assert_eq!(blocks[0], thinking[0], "{anthropic}");
    assert_eq!(blocks[1], thinking[1], "{anthropic}");
    assert_eq!(blocks[2]["type"], "text", "{anthropic}");
    assert_eq!(blocks[3]["type"], "tool_use", "{anthropic}");
    let openai = app.get_json("/v1/threads/th/context?format=openai").await;
    assert!(
        !openai.to_string().contains("EqQBCkYIBxgC"),
        "thinking in the OpenAI context: {openai}"
    );
    let history = app.history("th").await;
    let a1 = history.iter().find(|m| m["id"] == "a1").unwrap();
    assert_eq!(a1["thinking"], thinking, "{a1}");
    // A retry with the same blocks is the same message; other blocks are
    // another message under a taken id.
    let r = app.post("/v1/threads/th/messages", &turn).await;
    assert_eq!(r.status(), 200);
    let mut other = turn.clone();
    other["thinking"][0]["signature"] = json!("other");
    let r = app.post("/v1/threads/th/messages", &other).await;
    assert_eq!(r.status(), 409);
    // Only an assistant turn thinks; a block is one the API returns.
    refused_at(
        app.post(
            "/v1/threads/th/messages",
            &json!({"role": "user", "content": "x", "thinking": thinking}),
        )
        .await,
        422,
        "only assistant messages carry thinking blocks",
        "/thinking",
    )
    .await;
    for block in [
        json!({"type": "thinking", "thinking": "no signature"}),
        json!({"type": "thoughts", "data": "x"}),
        json!({"type": "redacted_thinking", "data": "x", "extra": 1}),
        json!({"type": "thinking", "thinking": "t", "signature": ""}),
        json!({"type": "redacted_thinking", "data": ""}),
    ] {
        let body = json!({"role": "assistant", "content": "x", "thinking": [block]});
        let r = app.post("/v1/threads/th/messages", &body).await;
        assert_eq!(r.status(), 422, "{block}");
        let p: Value = r.json().await.unwrap();
        assert!(
            p["errors"][0]["pointer"]
                .as_str()
                .is_some_and(|at| at.starts_with("/thinking/0")),
            "{p}"
        );
    }
    assert_eq!(
        app.history("th").await.len(),
        3,
        "a refused message was kept"
    );
}

async fn a_call_id_means_one_call_in_a_thread(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let turn = |id: &str, call: &str, text: &str| {
        json!({"id": id, "role": "assistant",
               "tool_calls": [{"id": call, "name": "echo", "arguments": {"text": text}}]})
    };
    assert_eq!(
        app.post("/v1/threads/dc/messages", &turn("a1", "c1", "one"))
            .await
            .status(),
        201
    );
    // Declared again by another message, even with the same call: a call
    // is the one message's that made it.
    refused_at(
        app.post("/v1/threads/dc/messages", &turn("a2", "c1", "one"))
            .await,
        409,
        "already declared by message \"a1\"",
        "/tool_calls/0/id",
    )
    .await;
    // Declared again with other arguments: the result of c1 could answer
    // only one of them.
    refused_at(
        app.post("/v1/threads/dc/messages", &turn("a3", "c1", "two"))
            .await,
        409,
        "already declared",
        "/tool_calls/0/id",
    )
    .await;
    // A call posted first fixes what its id means as well.
    let (s, _) = app
        .call(
            "dc",
            json!({"id": "c2", "name": "echo", "arguments": {"text": "ran"}}),
        )
        .await;
    assert_eq!(s, 200);
    refused_at(
        app.post("/v1/threads/dc/messages", &turn("a4", "c2", "other"))
            .await,
        409,
        "already recorded",
        "/tool_calls/0/id",
    )
    .await;
    assert_eq!(
        app.post("/v1/threads/dc/messages", &turn("a4", "c2", "ran"))
            .await
            .status(),
        201
    );
    // A run's new assistant message is held to the same, before its stream.
    let run = json!({"threadId": "dc", "runId": "run_1", "state": {}, "tools": [], "context": [],
        "forwardedProps": {}, "messages": [
            {"id": "a5", "role": "assistant", "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"three\"}"}}]}]});
    refused_at(
        app.post("/v1/threads/dc/runs", &run).await,
        409,
        "already declared",
        "/messages/0/toolCalls/0/id",
    )
    .await;
    let run_with = |messages: Value| {
        json!({"threadId": "dc", "runId": "run_2", "state": {}, "context": [], "forwardedProps": {},
               "tools": [{"name": "confirm", "description": "Ask.", "parameters": {"type": "object"}}],
               "messages": messages})
    };
    // A recorded turn sent back with other calls: the record would no
    // longer say what ran.
    let rewritten = run_with(json!([{"id": "a1", "role": "assistant", "toolCalls": [
        {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"one\"}"}},
        {"id": "c9", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"new\"}"}}]}]));
    refused_at(
        app.post("/v1/threads/dc/runs", &rewritten).await,
        409,
        "other tool calls",
        "/messages/0/id",
    )
    .await;
    // A call toolgate ran has its result; a second one is refused.
    let forged =
        run_with(json!([{"id": "t9", "role": "tool", "toolCallId": "c2", "content": "forged"}]));
    refused_at(
        app.post("/v1/threads/dc/runs", &forged).await,
        409,
        "already has a result",
        "/messages/0/toolCallId",
    )
    .await;
    // A tool message needs a valid call id, and a call one result.
    for (messages, expected) in [
        (
            json!([{"id": "t1", "role": "tool", "toolCallId": "", "content": "x"}]),
            "must be",
        ),
        (
            json!([{"id": "t1", "role": "tool", "toolCallId": "f1", "content": "x"},
                   {"id": "t2", "role": "tool", "toolCallId": "f1", "content": "y"}]),
            "earlier tool message",
        ),
    ] {
        refused(
            app.post("/v1/threads/dc/runs", &run_with(messages)).await,
            422,
            expected,
        )
        .await;
    }
    // A frontend call answered once; a second answer (in a later run) is
    // refused.
    let turn_f = json!({"id": "a6", "role": "assistant", "toolCalls": [
        {"id": "f1", "type": "function", "function": {"name": "confirm", "arguments": "{}"}}]});
    let answer = |id: &str| json!({"id": id, "role": "tool", "toolCallId": "f1", "content": "yes"});
    let r = app
        .post(
            "/v1/threads/dc/runs",
            &run_with(json!([turn_f, answer("t1")])),
        )
        .await;
    assert_eq!(r.status(), 200);
    let _ = r.text().await.unwrap();
    refused_at(
        app.post(
            "/v1/threads/dc/runs",
            &run_with(json!([turn_f, answer("t2")])),
        )
        .await,
        409,
        "already has a result",
        "/messages/1/toolCallId",
    )
    .await;
    // A tool named by its alias is the same tool.
    let (s, _) = app
        .call(
            "dc",
            json!({"id": "s1", "name": "sleep", "arguments": {"ms": 1}}),
        )
        .await;
    assert_eq!(s, 200);
    let turn = |name: &str| {
        json!({"role": "assistant",
                      "tool_calls": [{"id": "s1", "name": name, "arguments": {"ms": 1}}]})
    };
    let r = app.post("/v1/threads/dc/messages", &turn("wait")).await;
    assert_eq!(r.status(), 201);
    // Declared again under the alias: the same call, so the refusal is
    // for a second message declaring it, not for another tool.
    refused_at(
        app.post("/v1/threads/dc/messages", &turn("sleep")).await,
        409,
        "is already declared by message",
        "/tool_calls/0/id",
    )
    .await;
    // Nothing refused was recorded.
    let ids: Vec<String> = app
        .history("dc")
        .await
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !ids.iter()
            .any(|id| ["a3", "a5", "t2", "t9", "c9"].contains(&id.as_str())),
        "{ids:?}"
    );
    // The context pairs each result with the call it answers.
    let context = app.get_json("/v1/threads/dc/context").await;
    let turns: Vec<&Value> = context["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(
        turns[0]["tool_calls"][0]["function"]["arguments"], r#"{"text":"one"}"#,
        "{context}"
    );
}

/// An AG-UI tool message answering the application's own call may carry
/// content parts and an `error`: the text parts are kept, and the error
/// reaches the model, the snapshot and the history.
async fn an_application_tools_failure_is_kept(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let mut input = json!({
        "threadId": "fe", "runId": "run_1",
        "tools": [{"name": "upload", "description": "Upload a file.", "parameters": {"type": "object"}}],
        "messages": [
            {"id": "u1", "role": "user", "content": "upload it"},
            {"id": "a1", "role": "assistant", "toolCalls": [
                {"id": "up.1", "type": "function", "function": {"name": "upload", "arguments": "{}"}}]}
        ]
    });
    let r = app.post("/v1/threads/fe/runs", &input).await;
    let frames = common::SseReader::new(r).until("RUN_FINISHED").await;
    assert_eq!(
        frames.last().unwrap().data["outcome"]["pendingToolCallIds"],
        json!(["up.1"])
    );
    input["runId"] = json!("run_2");
    input["messages"].as_array_mut().unwrap().push(json!({
        "id": "t1", "role": "tool", "toolCallId": "up.1",
        "content": [
            {"type": "text", "text": "sent 3 of 5 parts"},
            {"type": "image", "source": {"type": "url", "value": "https://example.test/x.png", "mimeType": "image/png"}}],
        "error": "the connection dropped"
    }));
    // Content that is neither text nor parts is refused, before anything
    // is recorded.
    for (content, pointer) in [
        (json!(42), "/messages/2/content"),
        (json!({"colour": "red"}), "/messages/2/content"),
        (json!([{"text": "no type"}]), "/messages/2/content/0"),
        (
            json!([{"type": "image", "source": {"type": "data", "value": "AA=="}}]),
            "/messages/2/content/0/source/mimeType",
        ),
    ] {
        let mut odd = input.clone();
        odd["messages"][2]["content"] = content;
        let r = app.post("/v1/threads/fe/runs", &odd).await;
        assert_eq!(r.status(), 422);
        let p: Value = r.json().await.unwrap();
        assert_eq!(p["errors"][0]["pointer"], pointer, "{p}");
    }
    assert!(app.history("fe").await.iter().all(|m| m["id"] != "t1"));
    let r = app.post("/v1/threads/fe/runs", &input).await;
    assert_eq!(r.status(), 200);
    let frames = common::SseReader::new(r).until("RUN_FINISHED").await;
    assert_eq!(
        frames.last().unwrap().data["outcome"],
        json!({"type": "success"})
    );
    let context = app.get_json("/v1/threads/fe/context").await;
    assert_eq!(
        context["messages"][2],
        json!({"role": "tool", "tool_call_id": "up.1",
               "content": "sent 3 of 5 parts\n\n[attached image (image/png) at https://example.test/x.png, which this context format cannot pass on]\n\nError: the connection dropped"}),
        "{context}"
    );
    let context = app
        .get_json("/v1/threads/fe/context?format=anthropic")
        .await;
    let result = &context["messages"][2]["content"][0];
    assert_eq!(result["is_error"], true, "{context}");
    // Its image is passed on as an image, after the text and before the
    // error.
    assert_eq!(
        result["content"],
        json!([
            {"type": "text", "text": "sent 3 of 5 parts"},
            {"type": "image", "source": {"type": "url", "url": "https://example.test/x.png"}},
            {"type": "text", "text": "Error: the connection dropped"}
        ]),
        "{context}"
    );
    // Anthropic refuses `.` in a tool_use id: the call and its result get
    // one it accepts, `_` for `.` and a hash of the id after it.
    // (README: `up.1` → `up_1_f6f1c42d`.)
    let wire = "up_1_f6f1c42d";
    assert_eq!(result["tool_use_id"], wire, "{context}");
    assert_eq!(
        context["messages"][1]["content"][0]["id"], wire,
        "{context}"
    );
    let history = app.history("fe").await;
    let t1 = history.iter().find(|m| m["id"] == "t1").unwrap();
    assert_eq!(
        (&t1["content"], &t1["error"]),
        (
            &json!("sent 3 of 5 parts"),
            &json!("the connection dropped")
        ),
        "{t1}"
    );
    let r = app
        .client
        .get(app.url("/v1/threads/fe/events?snapshot=true"))
        .bearer_auth(&app.token)
        .send()
        .await
        .unwrap();
    let frames = common::SseReader::new(r).until("MESSAGES_SNAPSHOT").await;
    let t1 = frames.last().unwrap().data["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "t1")
        .unwrap();
    assert_eq!(t1["error"], "the connection dropped", "{t1}");
    // The result's parts come back as sent, in the snapshot and history.
    let sent = input["messages"][2]["content"].clone();
    assert_eq!(t1["content"], sent, "{t1}");
    let history = app.history("fe").await;
    let t1 = history.iter().find(|m| m["id"] == "t1").unwrap();
    assert_eq!(t1["content_parts"], sent, "{t1}");
}

/// A user message sent to a run with images, audio and documents keeps
/// them: `/history` and the snapshot give the parts back as sent, and the
/// context passes each on in the vendor's shape (a note where it has none).
async fn a_users_media_parts_are_kept_and_passed_on(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let content = json!([
        {"type": "text", "text": "what is wrong here?"},
        {"type": "image", "source": {"type": "data", "value": "iVBORw0KGgo=", "mimeType": "image/png"}},
        {"type": "document", "source": {"type": "url", "value": "https://example.test/r.pdf", "mimeType": "application/pdf"}},
        {"type": "video", "source": {"type": "url", "value": "https://example.test/v.mp4", "mimeType": "video/mp4"}},
    ]);
    let input = json!({
        "threadId": "mm", "runId": "run_1", "tools": [], "context": [], "state": {},
        "forwardedProps": {},
        "messages": [
            {"id": "u1", "role": "user", "content": content},
            {"id": "u2", "role": "user", "content": "and plain text"},
        ]
    });
    let r = app.post("/v1/threads/mm/runs", &input).await;
    assert_eq!(r.status(), 200);
    common::SseReader::new(r).until("RUN_FINISHED").await;

    let history = app.history("mm").await;
    assert_eq!(history[0]["content"], "what is wrong here?");
    assert_eq!(history[0]["content_parts"], content);
    assert!(
        history[1].get("content_parts").is_none(),
        "{:?}",
        history[1]
    );

    let r = app
        .client
        .get(app.url("/v1/threads/mm/events?snapshot=true"))
        .bearer_auth(&app.token)
        .send()
        .await
        .unwrap();
    let frames = common::SseReader::new(r).until("MESSAGES_SNAPSHOT").await;
    let messages = &frames.last().unwrap().data["messages"];
    assert_eq!(messages[0]["content"], content, "{messages}");
    assert_eq!(messages[1]["content"], "and plain text", "{messages}");

    let openai = app.get_json("/v1/threads/mm/context?format=openai").await;
    let parts = &openai["messages"][0]["content"];
    assert_eq!(
        parts[0],
        json!({"type": "text", "text": "what is wrong here?"})
    );
    assert_eq!(
        parts[1],
        json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}})
    );
    // A document OpenAI would have to fetch, and a video: notes.
    assert!(
        parts[2]["text"]
            .as_str()
            .unwrap()
            .contains("https://example.test/r.pdf")
    );
    assert!(
        parts[3]["text"]
            .as_str()
            .unwrap()
            .contains("video (video/mp4)")
    );
    assert_eq!(openai["messages"][1]["content"], "and plain text");

    let anthropic = app
        .get_json("/v1/threads/mm/context?format=anthropic")
        .await;
    let blocks = &anthropic["messages"][0]["content"];
    assert_eq!(
        blocks[1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}})
    );
    assert_eq!(
        blocks[2],
        json!({"type": "document", "source": {"type": "url", "url": "https://example.test/r.pdf"}})
    );
    assert!(
        blocks[3]["text"]
            .as_str()
            .unwrap()
            .starts_with("[attached video")
    );
    // The two user messages are one user turn.
    assert_eq!(blocks[4], json!({"type": "text", "text": "and plain text"}));
}

async fn a_run_claims_its_new_thread_even_when_it_records_nothing(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let r = app
        .post(
            "/v1/threads/empty-run/runs",
            &json!({"threadId": "empty-run", "runId": "r1", "messages": []}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let stream = r.text().await.unwrap();
    assert!(stream.contains("RUN_FINISHED"), "{stream}");
    // The thread is the caller's now: empty, and nobody else's to take.
    assert_eq!(app.history("empty-run").await, Vec::<Value>::new());
    let r = app
        .post_as(
            &app.token_for("someone-else"),
            "/v1/threads/empty-run/messages",
            &json!({"role": "user", "content": "mine?"}),
        )
        .await;
    assert_eq!(r.status(), 404);
}

/// An AG-UI client renames its copy of a call to the name a run announces:
/// a call by a tool's alias is announced by that alias, so the client's
/// next run, which sends the conversation back, declares it unchanged.
async fn a_run_announces_a_call_by_the_name_it_was_called(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let first = json!({"threadId": "alias", "runId": "r1", "messages": [
        {"id": "u1", "role": "user", "content": "nap"},
        {"id": "a1", "role": "assistant", "toolCalls": [{"id": "s1", "type": "function",
            "function": {"name": "sleep", "arguments": "{\"ms\": 1}"}}]}]});
    let app = &app;
    let stream = |input: Value| async move {
        let r = app.post("/v1/threads/alias/runs", &input).await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert!(
            text.contains(r#""toolCallId":"s1","toolCallName":"sleep""#),
            "{text}"
        );
        text
    };
    let first_stream = stream(first.clone()).await;
    // The next run sends the conversation back as the client holds it.
    let mut next = first.clone();
    next["runId"] = json!("r2");
    let result = first_stream
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["type"] == "TOOL_CALL_RESULT")
        .unwrap();
    next["messages"].as_array_mut().unwrap().extend([
        json!({"id": result["messageId"], "role": "tool", "toolCallId": "s1", "content": result["content"]}),
        json!({"id": "u2", "role": "user", "content": "again"}),
    ]);
    let r = app.post("/v1/threads/alias/runs", &next).await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // A retry of the first run replays the call by the same name.
    stream(first).await;
}

/// JSON Schema's `integer` takes `30.0` as well as `30`: the tool gets
/// the integer either way, and the call is recorded as sent.
async fn a_whole_number_with_a_fraction_is_the_integer(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (s, out) = app
        .call(
            "num",
            json!({"id": "w1", "name": "wait", "arguments": {"ms": 30.0}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["tool_agent_output"]["result"]["waited_ms"], 30, "{out}");
    let (s, out) = app
        .call(
            "num",
            json!({"id": "w1", "name": "wait", "arguments": {"ms": 30.0}}),
        )
        .await;
    assert_eq!((s, &out["replayed"]), (200, &json!(true)), "{out}");
    // The same whole number written without its fraction is the same
    // call, as the tool got it; another number is not.
    let (s, out) = app
        .call(
            "num",
            json!({"id": "w1", "name": "wait", "arguments": {"ms": 30}}),
        )
        .await;
    assert_eq!((s, &out["replayed"]), (200, &json!(true)), "{out}");
    let (s, out) = app
        .call(
            "num",
            json!({"id": "w1", "name": "wait", "arguments": {"ms": 31}}),
        )
        .await;
    assert_eq!(s, 409, "{out}");
    // A fraction that is not whole is no integer.
    let (s, out) = app
        .call(
            "num",
            json!({"id": "w2", "name": "wait", "arguments": {"ms": 30.5}}),
        )
        .await;
    assert_eq!(s, 422, "{out}");
    assert_eq!(out["errors"][0]["path"], "/ms", "{out}");
}

/// A whole number's spelling does not change a call where it is declared
/// either: an assistant message, a posted call, a re-posted message and a
/// run's re-sent turn compare `30` and `30.0` alike, on both backends (a
/// client that parses and re-serializes arguments changes the spelling).
async fn a_declared_call_is_the_same_with_a_whole_number_spelled_either_way(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let t = "/v1/threads/num-declared";
    let messages = format!("{t}/messages");
    // An assistant message declaring `call` as `wait` with `ms`, posted.
    let declare = |id: &str, call: &str, ms: Value| {
        let body = json!({"id": id, "role": "assistant", "content": "",
               "tool_calls": [{"id": call, "name": "wait", "arguments": {"ms": ms}}]});
        let (app, messages) = (&app, &messages);
        async move { app.post(messages, &body).await }
    };
    // `call` posted as `wait` with `ms`.
    let wait = |call: &str, ms: Value| {
        app.call(
            "num-declared",
            json!({"id": call, "name": "wait", "arguments": {"ms": ms}}),
        )
    };
    let r = app
        .post(&messages, &json!({"role": "user", "content": "go"}))
        .await;
    assert_eq!(r.status(), 201);
    // Declared with the fraction, posted without it.
    assert_eq!(declare("a1", "c1", json!(30.0)).await.status(), 201);
    let (s, out) = wait("c1", json!(30)).await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["tool_agent_output"]["status"], "success", "{out}");
    // The declaring message posted again, re-serialized: the same message.
    let r = declare("a1", "c1", json!(30)).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["replayed"], true);
    // Posted without the fraction first, declared with it afterwards.
    let (s, out) = wait("c2", json!(30)).await;
    assert_eq!(s, 200, "{out}");
    let r = declare("a2", "c2", json!(30.0)).await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    // A run that re-sends the recorded turns, re-serialized as a JavaScript
    // client does (`30.0` becomes `30`), is no other turn.
    let turn = |id: &str, call: &str| {
        json!({"id": id, "role": "assistant", "toolCalls": [
            {"id": call, "type": "function", "function": {"name": "wait", "arguments": "{\"ms\":30}"}}]})
    };
    let input = json!({
        "threadId": "num-declared", "runId": "run_1", "state": {}, "context": [],
        "forwardedProps": {}, "tools": [],
        "messages": [turn("a1", "c1"), turn("a2", "c2")]
    });
    let r = app.post(&format!("{t}/runs"), &input).await;
    assert_eq!(r.status(), 200);
    common::SseReader::new(r).until("RUN_FINISHED").await;
    // Another number is another call, wherever it is declared.
    let (s, out) = wait("c1", json!(31)).await;
    assert_eq!(s, 409, "{out}");
    assert_eq!(declare("a3", "c2", json!(31.0)).await.status(), 409);
    assert_eq!(declare("a4", "c4", json!(30.0)).await.status(), 201);
    let (s, out) = wait("c4", json!(31)).await;
    assert_ne!(s, 200, "{out}");
}

/// A call that an assistant message declares is announced as that
/// message's (`parentMessageId`), also in a thread whose earlier calls no
/// message declared: a message recorded since is seen. Posted as another
/// message's call, it is refused and nothing is recorded.
async fn a_declared_call_is_announced_as_its_messages(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let echo = |id: &str| json!({"id": id, "name": "echo", "arguments": {"text": id}});
    let (s, out) = app.call("late-decl", echo("u0")).await;
    assert_eq!(s, 200, "{out}");
    let r = app
        .post(
            "/v1/threads/late-decl/messages",
            &json!({"id": "am", "role": "assistant", "content": "", "tool_calls": [echo("c5"), {"id": "c6", "name": "echo", "arguments": {"txt": "typo"}}]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let mut elsewhere = echo("c5");
    elsewhere["parent_message_id"] = json!("u0-turn");
    let (s, out) = app.call("late-decl", elsewhere).await;
    assert_eq!(s, 409, "{out}");
    assert_eq!(
        out["detail"],
        "tool call \"c5\" is declared by message \"am\", not \"u0-turn\": post it with parent_message_id \"am\", or without one"
    );
    // The place it names: the call's parent_message_id.
    assert_eq!(out["errors"][0]["pointer"], "/parent_message_id", "{out}");
    let (s, out) = app.call("late-decl", echo("c5")).await;
    assert_eq!((s, &out["replayed"]), (200, &json!(false)), "{out}");
    // A declared call refused before it runs is its message's too.
    let (s, out) = app
        .call(
            "late-decl",
            json!({"id": "c6", "name": "echo", "arguments": {"txt": "typo"}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["tool_agent_output"]["status"], "failure", "{out}");

    // c6, which can never run, was refused (and announced) as its
    // message was recorded, before c5 was posted.
    let mut sse = app.events("late-decl", "?after=0", None).await;
    assert_eq!(
        sse.call_starts(3).await,
        [
            (json!("u0"), None),
            (json!("c6"), Some(json!("am"))),
            (json!("c5"), Some(json!("am")))
        ]
    );
    // The call's record keeps the parent its announcement named, as it was
    // posted with it too when no message declares it.
    let mut under = echo("u1");
    under["parent_message_id"] = json!("backend-turn-7");
    let (s, out) = app.call("late-decl", under).await;
    assert_eq!(s, 200, "{out}");
    for (call, parent) in [
        ("u0", None),
        ("c5", Some("am")),
        ("c6", Some("am")),
        ("u1", Some("backend-turn-7")),
    ] {
        let record = app
            .get_json(&format!("/v1/threads/late-decl/tool-calls/{call}"))
            .await;
        assert_eq!(
            record.get("parent_message_id").and_then(Value::as_str),
            parent,
            "{record}"
        );
    }
}

/// A call posted under a parent it names is that message's, whichever
/// comes first: a user, system or developer message cannot take the id
/// (a stock AG-UI client would show its text as the assistant's), and no
/// other assistant message can declare the call first. Nothing of a
/// refused message is kept.
async fn a_call_posted_under_a_parent_is_that_messages(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let t = "/v1/threads/parents";
    let under = |id: &str, parent: &str| json!({"id": id, "name": "echo", "arguments": {"text": id}, "parent_message_id": parent});
    let message = |body: Value| {
        let app = &app;
        async move {
            let r = app.post(&format!("{t}/messages"), &body).await;
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        }
    };
    let (s, out) = app.call("parents", under("p1", "m-later")).await;
    assert_eq!(s, 200, "{out}");
    for role in ["user", "system", "developer"] {
        let (s, out) =
            message(json!({"id": "m-later", "role": role, "content": "not the assistant"})).await;
        assert_eq!(s, 409, "{out}");
        assert_eq!(out["errors"][0]["pointer"], "/id", "{out}");
        assert_eq!(
            out["detail"],
            format!(
                "message id \"m-later\" is the parent_message_id of tool call \"p1\" in this thread: only the assistant message that made the call can take it, not a {role} message; give this message an id of its own"
            ),
        );
    }
    // Nor in an AG-UI run: refused before its stream starts.
    let input = json!({"threadId": "parents", "runId": "r1", "state": {}, "tools": [],
        "context": [], "forwardedProps": {},
        "messages": [{"id": "m-later", "role": "user", "content": "not the assistant"}]});
    let r = app.post(&format!("{t}/runs"), &input).await;
    assert_eq!(r.status(), 409);
    let out: Value = r.json().await.unwrap();
    assert_eq!(out["errors"][0]["pointer"], "/messages/0/id", "{out}");
    // The assistant message takes it, without declaring the call or with.
    let (s, out) = message(json!({"id": "m-later", "role": "assistant", "content": "I did"})).await;
    assert_eq!(s, 201, "{out}");

    // Declared first by another assistant message: refused, before the
    // write and (had it raced the check) by the store.
    let (s, out) = app.call("parents", under("g1", "pm-z")).await;
    assert_eq!(s, 200, "{out}");
    let declaring = |id: &str, call: &str| json!({"id": id, "role": "assistant", "content": format!("I call {call}"), "tool_calls": [{"id": call, "name": "echo", "arguments": {"text": call}}]});
    let (s, out) = message(declaring("pm-y", "g1")).await;
    assert_eq!(s, 409, "{out}");
    assert_eq!(out["errors"][0]["pointer"], "/tool_calls/0/id", "{out}");
    assert_eq!(
        out["errors"][0]["message"],
        "tool call \"g1\" was posted with parent_message_id \"pm-z\": only message \"pm-z\" can declare it, not \"pm-y\""
    );
    let (s, out) = message(declaring("pm-z", "g1")).await;
    assert_eq!(s, 201, "{out}");
    // Declared again by another message: refused too. It was taken as a
    // repetition, which the snapshot showed without the call, so a client
    // that sent the message back as shown was refused, and a run whose
    // last message it was tried to run the call under it.
    let (s, out) = message(declaring("pm-again", "g1")).await;
    assert_eq!(s, 409, "{out}");
    assert_eq!(out["errors"][0]["pointer"], "/tool_calls/0/id", "{out}");
    assert_eq!(
        out["errors"][0]["message"],
        "tool call \"g1\" is already declared by message \"pm-z\": a call belongs to the one assistant message that made it, not \"pm-again\"; a new call needs an id of its own"
    );
    // Nor in an AG-UI run's new turn, before its stream starts.
    let input = json!({"threadId": "parents", "runId": "r2", "state": {}, "tools": [],
        "context": [], "forwardedProps": {},
        "messages": [{"id": "pm-again", "role": "assistant", "toolCalls": [
            {"id": "g1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"g1\"}"}}]}]});
    let r = app.post(&format!("{t}/runs"), &input).await;
    assert_eq!(r.status(), 409);
    let out: Value = r.json().await.unwrap();
    assert_eq!(
        out["errors"][0]["pointer"], "/messages/0/toolCalls/0/id",
        "{out}"
    );

    let history = app.history("parents").await;
    let ids: Vec<&str> = history.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert!(!ids.contains(&"pm-y"), "{ids:?}");
    let later: Vec<&Value> = history.iter().filter(|m| m["id"] == "m-later").collect();
    assert_eq!(later.len(), 1, "{ids:?}");
    assert_eq!(later[0]["role"], "assistant");
    for (call, parent) in [("p1", "m-later"), ("g1", "pm-z")] {
        let record = app.get_json(&format!("{t}/tool-calls/{call}")).await;
        assert_eq!(record["parent_message_id"], parent, "{record}");
    }
    // The snapshot shows each call in its parent, as the record says.
    let mut sse = app.events("parents", "?snapshot=true", None).await;
    let snapshot = sse.until("MESSAGES_SNAPSHOT").await.pop().unwrap().data;
    assert_eq!(snapshot["type"], "MESSAGES_SNAPSHOT", "{snapshot}");
    let holder = |call: &str| {
        snapshot["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| {
                m["toolCalls"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["id"] == call))
            })
            .map(|m| (m["id"].clone(), m["role"].clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(holder("p1"), [(json!("m-later"), json!("assistant"))]);
    assert_eq!(holder("g1"), [(json!("pm-z"), json!("assistant"))]);
    // So does the model's context: p1 in the turn of m-later, which does
    // not declare it, its result right after.
    let context = app
        .get_json("/v1/threads/parents/context?format=openai")
        .await;
    let turns = context["messages"].as_array().unwrap();
    let at = turns
        .iter()
        .position(|m| m["content"] == "I did")
        .unwrap_or_else(|| panic!("{context}"));
    assert_eq!(turns[at]["tool_calls"][0]["id"], "p1", "{context}");
    assert_eq!(
        turns[at]["tool_calls"][0]["function"]["arguments"],
        r#"{"text":"p1"}"#
    );
    assert_eq!(
        (&turns[at + 1]["role"], &turns[at + 1]["tool_call_id"]),
        (&json!("tool"), &json!("p1")),
        "{context}"
    );
    let context = app
        .get_json("/v1/threads/parents/context?format=anthropic")
        .await;
    let turns = context["messages"].as_array().unwrap();
    let at = turns
        .iter()
        .position(|m| m["content"][0]["text"] == "I did")
        .unwrap_or_else(|| panic!("{context}"));
    assert_eq!(turns[at]["content"][1]["type"], "tool_use", "{context}");
    assert_eq!(turns[at]["content"][1]["id"], "p1", "{context}");
    assert_eq!(
        turns[at + 1]["content"][0]["tool_use_id"],
        "p1",
        "{context}"
    );
}

/// A call and a user message under the call's parent id, posted at once:
/// whichever the store records first, the other is refused, and each
/// request is answered (a call refused where its record would commit once
/// spun, looking again for ever).
async fn a_call_racing_a_message_under_its_parent_is_answered(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for round in 0..20 {
        let thread = format!("race-{round}");
        let (path, body) = (
            format!("/v1/threads/{thread}/messages"),
            json!({"id": "M", "role": "user", "content": "u"}),
        );
        let call = app.call(
            &thread,
            json!({"id": "c", "name": "echo", "arguments": {"text": "x"}, "parent_message_id": "M"}),
        );
        let message = app.post(&path, &body);
        let ((s, out), r) = tokio::time::timeout(Duration::from_secs(30), async {
            tokio::join!(call, message)
        })
        .await
        .unwrap_or_else(|_| panic!("round {round}: no answer"));
        let m = r.status().as_u16();
        match (s, m) {
            (200, 409) => {}
            (422 | 409, 201) => {
                assert_eq!(
                    app.get(&format!("/v1/threads/{thread}/tool-calls/c"))
                        .await
                        .status(),
                    404,
                    "round {round}: the refused call left a record"
                );
            }
            other => panic!("round {round}: {other:?} {out}"),
        }
    }
}

/// A declared call refused before it runs (arguments that do not match,
/// an unknown tool) is the call's failed result: the model waits for it,
/// and no corrected call can answer under its id. An undeclared one is a
/// request error that records nothing.
async fn a_declared_call_refused_before_it_runs_is_its_failed_result(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let t = "/v1/threads/decl-refused";
    let r = app
        .post(
            &format!("{t}/messages"),
            &json!({"role": "user", "content": "go"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let declared = json!({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "name": "echo", "arguments": {"txt": "typo"}},
        {"id": "c2", "name": "nope", "arguments": {}},
        {"id": "c4", "name": "sleep", "arguments": {"ms": "long"}},
    ]});
    assert_eq!(
        app.post(&format!("{t}/messages"), &declared).await.status(),
        201
    );
    // Recorded with the message: the model reads the errors in its
    // context before any of the calls is posted, not a stand-in saying
    // they were not.
    let context_results = || async {
        let context = app.get_json(&format!("{t}/context")).await;
        let results: Vec<String> = context["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| m["content"].as_str().unwrap().to_string())
            .collect();
        results
    };
    let results = context_results().await;
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results[0].contains("INVALID_ARGUMENTS"), "{results:?}");
    assert!(results[1].contains("TOOL_NOT_FOUND"), "{results:?}");
    assert!(results[2].contains("INVALID_ARGUMENTS"), "{results:?}");
    let (s, out) = app
        .call(
            "decl-refused",
            json!({"id": "c1", "name": "echo", "arguments": {"txt": "typo"}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    let output = &out["tool_agent_output"];
    assert_eq!(output["status"], "failure", "{out}");
    assert_eq!(output["error"]["code"], "INVALID_ARGUMENTS", "{out}");
    // Each failure points at its property, and a misspelt one at the
    // property meant.
    let errors = &output["error"]["errors"];
    assert_eq!(
        common::error_at(errors, "/text"),
        "\"text\" is a required property (\"txt\" is given: did you mean \"text\"?)",
        "{errors}"
    );
    assert!(
        out["tool_response"]["content"]
            .as_str()
            .unwrap()
            .contains("INVALID_ARGUMENTS")
    );
    // Posted again: the stored outcome, nothing new.
    let (s, again) = app
        .call(
            "decl-refused",
            json!({"id": "c1", "name": "echo", "arguments": {"txt": "typo"}}),
        )
        .await;
    assert_eq!((s, &again["replayed"]), (200, &json!(true)), "{again}");
    assert_eq!(again["tool_agent_output"], *output);
    // Made by a tool's alias, it is recorded under the tool's own name, as
    // declared: its failed result, answered as recorded.
    let c4 = json!({"id": "c4", "name": "sleep", "arguments": {"ms": "long"}});
    let (s, out) = app.call("decl-refused", c4.clone()).await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(
        out["tool_agent_output"]["error"]["code"], "INVALID_ARGUMENTS",
        "{out}"
    );
    assert_eq!(out["replayed"], true, "{out}");
    assert_eq!(out["tool_agent_output"]["tool_name"], "wait", "{out}");
    // Another call under its id, itself refused or not: a 409, as for any
    // declared call, whose code says never to post it again as it is.
    for other in [json!({"txt": "other"}), json!({"text": "fixed"})] {
        let (s, p) = app
            .call(
                "decl-refused",
                json!({"id": "c1", "name": "echo", "arguments": other}),
            )
            .await;
        assert_eq!(s, 409, "{p}");
        assert_eq!(p["code"], "CALL_CONFLICT", "{p}");
    }
    let (s, out) = app
        .call(
            "decl-refused",
            json!({"id": "c2", "name": "nope", "arguments": {}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(
        out["tool_agent_output"]["error"]["code"], "TOOL_NOT_FOUND",
        "{out}"
    );
    // Posting them recorded nothing more.
    assert_eq!(context_results().await, results);
    // A call no message declares is refused and leaves nothing.
    let before = app.history("decl-refused").await.len();
    let (s, out) = app
        .call(
            "decl-refused",
            json!({"id": "c3", "name": "echo", "arguments": {"txt": "typo"}}),
        )
        .await;
    assert_eq!(s, 422, "{out}");
    assert_eq!(app.history("decl-refused").await.len(), before);
    // Nor does a declared call's id posted to another owner's thread.
    let other = app.token_for("mallory");
    let r = app
        .client
        .post(format!("{}{t}/tool-calls", app.base))
        .bearer_auth(&other)
        .json(&json!({"id": "c2", "name": "nope", "arguments": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

/// A call posted before the assistant message declaring it, and refused
/// (an unknown tool, arguments that do not match: a 422 that stores
/// nothing), becomes the call's failed result when the message is
/// recorded: the model reads what was wrong in its context, flagged as an
/// error, whichever the chat backend did first. It read a stand-in saying
/// the call was never posted. Arguments a model sent as JSON text that is
/// no object's (its output cut short) are recorded as `_raw` and refused
/// with the parse error: the whole message was a 422, and the model's turn
/// could not be recorded as it was.
async fn a_call_refused_before_its_declaration_is_its_failed_result(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let thread = "refused-first";
    let t = format!("/v1/threads/{thread}");
    let r = app
        .post(
            &format!("{t}/messages"),
            &json!({"role": "user", "content": "go"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let e1 = json!({"id": "e1", "name": "echo", "arguments": {"txt": "hi"}});
    let e2 = json!({"id": "e2", "name": "Echo", "arguments": {"text": "hi"}});
    for call in [&e1, &e2] {
        let (s, out) = app.call(thread, call.clone()).await;
        assert_eq!(s, 422, "{out}");
    }
    let cut = "{\"text\": \"cu";
    let e3 =
        json!({"id": "e3", "type": "function", "function": {"name": "echo", "arguments": cut}});
    let e4 = json!({"id": "e4", "name": "echo", "arguments": {"text": "fine"}});
    let r = app
        .post(
            &format!("{t}/messages"),
            &json!({"role": "assistant", "content": "", "tool_calls": [e1, e2, e3, e4]}),
        )
        .await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    let declared = app.history(thread).await[1]["tool_calls"].clone();
    assert_eq!(declared[2]["arguments"], json!({"_raw": cut}), "{declared}");

    let context = app.get_json(&format!("{t}/context?format=anthropic")).await;
    let blocks: Vec<&Value> = context["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .collect();
    let result = |id: &str| {
        blocks
            .iter()
            .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == id)
            .unwrap_or_else(|| panic!("{id}: {context}"))
    };
    for (id, says) in [
        ("e1", "did you mean \\\"text\\\"?"),
        ("e2", "TOOL_NOT_FOUND"),
        ("e3", "is not valid JSON"),
    ] {
        let block = result(id);
        assert_eq!(block["is_error"], true, "{id}: {block}");
        assert!(
            block["content"].as_str().unwrap().contains(says),
            "{id}: {block}"
        );
    }
    // The call that can run waits for its post, as before.
    assert_eq!(result("e4")["is_error"], false, "{context}");
    assert!(
        result("e4")["content"]
            .as_str()
            .unwrap()
            .contains("no_result")
    );
    let tool_use = blocks
        .iter()
        .find(|b| b["type"] == "tool_use" && b["id"] == "e3")
        .unwrap();
    assert_eq!(tool_use["input"], json!({"_raw": cut}), "{tool_use}");

    // Posted now, each answers as recorded, the one cut short too (it was
    // a 422 however often it came); the other runs.
    for call in [&e1, &e2, &e3] {
        let (s, out) = app.call(thread, call.clone()).await;
        assert_eq!((s, &out["replayed"]), (200, &json!(true)), "{out}");
        assert_eq!(out["tool_agent_output"]["status"], "failure", "{out}");
    }
    // In a batch too.
    let batch: Value = app
        .post(&format!("{t}/batches"), &json!({"calls": [e3]}))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(batch["results"][0]["status"], 200, "{batch}");
    assert_eq!(batch["results"][0]["result"]["replayed"], true, "{batch}");
    // Cut short otherwise, it is another call: refused, storing nothing.
    let mut other = e3.clone();
    other["function"]["arguments"] = json!("{\"text\": \"c");
    let (s, out) = app.call(thread, other).await;
    assert_eq!(s, 422, "{out}");
    let (s, out) = app.call(thread, e4).await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["tool_agent_output"]["status"], "success", "{out}");
}

/// Large results are paged by size: a history page of 200 ends early and
/// hands a cursor, paging on reaches every message, and a replay of the
/// whole event log goes on past each page its size ended.
async fn large_results_are_paged_by_size(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let text = "z".repeat(900 * 1024);
    let ids: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
    for id in &ids {
        let (s, _) = app
            .call(
                "large",
                json!({"id": id, "name": "echo", "arguments": {"text": text}}),
            )
            .await;
        assert_eq!(s, 200);
    }
    let page = app.get_json("/v1/threads/large/history?limit=200").await;
    let held = page["messages"].as_array().unwrap();
    assert!(!held.is_empty() && held.len() < 6, "{}", held.len());
    assert_eq!(held.last().unwrap()["tool_call_id"], "c5");
    assert!(page["next_cursor"].is_string());
    let every: Vec<Value> = app
        .history("large")
        .await
        .iter()
        .map(|m| m["tool_call_id"].clone())
        .collect();
    assert_eq!(every, ids);

    let mut sse = app.events("large", "?after=0", None).await;
    let mut results = Vec::new();
    while results.len() < ids.len() {
        let frame = sse
            .next(Duration::from_secs(20))
            .await
            .unwrap_or_else(|| panic!("the replay stopped after {results:?}"));
        if frame.kind() == "TOOL_CALL_RESULT" {
            assert_eq!(frame.data["content"], json!({"text": text}).to_string());
            results.push(frame.data["toolCallId"].clone());
        }
    }
    assert_eq!(results, ids);
}

/// A thread longer than `DELETE_AT_ONCE` rows is gone at once when
/// deleted (`410` to every route), and its rows are removed after, in
/// chunks; a process stopped before it finished leaves them to the next
/// start, which removes them.
async fn a_long_threads_rows_go_after_it_and_after_a_restart(backend: Backend) {
    // Between chunks, a pause longer than the test: the first process
    // removes at most one chunk.
    let app = TestApp::spawn_with(backend, |s| s.storage.purge_pause_ms = 600_000).await;
    let calls = (toolgate::store::DELETE_AT_ONCE as usize / 6) + 10;
    let posted = futures::future::join_all((0..8).map(|lane| {
        let app = &app;
        async move {
            for i in (lane..calls).step_by(8) {
                let call =
                    json!({"id": format!("c{i}"), "name": "echo", "arguments": {"text": "x"}});
                let (s, out) = app.call("long", call).await;
                assert_eq!(s, 200, "{out}");
            }
        }
    }));
    posted.await;
    let (s, _) = app
        .call(
            "keep",
            json!({"id": "k", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200);
    let held = app.rows_of_thread("long").await;
    assert!(held > toolgate::store::DELETE_AT_ONCE, "{held}");
    let r = app.delete_as(&app.token, "/v1/threads/long").await;
    assert_eq!(r.status(), 204);
    let r = app.get("/v1/threads/long/history").await;
    assert_eq!(r.status(), 410);
    // One chunk goes, then the purge waits: the count (read table by
    // table, so one read may straddle the chunk's commit) settles below
    // what the thread held, and above nothing.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let left = loop {
        assert!(tokio::time::Instant::now() < deadline, "no chunk went");
        let before = app.rows_of_thread("long").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = app.rows_of_thread("long").await;
        if before == after && after < held {
            break after;
        }
    };
    assert!(left > 0, "{left} of {held}");

    let (mut settings, data_dir, pg) = app.stop().await;
    settings.storage.purge_pause_ms = 1;
    let app = TestApp::start(settings, data_dir, pg).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while app.rows_of_thread("long").await > 0 {
        assert!(tokio::time::Instant::now() < deadline, "the rows stay");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = app.get("/v1/threads/long/history").await;
    assert_eq!(r.status(), 410);
    assert_eq!(app.history("keep").await.len(), 1);
}

/// `DELETE /v1/threads/{id}`: everything the thread holds goes at once, in
/// one transaction; its streams end; its id answers `410` ever after, so
/// a call posted again under it (a retry of an old one) never runs twice.
/// Not while a call waits for a person; never another owner's thread.
async fn a_deleted_thread_is_gone_and_its_ids_never_run_again(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let token = app.token.clone();
    let echo = json!({"id": "c1", "name": "echo", "arguments": {"text": "secret words"}});
    let (s, out) = app.call("del", echo.clone()).await;
    assert_eq!(s, 200, "{out}");
    let r = app
        .post(
            "/v1/threads/del/messages",
            &json!({"id": "m1", "role": "user", "content": "more secret words"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let (s, _) = app.call("keep", echo.clone()).await;
    assert_eq!(s, 200);
    let mut stream = app.events("del", "", None).await;
    stream.until("TOOL_CALL_RESULT").await;

    // Another owner's thread is not found, and stays whole.
    let r = app
        .delete_as(&app.token_for("mallory"), "/v1/threads/del")
        .await;
    assert_eq!(r.status(), 404);
    assert_eq!(app.history("del").await.len(), 2);
    let r = app.delete_as(&token, "/v1/threads/never-was").await;
    assert_eq!(r.status(), 404);
    // A body is refused, not ignored (`{"dry_run": true}` deletes nothing).
    let r = reqwest::Client::new()
        .delete(app.url("/v1/threads/del"))
        .bearer_auth(&token)
        .json(&json!({"dry_run": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    assert_eq!(app.history("del").await.len(), 2);

    // A call waiting for a person holds the thread.
    let ask = json!({"id": "c2", "name": "bash", "arguments": {"command": "mkdir asked"}});
    let (s, out) = app.call("del", ask.clone()).await;
    assert_eq!(s, 202, "{out}");
    let approval = out["approval"]["id"].as_str().unwrap().to_string();
    let r = app.delete_as(&token, "/v1/threads/del").await;
    assert_eq!(r.status(), 409);
    let busy: Value = r.json().await.unwrap();
    assert_eq!(busy["code"], "THREAD_BUSY", "{busy}");
    assert_eq!(
        busy["errors"],
        json!([{"tool_call_id": "c2", "status": "pending_approval"}]),
        "{busy}"
    );
    assert_eq!(app.history("del").await.len(), 2, "nothing deleted");
    let r = app
        .post(
            &format!("/v1/approvals/{approval}/decision"),
            &json!({"decision": "deny"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    app.call_until_done("del", &ask).await;

    let r = app.delete_as(&token, "/v1/threads/del").await;
    assert_eq!(r.status(), 204);
    // Its stream ends, saying why.
    let end = stream.until("RUN_ERROR").await;
    let end = &end.last().unwrap().data;
    assert_eq!(end["code"], "THREAD_DELETED", "{end}");

    // Every request on it is a 410, the retried call too, which does not
    // run again; deleting it again answers as the first time.
    let gone = |what: &str, r: reqwest::Response| {
        let what = what.to_string();
        async move {
            assert_eq!(r.status(), 410, "{what}");
            let p: Value = r.json().await.unwrap();
            assert_eq!(p["code"], "THREAD_DELETED", "{what}: {p}");
            assert!(p["deleted_at"].as_str().unwrap().ends_with('Z'), "{p}");
        }
    };
    gone("history", app.get("/v1/threads/del/history").await).await;
    gone("context", app.get("/v1/threads/del/context").await).await;
    gone("events", app.get("/v1/threads/del/events").await).await;
    gone("a call", app.get("/v1/threads/del/tool-calls/c1").await).await;
    gone(
        "the call again",
        app.post("/v1/threads/del/tool-calls", &echo).await,
    )
    .await;
    gone(
        "a message",
        app.post(
            "/v1/threads/del/messages",
            &json!({"id": "m2", "role": "user", "content": "hello"}),
        )
        .await,
    )
    .await;
    gone(
        "a run",
        app.post(
            "/v1/threads/del/runs",
            &json!({"threadId": "del", "runId": "r1", "messages": [], "tools": [], "context": [], "state": {}, "forwardedProps": {}}),
        )
        .await,
    )
    .await;
    let r = app.delete_as(&token, "/v1/threads/del").await;
    assert_eq!(r.status(), 204);
    // The id stays its owner's: another owner cannot take it.
    let r = app
        .post_as(
            &app.token_for("mallory"),
            "/v1/threads/del/tool-calls",
            &echo,
        )
        .await;
    assert_eq!(r.status(), 404);
    let r = app.get(&format!("/v1/approvals/{approval}")).await;
    assert_eq!(r.status(), 410, "its approvals went with it");
    assert_eq!(r.json::<Value>().await.unwrap()["code"], "THREAD_DELETED");

    // The other thread is untouched; the list no longer holds this one.
    let listed = app.get_json("/v1/threads").await;
    let ids: Vec<&str> = listed["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["keep"], "{listed}");
    assert_eq!(app.history("keep").await.len(), 1);

    // The audit log counts what went, and the old call ran once.
    let audit = app.get_json("/v1/audit?thread_id=del").await;
    let entries = audit["entries"].as_array().unwrap();
    let deleted: Vec<&Value> = entries
        .iter()
        .filter(|e| e["action"] == "thread.deleted")
        .collect();
    assert_eq!(deleted.len(), 1, "{audit}");
    assert_eq!(
        deleted[0]["detail"],
        json!({"messages": 3, "events": deleted[0]["detail"]["events"], "tool_calls": 2, "approvals": 1}),
        "{audit}"
    );
    assert!(
        deleted[0]["detail"]["events"].as_i64().unwrap() >= 8,
        "{audit}"
    );
    let ran = entries
        .iter()
        .filter(|e| e["action"] == "call.executed" && e["tool_call_id"] == "c1")
        .count();
    assert_eq!(ran, 1, "{audit}");
    // Nothing of what it held is left in the database's tables.
    assert_eq!(app.rows_of_thread("del").await, 0);
    assert!(app.rows_of_thread("keep").await > 0);
}

/// `DELETE …?cancel=true` deletes a busy thread: the calls running are
/// cancelled (their callers get their `CANCELLED` results), those waiting
/// for approval withdrawn, having run nothing, and the thread goes.
async fn a_cancelling_deletion_stops_what_runs_and_what_waits(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.permissions.allow = vec!["bash(sleep *)".into()];
    })
    .await;
    // A command that runs here is stopped and waited for, whatever the
    // deletion's `wait` (which is for calls of other processes).
    let command = app
        .client
        .post(app.url("/v1/threads/stop/tool-calls"))
        .bearer_auth(&app.token)
        .json(&json!({"id": "b1", "name": "bash", "arguments": {"command": "sleep 20"}}))
        .send();
    let command =
        tokio::spawn(async move { command.await.unwrap().json::<Value>().await.unwrap() });
    let long = app
        .client
        .post(app.url("/v1/threads/stop/tool-calls"))
        .bearer_auth(&app.token)
        .json(&json!({"id": "w1", "name": "wait", "arguments": {"ms": 25000}}))
        .send();
    let long = tokio::spawn(async move { long.await.unwrap().json::<Value>().await.unwrap() });
    let ask = json!({"id": "c2", "name": "bash", "arguments": {"command": "mkdir asked"}});
    let (s, out) = app.call("stop", ask.clone()).await;
    assert_eq!(s, 202, "{out}");
    let approval = out["approval"]["id"].as_str().unwrap().to_string();
    for call in ["w1", "b1"] {
        let mut status = Value::Null;
        for _ in 0..200 {
            // Announced once it has run a moment (`wait` reads nothing, so
            // its record may wait for its result).
            let r = app
                .get(&format!("/v1/threads/stop/tool-calls/{call}"))
                .await;
            if r.status() == 200 {
                status = r.json::<Value>().await.unwrap()["status"].clone();
            }
            if status == "running" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_eq!(status, "running", "{call}");
    }
    // Without `cancel`, a busy thread stays as it is.
    let r = app.delete_as(&app.token, "/v1/threads/stop").await;
    assert_eq!(r.status(), 409);
    let (s, out) = app
        .call(
            "stop",
            json!({"id": "c3", "name": "echo", "arguments": {"text": "still open"}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");

    let r = app
        .delete_as(&app.token, "/v1/threads/stop?cancel=true&wait=0")
        .await;
    assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());
    for answered in [long.await.unwrap(), command.await.unwrap()] {
        assert_eq!(
            answered["tool_agent_output"]["error"]["code"], "CANCELLED",
            "{answered}"
        );
    }
    let r = app.get("/v1/threads/stop/history").await;
    assert_eq!(r.status(), 410);
    // The call waiting for a person never ran; the audit log tells why
    // it was denied.
    let audit = app.get_json("/v1/audit?thread_id=stop").await;
    let entries = audit["entries"].as_array().unwrap();
    let decided = entries
        .iter()
        .find(|e| e["action"] == "approval.decided" && e["tool_call_id"] == "c2")
        .expect("the approval was decided");
    assert!(
        decided.to_string().contains("its owner deleted the thread"),
        "{decided}"
    );
    assert!(
        !entries
            .iter()
            .any(|e| e["action"] == "call.executed" && e["tool_call_id"] == "c2"),
        "{audit}"
    );
    assert_eq!(app.rows_of_thread("stop").await, 0);
    // The approval went with its thread: looked up or decided, it is gone
    // as the thread is, for its owner; to anyone else it never was.
    let gone = app.get(&format!("/v1/approvals/{approval}")).await;
    assert_eq!(gone.status(), 410);
    let gone = gone.json::<Value>().await.unwrap();
    assert_eq!(gone["code"], "THREAD_DELETED", "{gone}");
    assert!(gone["deleted_at"].is_string(), "{gone}");
    let r = app
        .post(
            &format!("/v1/approvals/{approval}/decision"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(r.status(), 410);
    let other = app.token_for("mallory");
    let r = app
        .client
        .get(app.url(&format!("/v1/approvals/{approval}")))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = app.get("/v1/approvals/apr_0000000000000000").await;
    assert_eq!(r.status(), 404);
}

/// A deletion whose notice never reached this process (another process
/// deleted the thread while this one's watch was away): its streams end
/// at their next heartbeat, and its requests answer 410 once the owner it
/// remembers is read again (within ten seconds).
async fn a_deletion_told_nowhere_is_found_all_the_same(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.server.sse_heartbeat_secs = 1).await;
    let (s, _) = app
        .call(
            "quiet",
            json!({"id": "c1", "name": "echo", "arguments": {"text": "hi"}}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(app.history("quiet").await.len(), 1);
    let mut stream = app.events("quiet", "", None).await;
    stream.until("TOOL_CALL_RESULT").await;
    // As another process's deletion leaves this one's memory: untold.
    let marked: i64 = app
        .stored_scalar(
            "UPDATE threads SET deleted_at_ms = 1795000000000 WHERE id = $1 RETURNING deleted_at_ms",
            "quiet",
        )
        .await;
    assert_eq!(marked, 1_795_000_000_000);
    let end = stream.until("RUN_ERROR").await;
    assert_eq!(end.last().unwrap().data["code"], "THREAD_DELETED");
    let mut status = 0;
    for _ in 0..150 {
        status = app.get("/v1/threads/quiet/history").await.status().as_u16();
        if status == 410 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 410);
}

both_backends!(
    a_long_threads_rows_go_after_it_and_after_a_restart,
    a_deleted_thread_is_gone_and_its_ids_never_run_again,
    a_cancelling_deletion_stops_what_runs_and_what_waits,
    a_deletion_told_nowhere_is_found_all_the_same,
    a_message_and_its_events_have_one_moment,
    a_recorded_turn_comes_back_as_the_stream_showed_it,
    identical_runs_at_once_all_finish,
    a_run_names_the_fields_it_does_not_know,
    large_results_are_paged_by_size,
    a_declared_call_refused_before_it_runs_is_its_failed_result,
    a_call_refused_before_its_declaration_is_its_failed_result,
    a_whole_number_with_a_fraction_is_the_integer,
    a_declared_call_is_the_same_with_a_whole_number_spelled_either_way,
    a_declared_call_is_announced_as_its_messages,
    a_call_posted_under_a_parent_is_that_messages,
    a_call_racing_a_message_under_its_parent_is_answered,
    a_run_announces_a_call_by_the_name_it_was_called,
    a_run_claims_its_new_thread_even_when_it_records_nothing,
    a_users_media_parts_are_kept_and_passed_on,
    an_application_tools_failure_is_kept,
    a_call_id_means_one_call_in_a_thread,
    a_declared_call_runs_only_as_declared,
    an_assistant_turns_thinking_is_kept_for_anthropic,
    a_refused_result_finishes_its_call_as_a_failure,
    a_result_the_database_fails_on_finishes_its_call_as_a_failure,
    extreme_numbers_survive_storage,
    resumed_results_are_the_live_ones_byte_for_byte,
    a_caller_that_hangs_up_does_not_cut_the_call,
    tool_call_in_three_shapes,
    live_stream_and_history_carry_the_same_ui,
    a_file_read_is_stored_once_and_shown_alike_everywhere,
    resume_replays_exactly_what_was_missed,
    idempotent_calls_run_once,
    messages_context_and_text_events,
    history_pages_backwards_with_cursors,
    a_retried_run_replays_its_calls_under_their_message,
    a_runs_messages_reach_watchers_and_a_valid_context,
    a_runs_developer_message_keeps_its_role,
    a_runs_earlier_calls_that_can_never_run_are_refused,
    an_owner_lists_their_threads_page_by_page,
    a_snapshot_and_the_stream_after_it_never_overlap,
    a_snapshot_shows_running_calls_where_they_were_announced,
    failures_are_data_with_an_error_template,
    progress_of_long_tools_streams_as_custom_events,
);
