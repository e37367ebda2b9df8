//! Batches, concurrency limits, cancellation and dry runs, over HTTP.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use common::{Backend, TestApp};
use serde_json::{Value, json};
use toolgate::tools::{
    DryRunResult, Tool, ToolCapability, ToolContext, ToolDefinition, ToolError, ToolMetadata,
    ToolSuccess,
};

fn definition(name: &str, concurrency_safe: bool, dry_run: bool) -> ToolDefinition {
    ToolDefinition {
        name: name.into(),
        description: format!("test tool {name}"),
        input_schema: json!({"type": "object", "properties": {"tag": {"type": "string"}}}),
        output_schema: None,
        aliases: vec![],
        metadata: ToolMetadata {
            concurrency_safe,
            ..ToolMetadata::default()
        },
        capability: ToolCapability {
            dry_run,
            ..ToolCapability::default()
        },
    }
}

/// Concurrency-safe: every call waits until `parties` calls are inside at
/// once. Run one after another they would never get there, so success
/// proves they overlapped, whatever the machine's speed.
struct Rendezvous {
    barrier: Arc<tokio::sync::Barrier>,
}

#[async_trait]
impl Tool for Rendezvous {
    fn definition(&self) -> ToolDefinition {
        definition("rendezvous", true, false)
    }
    async fn execute(&self, args: Value, _ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        match tokio::time::timeout(Duration::from_secs(20), self.barrier.wait()).await {
            Ok(_) => Ok(ToolSuccess::complete(json!({"met": args["tag"]}))),
            Err(_) => Err(ToolError::new(
                "ALONE",
                "the other calls never arrived",
                false,
            )),
        }
    }
}

/// Not concurrency-safe: logs when it enters and leaves.
struct Exclusive {
    log: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl Tool for Exclusive {
    fn definition(&self) -> ToolDefinition {
        definition("exclusive", false, true)
    }
    async fn execute(&self, args: Value, _ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        let tag = args["tag"].as_str().unwrap_or_default().to_string();
        self.log.lock().unwrap().push(format!("start {tag}"));
        tokio::time::sleep(Duration::from_millis(30)).await;
        self.log.lock().unwrap().push(format!("end {tag}"));
        Ok(ToolSuccess::complete(json!({"done": tag})))
    }
    async fn dry_run(&self, args: Value, _ctx: ToolContext) -> Result<DryRunResult, ToolError> {
        Ok(DryRunResult {
            would_affect: format!("item {}", args["tag"].as_str().unwrap_or_default()),
            preview: "- old\n+ new\n".into(),
            estimated_impact: json!({"items": 1}),
        })
    }
}

/// Does its work when told to stop, then reports it done: a tool that
/// finished just as the cancellation reached it.
struct FinishesOnCancel {
    done: Arc<Mutex<u32>>,
}

#[async_trait]
impl Tool for FinishesOnCancel {
    fn definition(&self) -> ToolDefinition {
        definition("finishes_on_cancel", false, false)
    }
    async fn execute(&self, _args: Value, ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        ctx.progress.report(0.5, "working");
        ctx.cancel.cancelled().await;
        *self.done.lock().unwrap() += 1;
        Ok(ToolSuccess::complete(json!({"done": true})))
    }
}

/// A cancel reports "stopped" only for what stopped: a call that finished its
/// work as the cancellation reached it keeps its result, and the cancel is
/// answered `409` naming it, not `202`. A cancel that does stop its call
/// is answered once the `CANCELLED` result is stored.
async fn a_cancel_answers_what_it_came_to(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.permissions.allow = vec!["finishes_on_cancel".into()];
    })
    .await;
    let done = Arc::new(Mutex::new(0));
    app.registry
        .register(Arc::new(FinishesOnCancel { done: done.clone() }))
        .unwrap();
    let mut sse = app.events("fc", "", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let posted = {
        let (client, url, token) = (
            app.client.clone(),
            app.url("/v1/threads/fc/tool-calls"),
            app.token.clone(),
        );
        tokio::spawn(async move {
            let r = client
                .post(url)
                .bearer_auth(token)
                .json(&json!({"id": "f1", "name": "finishes_on_cancel", "arguments": {}}))
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()
        })
    };
    sse.until("TOOL_CALL_END").await;
    let r = app
        .post("/v1/threads/fc/tool-calls/f1/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 409);
    let p: Value = r.json().await.unwrap();
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains("finished (status success) before the cancellation reached it"),
        "{p}"
    );
    assert_eq!(*done.lock().unwrap(), 1, "the work was done");
    let out = posted.await.unwrap();
    assert_eq!(out["tool_agent_output"]["status"], "success", "{out}");

    // A call that does stop: by the time the 202 comes, its CANCELLED
    // result is stored.
    let waiting = {
        let (client, url, token) = (
            app.client.clone(),
            app.url("/v1/threads/fc/tool-calls"),
            app.token.clone(),
        );
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(token)
                .json(&json!({"id": "w1", "name": "wait", "arguments": {"ms": 20000}}))
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    sse.until("TOOL_CALL_END").await;
    let r = app
        .post("/v1/threads/fc/tool-calls/w1/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);
    let record = app.get_json("/v1/threads/fc/tool-calls/w1").await;
    assert_eq!(record["status"], "failure", "{record}");
    assert_eq!(
        record["outcome"]["tool_agent_output"]["error"]["code"], "CANCELLED",
        "{record}"
    );
    assert_eq!(waiting.await.unwrap(), 200);
}

/// Two owners write first to one new thread at once, one with a batch: the
/// loser is answered `404` whichever route it took, never a `200` whose
/// items say the thread is not found.
async fn a_batch_that_loses_a_new_thread_is_answered_404(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let other = app.token_for("batch-rival");
    for round in 0..12 {
        let thread = format!("claimed-{round}");
        let (message_path, batch_path) = (
            format!("/v1/threads/{thread}/messages"),
            format!("/v1/threads/{thread}/batches"),
        );
        let (message_body, batch_body) = (
            json!({"role": "user", "content": "mine"}),
            json!({"calls": [{"id": "b1", "name": "echo", "arguments": {"text": "x"}}]}),
        );
        let message = app.post(&message_path, &message_body);
        let batch = app.post_as(&other, &batch_path, &batch_body);
        let (message, batch) = tokio::join!(message, batch);
        let (message, batch) = (message.status().as_u16(), batch);
        let batch_status = batch.status().as_u16();
        let body: Value = batch.json().await.unwrap();
        match (message, batch_status) {
            (201, 404) => assert_eq!(body["detail"], "thread not found", "{body}"),
            (404, 200) => assert_eq!(body["results"][0]["status"], 200, "{body}"),
            other => panic!("round {round}: message and batch answered {other:?}: {body}"),
        }
        let owner_sees = app.get(&format!("/v1/threads/{thread}/history")).await;
        assert_eq!(
            owner_sees.status().as_u16(),
            if message == 201 { 200 } else { 404 }
        );
    }
}

/// Reports progress, then works on a blocking thread, holding its context,
/// until the test lets it go: work no timeout or cancel can abort.
struct Stuck {
    release: Arc<Mutex<Option<std::sync::mpsc::Receiver<()>>>>,
}

#[async_trait]
impl Tool for Stuck {
    fn definition(&self) -> ToolDefinition {
        definition("stuck", false, false)
    }
    async fn execute(&self, _args: Value, ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        ctx.progress.report(0.1, "started");
        let release = self.release.lock().unwrap().take().unwrap();
        tokio::task::spawn_blocking(move || {
            let _held = ctx;
            let _ = release.recv();
        })
        .await
        .unwrap();
        Ok(ToolSuccess::complete(json!({"done": true})))
    }
}

/// A tool stopped by its timeout is answered `TIMEOUT` even while work it
/// started on a blocking thread still holds its context (and its progress
/// sender): the call does not wait for that work.
async fn a_timed_out_call_is_answered_while_its_blocking_work_goes_on(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.tools.timeout_secs = 1;
        s.permissions.allow = vec!["stuck".into()];
    })
    .await;
    let (release, held) = std::sync::mpsc::channel();
    app.registry
        .register(Arc::new(Stuck {
            release: Arc::new(Mutex::new(Some(held))),
        }))
        .unwrap();
    let answered = tokio::time::timeout(
        Duration::from_secs(30),
        app.call(
            "stuck",
            json!({"id": "s1", "name": "stuck", "arguments": {}}),
        ),
    )
    .await;
    let _ = release.send(());
    let (s, out) = answered.expect("the call was answered while the tool's work went on");
    assert_eq!(s, 200, "{out}");
    assert_eq!(
        out["tool_agent_output"]["error"]["code"], "TIMEOUT",
        "{out}"
    );
    let history = app.history("stuck").await;
    assert_eq!(history.len(), 1, "{history:?}");
}

