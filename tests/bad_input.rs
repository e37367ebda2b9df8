//! Every endpoint refuses malformed, oversized or unauthorised input with a
//! precise problem document, never a 500, and stores nothing.

mod common;

use base64::Engine as _;
use common::{Backend, TestApp};
use serde_json::{Value, json};
use std::time::Duration;

async fn problem(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    assert_eq!(
        resp.headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap()),
        Some("application/problem+json"),
        "status {status} is a problem document"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["status"], status);
    assert!(
        body["type"]
            .as_str()
            .unwrap()
            .starts_with("urn:toolgate:problem:")
    );
    assert!(!body["detail"].as_str().unwrap().is_empty());
    (status, body)
}

/// Stored state of a thread as the API shows it: messages and events.
async fn snapshot(app: &TestApp, thread: &str) -> (Vec<Value>, Vec<String>) {
    let history = app.history(thread).await;
    let mut sse = app.events(thread, "", Some("0")).await;
    let mut events = vec![];
    while let Some(f) = sse.next(std::time::Duration::from_millis(400)).await {
        if f.id.is_some() {
            events.push(f.raw);
        }
    }
    (history, events)
}

async fn malformed_requests_are_refused_and_change_nothing(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.server.body_limit_bytes = 4096).await;
    let (s, _) = app
        .call(
            "t",
            json!({"id": "ok1", "name": "echo", "arguments": {"text": "kept"}}),
        )
        .await;
    assert_eq!(s, 200);
    let before = snapshot(&app, "t").await;
    let calls = "/v1/threads/t/tool-calls";

    // Malformed JSON.
    let r = app
        .client
        .post(app.url(calls))
        .bearer_auth(&app.token)
        .header("content-type", "application/json")
        .body("{\"id\": \"x\", ")
        .send()
        .await
        .unwrap();
    let (s, p) = problem(r).await;
    assert_eq!(s, 400);
    assert!(
        p["detail"].as_str().unwrap().contains("malformed JSON"),
        "{p}"
    );
    // Half a surrogate pair is said to be one; a short escape is not.
    for (body, surrogate) in [
        (r#"{"id": "x\ud800", "name": "echo"}"#, true),
        (r#"{"id": "x\ud800x", "name": "echo"}"#, true),
        (r#"{"id": "x\udc00", "name": "echo"}"#, true),
        (r#"{"id": "x\u12", "name": "echo"}"#, false),
    ] {
        let r = app
            .client
            .post(app.url(calls))
            .bearer_auth(&app.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let (s, p) = problem(r).await;
        assert_eq!(s, 400, "{body}: {p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(detail.starts_with("malformed JSON"), "{body}: {p}");
        assert_eq!(
            detail.contains("surrogate pair"),
            surrogate,
            "{body}: {detail}"
        );
    }

    // A missing field is pointed at by its own path, on every endpoint.
    for (path, body, pointer) in [
        ("/v1/approvals/apr_0/decision", json!({}), "/decision"),
        ("/v1/threads/t/messages", json!({"id": "m1"}), "/role"),
        ("/v1/threads/t/batches", json!({}), "/calls"),
    ] {
        let (s, p) = problem(app.post(path, &body).await).await;
        assert_eq!(s, 422, "{path}: {p}");
        assert_eq!(p["errors"][0]["pointer"], pointer, "{path}: {p}");
    }

    // A compressed body (or one claiming a coding): 415 naming it, not a
    // misleading "malformed JSON", and not read as if uncompressed.
    for (coding, body) in [
        ("gzip", vec![0x1f, 0x8b, 0x08, 0x00]),
        (
            "br",
            br#"{"id": "enc", "name": "echo", "arguments": {"text": "x"}}"#.to_vec(),
        ),
        ("identity, deflate", b"{}".to_vec()),
    ] {
        let r = app
            .client
            .post(app.url(calls))
            .bearer_auth(&app.token)
            .header("content-type", "application/json")
            .header("content-encoding", coding)
            .body(body)
            .send()
            .await
            .unwrap();
        let (s, p) = problem(r).await;
        assert_eq!(s, 415, "{coding}: {p}");
        let named = coding.rsplit(", ").next().unwrap();
        assert!(p["detail"].as_str().unwrap().contains(named), "{p}");
    }
    // A request without a body has nothing to decode.
    let r = app
        .client
        .get(app.url("/v1/threads/t/history"))
        .bearer_auth(&app.token)
        .header("content-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Not JSON at all.
    let r = app
        .client
        .post(app.url(calls))
        .bearer_auth(&app.token)
        .body("id=x")
        .send()
        .await
        .unwrap();
    assert_eq!(problem(r).await.0, 415);
    // A JSON media type, in any case (RFC 6838): taken.
    for (i, content_type) in [
        "APPLICATION/JSON",
        "application/vnd.example+JSON; charset=utf-8",
        "application/vnd.example+json",
        "application/json; charset=UTF8",
        "application/json;charset=\"utf-8\"",
    ]
    .into_iter()
    .enumerate()
    {
        // On a thread of its own: this test's refusals change nothing.
        let r = app
            .client
            .post(app.url("/v1/threads/ct/tool-calls"))
            .bearer_auth(&app.token)
            .header("content-type", content_type)
            .body(
                json!({"id": format!("ct{i}"), "name": "echo", "arguments": {"text": "t"}})
                    .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{content_type}");
    }
    let r = app
        .client
        .post(app.url(calls))
        .bearer_auth(&app.token)
        .header("content-type", "application/jsonx")
        .body(json!({"id": "ct9", "name": "echo", "arguments": {"text": "t"}}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(problem(r).await.0, 415);
    // Another encoding than JSON's own is not read as UTF-8, and two
    // media types leave nothing to guess: neither is stored.
    let body = json!({"id": "ct10", "name": "echo", "arguments": {"text": "t"}}).to_string();
    let utf16: Vec<u8> = body.encode_utf16().flat_map(u16::to_le_bytes).collect();
    let post_typed = |types: &[&'static str], body: Vec<u8>| {
        let mut request = app
            .client
            .post(app.url("/v1/threads/ct/tool-calls"))
            .bearer_auth(&app.token);
        for content_type in types {
            request = request.header("content-type", *content_type);
        }
        async move { problem(request.body(body).send().await.unwrap()).await }
    };
    let (s, p) = post_typed(&["application/json; charset=utf-16"], utf16).await;
    assert_eq!(s, 415, "{p}");
    assert!(
        p["detail"].as_str().unwrap().contains("charset=utf-16"),
        "{p}"
    );
    let (s, p) = post_typed(&["application/json", "text/plain"], body.into_bytes()).await;
    assert_eq!(s, 415, "{p}");
    assert!(
        p["detail"].as_str().unwrap().contains("one `Content-Type"),
        "{p}"
    );
    let history = app.history("ct").await;
    assert!(
        !history.iter().any(|m| m.to_string().contains("ct10")),
        "{history:?}"
    );

    // Wrong types in the envelope: the field is named.
    let (s, p) = problem(app.post(calls, &json!({"id": "x", "name": 3})).await).await;
    assert_eq!(s, 422);
    assert_eq!(p["errors"][0]["pointer"], "/name");
    // A field no call has is refused by name, not ignored: a misspelt
    // `dry_run` never runs the call for real.
    for (path, body, pointer) in [
        (
            calls,
            json!({"id": "x", "name": "echo", "arguments": {"text": "real"}, "dryRun": true}),
            "/dryRun",
        ),
        (
            calls,
            json!({"type": "tool_use", "id": "x", "name": "echo", "input": {}, "workspce": "w"}),
            "/workspce",
        ),
        (
            "/v1/threads/t/messages",
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "x", "type": "function", "function": {"name": "echo", "argument": "{}"}}]}),
            "/tool_calls/0/function/argument",
        ),
    ] {
        let (s, p) = problem(app.post(path, &body).await).await;
        assert_eq!(s, 422, "{p}");
        assert_eq!(p["errors"][0]["pointer"], pointer, "{p}");
        assert!(
            p["detail"].as_str().unwrap().contains("is not a field of"),
            "{p}"
        );
    }
    // A declared call's name must be one a tool (and a model API) can have.
    for (call, pointer) in [
        (
            json!({"id": "x", "name": "has space"}),
            "/tool_calls/0/name",
        ),
        (
            json!({"id": "x", "function": {"name": "x".repeat(65)}}),
            "/tool_calls/0/function/name",
        ),
    ] {
        let (s, p) = problem(
            app.post(
                "/v1/threads/t/messages",
                &json!({"role": "assistant", "content": null, "tool_calls": [call]}),
            )
            .await,
        )
        .await;
        assert_eq!(
            (s, &p["errors"][0]["pointer"]),
            (422, &json!(pointer)),
            "{p}"
        );
        assert!(
            p["detail"].as_str().unwrap().contains("is not a tool name"),
            "{p}"
        );
    }
    let r: Value = app
        .post(
            "/v1/threads/t/batches",
            &json!({"calls": [{"id": "x", "name": "echo", "arguments": {"text": "real"}, "dry_run": false, "dryrun": true}]}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["results"][0]["status"], 422, "{r}");
    assert!(
        r["results"][0]["problem"]["detail"]
            .as_str()
            .unwrap()
            .contains("did you mean \"dry_run\"?"),
        "{r}"
    );
    let (s, p) = problem(
        app.post(
            "/v1/threads/t/messages",
            &json!({"role": 5, "content": "x"}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422);
    assert_eq!(p["errors"][0]["pointer"], "/role", "{p}");
    let (s, p) = problem(
        app.post(
            "/v1/threads/t/messages",
            &json!({"role": "user", "content": "x", "owner_id": "bob"}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422, "unknown fields are refused: {p}");

    // Unknown tool: the model learns which tools exist.
    let (s, p) = problem(
        app.post(calls, &json!({"id": "x1", "name": "nope", "arguments": {}}))
            .await,
    )
    .await;
    assert_eq!(s, 422);
    assert_eq!(p["code"], "TOOL_NOT_FOUND");
    assert!(
        p["available_tools"]
            .as_array()
            .unwrap()
            .contains(&json!("echo"))
    );
    let content: Value =
        serde_json::from_str(p["tool_response"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["error"]["code"], "TOOL_NOT_FOUND");

    // Arguments failing the schema: path and schema included.
    let (s, p) = problem(
        app.post(
            calls,
            &json!({"id": "x2", "name": "echo", "arguments": {"text": 5}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422);
    assert_eq!(p["code"], "INVALID_ARGUMENTS");
    assert_eq!(p["errors"][0]["path"], "/text");
    assert_eq!(p["input_schema"]["properties"]["text"]["type"], "string");
    assert_eq!(p["tool_error"]["input_schema"], p["input_schema"]);
    let (s, p) = problem(
        app.post(calls, &json!({"id": "x3", "name": "echo", "arguments": {}}))
            .await,
    )
    .await;
    assert_eq!(s, 422);
    assert!(
        p["detail"].as_str().unwrap().contains("text"),
        "missing required property named: {p}"
    );
    // A missing property is pointed at by its own path; one the tool does
    // not take too, with the one meant (both were at "", the arguments).
    assert_eq!(p["errors"][0]["path"], "/text", "{p}");
    let (s, p) = problem(
        app.post(
            calls,
            &json!({"id": "x3b", "name": "edit_file", "arguments": {"path": "a", "old_strin": "b", "new_string": "c"}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422);
    let at = |path: &str| common::error_at(&p["errors"], path);
    assert_eq!(
        at("/old_strin"),
        "\"old_strin\" is not a property this object takes; did you mean \"old_string\"?"
    );
    assert!(
        at("/old_string").contains("did you mean \"old_string\"?"),
        "{p}"
    );
    // The property meant is a missing required one before any other
    // ("cmd" is "command", not "cwd"), and never one given already.
    let (s, p) = problem(
        app.post(
            calls,
            &json!({"id": "x3c", "name": "bash", "arguments": {"cmd": "ls", "cdw": "."}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422);
    let at = |path: &str| common::error_at(&p["errors"], path);
    assert!(at("/cmd").ends_with("did you mean \"command\"?"), "{p}");
    assert!(at("/cdw").ends_with("did you mean \"cwd\"?"), "{p}");
    let (s, p) = problem(
        app.post(
            calls,
            &json!({"id": "x3d", "name": "edit_file", "arguments": {"path": "a", "old_string": "b", "new_string": "c", "old_strin": "d"}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422);
    assert!(
        !common::error_at(&p["errors"], "/old_strin").contains("did you mean"),
        "{p}"
    );
    let (s, p) = problem(
        app.post(
            calls,
            &json!({"id": "x4", "name": "wait", "arguments": {"ms": 10_000_000}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422);
    assert_eq!(p["errors"][0]["path"], "/ms");
    // read_file's `limit` is at most what its description says it reads
    // (a larger one was cut to it silently).
    let (s, p) = problem(
        app.post(
            calls,
            &json!({"id": "x4r", "name": "read_file", "arguments": {"path": "a.txt", "limit": 2001}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422, "{p}");
    assert_eq!(p["errors"][0]["path"], "/limit", "{p}");
    // An integer past what a JSON reader holds exactly is refused at its
    // field, not recorded as a float the tool cannot take.
    for (tool, field) in [("read_file", "offset"), ("undo_edit", "entry")] {
        let body: Value = serde_json::from_str(&format!(
            r#"{{"id": "big-{field}", "name": "{tool}", "arguments": {{"path": "a.txt", "{field}": 18446744073709551616}}}}"#
        ))
        .unwrap();
        let (s, p) = problem(app.post(calls, &body).await).await;
        assert_eq!(s, 422, "{p}");
        assert_eq!(p["errors"][0]["path"], format!("/{field}"), "{p}");
    }

    // OpenAI arguments that are not valid JSON text.
    let (s, p) = problem(
        app.post(calls, &json!({"id": "x5", "type": "function", "function": {"name": "echo", "arguments": "{\"text\": "}}))
            .await,
    )
    .await;
    assert_eq!(s, 422);
    assert_eq!(p["code"], "INVALID_ARGUMENTS");
    // `path` points into the arguments (`""`: the arguments themselves),
    // in `errors` as in `tool_error.errors`, as for a schema failure.
    assert_eq!(
        p["errors"],
        json!([{"path": "", "message": p["errors"][0]["message"]}]),
        "{p}"
    );
    assert_eq!(p["tool_error"]["errors"], p["errors"], "{p}");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .starts_with("/function/arguments: "),
        "{p}"
    );
    // Arguments that are not an object, in each shape.
    for (id, call, pointer) in [
        ("x5a", json!({"name": "echo", "arguments": 5}), "/arguments"),
        (
            "x5b",
            json!({"name": "echo", "arguments": "[1]"}),
            "/arguments",
        ),
        (
            "x5c",
            json!({"type": "function", "function": {"name": "echo", "arguments": "7"}}),
            "/function/arguments",
        ),
        (
            "x5d",
            json!({"type": "tool_use", "name": "echo", "input": []}),
            "/input",
        ),
    ] {
        let mut call = call;
        call["id"] = json!(id);
        let (s, p) = problem(app.post(calls, &call).await).await;
        assert_eq!(s, 422, "{call}: {p}");
        assert_eq!(p["code"], "INVALID_ARGUMENTS", "{p}");
        assert_eq!(p["errors"][0]["path"], "", "{p}");
        assert_eq!(p["tool_error"]["errors"], p["errors"], "{p}");
        assert!(
            p["detail"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{pointer}: ")),
            "{p}"
        );
        assert!(p["detail"].as_str().unwrap().contains("object"), "{p}");
    }

    // Oversized body.
    let big = "x".repeat(8000);
    let (s, _) = problem(
        app.post(
            calls,
            &json!({"id": "x6", "name": "echo", "arguments": {"text": big}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 413);

    // Query parameters.
    for q in [
        "limit=0",
        "limit=201",
        "limit=abc",
        "before=zz",
        "before=-3",
        "before=+3",
        "before=0",
        // Within i64, but past the 18 digits the API publishes.
        "before=1000000000000000000",
    ] {
        let (s, p) = problem(app.get(&format!("/v1/threads/t/history?{q}")).await).await;
        assert_eq!(s, 400, "{q}: {p}");
    }
    // Leading zeros are no digits of the number.
    let page = app
        .get_json("/v1/threads/t/history?before=00000000000000000000000999")
        .await;
    let all = app.get_json("/v1/threads/t/history").await;
    assert!(!all["messages"].as_array().unwrap().is_empty(), "{all}");
    assert_eq!(page["messages"], all["messages"]);
    let (s, p) = problem(
        app.get("/v1/approvals?before=1000000000000000000:ap_1")
            .await,
    )
    .await;
    assert_eq!(
        (s, &p["errors"][0]["parameter"]),
        (400, &json!("before")),
        "{p}"
    );
    for path in [
        "/v1/tools?format=yaml",
        "/v1/system-prompt?format=html",
        "/v1/threads/t/context?format=gemini",
        "/v1/tools/echo?format=x",
    ] {
        let (s, p) = problem(app.get(path).await).await;
        assert_eq!(s, 400, "{path}");
        assert!(
            p["detail"].as_str().unwrap().contains("unknown variant"),
            "{p}"
        );
        // The failing parameter is named, as for out-of-range values.
        assert_eq!(p["errors"][0]["parameter"], "format", "{p}");
    }
    // A parameter given twice is named: which value counts would be a guess.
    for path in [
        "/v1/threads/t/history?limit=1&limit=2",
        "/v1/tools?format=openai&format=openai",
        "/v1/audit?action=call.executed&limit=5&action=call.executed",
    ] {
        let (s, p) = problem(app.get(path).await).await;
        assert_eq!(s, 400, "{path}: {p}");
        assert!(
            p["detail"].as_str().unwrap().contains("more than once"),
            "{p}"
        );
        assert!(p["errors"][0]["parameter"].is_string(), "{p}");
    }
    let (_, p) = problem(app.get("/v1/threads/t/history?limit=1&limit=2").await).await;
    assert_eq!(p["errors"][0]["parameter"], "limit", "{p}");
    // A parameter the route does not take is named with the ones it does,
    // never ignored: a misspelt `format` would answer in another shape.
    for (path, named, takes) in [
        ("/v1/tools?fromat=openai", "fromat", "format"),
        ("/v1/threads/t/context?Format=anthropic", "Format", "format"),
        ("/v1/threads/t/history?limt=2", "limt", "limit, before"),
        ("/v1/approvals?stauts=pending", "stauts", "status"),
        ("/v1/system-prompt?format=xml&x=1", "x", "format"),
    ] {
        let (s, p) = problem(app.get(path).await).await;
        assert_eq!(s, 400, "{path}: {p}");
        assert_eq!(p["errors"][0]["parameter"], named, "{p}");
        assert!(p["detail"].as_str().unwrap().contains(takes), "{path}: {p}");
    }
    // Also on routes whose handler reads no query (they ignored it: a
    // decision posted with `?force=1` was taken as if it forced something).
    let (s, out) = app
        .call(
            "q",
            json!({"id": "q1", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    for (path, post) in [
        (
            "/v1/approvals/apr_1/decision?force=1",
            Some(json!({"decision": "approve"})),
        ),
        (
            "/v1/threads/q/messages?x=1",
            Some(json!({"role": "user", "content": "hi"})),
        ),
        ("/v1/threads/q/tool-calls/q1?x=1", None),
        ("/v1/permissions?x=1", None),
        ("/v1/approvals/apr_1?x=1", None),
    ] {
        let r = match &post {
            Some(body) => app.post(path, body).await,
            None => app.get(path).await,
        };
        let (s, p) = problem(r).await;
        assert_eq!(s, 400, "{path}: {p}");
        let named = if path.contains("force") { "force" } else { "x" };
        assert_eq!(p["errors"][0]["parameter"], named, "{p}");
        assert!(
            p["detail"]
                .as_str()
                .unwrap()
                .contains("takes no query parameters"),
            "{path}: {p}"
        );
    }
    assert_eq!(
        app.history("q").await.len(),
        1,
        "a refused message was kept"
    );
    // Without a good token the credential is refused first, as with a
    // query the route takes: a 401 with its challenge, not the 400.
    for token in [None, Some("not.a.token")] {
        let mut request = app.client.get(app.url("/v1/threads/q/history?limt=2"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), 401, "{token:?}");
        assert!(r.headers().contains_key("www-authenticate"), "{token:?}");
    }
    // A method the route does not serve is still its 405.
    let r = app
        .client
        .delete(app.url("/v1/threads/q/tool-calls/q1?x=1"))
        .bearer_auth(&app.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    for path in ["/v1/threads/q/events?x=1", "/v1/threads/q/events?after=1"] {
        let r = app
            .client
            .head(app.url(path))
            .bearer_auth(&app.token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{path}");
    }
    // An audit action that no entry can have is an error, not an empty page.
    let (s, p) = problem(app.get("/v1/audit?action=bogus").await).await;
    assert_eq!(s, 400, "{p}");
    assert_eq!(p["errors"][0]["parameter"], "action", "{p}");
    assert!(
        p["detail"].as_str().unwrap().contains("call.executed"),
        "{p}"
    );
    // So is an audit cursor no page ever gave.
    for before in ["0", "-1", "%2B5", "1234567890123456789", "5.0"] {
        let (s, p) = problem(app.get(&format!("/v1/audit?before={before}")).await).await;
        assert_eq!(
            (s, &p["errors"][0]["parameter"]),
            (400, &json!("before")),
            "{p}"
        );
    }
    // A value of the wrong type names its parameter too.
    let (s, p) = problem(app.get("/v1/threads/t/history?limit=abc").await).await;
    assert_eq!(s, 400);
    assert_eq!(p["errors"][0]["parameter"], "limit", "{p}");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .starts_with("query parameter `limit` must be a whole number, got \"abc\""),
        "{p}"
    );
    // A negative number for an unsigned one says what it was given.
    let token = app.token_for("dev");
    for path in ["/v1/threads/t?wait=-1", "/v1/threads/t/tool-calls?wait=-1"] {
        let resp = if path.ends_with("tool-calls?wait=-1") {
            app.post(
                path,
                &json!({"id": "w", "name": "echo", "arguments": {"text": "x"}}),
            )
            .await
        } else {
            app.delete_as(&token, path).await
        };
        let (s, p) = problem(resp).await;
        assert_eq!(s, 400, "{path}: {p}");
        assert_eq!(p["errors"][0]["parameter"], "wait", "{p}");
        assert_eq!(
            p["detail"], "query parameter `wait` must be a whole number, got \"-1\"",
            "{p}"
        );
    }
    let (s, _) = problem(app.get("/v1/tools/missing").await).await;
    assert_eq!(s, 404);
    let (s, _) = problem(app.get("/v1/threads/bad%20id/history").await).await;
    assert_eq!(s, 400);

    // Resume points.
    let bad_ids = [
        "abc",
        "-1",
        "1.5",
        "+1",
        "",
        "99999999999999999999",
        // Within i64, but past the 18 digits the API publishes.
        "1000000000000000000",
    ]
    .map(|bad| bad.as_bytes())
    .into_iter()
    // Not text at all: a byte no header text holds.
    .chain([b"3\x80".as_slice()]);
    for bad in bad_ids {
        let r = app
            .client
            .get(app.url("/v1/threads/t/events"))
            .bearer_auth(&app.token)
            .header(
                "last-event-id",
                reqwest::header::HeaderValue::from_bytes(bad).unwrap(),
            )
            .send()
            .await
            .unwrap();
        let (s, p) = problem(r).await;
        assert_eq!(s, 400, "{bad:?}");
        assert_eq!(p["errors"][0]["parameter"], "Last-Event-ID", "{bad:?}: {p}");
    }
    let r = app
        .client
        .get(app.url("/v1/threads/t/events"))
        .bearer_auth(&app.token)
        .header("last-event-id", "999")
        .send()
        .await
        .unwrap();
    let (s, p) = problem(r).await;
    assert_eq!(s, 400);
    assert!(p["detail"].as_str().unwrap().contains("future"));
    assert_eq!(p["errors"][0]["parameter"], "Last-Event-ID", "{p}");
    // The same through the query names the query's parameter.
    let (s, p) = problem(app.get("/v1/threads/t/events?after=999").await).await;
    assert_eq!(s, 400);
    assert_eq!(p["errors"][0]["parameter"], "after", "{p}");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .starts_with("after: event id 999 is in the future"),
        "{p}"
    );
    let (s, _) = problem(app.get("/v1/threads/t/events?after=abc").await).await;
    assert_eq!(s, 400);
    // Two resume points: which to follow is not the server's guess.
    let r = app
        .client
        .get(app.url("/v1/threads/t/events"))
        .bearer_auth(&app.token)
        .header("last-event-id", "0")
        .header("last-event-id", "0")
        .send()
        .await
        .unwrap();
    let (s, p) = problem(r).await;
    assert_eq!(s, 400, "{p}");
    assert_eq!(p["errors"][0]["message"], "given more than once", "{p}");
    // A call or run id no call could have is a 400 naming the parameter.
    for (path, parameter) in [
        ("/v1/threads/t/tool-calls/bad%20id/cancel", "tool_call_id"),
        ("/v1/threads/t/tool-calls/bad%20id/undo", "tool_call_id"),
        ("/v1/threads/t/runs/bad%20id/rollback", "run_id"),
    ] {
        let (s, p) = problem(app.post(path, &json!({})).await).await;
        assert_eq!(s, 400, "{path}: {p}");
        assert_eq!(p["errors"][0]["parameter"], parameter, "{p}");
    }
    // Refused on a thread nobody has yet: the refusal does not claim it.
    let r = app
        .client
        .get(app.url("/v1/threads/unclaimed/events"))
        .bearer_auth(app.token_for("mallory"))
        .header("last-event-id", "5")
        .send()
        .await
        .unwrap();
    let (s, p) = problem(r).await;
    assert_eq!(s, 400, "{p}");
    let (s, out) = app
        .call(
            "unclaimed",
            json!({"id": "mine", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200, "still free for its first writer: {out}");

    // AG-UI run for another thread id than the path's.
    let run = json!({"threadId": "other", "runId": "r1", "messages": [], "tools": [], "context": [], "state": {}, "forwardedProps": {}});
    let (s, _) = problem(app.post("/v1/threads/t/runs", &run).await).await;
    assert_eq!(s, 422);
    // A run's calls need ids the REST route would take, one per call of a
    // turn; refused before the stream starts, with nothing run or stored.
    let echo = |id: &str| json!({"id": id, "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"a\"}"}});
    for (calls, says) in [
        (json!([echo("bad id")]), "must be 1-128 characters"),
        (
            json!([echo("c1"), echo("c1")]),
            "another call of the same message",
        ),
    ] {
        let run = json!({"threadId": "t", "runId": "r1", "tools": [], "context": [], "state": {}, "forwardedProps": {},
            "messages": [{"id": "a1", "role": "assistant", "toolCalls": calls}]});
        let (s, p) = problem(app.post("/v1/threads/t/runs", &run).await).await;
        assert_eq!(s, 422, "{p}");
        assert!(p["detail"].as_str().unwrap().contains(says), "{p}");
    }
    // A run whose call reuses an id the thread recorded for another call:
    // 409 before the stream, with nothing of the run stored.
    let (s, _) = app
        .call(
            "rr",
            json!({"id": "c9", "name": "echo", "arguments": {"text": "a"}}),
        )
        .await;
    assert_eq!(s, 200);
    let run = json!({"threadId": "rr", "runId": "r9", "tools": [], "context": [], "state": {}, "forwardedProps": {},
        "messages": [{"id": "z9", "role": "reasoning", "content": "reuse it"},
            {"id": "a9", "role": "assistant", "toolCalls": [
            {"id": "c9", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"b\"}"}}]}]});
    let (s, p) = problem(app.post("/v1/threads/rr/runs", &run).await).await;
    assert_eq!(s, 409, "{p}");
    assert!(p["detail"].as_str().unwrap().contains("\"c9\""), "{p}");
    // Named in the input as the client sent it (the reasoning counted).
    assert_eq!(
        p["errors"][0]["pointer"], "/messages/1/toolCalls/0/id",
        "{p}"
    );
    assert_eq!(app.history("rr").await.len(), 1, "the run stored nothing");

    // Unknown route and method.
    let (s, p) = problem(app.get("/v1/nothing-here").await).await;
    assert_eq!(s, 404);
    // The same title as a handler's 404 (an unknown tool's).
    assert_eq!(p["title"], "Not found", "{p}");
    let (_, p) = problem(app.get("/v1/tools/missing").await).await;
    assert_eq!(p["title"], "Not found", "{p}");
    let r = app
        .client
        .delete(app.url("/v1/tools"))
        .bearer_auth(&app.token)
        .send()
        .await
        .unwrap();
    let (s, p) = problem(r).await;
    assert_eq!(s, 405);
    assert_eq!(p["title"], "Method not allowed", "{p}");

    // A message's content errors are 422 and name the field.
    let (s, p) = problem(
        app.post(
            "/v1/threads/t/messages",
            &json!({"role": "user", "content": "x", "tool_calls": []}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422, "{p}");
    assert_eq!(p["errors"][0]["pointer"], "/tool_calls", "{p}");
    let (s, p) = problem(
        app.post(
            "/v1/threads/t/messages",
            &json!({"id": "bad id", "role": "user", "content": "x"}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422, "{p}");
    assert_eq!(p["errors"][0]["pointer"], "/id", "{p}");
    // Two calls of one turn under one id: no vendor takes that turn back.
    let twice = json!({"id": "t3", "name": "echo", "arguments": {"text": "a"}});
    let (s, p) = problem(
        app.post(
            "/v1/threads/t/messages",
            &json!({"role": "assistant", "content": "x", "tool_calls": [twice, twice]}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422, "{p}");
    assert_eq!(p["errors"][0]["pointer"], "/tool_calls/1/id", "{p}");
    // How a call is run is given when it is posted: a declaration that
    // says it (kept silently, a declared dry run could run for real).
    for (field, value) in [
        ("dry_run", json!(true)),
        ("workspace", json!("sub")),
        ("run_id", json!("r")),
        ("parent_message_id", json!("m")),
    ] {
        let mut call = json!({"id": "t4", "name": "write_file",
                              "arguments": {"path": "f.txt", "content": "x"}});
        call[field] = value;
        let (s, p) = problem(
            app.post(
                "/v1/threads/t/messages",
                &json!({"role": "assistant", "content": "x", "tool_calls": [call]}),
            )
            .await,
        )
        .await;
        assert_eq!(s, 422, "{field}: {p}");
        assert_eq!(
            p["errors"][0]["pointer"],
            format!("/tool_calls/0/{field}"),
            "{p}"
        );
    }

    assert_eq!(
        snapshot(&app, "t").await,
        before,
        "no bad request changed stored data"
    );
}

fn forged(header: Value, claims: Value, signature: &str) -> String {
    let enc = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!("{}.{}.{}", enc(&header), enc(&claims), signature)
}

async fn forged_expired_and_missing_tokens_get_401(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims =
        json!({"sub": "dev", "exp": now + 3600, "iat": now, "aud": "toolgate", "iss": "toolgate"});
    let key_text = std::fs::read_to_string(app.data_dir.path().join("signing.key")).unwrap();
    let key = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(key_text.trim())
        .unwrap();
    let sign = |claims: &Value, secret: &[u8]| {
        jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            claims,
            &jsonwebtoken::EncodingKey::from_secret(secret),
        )
        .unwrap()
    };
    let mut expired = claims.clone();
    expired["exp"] = json!(now - 3600);
    let mut wrong_aud = claims.clone();
    wrong_aud["aud"] = json!("someone-else");
    let mut no_exp = claims.clone();
    no_exp.as_object_mut().unwrap().remove("exp");
    let mut not_yet = claims.clone();
    not_yet["nbf"] = json!(now + 3600);
    let cases: Vec<(&str, Option<String>)> = vec![
        ("missing", None),
        (
            "alg none",
            Some(forged(
                json!({"alg": "none", "typ": "JWT"}),
                claims.clone(),
                "",
            )),
        ),
        (
            "wrong key",
            Some(sign(&claims, b"an-attacker-chosen-secret-of-32-bytes!!")),
        ),
        ("expired", Some(sign(&expired, &key))),
        ("wrong audience", Some(sign(&wrong_aud, &key))),
        ("no exp", Some(sign(&no_exp, &key))),
        ("not valid yet", Some(sign(&not_yet, &key))),
        (
            "critical extension",
            Some({
                let signed = sign(&claims, &key);
                // Re-sign with a `crit` header: the signature is good, the
                // extension one toolgate cannot honour.
                let head = json!({"alg": "HS256", "typ": "JWT", "crit": ["x-ext"], "x-ext": 1});
                let enc = |v: &Value| {
                    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
                };
                let body = signed.split('.').nth(1).unwrap().to_string();
                let message = format!("{}.{body}", enc(&head));
                let signature = jsonwebtoken::crypto::sign(
                    message.as_bytes(),
                    &jsonwebtoken::EncodingKey::from_secret(&key),
                    jsonwebtoken::Algorithm::HS256,
                )
                .unwrap();
                format!("{message}.{signature}")
            }),
        ),
        ("garbage", Some("not.a.jwt".into())),
        (
            "tampered",
            Some({
                let good = sign(&claims, &key);
                let parts: Vec<&str> = good.split('.').collect();
                let mut evil = claims.clone();
                evil["sub"] = json!("admin");
                forged(json!({"alg": "HS256", "typ": "JWT"}), evil, parts[2])
            }),
        ),
    ];
    for (name, token) in cases {
        let mut req = app
            .client
            .post(app.url("/v1/threads/tt/tool-calls"))
            .json(&json!({"id": "c", "name": "echo", "arguments": {"text": "x"}}));
        if let Some(t) = &token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        let challenge = resp
            .headers()
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_string());
        let (s, p) = problem(resp).await;
        assert_eq!(s, 401, "{name}: {p}");
        let challenge = challenge.unwrap_or_else(|| panic!("{name}: WWW-Authenticate on 401"));
        assert!(
            challenge.starts_with("Bearer realm=\"toolgate\""),
            "{challenge}"
        );
        // RFC 6750 §3.1: no error code when no token was sent.
        assert_eq!(
            challenge.contains("error=\"invalid_token\""),
            token.is_some(),
            "{name}: {challenge}"
        );
        if name == "expired" {
            assert!(p["detail"].as_str().unwrap().contains("expired"), "{p}");
        }
    }
    let r = app
        .client
        .get(app.url("/v1/tools"))
        .header("authorization", "Basic ZGV2OmRldg==")
        .send()
        .await
        .unwrap();
    assert_eq!(problem(r).await.0, 401);
    // Two Authorization headers, a good token in either place: which one a
    // proxy in front checked is not known, so neither counts.
    let good = app.token_for("dev");
    let bad = sign(&claims, b"an-attacker-chosen-secret-of-32-bytes!!");
    for (first, second) in [(&good, &bad), (&bad, &good), (&good, &good)] {
        let r = app
            .client
            .post(app.url("/v1/threads/tt/tool-calls"))
            .header("authorization", format!("Bearer {first}"))
            .header("authorization", format!("Bearer {second}"))
            .json(&json!({"id": "c", "name": "echo", "arguments": {"text": "x"}}))
            .send()
            .await
            .unwrap();
        let (s, p) = problem(r).await;
        assert_eq!(s, 401, "{p}");
        assert!(
            p["detail"].as_str().unwrap().contains("more than one"),
            "{p}"
        );
    }
    // Nothing was written by any of them.
    assert!(app.history("tt").await.is_empty());
    let (s, _) = problem(app.get("/v1/threads/tt/history").await).await;
    assert_eq!(s, 404);
}

/// An event stream lasts as long as the token that opened it: at its
/// expiry the stream closes what it is inside of and ends with RUN_ERROR
/// `TOKEN_EXPIRED`; events before then arrive as usual.
async fn an_event_stream_ends_when_its_token_expires(backend: Backend) {
    // The stream lasts as long as the token is taken: to `exp` and the
    // leeway, none here.
    let app = TestApp::spawn_with(backend, |s| s.auth.leeway_secs = 0).await;
    let short = app.token_with_ttl("dev", 3);
    let mut sse = app.events_as(&short, "exp", "", None).await;
    let opened = std::time::Instant::now();
    let first = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(first.data["type"], "RUN_STARTED");
    let (s, _) = app
        .call(
            "exp",
            json!({"id": "c1", "name": "echo", "arguments": {"text": "hi"}}),
        )
        .await;
    assert_eq!(s, 200);
    let mut seen = Vec::new();
    while let Some(frame) = sse.next(Duration::from_secs(10)).await {
        seen.push(frame.data);
    }
    let types: Vec<&str> = seen.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert!(types.contains(&"TOOL_CALL_RESULT"), "{types:?}");
    let last = seen.last().unwrap();
    assert_eq!(last["type"], "RUN_ERROR", "{types:?}");
    assert_eq!(last["code"], "TOKEN_EXPIRED", "{last}");
    assert!(
        opened.elapsed() >= Duration::from_secs(1),
        "ended before the token expired"
    );
}

/// A token past its `exp` but within the leeway every request is allowed
/// opens a stream that lasts to the end of the leeway, not one that ends
/// at once (an `EventSource` would open it again and again); past the
/// leeway it is refused with `401`. The approvals stream ends the same
/// way, with RUN_ERROR `TOKEN_EXPIRED`.
async fn a_stream_opened_within_the_leeway_lasts_to_its_end(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.auth.leeway_secs = 4).await;
    let short = app.token_with_ttl("dev", 1);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let mut sse = app.events_as(&short, "lee", "", None).await;
    let opened = std::time::Instant::now();
    let mut approvals = {
        let r = app
            .client
            .get(app.url("/v1/approvals/events"))
            .bearer_auth(&short)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        common::SseReader::new(r)
    };
    let first = sse.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(first.data["type"], "RUN_STARTED");
    let mut last = Value::Null;
    while let Some(frame) = sse.next(Duration::from_secs(10)).await {
        last = frame.data;
    }
    assert_eq!(last["code"], "TOKEN_EXPIRED", "{last}");
    assert!(
        opened.elapsed() >= Duration::from_millis(500),
        "ended at once: {:?}",
        opened.elapsed()
    );
    let mut frames = Vec::new();
    while let Some(frame) = approvals.next(Duration::from_secs(10)).await {
        frames.push(frame.data);
    }
    assert_eq!(
        frames.first().map(|f| &f["name"]),
        Some(&json!("approvals.synced")),
        "{frames:?}"
    );
    assert_eq!(
        frames.last().map(|f| &f["code"]),
        Some(&json!("TOKEN_EXPIRED")),
        "{frames:?}"
    );
    let r = app
        .client
        .get(app.url("/v1/threads/lee/events"))
        .bearer_auth(&short)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
}

/// A client that reads slowly still gets the end of a stream whose token
/// expired: the groups it is inside closed, then RUN_ERROR `TOKEN_EXPIRED`,
/// once it has read what was queued before them.
async fn a_slow_reader_gets_the_end_of_an_expired_stream(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| s.auth.leeway_secs = 0).await;
    let text = "x".repeat(100_000);
    for i in 0..60 {
        let (s, _) = app
            .call(
                "slowexp",
                json!({"id": format!("c{i}"), "name": "echo", "arguments": {"text": text}}),
            )
            .await;
        assert_eq!(s, 200);
    }
    let short = app.token_with_ttl("dev", 3);
    let mut sse = app.events_as(&short, "slowexp", "", None).await;
    // Nothing read until well after the token expired: the server is
    // blocked on a full connection when it does.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let mut kinds = Vec::new();
    let mut last = Value::Null;
    while let Some(frame) = sse.next(Duration::from_secs(15)).await {
        kinds.push(frame.data["type"].as_str().unwrap().to_string());
        last = frame.data;
    }
    assert!(
        kinds.len() < 1 + 60 * 4,
        "the stream ended early: {}",
        kinds.len()
    );
    assert_eq!(
        last["type"],
        "RUN_ERROR",
        "the last events: {:?}",
        &kinds[kinds.len().saturating_sub(3)..]
    );
    assert_eq!(last["code"], "TOKEN_EXPIRED", "{last}");
    let count = |kind: &str| kinds.iter().filter(|k| *k == kind).count();
    assert_eq!(
        count("TOOL_CALL_START"),
        count("TOOL_CALL_END"),
        "{kinds:?}"
    );
}

async fn another_owners_thread_is_not_found(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let (s, _) = app
        .call(
            "alice-thread",
            json!({"id": "c1", "name": "echo", "arguments": {"text": "secret"}}),
        )
        .await;
    assert_eq!(s, 200);
    let before = app.history("alice-thread").await;
    let mallory = app.token_for("mallory");
    let t = "/v1/threads/alice-thread";
    let attempts = [
        app.post_as(
            &mallory,
            &format!("{t}/tool-calls"),
            &json!({"id": "c1", "name": "echo", "arguments": {"text": "secret"}}),
        )
        .await,
        app.post_as(
            &mallory,
            &format!("{t}/tool-calls"),
            &json!({"id": "c2", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await,
        app.post_as(
            &mallory,
            &format!("{t}/messages"),
            &json!({"role": "user", "content": "hi"}),
        )
        .await,
        app.post_as(
            &mallory,
            &format!("{t}/runs"),
            &json!({"threadId": "alice-thread", "runId": "r", "messages": []}),
        )
        .await,
        app.client
            .get(app.url(&format!("{t}/history")))
            .bearer_auth(&mallory)
            .send()
            .await
            .unwrap(),
        app.client
            .get(app.url(&format!("{t}/context")))
            .bearer_auth(&mallory)
            .send()
            .await
            .unwrap(),
        app.client
            .get(app.url(&format!("{t}/events")))
            .bearer_auth(&mallory)
            .send()
            .await
            .unwrap(),
    ];
    for resp in attempts {
        let (s, p) = problem(resp).await;
        assert_eq!(s, 404, "{p}");
        assert_eq!(p["detail"], "thread not found");
        assert!(!p.to_string().contains("secret"));
    }
    // Looks exactly like a thread that does not exist.
    let missing = app
        .client
        .get(app.url("/v1/threads/never-made/history"))
        .bearer_auth(&mallory)
        .send()
        .await
        .unwrap();
    assert_eq!(problem(missing).await.1["detail"], "thread not found");
    assert_eq!(app.history("alice-thread").await, before);
}

/// `.` and `..` are no ids: a URL client turns them (and `%2e%2e`) into a
/// step up the path, so a thread, call or run by such an id could never be
/// reached again. Refused in a path (sent as is, as `curl --path-as-is`
/// does) and in a body, with nothing stored.
async fn dot_segment_ids_are_refused(backend: Backend) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::spawn(backend).await;
    let addr = app.base.trim_start_matches("http://").to_string();
    let status_of = |path: &str| {
        let (addr, token, path) = (addr.clone(), app.token.clone(), path.to_string());
        async move {
            let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let body = r#"{"role": "user", "content": "hi"}"#;
            let request = format!(
                "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.unwrap();
            answer
        }
    };
    for thread in [".", "..", "%2e", "%2e%2e", "%2E."] {
        let answer = status_of(&format!("/v1/threads/{thread}/messages")).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{thread}: {answer}");
        assert!(answer.contains("not . or .."), "{thread}: {answer}");
    }
    for (path, body, pointer) in [
        (
            "messages",
            json!({"id": "..", "role": "user", "content": "hi"}),
            "/id",
        ),
        (
            "tool-calls",
            json!({"id": ".", "name": "echo", "arguments": {"text": "x"}}),
            "/id",
        ),
        (
            "batches",
            json!({"run_id": "..", "calls": [{"id": "b1", "name": "echo", "arguments": {"text": "x"}}]}),
            "/run_id",
        ),
    ] {
        let (s, p) = problem(app.post(&format!("/v1/threads/dots/{path}"), &body).await).await;
        assert_eq!(s, 422, "{path}: {p}");
        assert_eq!(p["errors"][0]["pointer"], pointer, "{p}");
    }
    // `...` is an id like any other.
    let r = app
        .post(
            "/v1/threads/.../messages",
            &json!({"id": "...", "role": "user", "content": "hi"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let threads = app.get_json("/v1/threads").await;
    let ids: Vec<&Value> = threads["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["id"])
        .collect();
    assert_eq!(ids, [&json!("...")], "{threads}");
}

/// U+0000 cannot be stored in Postgres text or jsonb. A request that spells
/// it is refused on both backends alike; a tool whose output holds it
/// (here a command's) still has its result stored, with U+FFFD instead.
async fn nul_characters_are_refused_in_requests_and_replaced_in_results(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.permissions.allow = vec!["bash(printf *)".into()]
    })
    .await;
    let t = "/v1/threads/nul";
    app.post(
        &format!("{t}/messages"),
        &json!({"role": "user", "content": "before"}),
    )
    .await;
    let before = snapshot(&app, "nul").await;
    for uri in [
        "/v1/audit?tool_name=a%00",
        "/v1/approvals/a%00b",
        "/v1/threads/nul/history?before=1%00",
        "/v1/tools/ec%00ho",
    ] {
        let (s, p) = problem(app.get(uri).await).await;
        assert_eq!(s, 400, "{uri}: {p}");
        assert!(p["detail"].as_str().unwrap().contains("%00"), "{p}");
    }
    // A path segment that does not decode to UTF-8: a 400 that says so.
    let (s, p) = problem(app.get("/v1/threads/%FF/history").await).await;
    assert_eq!(s, 400, "{p}");
    assert_eq!(p["type"], "urn:toolgate:problem:bad-request", "{p}");
    assert!(p["detail"].as_str().unwrap().contains("UTF-8"), "{p}");
    for path in [
        "tool-calls/a%00b/cancel",
        "tool-calls/a%00b/undo",
        "runs/a%00b/rollback",
    ] {
        let (s, p) = problem(app.post(&format!("{t}/{path}"), &json!({})).await).await;
        assert_eq!(s, 400, "{path}: {p}");
    }
    for (path, body, pointer) in [
        (
            "messages",
            json!({"role": "user", "content": "a\u{0}b"}),
            "/content",
        ),
        (
            "tool-calls",
            json!({"id": "n1", "name": "echo", "arguments": {"text": "a\u{0}b"}}),
            "/arguments/text",
        ),
        (
            "tool-calls",
            json!({"id": "n2", "name": "echo", "arguments": {"text": "x", "k\u{0}": 1}}),
            "/arguments/k\u{0}",
        ),
        (
            "batches",
            json!({"calls": [{"id": "n3", "name": "echo", "arguments": {"text": ["\u{0}"]}}]}),
            "/calls/0/arguments/text/0",
        ),
    ] {
        let (s, p) = problem(app.post(&format!("{t}/{path}"), &body).await).await;
        assert_eq!(s, 422, "{path}: {p}");
        assert_eq!(p["errors"][0]["pointer"], pointer, "{p}");
        assert!(p["detail"].as_str().unwrap().contains("U+0000"), "{p}");
    }
    // Arguments sent as JSON text spell it `\u0000`: refused alike, with
    // the place in the arguments, so a call never runs with what its
    // stored record cannot say.
    let text = r#"{"path": "n.txt", "content": "x\u0000y"}"#;
    for (path, body) in [
        (
            "tool-calls",
            json!({"id": "n4", "name": "write_file", "arguments": text}),
        ),
        (
            "tool-calls",
            json!({"id": "n5", "type": "function", "function": {"name": "write_file", "arguments": text}}),
        ),
        (
            "batches",
            json!({"calls": [{"id": "n6", "type": "function", "function": {"name": "write_file", "arguments": text}}]}),
        ),
    ] {
        let r = app.post(&format!("{t}/{path}"), &body).await;
        let p = if path == "batches" {
            assert_eq!(r.status(), 200);
            let r: Value = r.json().await.unwrap();
            assert_eq!(r["results"][0]["status"], 422, "{r}");
            r["results"][0]["problem"].clone()
        } else {
            let (s, p) = problem(r).await;
            assert_eq!(s, 422, "{path}: {p}");
            p
        };
        assert!(p["detail"].as_str().unwrap().contains("U+0000"), "{p}");
        assert_eq!(p["code"], "INVALID_ARGUMENTS", "{p}");
        assert_eq!(p["errors"][0]["path"], "/content", "{p}");
        assert_eq!(p["tool_error"]["errors"], p["errors"], "{p}");
    }
    assert_eq!(
        snapshot(&app, "nul").await,
        before,
        "refusals store nothing"
    );
    // A model's turn declaring such a call is recorded as a run records
    // it: the text as sent, under `_raw` (a JSON string that spells the
    // escape, holding no NUL), and the call's failure the model can
    // correct.
    let r = app
        .post(
            &format!("{t}/messages"),
            &json!({"role": "assistant", "tool_calls": [{"id": "n7", "type": "function", "function": {"name": "write_file", "arguments": text}}]}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let (s, out) = app
        .call(
            "nul",
            json!({"id": "n7", "name": "write_file", "arguments": {"_raw": text}}),
        )
        .await;
    assert_eq!((s, &out["replayed"]), (200, &json!(true)), "{out}");
    let error = &out["tool_agent_output"]["error"];
    assert_eq!(error["code"], "INVALID_ARGUMENTS", "{out}");
    assert!(
        error["message"].as_str().unwrap().contains("U+0000"),
        "{out}"
    );
    // A run's call answers with a failure the model can correct, and
    // records the text as sent.
    let run = json!({"threadId": "nul", "runId": "rn", "tools": [], "context": [], "state": {}, "forwardedProps": {},
        "messages": [{"id": "an", "role": "assistant", "toolCalls": [
            {"id": "n8", "type": "function", "function": {"name": "write_file", "arguments": text}}]}]});
    let r = app.post(&format!("{t}/runs"), &run).await;
    assert_eq!(r.status(), 200);
    let frames = common::SseReader::new(r).until("RUN_FINISHED").await;
    let result = frames
        .iter()
        .find(|f| f.kind() == "TOOL_CALL_RESULT")
        .expect("the call is answered");
    let output: Value = serde_json::from_str(result.data["content"].as_str().unwrap()).unwrap();
    assert_eq!(output["error"]["code"], "INVALID_ARGUMENTS", "{output}");
    assert!(
        output["error"]["message"]
            .as_str()
            .unwrap()
            .contains("U+0000"),
        "{output}"
    );
    let view = app.get_json(&format!("{t}/tool-calls/n8")).await;
    assert_eq!(view["arguments"], json!({"_raw": text}), "{view}");
    assert!(
        !app.data_dir
            .path()
            .join("workspaces")
            .join(toolgate::workspace::Workspaces::owner_dir_name("dev"))
            .join("n.txt")
            .exists(),
        "nothing was written"
    );

    // The text `\u0000` (a backslash, then `u0000`) is no NUL.
    let r = app
        .post(
            &format!("{t}/messages"),
            &json!({"role": "user", "content": "\\u0000"}),
        )
        .await;
    assert_eq!(r.status(), 201);

    // A result holding NUL is stored, streamed and replayed.
    let call = json!({"id": "p1", "name": "bash", "arguments": {"command": "printf 'a\\000b'"}});
    let first = app.post(&format!("{t}/tool-calls"), &call).await;
    assert_eq!(first.status(), 200);
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["tool_agent_output"]["status"], "success", "{first}");
    assert_eq!(first["tool_agent_output"]["result"]["stdout"], "a\u{FFFD}b");
    let again: Value = app
        .post(&format!("{t}/tool-calls"), &call)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["tool_agent_output"], first["tool_agent_output"]);
    let history = app.history("nul").await;
    let tool = history
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "p1")
        .expect("tool message");
    assert_eq!(tool["ui_schema"], first["ui_schema"]);
}

/// `levels` arrays nested inside each other: `[[…]]`.
fn nested(levels: usize) -> String {
    format!("{}{}", "[".repeat(levels), "]".repeat(levels))
}

/// Whatever is accepted reads back: arguments nested deeper than toolgate
/// can store and read again are a `422` naming where, in every shape, and
/// the thread stays readable.
async fn deeply_nested_arguments_are_refused_and_the_thread_stays_readable(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let send = |body: String| {
        app.client
            .post(app.url("/v1/threads/deep/tool-calls"))
            .bearer_auth(&app.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    // Deep, but within the limit: stored, and every read works.
    let r = send(format!(
        r#"{{"id": "ok", "name": "echo", "arguments": {{"text": "x", "extra": {}}}}}"#,
        nested(60)
    ))
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    for bad in [
        // Past the limit, and past serde_json's own 128 levels.
        format!(
            r#"{{"id": "n1", "name": "echo", "arguments": {{"text": "x", "extra": {}}}}}"#,
            nested(70)
        ),
        format!(
            r#"{{"id": "n2", "name": "echo", "arguments": {{"text": "x", "extra": {}}}}}"#,
            nested(200)
        ),
        // OpenAI's arguments are JSON text, parsed on their own.
        serde_json::to_string(
            &json!({"id": "n3", "type": "function", "function": {"name": "echo",
            "arguments": format!(r#"{{"text": "x", "extra": {}}}"#, nested(124))}}),
        )
        .unwrap(),
    ] {
        let (s, p) = problem(send(bad.clone()).await.unwrap()).await;
        assert_eq!(s, 422, "{p}");
        assert!(p.to_string().contains("levels deep"), "{p}");
    }
    let r = app
        .post(
            "/v1/threads/deep/messages",
            &serde_json::from_str::<Value>(&format!(
                r#"{{"role": "assistant", "content": "", "tool_calls": [{{"id": "m1", "name": "echo", "arguments": {{"x": {}}}}}]}}"#,
                nested(66)
            ))
            .unwrap(),
        )
        .await;
    assert_eq!(r.status(), 422);
    let history = app.history("deep").await;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(
        app.get("/v1/threads/deep/context?format=openai")
            .await
            .status(),
        200
    );
    let (s, out) = app
        .call(
            "deep",
            json!({"id": "ok2", "name": "echo", "arguments": {"text": "after"}}),
        )
        .await;
    assert_eq!(
        (s, &out["tool_agent_output"]["status"]),
        (200, &json!("success"))
    );
}

/// A key given twice in one object is refused wherever it is, with the
/// pointer of the repeat: the call is not run with one of the two values
/// while its reader saw the other, and nothing is stored.
async fn repeated_keys_are_refused_with_where_they_repeat(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let send = |path: &'static str, body: &'static str| {
        app.client
            .post(app.url(path))
            .bearer_auth(&app.token)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let calls = "/v1/threads/twice/tool-calls";
    for (path, body, pointer) in [
        (
            calls,
            r#"{"id": "c1", "name": "echo", "arguments": {"text": "shown", "text": "run"}}"#,
            "/arguments/text",
        ),
        (
            calls,
            r#"{"id": "c2", "name": "echo", "name": "wait", "arguments": {"text": "a"}}"#,
            "/name",
        ),
        // Escapes name the same key.
        (
            calls,
            r#"{"id": "c3", "name": "echo", "arguments": {"list": [{"k": 1, "\u006b": 2}], "text": "a"}}"#,
            "/arguments/list/0/k",
        ),
        (
            "/v1/threads/twice/messages",
            r#"{"role": "assistant", "content": "", "tool_calls": [{"id": "m1", "name": "echo", "arguments": {"text": "a", "text": "b"}}]}"#,
            "/tool_calls/0/arguments/text",
        ),
    ] {
        let (s, p) = problem(send(path, body).await.unwrap()).await;
        assert_eq!(s, 422, "{body}: {p}");
        assert_eq!(p["errors"][0]["pointer"], pointer, "{p}");
        assert!(
            p["detail"]
                .as_str()
                .unwrap()
                .contains("appears more than once"),
            "{p}"
        );
    }
    // OpenAI's arguments are JSON text: the field is named, and where in
    // the text the key repeats.
    let (s, p) = problem(
        app.post(
            calls,
            &json!({"id": "c4", "type": "function", "function": {"name": "echo",
                "arguments": r#"{"text": "a", "text": "b"}"#}}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422, "{p}");
    // An arguments error, told the way a model reads one.
    assert_eq!(p["code"], "INVALID_ARGUMENTS", "{p}");
    assert_eq!(p["errors"][0]["path"], "/text", "{p}");
    assert_eq!(p["tool_error"]["errors"], p["errors"], "{p}");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains(r#"the key "text" appears more than once"#)
            && p["detail"].as_str().unwrap().contains("(at /text)"),
        "{p}"
    );
    let r = app.get("/v1/threads/twice/history").await;
    assert_eq!(r.status(), 404, "nothing stored, not even the thread");
    // The same key in sibling objects is no repeat.
    let (s, out) = app
        .call(
            "twice",
            json!({"id": "ok", "name": "echo", "arguments": {"text": "a", "more": [{"text": 1}, {"text": 2}]}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
}

/// A run executes at most as many calls as a batch may carry: more is a
/// `422` before the stream, with nothing run or stored.
async fn a_run_carries_at_most_a_batch_of_calls(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let calls = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"id": format!("m{i}"), "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"a\"}"}}))
            .collect()
    };
    let run = |n: usize| {
        json!({"threadId": "many", "runId": "r1", "tools": [], "context": [], "state": {}, "forwardedProps": {},
        "messages": [{"id": "a1", "role": "assistant", "toolCalls": calls(n)}]})
    };
    let (s, p) = problem(app.post("/v1/threads/many/runs", &run(65)).await).await;
    assert_eq!(s, 422, "{p}");
    assert!(p["detail"].as_str().unwrap().contains("at most 64"), "{p}");
    assert_eq!(p["errors"][0]["pointer"], "/messages/0/toolCalls", "{p}");
    let r = app.get("/v1/threads/many/history").await;
    assert_eq!(r.status(), 404, "nothing stored, not even the thread");
    // An earlier turn, whose calls the run only records, is held to it too.
    let mut earlier = run(1);
    earlier["messages"] = json!([
        {"id": "a0", "role": "assistant", "toolCalls": calls(65)},
        {"id": "u1", "role": "user", "content": "go on"},
        {"id": "a1", "role": "assistant", "toolCalls": calls(1)},
    ]);
    let (s, p) = problem(app.post("/v1/threads/many/runs", &earlier).await).await;
    assert_eq!(s, 422, "{p}");
    assert_eq!(p["errors"][0]["pointer"], "/messages/0/toolCalls", "{p}");
    // So is a message recorded on its own.
    let declared: Vec<Value> = (0..65)
        .map(|i| json!({"id": format!("d{i}"), "name": "echo", "arguments": {"text": "a"}}))
        .collect();
    let (s, p) = problem(
        app.post(
            "/v1/threads/many/messages",
            &json!({"role": "assistant", "content": "", "tool_calls": declared}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422, "{p}");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("declares 65 tool calls; a message declares at most 64"),
        "{p}"
    );
    assert_eq!(p["errors"][0]["pointer"], "/tool_calls", "{p}");
    let r = app.get("/v1/threads/many/history").await;
    assert_eq!(r.status(), 404, "nothing stored, not even the thread");
    let r = app.post("/v1/threads/many/runs", &run(64)).await;
    assert_eq!(r.status(), 200);
    let frames = common::SseReader::new(r).until("RUN_FINISHED").await;
    assert_eq!(
        frames
            .iter()
            .filter(|f| f.kind() == "TOOL_CALL_RESULT")
            .count(),
        64
    );
}

/// Each refusal of a run's input names the field, as a JSON pointer into
/// the body; the run's reasoning and activity messages are taken and left
/// out of the thread.
async fn a_runs_refusals_name_the_field(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let call = |id: &str| json!({"id": id, "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"a\"}"}});
    let run = |thread: &str, run: &str, messages: Value| {
        json!({"threadId": thread, "runId": run, "tools": [], "context": [], "state": {}, "forwardedProps": {},
        "messages": messages})
    };
    let user = |id: &str| json!({"id": id, "role": "user", "content": "hi"});
    for (body, pointer) in [
        (run("other", "r1", json!([user("u1")])), "/threadId"),
        (run("rf", "r 1", json!([user("u1")])), "/runId"),
        (
            run("rf", "r1", json!([user("u1"), user("u 2")])),
            "/messages/1/id",
        ),
        (
            run("rf", "r1", json!([user("u1"), user("u1")])),
            "/messages/1/id",
        ),
        (
            run(
                "rf",
                "r1",
                json!([user("u1"), {"id": "a1", "role": "assistant", "toolCalls": [call("c1"), call("c1")]}]),
            ),
            "/messages/1/toolCalls/1/id",
        ),
        (
            run(
                "rf",
                "r1",
                json!([user("u1"), {"id": "t1", "role": "tool", "toolCallId": "c 1", "content": "x"}]),
            ),
            "/messages/1/toolCallId",
        ),
        (
            run(
                "rf",
                "r1",
                json!([{"id": "t1", "role": "tool", "toolCallId": "c1", "content": "x"},
                {"id": "t2", "role": "tool", "toolCallId": "c1", "content": "y"}]),
            ),
            "/messages/1/toolCallId",
        ),
        (
            run(
                "rf",
                "r1",
                json!([{"id": "z1", "role": "reasoning", "content": "x"}, {"id": "z1", "role": "user", "content": "y"}]),
            ),
            "/messages/1/id",
        ),
    ] {
        let (s, p) = problem(app.post("/v1/threads/rf/runs", &body).await).await;
        assert_eq!(s, 422, "{body}: {p}");
        assert_eq!(p["errors"][0]["pointer"], pointer, "{body}: {p}");
        assert_eq!(p["errors"][0]["message"], p["detail"], "{p}");
    }
    let r = app.get("/v1/threads/rf/history").await;
    assert_eq!(r.status(), 404, "nothing stored, not even the thread");
    // Reasoning and activity messages, anywhere in the input: the run goes
    // on without them.
    let body = run(
        "rf",
        "r2",
        json!([
            user("u1"),
            {"id": "z1", "role": "reasoning", "content": "echo it", "encryptedValue": "opaque"},
            {"id": "a1", "role": "assistant", "toolCalls": [call("c1")]},
            {"id": "v1", "role": "activity", "activityType": "plan", "content": {"steps": ["echo"]}},
        ]),
    );
    let r = app.post("/v1/threads/rf/runs", &body).await;
    assert_eq!(r.status(), 200);
    let frames = common::SseReader::new(r).until("RUN_FINISHED").await;
    assert!(
        frames.iter().any(|f| f.kind() == "TOOL_CALL_RESULT"),
        "the call ran"
    );
    let ids: Vec<Value> = app
        .history("rf")
        .await
        .iter()
        .map(|m| m["id"].clone())
        .collect();
    assert_eq!(ids[..2], [json!("u1"), json!("a1")], "{ids:?}");
    assert_eq!(ids.len(), 3, "and c1's result: {ids:?}");
    // An activity message is an AG-UI one: its content is an object.
    let mut bad = body.clone();
    bad["runId"] = json!("r3");
    bad["messages"][3]["content"] = json!("text");
    let (s, p) = problem(app.post("/v1/threads/rf/runs", &bad).await).await;
    assert_eq!(s, 422, "{p}");
}

/// A request target over 8 KiB, or header fields over 64 KiB in all, get
/// a `414` or `431` problem (naming the largest field, never its value)
/// before the token is checked, on every route; nothing is run or stored.
/// Just under the limits the same requests are served.
async fn oversized_targets_and_headers_get_problems(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let call = json!({"id": "big1", "name": "echo", "arguments": {"text": "hi"}});
    // The target: path and query, counted as sent.
    let at_limit = |path: &str| format!("{path}?pad={}", "a".repeat(8192 - path.len() - 5));
    for path in ["/healthz", "/v1/tools", "/v1/threads/big/tool-calls"] {
        let over = format!("{}a", at_limit(path));
        let resp = app
            .client
            .post(app.url(&over))
            .json(&call)
            .send()
            .await
            .unwrap();
        let (s, p) = problem(resp).await;
        assert_eq!(s, 414, "{path}: {p}");
        assert_eq!(p["type"], "urn:toolgate:problem:uri-too-long", "{p}");
        assert!(p["detail"].as_str().unwrap().contains("8193 bytes"), "{p}");
        assert!(p["detail"].as_str().unwrap().contains("8192"), "{p}");
    }
    let r = app.get(&at_limit("/healthz")).await;
    assert_eq!(r.status(), 200, "a target of exactly 8192 bytes is read");

    // Header fields: a token of 70 KiB is refused by name, its value unsaid.
    let secret = format!("Bearer {}", "s".repeat(70 * 1024));
    let resp = app
        .client
        .post(app.url("/v1/threads/big/tool-calls"))
        .header("authorization", &secret)
        .json(&call)
        .send()
        .await
        .unwrap();
    let (s, p) = problem(resp).await;
    assert_eq!(s, 431, "{p}");
    assert_eq!(
        p["type"], "urn:toolgate:problem:request-header-fields-too-large",
        "{p}"
    );
    let detail = p["detail"].as_str().unwrap();
    assert!(detail.contains("`authorization`"), "{p}");
    assert!(detail.contains("65536"), "{p}");
    assert!(
        !p.to_string().contains("sssssssss"),
        "the value is never echoed: {p}"
    );
    // Many fields, each small, count together; with the dev token the call
    // is still refused before it runs.
    let mut many = app
        .client
        .post(app.url("/v1/threads/big/tool-calls"))
        .bearer_auth(&app.token)
        .json(&call);
    for i in 0..40 {
        many = many.header(format!("x-pad-{i}"), "p".repeat(2000));
    }
    let (s, p) = problem(many.send().await.unwrap()).await;
    assert_eq!(s, 431, "{p}");
    assert!(p["detail"].as_str().unwrap().contains("`x-pad-"), "{p}");
    let r = app.get("/v1/threads/big/history").await;
    assert_eq!(r.status(), 404, "nothing stored, not even the thread");
    // Under the limit, the same padded call runs.
    let mut fewer = app
        .client
        .post(app.url("/v1/threads/big/tool-calls"))
        .bearer_auth(&app.token)
        .json(&call);
    for i in 0..20 {
        fewer = fewer.header(format!("x-pad-{i}"), "p".repeat(2000));
    }
    assert_eq!(fewer.send().await.unwrap().status(), 200);
}

/// What a refusal quotes of the request is clipped: a 100 KB tool name or
/// role does not come back whole (let alone three times over).
async fn refusals_do_not_echo_large_values_whole(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let long = "n".repeat(100_000);
    let r = app
        .post(
            "/v1/threads/echoes/tool-calls",
            &json!({"id": "c1", "name": long, "arguments": {}}),
        )
        .await;
    let text = {
        let (s, p) = problem(r).await;
        assert_eq!(s, 422, "{p}");
        assert_eq!(p["code"], "TOOL_NOT_FOUND", "{p}");
        assert!(p["detail"].as_str().unwrap().contains("nnnn…"), "{p}");
        p.to_string()
    };
    assert!(text.len() < 10_000, "{} bytes answered", text.len());
    let (s, p) = problem(
        app.post(
            "/v1/threads/echoes/messages",
            &json!({"role": "r".repeat(100_000), "content": "hi"}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 422, "{p}");
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.chars().count() <= 2001 && detail.ends_with('…'),
        "{}",
        detail.len()
    );
}

/// A call's parent is the assistant message that made it: one naming a
/// user, system or tool message of the thread is refused where it is
/// given, alone or in a batch, and nothing is recorded. A parent no
/// message has yet is taken (the message may come after its calls).
async fn a_parent_that_is_not_an_assistant_message_is_refused(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let t = "/v1/threads/pa";
    for body in [
        json!({"id": "u1", "role": "user", "content": "hi"}),
        json!({"id": "s1", "role": "system", "content": "be brief"}),
        json!({"id": "a1", "role": "assistant", "content": "let me see"}),
    ] {
        let r = app.post(&format!("{t}/messages"), &body).await;
        assert_eq!(r.status(), 201);
    }
    let (s, out) = app
        .call(
            "pa",
            json!({"id": "c0", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    let result_message = app.history("pa").await.last().unwrap()["id"].clone();
    let before = snapshot(&app, "pa").await;
    let echo = |id: &str, parent: &Value| json!({"id": id, "name": "echo", "arguments": {"text": id}, "parent_message_id": parent});
    for (parent, role) in [
        (json!("u1"), "user"),
        (json!("s1"), "system"),
        (result_message.clone(), "tool"),
    ] {
        let (s, body) = problem(
            app.post(&format!("{t}/tool-calls"), &echo("c1", &parent))
                .await,
        )
        .await;
        assert_eq!(s, 422, "{body}");
        assert_eq!(body["errors"][0]["pointer"], "/parent_message_id", "{body}");
        let message = body["errors"][0]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("is a {role} message")),
            "{message}"
        );
        // In a batch: that item, at its place; the others run.
        let r = app
            .post(
                &format!("{t}/batches"),
                &json!({"calls": [echo("b1", &json!("a1")), echo("b2", &parent)]}),
            )
            .await;
        assert_eq!(r.status(), 200);
        let out: Value = r.json().await.unwrap();
        assert_eq!(out["results"][0]["status"], 200, "{out}");
        assert_eq!(out["results"][1]["status"], 422, "{out}");
        assert_eq!(
            out["results"][1]["problem"]["errors"][0]["pointer"], "/calls/1/parent_message_id",
            "{out}"
        );
        let r = app.get(&format!("{t}/tool-calls/b2")).await;
        assert_eq!(r.status(), 404, "nothing recorded");
        // b1 again is a replay; the next round posts it anew.
        let r = app.get(&format!("{t}/tool-calls/b1")).await;
        assert_eq!(r.status(), 200);
    }
    assert_eq!(app.get(&format!("{t}/tool-calls/c1")).await.status(), 404);
    // The assistant message, or a message to come, is taken.
    for (id, parent) in [("c2", "a1"), ("c3", "later")] {
        let (s, out) = app.call("pa", echo(id, &json!(parent))).await;
        assert_eq!(s, 200, "{out}");
    }
    let (history, _) = snapshot(&app, "pa").await;
    assert_eq!(
        history.len(),
        before.0.len() + 3,
        "b1, c2 and c3: {history:?}"
    );
}

/// An AG-UI client sends the whole conversation with every run: a run's
/// body may be larger than other requests' (`server.run_body_limit_bytes`),
/// and past that it is refused naming that setting.
async fn a_run_takes_a_larger_body_than_other_requests(backend: Backend) {
    let app = TestApp::spawn_with(backend, |s| {
        s.server.body_limit_bytes = 4096;
        s.server.run_body_limit_bytes = 64 * 1024;
    })
    .await;
    let run = |text_len: usize| {
        json!({"threadId": "big", "runId": format!("r{text_len}"), "state": {}, "tools": [],
               "context": [], "forwardedProps": {},
               "messages": [{"id": format!("u{text_len}"), "role": "user", "content": "x".repeat(text_len)}]})
    };
    let r = app.post("/v1/threads/big/runs", &run(20_000)).await;
    assert_eq!(r.status(), 200, "over body_limit_bytes, within the run's");
    let frames = common::SseReader::new(r).until("RUN_FINISHED").await;
    assert!(frames.iter().all(|f| f.kind() != "RUN_ERROR"));
    // Not declared: measured as it arrives. The answer comes while the
    // client may still be sending, and the connection is closed after it:
    // on a busy host the close can reach the client before it reads the
    // answer (a transport error, no answer), so it sends again.
    let mut streamed = None;
    for _ in 0..5 {
        let sent = app
            .client
            .post(app.url("/v1/threads/big/runs"))
            .bearer_auth(&app.token)
            .header("content-type", "application/json")
            .body(reqwest::Body::wrap_stream(futures::stream::iter([Ok::<
                _,
                std::io::Error,
            >(
                serde_json::to_vec(&run(80_001)).unwrap(),
            )])))
            .send()
            .await;
        if let Ok(answer) = sent {
            streamed = Some(answer);
            break;
        }
    }
    for sent in [
        app.post("/v1/threads/big/runs", &run(80_000)).await,
        streamed.expect("answered within five tries"),
    ] {
        let (s, p) = problem(sent).await;
        assert_eq!(s, 413, "{p}");
        assert!(
            p["detail"]
                .as_str()
                .unwrap()
                .contains("server.run_body_limit_bytes"),
            "{p}"
        );
    }
    // Other routes keep theirs.
    let (s, p) = problem(
        app.post(
            "/v1/threads/big/messages",
            &json!({"role": "user", "content": "x".repeat(20_000)}),
        )
        .await,
    )
    .await;
    assert_eq!(s, 413, "{p}");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("server.body_limit_bytes"),
        "{p}"
    );
}

both_backends!(
    a_run_takes_a_larger_body_than_other_requests,
    dot_segment_ids_are_refused,
    a_parent_that_is_not_an_assistant_message_is_refused,
    refusals_do_not_echo_large_values_whole,
    oversized_targets_and_headers_get_problems,
    a_run_carries_at_most_a_batch_of_calls,
    a_runs_refusals_name_the_field,
    repeated_keys_are_refused_with_where_they_repeat,
    deeply_nested_arguments_are_refused_and_the_thread_stays_readable,
    malformed_requests_are_refused_and_change_nothing,
    nul_characters_are_refused_in_requests_and_replaced_in_results,
    forged_expired_and_missing_tokens_get_401,
    an_event_stream_ends_when_its_token_expires,
    a_stream_opened_within_the_leeway_lasts_to_its_end,
    a_slow_reader_gets_the_end_of_an_expired_stream,
    another_owners_thread_is_not_found,
);