/// The test tools are generic (they declare no permission class), so they
/// ask by default; these tests allow them by a deployment rule.
fn allow_test_tools(s: &mut toolgate::config::Settings) {
    s.permissions.allow = vec!["rendezvous".into(), "exclusive".into()];
}

/// A batch posted again (its answer lost) answers from storage with the
/// run its calls were recorded under, not the run this post was given, so
/// rolling that run back reaches them. It answered a new run id that held
/// none of its calls, and the rollback was a 404.
async fn a_batch_posted_again_names_the_run_of_its_calls(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let write = |id: &str| json!({"id": id, "name": "write_file", "arguments": {"path": format!("{id}.txt"), "content": id}});
    let batch = json!({"calls": [write("r1"), write("r2")]});
    let first: Value = app
        .post("/v1/threads/again/batches", &batch)
        .await
        .json()
        .await
        .unwrap();
    let run = first["run_id"].as_str().unwrap().to_string();
    assert_eq!(first["results"][0]["status"], 200, "{first}");
    for retry in [
        batch.clone(),
        json!({"calls": batch["calls"], "run_id": "another"}),
    ] {
        let again: Value = app
            .post("/v1/threads/again/batches", &retry)
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(again["results"][0]["result"]["replayed"], true, "{again}");
        assert_eq!(again["run_id"], run.as_str(), "{again}");
    }
    // Posted again with a call more (as after one waiting for approval was
    // decided) and no run of its own: the new call joins the first run.
    let more = json!({"calls": [write("r1"), write("r2"), write("r3")]});
    let again: Value = app
        .post("/v1/threads/again/batches", &more)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["run_id"], run.as_str(), "{again}");
    assert_eq!(again["results"][2]["result"]["replayed"], false, "{again}");
    let r3 = app.get_json("/v1/threads/again/tool-calls/r3").await;
    assert_eq!(r3["run_id"], run.as_str(), "{r3}");
    let r = app
        .post(
            &format!("/v1/threads/again/runs/{run}/rollback"),
            &json!({}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

async fn batches_run_safe_calls_together_and_the_rest_in_order(backend: Backend) {
    let app = TestApp::spawn_with(backend, allow_test_tools).await;
    let log = Arc::new(Mutex::new(vec![]));
    app.registry
        .register(Arc::new(Rendezvous {
            barrier: Arc::new(tokio::sync::Barrier::new(3)),
        }))
        .unwrap();
    app.registry
        .register(Arc::new(Exclusive { log: log.clone() }))
        .unwrap();
    let batch = json!({"calls": [
        {"id": "p1", "name": "rendezvous", "arguments": {"tag": "1"}},
        {"id": "p2", "type": "tool_use", "name": "rendezvous", "input": {"tag": "2"}},
        {"id": "p3", "type": "function", "function": {"name": "rendezvous", "arguments": "{\"tag\":\"3\"}"}},
        {"id": "x1", "name": "exclusive", "arguments": {"tag": "a"}},
        {"id": "bad", "name": "nope", "arguments": {}},
        {"id": "x2", "name": "exclusive", "arguments": {"tag": "b"}},
        {"name": "echo"},
        "echo",
        {"id": "no-name", "type": "tool_use"},
    ]});
    let resp = app.post("/v1/threads/b/batches", &batch).await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 9);
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["index"], i, "request order");
    }
    for r in &results[..3] {
        assert_eq!(r["status"], 200);
        assert_eq!(
            r["result"]["tool_agent_output"]["status"], "success",
            "the three met: they ran in parallel: {r}"
        );
    }
    assert_eq!(results[4]["status"], 422);
    assert_eq!(results[4]["problem"]["code"], "TOOL_NOT_FOUND");
    assert_eq!(results[6]["status"], 422);
    // Pointers name the place in the request body.
    assert_eq!(results[6]["problem"]["errors"][0]["pointer"], "/calls/6/id");
    assert_eq!(results[7]["status"], 422);
    assert_eq!(
        results[7]["problem"]["errors"][0]["pointer"], "/calls/7",
        "an item that is not an object: {}",
        results[7]
    );
    assert!(
        results[7]["problem"]["detail"]
            .as_str()
            .unwrap()
            .starts_with("/calls/7 "),
        "{}",
        results[7]
    );
    // A refused item names its id when it has one.
    assert_eq!(
        (&results[8]["status"], &results[8]["tool_call_id"]),
        (&json!(422), &json!("no-name")),
        "{}",
        results[8]
    );
    assert_eq!(results[6]["tool_call_id"], Value::Null);
    assert_eq!(
        *log.lock().unwrap(),
        ["start a", "end a", "start b", "end b"],
        "exclusive calls one at a time, in order"
    );
    let run_id = body["run_id"].as_str().unwrap();
    assert!(run_id.starts_with("batch_"));
    assert_eq!(
        app.history("b").await.len(),
        5,
        "refused calls store nothing; the five that ran do"
    );

    let too_many = json!({"calls": (0..65).map(|i| json!({"id": format!("c{i}"), "name": "echo", "arguments": {"text": "x"}})).collect::<Vec<_>>()});
    let empty = json!({"calls": []});
    let bad_run = json!({"calls": [{"id": "c", "name": "echo", "arguments": {"text": "x"}}], "run_id": "a b"});
    for (body, pointer) in [
        (&too_many, "/calls"),
        (&empty, "/calls"),
        (&bad_run, "/run_id"),
    ] {
        let r = app.post("/v1/threads/b/batches", body).await;
        assert_eq!(r.status(), 422);
        let p: Value = r.json().await.unwrap();
        assert_eq!(p["errors"][0]["pointer"], pointer, "{p}");
        assert_eq!(p["errors"][0]["message"], p["detail"], "{p}");
    }

    // A batch is one run: an item filed under another run is refused (it
    // would be left out of the batch's rollback); the batch's own is fine.
    let runs = json!({"run_id": "R1", "calls": [
        {"id": "in", "name": "echo", "arguments": {"text": "x"}, "run_id": "R1"},
        {"id": "out", "name": "echo", "arguments": {"text": "x"}, "run_id": "OTHER"},
    ]});
    let r = app.post("/v1/threads/b3/batches", &runs).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["results"][0]["status"], 200, "{body}");
    assert_eq!(body["results"][1]["status"], 422, "{body}");
    assert_eq!(
        body["results"][1]["problem"]["errors"][0]["pointer"], "/calls/1/run_id",
        "{body}"
    );
    assert_eq!(
        app.history("b3").await.len(),
        1,
        "the refused item stored nothing"
    );

    // One id twice in a batch: the second is refused, whatever its
    // arguments, and the first runs.
    let twice = json!({"calls": [
        {"id": "dup", "name": "echo", "arguments": {"text": "first"}},
        {"id": "dup", "name": "echo", "arguments": {"text": "second"}},
    ]});
    let r = app.post("/v1/threads/b2/batches", &twice).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["results"][0]["status"], 200, "{body}");
    assert_eq!(
        body["results"][0]["result"]["tool_agent_output"]["result"]["text"], "first",
        "{body}"
    );
    assert_eq!(body["results"][1]["status"], 422, "{body}");
    assert_eq!(body["results"][1]["tool_call_id"], "dup", "{body}");
    assert!(
        body["results"][1]["problem"]["detail"]
            .as_str()
            .unwrap()
            .contains("call 0 of this batch"),
        "{body}"
    );
    assert_eq!(
        body["results"][1]["problem"]["errors"][0]["pointer"], "/calls/1/id",
        "{body}"
    );
}

/// A call posted again while it runs only waits for its outcome: it lets
/// its slot go at once, so retries (and retries whose client gave up)
/// keep none of the owner's slots from new calls.
async fn a_call_posted_again_while_it_runs_holds_no_slot(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.tools.max_concurrent_calls_per_owner = 2).await;
    let post = |id: &'static str, ms: u64, timeout: Option<Duration>| {
        let (client, url, token) = (
            app.client.clone(),
            app.url("/v1/threads/rs/tool-calls"),
            app.token.clone(),
        );
        async move {
            let mut request = client
                .post(url)
                .bearer_auth(token)
                .json(&json!({"id": id, "name": "wait", "arguments": {"ms": ms}}));
            if let Some(timeout) = timeout {
                request = request.timeout(timeout);
            }
            request.send().await.map(|r| r.status().as_u16())
        }
    };
    let mut sse = app.events("rs", "", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let long = tokio::spawn(post("long", 20_000, None));
    while sse.until("TOOL_CALL_END").await.pop().unwrap().data["toolCallId"] != "long" {}
    // Two retries, each given up by its client while the call runs.
    for _ in 0..2 {
        let gave_up = post("long", 20_000, Some(Duration::from_millis(700))).await;
        assert!(
            gave_up.is_err(),
            "the retry waits for the outcome: {gave_up:?}"
        );
    }
    // One slot is the running call's; the other is free.
    let r = app
        .post(
            "/v1/threads/rs/tool-calls",
            &json!({"id": "new", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // A batch of two safe calls runs in the one free slot, one at a time,
    // rather than being refused for wanting two.
    let r = app
        .post(
            "/v1/threads/rs/batches",
            &json!({"calls": [
                {"id": "b1", "name": "echo", "arguments": {"text": "1"}},
                {"id": "b2", "name": "echo", "arguments": {"text": "2"}},
            ]}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["status"] == 200),
        "{body}"
    );
    let r = app
        .post("/v1/threads/rs/tool-calls/long/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);
    assert_eq!(long.await.unwrap().unwrap(), 200);
}

/// An AG-UI run posted again while its call runs (its first client gone)
/// only waits for that call: it lets the run's slot go, so the owner's
/// new calls are not refused meanwhile.
async fn a_run_posted_again_while_its_call_runs_holds_no_slot(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.tools.max_concurrent_calls_per_owner = 2).await;
    let input = json!({
        "threadId": "rr", "runId": "run-1", "state": {}, "context": [], "tools": [],
        "forwardedProps": {},
        "messages": [
            {"id": "u1", "role": "user", "content": "wait"},
            {"id": "a1", "role": "assistant", "toolCalls": [
                {"id": "w1", "type": "function", "function": {"name": "wait", "arguments": "{\"ms\": 20000}"}}]}
        ]
    });
    let post_run = || async {
        let r = app
            .client
            .post(app.url("/v1/threads/rr/runs"))
            .bearer_auth(&app.token)
            .json(&input)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        // The client goes; the run goes on.
        drop(r);
    };
    post_run().await;
    let running = || async {
        let r = app.get("/v1/threads/rr/tool-calls/w1").await;
        r.status() == 200 && r.json::<Value>().await.unwrap()["status"] == "running"
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !running().await {
        assert!(std::time::Instant::now() < deadline, "w1 runs");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    post_run().await;
    // The retry reaches the call and lets its slot go: a new call of the
    // owner's runs in it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let r = app
            .post(
                "/v1/threads/other/tool-calls",
                &json!({"id": format!("e{}", deadline.elapsed().as_nanos()), "name": "echo", "arguments": {"text": "x"}}),
            )
            .await;
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 429);
        assert!(std::time::Instant::now() < deadline, "still refused");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = app
        .post("/v1/threads/rr/tool-calls/w1/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);
}

/// Under the owner's limit (one call at a time): a call or a batch
/// recorded already is answered again without a slot; a call posted again
/// with other arguments while it runs is a 409 at once; an approved call
/// takes a slot like any other (approving with none free is a 429 that
/// decides nothing); a batch wider than the limits runs, a few at a time.
async fn limits_leave_recorded_calls_and_count_approved_ones(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.tools.max_concurrent_calls_per_owner = 1).await;
    let (s, first) = app
        .call(
            "r",
            json!({"id": "done", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200, "{first}");
    let batch = json!({"run_id": "b1", "calls": [
        {"id": "b-1", "name": "echo", "arguments": {"text": "1"}},
        {"id": "b-2", "name": "echo", "arguments": {"text": "2"}},
        {"id": "b-3", "name": "echo", "arguments": {"text": "3"}},
    ]});
    // Three concurrency-safe calls, one slot: they run one at a time.
    let r = app.post("/v1/threads/r/batches", &batch).await;
    assert_eq!(r.status(), 200);
    let ran: Value = r.json().await.unwrap();
    assert!(
        ran["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["status"] == 200),
        "{ran}"
    );

    let mut sse = app.events("r", "", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let long = {
        let (client, url, token) = (
            app.client.clone(),
            app.url("/v1/threads/r/tool-calls"),
            app.token.clone(),
        );
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(token)
                .json(&json!({"id": "long", "name": "wait", "arguments": {"ms": 20000}}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    // (The stream replays the thread's earlier calls first.)
    while sse.until("TOOL_CALL_END").await.pop().unwrap().data["toolCallId"] != "long" {}
    // The slot is taken; a new call is refused...
    let busy = app
        .post(
            "/v1/threads/r/tool-calls",
            &json!({"id": "new", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(busy.status(), 429);
    // ...but a recorded one is answered as recorded, alone or in a batch.
    let (s, again) = app
        .call(
            "r",
            json!({"id": "done", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(again["replayed"], true, "{again}");
    let r = app.post("/v1/threads/r/batches", &batch).await;
    assert_eq!(r.status(), 200);
    let again: Value = r.json().await.unwrap();
    assert!(
        again["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["result"]["replayed"] == true),
        "{again}"
    );
    // The running call posted again with other arguments: a 409 at once.
    let started = std::time::Instant::now();
    let r = app
        .post(
            "/v1/threads/r/tool-calls",
            &json!({"id": "long", "name": "wait", "arguments": {"ms": 5}}),
        )
        .await;
    assert_eq!(r.status(), 409);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "it waited for the call"
    );
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["code"], "CALL_CONFLICT", "{p}");

    // An approval while the slot is taken decides nothing.
    let r = app.put("/v1/permissions", &json!({"ask": ["echo"]})).await;
    assert_eq!(r.status(), 200);
    let r = app
        .post(
            "/v1/threads/r/tool-calls",
            &json!({"id": "asks", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    // (Posting it needs a slot too: wait for the long call's to free.)
    assert_eq!(r.status(), 429);
    let r = app
        .post("/v1/threads/r/tool-calls/long/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);
    assert_eq!(long.await.unwrap(), 200);
    let r = app
        .post(
            "/v1/threads/r/tool-calls",
            &json!({"id": "asks", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(r.status(), 202);
    let pending: Value = r.json().await.unwrap();
    let approval = pending["approval"]["id"].as_str().unwrap().to_string();
    let r = app.put("/v1/permissions", &json!({"ask": ["wait"]})).await;
    assert_eq!(r.status(), 200);
    let r = app
        .post(
            "/v1/threads/r/tool-calls",
            &json!({"id": "w2", "name": "wait", "arguments": {"ms": 20000}}),
        )
        .await;
    assert_eq!(r.status(), 202);
    let waiting: Value = r.json().await.unwrap();
    let second = waiting["approval"]["id"].as_str().unwrap().to_string();
    // The second (a long wait) approved: it runs, in the owner's slot.
    let r = app
        .post(
            &format!("/v1/approvals/{second}/decision"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(r.status(), 200);
    let r = app
        .post(
            &format!("/v1/approvals/{approval}/decision"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    let p: Value = r.json().await.unwrap();
    assert!(
        p["detail"].as_str().unwrap().contains("stays pending"),
        "{p}"
    );
    let r = app.get(&format!("/v1/approvals/{approval}")).await;
    let view: Value = r.json().await.unwrap();
    assert_eq!(view["status"], "pending", "{view}");
    let busy = app
        .post(
            "/v1/threads/r/tool-calls",
            &json!({"id": "new", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(
        busy.status(),
        429,
        "the approved call holds the owner's slot"
    );
    // Denying needs no slot; once the approved call ends, approving works.
    let r = app
        .post("/v1/threads/r/tool-calls/w2/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);
    let r = app
        .post(
            &format!("/v1/approvals/{approval}/decision"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(r.status(), 200);
}

/// A call of a batch or an AG-UI run that has not started yet may be
/// cancelled (it was a 404): when its turn comes it is recorded CANCELLED
/// and does not run.
async fn a_call_waiting_its_turn_in_a_batch_or_run_can_be_cancelled(backend: Backend) {
    // One slot: the batch's calls run one after another.
    let app = TestApp::spawn_with(backend, |s| s.tools.max_concurrent_calls_per_owner = 1).await;
    let mut sse = app.events("q", "", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let batch = {
        let (client, url, token) = (
            app.client.clone(),
            app.url("/v1/threads/q/batches"),
            app.token.clone(),
        );
        tokio::spawn(async move {
            let r = client
                .post(url)
                .bearer_auth(token)
                .json(&json!({"calls": [
                    {"id": "first", "name": "wait", "arguments": {"ms": 20000}},
                    {"id": "second", "name": "echo", "arguments": {"text": "x"}},
                ]}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        })
    };
    sse.until("TOOL_CALL_END").await;
    let r = app
        .post("/v1/threads/q/tool-calls/second/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["outcome"], "not_started", "{answer}");
    // Cancelled again (its answer lost, say): the same answer.
    let r = app
        .post("/v1/threads/q/tool-calls/second/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["outcome"], "not_started", "{answer}");
    let r = app
        .post("/v1/threads/q/tool-calls/nobody/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 404);
    let r = app
        .post("/v1/threads/q/tool-calls/first/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["outcome"], "cancelled", "{answer}");
    let (status, body) = batch.await.unwrap();
    assert_eq!(status, 200, "{body}");
    for (i, id) in ["first", "second"].iter().enumerate() {
        let output = &body["results"][i]["result"]["tool_agent_output"];
        assert_eq!(output["tool_call_id"], *id, "{body}");
        assert_eq!(output["error"]["code"], "CANCELLED", "{body}");
    }
    let message = body["results"][1]["result"]["tool_agent_output"]["error"]["message"]
        .as_str()
        .unwrap();
    assert!(message.contains("before it started"), "{message}");
    let record = app.get_json("/v1/threads/q/tool-calls/second").await;
    assert_eq!(record["status"], "failure", "{record}");
    // After the batch the id is a finished call's: a cancel is the 202 of
    // a cancelled call.
    let r = app
        .post("/v1/threads/q/tool-calls/second/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);

    // The same in an AG-UI run.
    let input = json!({
        "threadId": "qr", "runId": "run_1", "state": {}, "tools": [], "context": [],
        "forwardedProps": {},
        "messages": [
            {"id": "u1", "role": "user", "content": "go"},
            {"id": "a1", "role": "assistant", "toolCalls": [
                {"id": "r1", "type": "function", "function": {"name": "wait", "arguments": "{\"ms\":20000}"}},
                {"id": "r2", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"x\"}"}}]}
        ]
    });
    let resp = app.post("/v1/threads/qr/runs", &input).await;
    assert_eq!(resp.status(), 200);
    let mut run = common::SseReader::new(resp);
    run.until("TOOL_CALL_END").await;
    let r = app
        .post("/v1/threads/qr/tool-calls/r2/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);
    let r = app
        .post("/v1/threads/qr/tool-calls/r1/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);
    let frames = run.until("RUN_FINISHED").await;
    let results: Vec<&Value> = frames
        .iter()
        .filter(|f| f.kind() == "TOOL_CALL_RESULT")
        .map(|f| &f.data)
        .collect();
    assert_eq!(results.len(), 2, "{frames:?}");
    for (result, id) in results.iter().zip(["r1", "r2"]) {
        assert_eq!(result["toolCallId"], id);
        assert_eq!(result["metadata"]["error"]["code"], "CANCELLED", "{result}");
    }

    // A call held back behind one waiting for approval, cancelled while it
    // waited its turn, is recorded CANCELLED, not left to run later; a
    // call the thread has recorded is cancelled by its record.
    let r = app
        .put("/v1/permissions", &json!({"ask": ["write_file"]}))
        .await;
    assert_eq!(r.status(), 200);
    let (s, done) = app
        .call(
            "h",
            json!({"id": "done", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200, "{done}");
    let mut sse = app.events("h", "", None).await;
    let batch = {
        let (client, url, token) = (
            app.client.clone(),
            app.url("/v1/threads/h/batches"),
            app.token.clone(),
        );
        tokio::spawn(async move {
            let r = client
                .post(url)
                .bearer_auth(token)
                .json(&json!({"calls": [
                    {"id": "w", "name": "wait", "arguments": {"ms": 1500}},
                    {"id": "p", "name": "write_file", "arguments": {"path": "p.txt", "content": "p"}},
                    {"id": "x", "name": "echo", "arguments": {"text": "x"}},
                    {"id": "done", "name": "echo", "arguments": {"text": "x"}},
                ]}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        })
    };
    while sse.until("TOOL_CALL_END").await.pop().unwrap().data["toolCallId"] != "w" {}
    let r = app
        .post("/v1/threads/h/tool-calls/x/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);
    let r = app
        .post("/v1/threads/h/tool-calls/done/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 409, "it finished: its result stands");
    let (status, body) = batch.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][1]["status"], 202, "{body}");
    assert_eq!(body["results"][2]["status"], 200, "{body}");
    assert_eq!(
        body["results"][2]["result"]["tool_agent_output"]["error"]["code"], "CANCELLED",
        "{body}"
    );
    assert_eq!(body["results"][3]["status"], 409, "waits behind p: {body}");
    let record = app.get_json("/v1/threads/h/tool-calls/x").await;
    assert_eq!(record["status"], "failure", "{record}");
    // Posted again later, it answers as recorded: it never runs.
    let (s, again) = app
        .call(
            "h",
            json!({"id": "x", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        again["tool_agent_output"]["error"]["code"], "CANCELLED",
        "{again}"
    );

    // The same in an AG-UI run that ends waiting for an approval.
    let input = json!({
        "threadId": "hr", "runId": "run_1", "state": {}, "tools": [], "context": [],
        "forwardedProps": {},
        "messages": [
            {"id": "u1", "role": "user", "content": "go"},
            {"id": "a1", "role": "assistant", "toolCalls": [
                {"id": "h1", "type": "function", "function": {"name": "wait", "arguments": "{\"ms\":1500}"}},
                {"id": "h2", "type": "function", "function": {"name": "write_file", "arguments": "{\"path\":\"h.txt\",\"content\":\"h\"}"}},
                {"id": "h3", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"x\"}"}}]}
        ]
    });
    let resp = app.post("/v1/threads/hr/runs", &input).await;
    assert_eq!(resp.status(), 200);
    let mut run = common::SseReader::new(resp);
    run.until("TOOL_CALL_END").await;
    let r = app
        .post("/v1/threads/hr/tool-calls/h3/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);
    let frames = run.until("RUN_FINISHED").await;
    let h3 = frames
        .iter()
        .find(|f| f.kind() == "TOOL_CALL_RESULT" && f.data["toolCallId"] == "h3")
        .unwrap_or_else(|| panic!("h3 answered in the run: {frames:?}"));
    assert_eq!(
        h3.data["metadata"]["error"]["code"], "CANCELLED",
        "{}",
        h3.raw
    );
    let finished = frames.last().unwrap();
    assert_eq!(
        finished.data["outcome"]["type"], "interrupt",
        "{}",
        finished.raw
    );
    // The run retried: its recorded result is answered again.
    let resp = app.post("/v1/threads/hr/runs", &input).await;
    assert_eq!(resp.status(), 200);
    let frames = common::SseReader::new(resp).until("RUN_FINISHED").await;
    let h3 = frames
        .iter()
        .find(|f| f.kind() == "TOOL_CALL_RESULT" && f.data["toolCallId"] == "h3")
        .unwrap_or_else(|| panic!("h3 answered in the retried run: {frames:?}"));
    assert_eq!(
        h3.data["metadata"]["error"]["code"], "CANCELLED",
        "{}",
        h3.raw
    );
}

/// A cancel landing while a batch's call is starting (out of its queue,
/// its permission checked and its preview made, not yet running or
/// recorded) waits for it: it answers 202 and the call never runs (it
/// answered 404 "no tool call", and the call went on to wait for
/// approval).
async fn a_cancel_while_a_call_starts_is_never_lost(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let r = app
        .put("/v1/permissions", &json!({"ask": ["write_file"]}))
        .await;
    assert_eq!(r.status(), 200);
    // A large file makes the approval's preview (a diff) take a while.
    let big = "x".repeat(120) + "\n";
    app.put_file("big.txt", &big.repeat(6_000));
    let content = big.repeat(5_000) + "changed\n";
    for attempt in 0..8 {
        let thread = format!("cs{attempt}");
        let mut sse = app.events(&thread, "", None).await;
        sse.next(Duration::from_secs(5)).await.unwrap();
        let batch = {
            let (client, url, token) = (
                app.client.clone(),
                app.url(&format!("/v1/threads/{thread}/batches")),
                app.token.clone(),
            );
            let body = json!({"calls": [
                {"id": "w", "name": "wait", "arguments": {"ms": 50}},
                {"id": "x", "name": "write_file", "arguments": {"path": "big.txt", "content": content}},
            ]});
            tokio::spawn(async move {
                client
                    .post(url)
                    .bearer_auth(token)
                    .json(&body)
                    .send()
                    .await
                    .unwrap()
                    .status()
            })
        };
        while sse.until("TOOL_CALL_RESULT").await.pop().unwrap().data["toolCallId"] != "w" {}
        let r = app
            .post(
                &format!("/v1/threads/{thread}/tool-calls/x/cancel"),
                &json!({}),
            )
            .await;
        assert_eq!(r.status(), 202, "attempt {attempt}");
        assert_eq!(batch.await.unwrap(), 200);
        let record = app
            .get_json(&format!("/v1/threads/{thread}/tool-calls/x"))
            .await;
        assert_eq!(record["status"], "failure", "attempt {attempt}: {record}");
    }
    assert_eq!(
        std::fs::read_to_string(
            app.data_dir
                .path()
                .join("workspaces")
                .join(toolgate::workspace::Workspaces::owner_dir_name("dev"))
                .join("big.txt")
        )
        .unwrap()
        .len(),
        big.len() * 6_000,
        "never written"
    );
}

/// Approvals a run's resume decides run in the owner's slots too: past
/// the limit, an entry is left out (the approval stays pending) with a
/// warning, instead of running every approved call at once.
async fn approvals_a_resume_decides_take_slots(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.tools.max_concurrent_calls_per_owner = 2).await;
    let r = app.put("/v1/permissions", &json!({"ask": ["wait"]})).await;
    assert_eq!(r.status(), 200);
    let mut ids = Vec::new();
    for i in 1..=3 {
        let (s, out) = app
            .call(
                "rs",
                json!({"id": format!("q{i}"), "name": "wait", "arguments": {"ms": 3000}}),
            )
            .await;
        assert_eq!(s, 202, "{out}");
        ids.push(out["approval"]["id"].as_str().unwrap().to_string());
    }
    let entries: Vec<Value> = ids
        .iter()
        .map(|id| json!({"interruptId": id, "status": "resolved", "payload": {"decision": "approve"}}))
        .collect();
    let resume = json!({"threadId": "rs", "runId": "run-r", "messages": [], "resume": entries});
    let r = app.post("/v1/threads/rs/runs", &resume).await;
    assert_eq!(r.status(), 200);
    let frames = common::SseReader::new(r).until("RUN_FINISHED").await;
    // The first approved call takes the free slot, the second the run's
    // own (lent: the run has no call of its own left to run), the third
    // none.
    let ignored: Vec<&Value> = frames
        .iter()
        .filter(|f| f.data["name"] == "run.resume_ignored")
        .map(|f| &f.data["value"])
        .collect();
    assert_eq!(ignored.len(), 1, "{frames:?}");
    assert_eq!(ignored[0]["interruptId"], ids[2].as_str());
    assert!(
        ignored[0]["reason"]
            .as_str()
            .unwrap()
            .contains("stays pending"),
        "{}",
        ignored[0]
    );
    let view = app.get_json(&format!("/v1/approvals/{}", ids[2])).await;
    assert_eq!(view["status"], "pending", "{view}");
    for id in &ids[..2] {
        let view = app.get_json(&format!("/v1/approvals/{id}")).await;
        assert_eq!(view["status"], "approved", "{view}");
    }
    // Under a limit of one, a resume approves through the run's slot.
    let app = TestApp::spawn_with(backend, |s| s.tools.max_concurrent_calls_per_owner = 1).await;
    let r = app.put("/v1/permissions", &json!({"ask": ["wait"]})).await;
    assert_eq!(r.status(), 200);
    let (s, out) = app
        .call(
            "r1",
            json!({"id": "o1", "name": "wait", "arguments": {"ms": 10}}),
        )
        .await;
    assert_eq!(s, 202, "{out}");
    let id = out["approval"]["id"].as_str().unwrap().to_string();
    let resume = json!({"threadId": "r1", "runId": "run-1", "messages": [], "resume": [
        {"interruptId": id, "status": "resolved", "payload": {"decision": "approve"}}]});
    let r = app.post("/v1/threads/r1/runs", &resume).await;
    assert_eq!(r.status(), 200);
    let frames = common::SseReader::new(r).until("RUN_FINISHED").await;
    assert!(
        frames
            .iter()
            .all(|f| f.data["name"] != "run.resume_ignored"),
        "{frames:?}"
    );
    let result = frames
        .iter()
        .find(|f| f.kind() == "TOOL_CALL_RESULT")
        .unwrap_or_else(|| panic!("{frames:?}"));
    assert_eq!(
        result.data["metadata"]["status"], "success",
        "{}",
        result.raw
    );
}

async fn limits_answer_429_and_cancellation_frees_the_slot(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.tools.max_concurrent_calls_per_owner = 1).await;
    let mut sse = app.events("l", "", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let long = {
        let (client, url, token) = (
            app.client.clone(),
            app.url("/v1/threads/l/tool-calls"),
            app.token.clone(),
        );
        tokio::spawn(async move {
            let r = client
                .post(url)
                .bearer_auth(token)
                .json(&json!({"id": "long", "name": "wait", "arguments": {"ms": 20000}}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        })
    };
    sse.until("TOOL_CALL_END").await;

    let busy = app
        .post(
            "/v1/threads/l/tool-calls",
            &json!({"id": "next", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(busy.status(), 429);
    assert_eq!(busy.headers()["retry-after"], "1");
    let p: Value = busy.json().await.unwrap();
    assert!(p["detail"].as_str().unwrap().contains("this owner"), "{p}");
    // Another owner is not held back by this owner's limit.
    let other = app.token_for("someone-else");
    let r = app
        .post_as(
            &other,
            "/v1/threads/other/tool-calls",
            &json!({"id": "o", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(r.status(), 200);

    // Three cancels at once: one stops the call.
    let cancel = || async {
        let r = app
            .post("/v1/threads/l/tool-calls/long/cancel", &json!({}))
            .await;
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    };
    let answers = [cancel(), cancel(), cancel()];
    let mut answers = futures::future::join_all(answers).await;
    answers.sort_by_key(|(s, _)| *s);
    assert_eq!(answers[0].0, 202, "{answers:?}");
    // The others find it being cancelled (409), or, arriving once it has
    // stopped, cancelled already (202, as the first).
    for (s, p) in &answers[1..] {
        match s {
            202 => assert_eq!(p["tool_call_id"], "long", "{answers:?}"),
            409 => assert_eq!(p["code"], "BEING_CANCELLED", "{answers:?}"),
            _ => panic!("{answers:?}"),
        }
    }
    let (status, out) = long.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(out["tool_agent_output"]["status"], "failure");
    assert_eq!(out["tool_agent_output"]["error"]["code"], "CANCELLED");
    let result = sse.until("TOOL_CALL_RESULT").await.pop().unwrap();
    assert_eq!(result.data["metadata"]["error"]["code"], "CANCELLED");

    let (s, _) = app
        .call(
            "l",
            json!({"id": "next", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200, "the cancelled call freed its slot");
    // Cancelled again (a cancel posted again after its answer was lost):
    // the 202 of the first time, which was a 409; a call that finished by
    // itself keeps its result, a 409.
    let r = app
        .post("/v1/threads/l/tool-calls/long/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 202);
    let accepted: Value = r.json().await.unwrap();
    assert_eq!(accepted["tool_call_id"], "long", "{accepted}");
    let r = app
        .post("/v1/threads/l/tool-calls/next/cancel", &json!({}))
        .await;
    assert_eq!(r.status(), 409);
    let p: Value = r.json().await.unwrap();
    assert!(
        p["detail"].as_str().unwrap().contains("its result stands"),
        "{p}"
    );
    assert_eq!(p["code"], "ALREADY_FINISHED", "{p}");
    assert_eq!(
        app.post("/v1/threads/l/tool-calls/ghost/cancel", &json!({}))
            .await
            .status(),
        404
    );
}

async fn dry_runs_preview_and_change_nothing(backend: Backend) {
    let app = TestApp::spawn_with(backend, allow_test_tools).await;
    let log = Arc::new(Mutex::new(vec![]));
    app.registry
        .register(Arc::new(Exclusive { log: log.clone() }))
        .unwrap();
    let (s, out) = app
        .call(
            "d",
            json!({"id": "d1", "name": "exclusive", "arguments": {"tag": "z"}, "dry_run": true}),
        )
        .await;
    assert_eq!(s, 200);
    let result = &out["tool_agent_output"]["result"];
    assert_eq!(result["dry_run"], true);
    assert_eq!(result["would_affect"], "item z");
    assert_eq!(result["preview"], "- old\n+ new\n");
    assert_eq!(result["estimated_impact"], json!({"items": 1}));
    assert!(log.lock().unwrap().is_empty(), "the tool did not execute");
    assert!(
        out["ui_schema"]["fallback_text"]
            .as_str()
            .unwrap()
            .contains("Dry run"),
        "{}",
        out["ui_schema"]
    );

    let (s, out) = app
        .call(
            "d",
            json!({"id": "d2", "name": "echo", "arguments": {"text": "x"}, "dry_run": true}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(
        out["tool_agent_output"]["error"]["code"],
        "DRY_RUN_UNSUPPORTED"
    );
    let (s, p) = app
        .call(
            "d",
            json!({"id": "d3", "name": "echo", "arguments": {"text": "x"}, "dry_run": "yes"}),
        )
        .await;
    assert_eq!(s, 422, "{p}");
}

/// Read-only, no progress: runs until the test releases it.
struct Held {
    entered: Arc<tokio::sync::Notify>,
    release: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl Tool for Held {
    fn definition(&self) -> ToolDefinition {
        let mut def = definition("held", true, false);
        def.metadata.read_only = true;
        def
    }
    async fn execute(&self, args: Value, _ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        self.entered.notify_one();
        self.release.notified().await;
        Ok(ToolSuccess::complete(json!({"released": args["tag"]})))
    }
}

/// A read-only call that outlives `tools.announce_after_ms` is recorded and
/// streamed while it still runs; its result follows in order.
async fn a_long_read_only_call_is_announced_while_it_runs(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.permissions.allow = vec!["held".into()];
        s.tools.announce_after_ms = 20;
    })
    .await;
    let release = Arc::new(tokio::sync::Notify::new());
    app.registry
        .register(Arc::new(Held {
            entered: Arc::new(tokio::sync::Notify::new()),
            release: release.clone(),
        }))
        .unwrap();
    let mut sse = app.events("held", "", None).await;
    assert_eq!(
        sse.next(Duration::from_secs(5)).await.unwrap().kind(),
        "RUN_STARTED"
    );
    let call = app.call(
        "held",
        json!({"id": "h1", "name": "held", "arguments": {"tag": "a"}}),
    );
    tokio::pin!(call);
    let announced = tokio::select! {
        frames = sse.until("TOOL_CALL_END") => frames,
        (s, out) = &mut call => panic!("answered before it was announced: {s} {out}"),
    };
    let kinds: Vec<&str> = announced.iter().map(|f| f.kind()).collect();
    assert_eq!(
        kinds,
        ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    );
    // Events are published only after commit: the record was durable while
    // the tool still ran.
    release.notify_one();
    let (s, out) = call.await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["tool_agent_output"]["result"], json!({"released": "a"}));
    let result = sse.until("TOOL_CALL_RESULT").await;
    assert_eq!(result.len(), 1, "only the result follows the announcement");
    assert_eq!(result[0].id, Some(4));

    // Re-posting the id replays the stored outcome. The tool is not
    // released again: a repeated run is stopped once its record conflicts.
    let again = tokio::time::timeout(
        Duration::from_secs(30),
        app.call(
            "held",
            json!({"id": "h1", "name": "held", "arguments": {"tag": "a"}}),
        ),
    )
    .await
    .expect("a repeated id answers without the tool finishing");
    assert_eq!(again.0, 200, "{}", again.1);
    assert_eq!(again.1["replayed"], true);
    assert_eq!(again.1["message_id"], out["message_id"]);
}

/// With a long announce delay, progress alone forces the announcement: it
/// precedes the first progress event, and the call is still running.
async fn progress_announces_a_read_only_call_first(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.tools.announce_after_ms = 600_000).await;
    let mut sse = app.events("prog", "", None).await;
    assert_eq!(
        sse.next(Duration::from_secs(5)).await.unwrap().kind(),
        "RUN_STARTED"
    );
    let call = app.call(
        "prog",
        json!({"id": "p1", "name": "wait", "arguments": {"ms": 1500}}),
    );
    tokio::pin!(call);
    let frames = tokio::select! {
        frames = sse.until("CUSTOM") => frames,
        (s, out) = &mut call => panic!("answered before any progress was streamed: {s} {out}"),
    };
    let kinds: Vec<&str> = frames.iter().map(|f| f.kind()).collect();
    assert_eq!(
        kinds,
        [
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "CUSTOM"
        ]
    );
    assert_eq!(frames[3].data["name"], "tool_call.progress");
    let (s, out) = call.await;
    assert_eq!(s, 200, "{out}");
    let rest = sse.until("TOOL_CALL_RESULT").await;
    assert!(
        rest[..rest.len() - 1].iter().all(|f| f.kind() == "CUSTOM"),
        "progress, then the result"
    );
    // Re-posting the id replays the stored outcome.
    let (s, again) = app
        .call(
            "prog",
            json!({"id": "p1", "name": "wait", "arguments": {"ms": 1500}}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(again["replayed"], true);
    assert_eq!(again["message_id"], out["message_id"]);
}

/// Within the announce delay a read-only call is not recorded yet: its
/// record and its result commit together.
async fn a_read_only_call_within_the_delay_commits_once(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.permissions.allow = vec!["held".into()];
        s.tools.announce_after_ms = 600_000;
    })
    .await;
    let (entered, release) = (
        Arc::new(tokio::sync::Notify::new()),
        Arc::new(tokio::sync::Notify::new()),
    );
    app.registry
        .register(Arc::new(Held {
            entered: entered.clone(),
            release: release.clone(),
        }))
        .unwrap();
    let call = app.call(
        "once",
        json!({"id": "o1", "name": "held", "arguments": {"tag": "b"}}),
    );
    tokio::pin!(call);
    tokio::select! {
        _ = entered.notified() => {}
        (s, out) = &mut call => panic!("answered before the tool ran: {s} {out}"),
    }
    // The tool runs; the thread's event log is still empty (a replay from
    // the start shows nothing after RUN_STARTED).
    let mut replay = app.events("once", "?after=0", None).await;
    assert_eq!(
        replay.next(Duration::from_secs(5)).await.unwrap().kind(),
        "RUN_STARTED"
    );
    let early = tokio::select! {
        frame = replay.next(Duration::from_millis(300)) => frame,
        (s, out) = &mut call => panic!("answered while held: {s} {out}"),
    };
    assert!(early.is_none(), "nothing is recorded yet: {early:?}");
    release.notify_one();
    let (s, out) = call.await;
    assert_eq!(s, 200, "{out}");
    let frames = replay.until("TOOL_CALL_RESULT").await;
    let ids: Vec<i64> = frames.iter().map(|f| f.id.unwrap()).collect();
    assert_eq!(ids, [1, 2, 3, 4]);
}

/// A quick read-only call is stored in one transaction, yet streams and
/// replays exactly like any other: announcement then result, ids in order.
async fn a_quick_read_only_call_streams_in_order(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.tools.announce_after_ms = 600_000).await;
    let mut sse = app.events("quick", "", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    for i in 0..3 {
        let (s, out) = app
            .call(
                "quick",
                json!({"id": format!("q{i}"), "name": "echo", "arguments": {"text": "x"}}),
            )
            .await;
        assert_eq!(s, 200, "{out}");
    }
    let mut ids = Vec::new();
    for _ in 0..3 {
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
        ids.extend(frames.iter().map(|f| f.id.unwrap()));
    }
    assert_eq!(ids, (1..=12).collect::<Vec<i64>>());
    let (s, again) = app
        .call(
            "quick",
            json!({"id": "q1", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(again["replayed"], true);
    let (s, _) = app
        .call(
            "quick",
            json!({"id": "q1", "name": "echo", "arguments": {"text": "other"}}),
        )
        .await;
    assert_eq!(s, 409);
}

/// One answer of a whole-thread read in a burst: its status, and the
/// problem or the number of messages it held.
async fn read_whole(client: reqwest::Client, url: String, token: String) -> (u16, Value) {
    let snapshot = url.contains("snapshot=true");
    let resp = client.get(url).bearer_auth(token).send().await.unwrap();
    let status = resp.status().as_u16();
    if status == 429 {
        assert_eq!(resp.headers()["retry-after"], "1");
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        return (status, resp.json().await.unwrap());
    }
    assert_eq!(status, 200);
    let messages = if snapshot {
        let mut sse = common::SseReader::new(resp);
        let frame = sse.until("MESSAGES_SNAPSHOT").await.pop().unwrap();
        frame.data["messages"].as_array().unwrap().len()
    } else {
        let body: Value = resp.json().await.unwrap();
        body["messages"].as_array().unwrap().len()
    };
    (status, json!(messages))
}

/// Bursts of eight reads of the owner's thread `big` (the `i`th at
/// `path(i)`), each beside a read of another owner's one-message thread
/// at `other_path`, until a read of the owner's is refused: the refusal.
/// The other owner's reads, and the owner's that are not refused, hold
/// the whole thread (eight messages, one).
async fn refused_in_bursts(
    app: &TestApp,
    path: impl Fn(usize) -> &'static str,
    other: &str,
    other_path: &str,
) -> Value {
    for _ in 0..10 {
        let mut burst = tokio::task::JoinSet::new();
        for i in 0..8 {
            burst.spawn(read_whole(
                app.client.clone(),
                app.url(path(i)),
                app.token.clone(),
            ));
        }
        let (status, messages) =
            read_whole(app.client.clone(), app.url(other_path), other.to_string()).await;
        assert_eq!((status, messages), (200, json!(1)), "another owner reads");
        let mut refused = None;
        while let Some(answer) = burst.join_next().await {
            match answer.unwrap() {
                (200, messages) => assert_eq!(messages, 8),
                (_, problem) => refused = refused.or(Some(problem)),
            }
        }
        if let Some(problem) = refused {
            return problem;
        }
    }
    panic!("no burst of reads was limited");
}

/// The owner's thread `big` of `messages` user messages of `text`, and
/// the thread `small` of one message of another owner, whose token it
/// returns.
async fn big_and_small_threads(app: &TestApp, messages: usize, text: &str) -> String {
    for _ in 0..messages {
        let r = app
            .post(
                "/v1/threads/big/messages",
                &json!({"role": "user", "content": text}),
            )
            .await;
        assert_eq!(r.status(), 201);
    }
    let other = app.token_for("someone-else");
    let r = app
        .post_as(
            &other,
            "/v1/threads/small/messages",
            &json!({"role": "user", "content": "hello"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    other
}

async fn whole_thread_reads_are_limited_per_owner(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.server.max_thread_reads_per_owner = 1;
        s.server.thread_read_wait_secs = 0;
    })
    .await;
    // A thread that takes a while to read: eight messages of 400 KB.
    let other = big_and_small_threads(&app, 8, &"x".repeat(400_000)).await;
    // Bursts of contexts and snapshots of the big thread by its owner, one
    // read by another owner beside each: the owner's reads beyond the first
    // are refused at once (no wait is configured), the other owner's never.
    let problem = refused_in_bursts(
        &app,
        |i| match i % 4 {
            0 => "/v1/threads/big/events?snapshot=true",
            _ => "/v1/threads/big/context",
        },
        &other,
        "/v1/threads/small/context",
    )
    .await;
    assert_eq!(problem["status"], 429);
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("this owner is reading its maximum of 1 whole threads"),
        "{detail}"
    );
    // Once the burst is over, the thread reads again.
    let context = app.get_json("/v1/threads/big/context").await;
    assert_eq!(context["messages"].as_array().unwrap().len(), 8);
}

/// Pages of history one owner reads from the database at once are
/// limited (`server.max_page_reads_per_owner`): in bursts of reads of a
/// large thread's history by its owner, those beyond the limit are refused
/// (no wait is configured), while another owner's reads go on.
async fn page_reads_are_limited_per_owner(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.server.max_page_reads_per_owner = 1;
        s.server.page_read_wait_secs = 0;
    })
    .await;
    // A history page that takes a while to read: eight messages of 400 KB.
    let other = big_and_small_threads(&app, 8, &"x".repeat(400_000)).await;
    let problem = refused_in_bursts(
        &app,
        |_| "/v1/threads/big/history?limit=200",
        &other,
        "/v1/threads/small/history",
    )
    .await;
    assert_eq!(problem["status"], 429);
    assert_eq!(
        problem["detail"],
        "this owner is reading its maximum of 1 pages at once (history and event-log replays); retry shortly"
    );
    // Once the burst is over, the history reads again.
    let page = app.get_json("/v1/threads/big/history?limit=200").await;
    assert_eq!(page["messages"].as_array().unwrap().len(), 8);
}

/// A replay whose client has stopped reading (a background tab) holds its
/// page, not a page slot: with one slot per owner, the owner's `/history`
/// and a live stream of the owner's go on meanwhile, and the stalled
/// replay, once read, is whole.
async fn a_stalled_replay_holds_up_no_other_read(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.server.max_page_reads_per_owner = 1;
        s.server.page_read_wait_secs = 1;
    })
    .await;
    // About 54 MB of logged text: more than a stream's channel and the
    // loopback socket's buffers hold, so a replay nobody reads stalls.
    const MESSAGES: usize = 60;
    let text = "x".repeat(900_000);
    big_and_small_threads(&app, MESSAGES, &text).await;
    let stalled = app
        .client
        .get(app.url("/v1/threads/big/events"))
        .bearer_auth(&app.token)
        .send()
        .await
        .unwrap();
    assert_eq!(stalled.status(), 200);
    // A live stream of another thread of the owner's, given large results
    // (read back from the log, as a page, before they are streamed).
    let mut live = app.events("live", "", None).await;
    live.next(Duration::from_secs(5)).await.unwrap();
    let large = "y".repeat(100_000);
    for i in 0..10 {
        let r = app.get("/v1/threads/big/history?limit=1").await;
        assert_eq!(r.status(), 200, "the owner's history reads on");
        let (status, _) = app
            .call(
                "live",
                json!({"id": format!("large-{i}"), "name": "echo", "arguments": {"text": large}}),
            )
            .await;
        assert_eq!(status, 200);
        let result = live.until("TOOL_CALL_RESULT").await.pop().unwrap();
        assert_eq!(result.data["toolCallId"], format!("large-{i}"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Read, the replay goes on to the end of the log, every message whole.
    let mut sse = common::SseReader::new(stalled);
    let mut texts = 0;
    while texts < MESSAGES {
        let frame = sse
            .next(Duration::from_secs(30))
            .await
            .expect("the replay goes on once read");
        if frame.kind() == "TEXT_MESSAGE_CONTENT" {
            assert_eq!(frame.data["delta"].as_str().unwrap().len(), text.len());
            texts += 1;
        }
    }
}

/// A batch whose client leaves after its first call started still runs
/// the calls queued after it: each is stored and streamed, and the batch
/// posted again is answered from storage, as a single call whose client
/// leaves is finished.
async fn a_batch_whose_client_leaves_runs_its_queued_calls(backend: Backend) {
    // One slot: the batch's calls run one after another.
    let app = TestApp::spawn_with(backend, |s| s.tools.max_concurrent_calls_per_owner = 1).await;
    let mut sse = app.events("left", "", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    let batch = json!({"calls": [
        {"id": "slow", "name": "wait", "arguments": {"ms": 400}},
        {"id": "queued", "name": "echo", "arguments": {"text": "after"}},
    ]});
    let client = {
        let (client, url, token, batch) = (
            app.client.clone(),
            app.url("/v1/threads/left/batches"),
            app.token.clone(),
            batch.clone(),
        );
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(token)
                .json(&batch)
                .send()
                .await
        })
    };
    sse.until("TOOL_CALL_END").await;
    // The client leaves while the first call runs: its connection closes.
    client.abort();
    let _ = client.await;
    let mut results = vec![];
    while results.len() < 2 {
        let frame = sse
            .next(Duration::from_secs(10))
            .await
            .expect("both calls of the batch finish");
        if frame.kind() == "TOOL_CALL_RESULT" {
            results.push(frame.data["toolCallId"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(results, ["slow", "queued"]);
    let record = app.get_json("/v1/threads/left/tool-calls/queued").await;
    assert_eq!(record["status"], "success", "{record}");
    // Posted again, the batch runs nothing: both answers come from storage.
    let again: Value = app
        .post("/v1/threads/left/batches", &batch)
        .await
        .json()
        .await
        .unwrap();
    for i in 0..2 {
        assert_eq!(again["results"][i]["status"], 200, "{again}");
        assert_eq!(again["results"][i]["result"]["replayed"], true, "{again}");
    }
}

both_backends!(
    a_batch_posted_again_names_the_run_of_its_calls,
    a_timed_out_call_is_answered_while_its_blocking_work_goes_on,
    batches_run_safe_calls_together_and_the_rest_in_order,
    limits_answer_429_and_cancellation_frees_the_slot,
    limits_leave_recorded_calls_and_count_approved_ones,
    a_call_posted_again_while_it_runs_holds_no_slot,
    a_run_posted_again_while_its_call_runs_holds_no_slot,
    approvals_a_resume_decides_take_slots,
    a_call_waiting_its_turn_in_a_batch_or_run_can_be_cancelled,
    a_cancel_while_a_call_starts_is_never_lost,
    dry_runs_preview_and_change_nothing,
    a_long_read_only_call_is_announced_while_it_runs,
    progress_announces_a_read_only_call_first,
    a_quick_read_only_call_streams_in_order,
    a_read_only_call_within_the_delay_commits_once,
    whole_thread_reads_are_limited_per_owner,
    page_reads_are_limited_per_owner,
    a_stalled_replay_holds_up_no_other_read,
    a_cancel_answers_what_it_came_to,
    a_batch_that_loses_a_new_thread_is_answered_404,
    a_batch_whose_client_leaves_runs_its_queued_calls,
);
