//! What operators and tooling rely on: health, readiness, metrics, the
//! OpenAPI document, request ids, and crash recovery of the real binary.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{Backend, Refusal, SseReader, TestApp};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

async fn health_readiness_and_metrics(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let health: Value = reqwest::get(app.url("/healthz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health, json!({"status": "ok"}));
    let ready: Value = reqwest::get(app.url("/readyz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let name = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(ready["database"], name);
    assert_eq!(ready["migrations"], "applied");
    assert_eq!(
        ready["sandbox"]["bash_enabled"], true,
        "this kernel has Landlock: {ready}"
    );
    assert_eq!(ready["sandbox"]["landlock"]["enforced"], true);
    assert_eq!(ready["sandbox"]["network"], "deny");
    assert!(
        ready["sandbox"].get("hidden_paths").is_none(),
        "no server paths on an unauthenticated endpoint"
    );

    let (s, _) = app
        .call(
            "m",
            json!({"id": "c", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200);
    // Methods a client makes up, sent without a token, share one label:
    // they cannot add series to `/metrics`.
    let client = reqwest::Client::new();
    for made_up in ["XMETHOD1", "XMETHOD2", "BREW"] {
        let method = reqwest::Method::from_bytes(made_up.as_bytes()).unwrap();
        let r = client
            .request(method, app.url("/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405);
    }
    // Answers given before or without a route are counted too.
    let r = client.get(app.url("/no-such-route")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let r = client
        .post(app.url("/v1/threads/m/tool-calls"))
        .bearer_auth(&app.token)
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 415);
    let _sse = app.events("m", "", None).await;
    // The stream counts itself once its task runs, which may be just after
    // the client has the response headers.
    let text = metrics_once(&app, |n| n >= 1.0).await;
    for status in ["404", "415"] {
        assert!(
            requests_counted(&text, "unmatched", status),
            "{status}: {text}"
        );
    }
    assert!(text.contains("toolgate_http_requests_total{"), "{text}");
    assert!(
        text.contains("method=\"other\"") && !text.contains("XMETHOD") && !text.contains("BREW"),
        "{text}"
    );
    assert!(
        text.contains("route=\"/v1/threads/{thread_id}/tool-calls\""),
        "{text}"
    );
    assert!(
        text.contains("toolgate_tool_calls_total{") && text.contains("tool=\"echo\""),
        "{text}"
    );
    assert!(
        text.contains("toolgate_tool_call_duration_seconds"),
        "{text}"
    );
    let subscribers = sse_subscribers(&text);
    assert!(
        subscribers.is_some_and(|n| n >= 1.0),
        "an open stream is counted: {text}"
    );
}

/// Whether `/metrics` counts a request answered `status` on `route`.
fn requests_counted(metrics: &str, route: &str, status: &str) -> bool {
    metrics.lines().any(|l| {
        l.starts_with("toolgate_http_requests_total{")
            && l.contains(&format!("route=\"{route}\""))
            && l.contains(&format!("status=\"{status}\""))
    })
}

/// `/metrics` as text, as soon as its SSE subscriber gauge satisfies
/// `done`, or after 10 s.
async fn metrics_once(app: &TestApp, done: impl Fn(f64) -> bool) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text = reqwest::get(app.url("/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if sse_subscribers(&text).is_some_and(&done) || std::time::Instant::now() > deadline {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The `toolgate_sse_subscribers` gauge in a `/metrics` text.
fn sse_subscribers(metrics: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("toolgate_sse_subscribers "))
        .and_then(|value| value.trim().parse().ok())
}

/// A frontend that goes away frees its stream at once, not at the next
/// heartbeat: its task ends and the subscriber gauge falls. Heartbeats are
/// an hour apart here, so only the closed connection can end the streams.
/// (The gauge is shared by every server in this test binary; another test
/// holds at most a few streams open.)
#[tokio::test]
async fn a_closed_event_stream_is_freed_without_waiting_for_a_heartbeat() {
    const STREAMS: usize = 20;
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.server.sse_heartbeat_secs = 3600).await;
    let (s, _) = app
        .call(
            "gone",
            json!({"id": "c", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 200);
    let mut streams = Vec::new();
    for _ in 0..STREAMS {
        let mut sse = app.events("gone", "", None).await;
        // The replayed result: the stream's task is running.
        sse.until("TOOL_CALL_RESULT").await;
        streams.push(sse);
    }
    let streaming = STREAMS as f64;
    let open = sse_subscribers(&metrics_once(&app, |n| n >= streaming).await);
    assert!(
        open.is_some_and(|n| n >= streaming),
        "{open:?} streams counted"
    );
    drop(streams);
    let now = sse_subscribers(&metrics_once(&app, |n| n < streaming).await);
    assert!(
        now.is_some_and(|n| n < streaming),
        "the closed streams are still counted: {now:?} (were {open:?})"
    );
}

/// One owner holds at most `server.max_streams_per_owner` event streams
/// open: one more is a `429` problem with `Retry-After` that claims no
/// thread; other owners are not held back, and a closed stream frees its
/// slot.
#[tokio::test]
async fn event_streams_are_limited_per_owner() {
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.server.max_streams_per_owner = 2;
        s.server.sse_heartbeat_secs = 3600;
    })
    .await;
    let mut first = app.events("s1", "", None).await;
    first.until("RUN_STARTED").await;
    let mut second = app.events("s2", "", None).await;
    second.until("RUN_STARTED").await;
    let open = |token: &str, thread: &str| {
        app.client
            .get(app.url(&format!("/v1/threads/{thread}/events")))
            .bearer_auth(token.to_string())
            .send()
    };
    let r = open(&app.token, "s3").await.unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    let p: Value = r.json().await.unwrap();
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("maximum of 2 event streams open"),
        "{p}"
    );
    // The title fits streams as well as calls.
    assert_eq!(p["title"], "Too many requests", "{p}");
    assert_eq!(
        app.get("/v1/threads/s3/history").await.status(),
        404,
        "the refused stream claimed nothing"
    );
    let other = app.token_for("stream-neighbour");
    assert_eq!(open(&other, "n1").await.unwrap().status(), 200);
    drop(first);
    let mut reopened = false;
    for _ in 0..100 {
        let r = open(&app.token, "s3").await.unwrap();
        if r.status() == 200 {
            reopened = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reopened, "a closed stream freed its slot");
}

/// The data directory, the workspaces and the edit history are the
/// service user's alone (`0700`), even when the data directory was made
/// open to others before the service started; and a file tool never
/// writes a set-user-ID file, even over one.
#[tokio::test]
async fn the_service_keeps_its_files_to_itself() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        let data_dir = &s.storage.data_dir;
        std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    })
    .await;
    let data_dir = app.data_dir.path();
    let (s, out) = app
        .call("own", json!({"id": "w", "name": "write_file", "arguments": {"path": "x.sh", "content": "true"}}))
        .await;
    assert_eq!(s, 200, "{out}");
    for dir in [
        data_dir.to_path_buf(),
        data_dir.join("workspaces"),
        data_dir.join("edit-history"),
    ] {
        assert_eq!(mode(&dir), 0o700, "{}", dir.display());
    }
    let ws = app.get_json("/v1/workspace").await;
    let file = std::path::Path::new(ws["root"].as_str().unwrap()).join("x.sh");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let (s, out) = app
        .call("own", json!({"id": "w2", "name": "write_file", "arguments": {"path": "x.sh", "content": "false"}}))
        .await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(mode(&file), 0o755, "the mode is kept, but not set-user-ID");
}

/// Without a token anyone can open connections: one that sends no
/// complete request, or idles after one, is closed after
/// `server.header_read_timeout_secs`, so none can hold the process's files.
#[tokio::test]
async fn connections_that_send_no_request_are_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.server.header_read_timeout_secs = 1).await;
    let addr = app.base.trim_start_matches("http://").to_string();
    let silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut partial = tokio::net::TcpStream::connect(&addr).await.unwrap();
    partial
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut idle = tokio::net::TcpStream::connect(&addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = vec![0u8; 1024];
    let n = idle.read(&mut answer).await.unwrap();
    assert!(
        answer[..n].starts_with(b"HTTP/1.1 200"),
        "the request is served"
    );
    for (name, mut stream) in [("silent", silent), ("partial", partial), ("idle", idle)] {
        // Read until the server closes (or a generous bound passes).
        let closed = tokio::time::timeout(Duration::from_secs(20), async {
            let mut buf = vec![0u8; 1024];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "{name}: the connection is still open");
    }
    // The server still serves.
    let health = reqwest::get(app.url("/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
}

/// A client that stops reading is cut off once nothing written to it has
/// moved for `server.write_stall_secs`: it holds neither its connection
/// nor the answer waiting in it (here a whole thread's context, larger
/// than the sockets' buffers), however long it keeps the socket open.
#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.server.write_stall_secs = 1).await;
    let text = "x".repeat(900_000);
    for i in 0..12 {
        let r = app
            .post(
                "/v1/threads/stall/messages",
                &json!({"id": format!("m{i}"), "role": "user", "content": text}),
            )
            .await;
        assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    }
    let request = format!(
        "GET /v1/threads/stall/context HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {}\r\n\r\n",
        app.token
    );
    let (request, base) = (&request, &app.base);
    // `buffer`: the client's receive buffer, when set small.
    let connect = |buffer: Option<u32>| async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        if let Some(size) = buffer {
            socket.set_recv_buffer_size(size).unwrap();
        }
        let addr = base.trim_start_matches("http://").parse().unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        stream
    };
    // Read at once, the whole answer arrives.
    let mut reader = connect(None).await;
    let mut whole = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), reader.read_to_end(&mut whole))
        .await
        .expect("the answer arrives")
        .unwrap_or_default();
    let complete = whole.len();
    assert!(complete > 10_000_000, "{complete} bytes");
    // Not read for a while, it is cut off: what arrives then ends early.
    let mut stalled = connect(Some(4096)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut cut = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(60), stalled.read_to_end(&mut cut))
        .await
        .expect("the server closes the connection");
    assert!(
        cut.len() < complete / 2,
        "{} of {complete} bytes arrived: the answer waited for its client",
        cut.len()
    );
    // A client that keeps reading, slowly (700 KB/s, so a third of a 4 MiB
    // socket buffer takes longer than the stall to drain), is not.
    let mut slow = connect(Some(64 * 1024)).await;
    let mut got = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let started = tokio::time::Instant::now();
    loop {
        let n = tokio::time::timeout(Duration::from_secs(30), slow.read(&mut chunk))
            .await
            .expect("the answer goes on")
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        got.extend_from_slice(&chunk[..n]);
        let due = Duration::from_secs_f64(got.len() as f64 / 700_000.0);
        tokio::time::sleep_until(started + due).await;
    }
    assert_eq!(got.len(), complete, "a slow reader gets the whole answer");
    // The server still serves.
    let health = reqwest::get(app.url("/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);
}

/// A connection past `server.max_connections` is answered at once with a
/// `503` problem and `Retry-After`, not left waiting to be accepted; a
/// slot freed serves again.
#[tokio::test]
async fn a_connection_past_the_limit_is_answered_503() {
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.server.max_connections = 2;
        s.server.sse_heartbeat_secs = 3600;
    })
    .await;
    let mut first = app.events("c1", "", None).await;
    first.until("RUN_STARTED").await;
    let mut second = app.events("c2", "", None).await;
    second.until("RUN_STARTED").await;
    // A client of its own: the test's pooled connections hold the slots.
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        fresh().get(app.url("/healthz")).send(),
    )
    .await
    .expect("answered, not left waiting")
    .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert!(r.headers().contains_key("x-request-id"));
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["type"], "urn:toolgate:problem:unavailable", "{p}");
    // Answered as any request: its own usable id echoed, and counted.
    let r = fresh()
        .get(app.url("/healthz"))
        .header("x-request-id", "refused-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["x-request-id"], "refused-1");
    assert!(
        p["detail"].as_str().unwrap().contains("max_connections"),
        "{p}"
    );
    drop(first);
    let mut served = false;
    for _ in 0..100 {
        let r = fresh().get(app.url("/healthz")).send().await.unwrap();
        if r.status() == 200 {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "a freed slot serves again");
    drop(second);
    let mut metrics = String::new();
    for _ in 0..100 {
        let r = fresh().get(app.url("/metrics")).send().await.unwrap();
        if r.status() == 200 {
            metrics = r.text().await.unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("toolgate_http_requests_total{")
                && l.contains("route=\"refused\"")
                && l.contains("status=\"503\"")),
        "{metrics}"
    );
}

/// Past the limit, a connection closed without a request (a
/// connect-and-close health check) is not counted as a `503` nobody was
/// sent; one that sends nothing is answered all the same once the
/// refusal's wait is over, and counted. Every refusal is timed too.
#[tokio::test]
async fn only_refusals_sent_are_counted() {
    use tokio::io::AsyncReadExt;
    let dir = tempfile::tempdir().unwrap();
    let served = serve_binary_with(
        dir.path(),
        None,
        &[
            ("TOOLGATE_SERVER__MAX_CONNECTIONS", "2"),
            ("TOOLGATE_SERVER__SSE_HEARTBEAT_SECS", "3600"),
        ],
    )
    .await;
    let addr = served.base.trim_start_matches("http://").to_string();
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    // The metrics, once a slot is free, and how many 503s the reads got
    // before (each counted by the server too).
    let metrics = || {
        let client = fresh();
        let url = format!("{}/metrics", served.base);
        async move {
            for refused in 0..200 {
                let r = client.get(&url).send().await.unwrap();
                if r.status() == 200 {
                    return (r.text().await.unwrap(), refused);
                }
                assert_eq!(r.status(), 503);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("no slot came free")
        }
    };
    let sse = fresh()
        .get(format!("{}/v1/threads/busy/events", served.base))
        .bearer_auth(&served.token)
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    let sse2 = fresh()
        .get(format!("{}/v1/threads/busy2/events", served.base))
        .bearer_auth(&served.token)
        .send()
        .await
        .unwrap();
    assert_eq!(sse2.status(), 200);
    for _ in 0..5 {
        drop(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), silent.read_to_string(&mut answer))
        .await
        .expect("answered, not left waiting")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    drop((sse, sse2));
    let (text, refused_here) = metrics().await;
    let value = |prefix: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with(prefix) && l.contains("route=\"refused\""))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    // The silent client's, and none for the five that asked nothing.
    assert_eq!(
        value("toolgate_http_requests_total{"),
        1.0 + refused_here as f64,
        "{text}"
    );
    assert_eq!(
        value("toolgate_http_request_duration_seconds_count{"),
        value("toolgate_http_requests_total{"),
        "{text}"
    );
}

/// A body announced larger than `server.body_limit_bytes` is refused at
/// once, before a byte of it is read; a body trickled in is answered `408`
/// after `server.header_read_timeout_secs`, not held for the request
/// timeout. Neither runs or stores anything.
#[tokio::test]
async fn bodies_too_large_or_too_slow_are_refused_early() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.server.header_read_timeout_secs = 1).await;
    let addr = app.base.trim_start_matches("http://").to_string();
    let head = |length: usize| {
        format!(
            "POST /v1/threads/slow/tool-calls HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n",
            app.token
        )
    };
    let answer = |mut stream: tokio::net::TcpStream| async move {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 4096];
        let read = tokio::time::timeout(Duration::from_secs(15), async {
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        got.extend_from_slice(&buf[..n]);
                        if got.windows(4).any(|w| w == b"\r\n\r\n") && got.ends_with(b"}") {
                            return;
                        }
                    }
                }
            }
        })
        .await;
        assert!(read.is_ok(), "no answer: {}", String::from_utf8_lossy(&got));
        String::from_utf8(got).unwrap()
    };

    // Declared as 100 MB, two bytes sent: refused without waiting for more.
    let mut big = tokio::net::TcpStream::connect(&addr).await.unwrap();
    big.write_all(format!("{}{{}}", head(100_000_000)).as_bytes())
        .await
        .unwrap();
    let got = answer(big).await;
    assert!(got.starts_with("HTTP/1.1 413"), "{got}");
    assert!(got.contains("application/problem+json"), "{got}");
    assert!(got.contains("declared as 100000000 bytes"), "{got}");

    // A byte of the body at a time, slower than the read timeout allows.
    let call = r#"{"id": "s1", "name": "echo", "arguments": {"text": "hi"}}"#;
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(head(call.len()).as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    let trickle = {
        let call = call.to_string();
        let (mut read, mut write) = slow.into_split();
        let writer = tokio::spawn(async move {
            for byte in call.as_bytes() {
                if write.write_all(&[*byte]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        let mut got = Vec::new();
        let mut buf = vec![0u8; 4096];
        let _ = tokio::time::timeout(Duration::from_secs(15), async {
            while let Ok(n) = read.read(&mut buf).await {
                if n == 0 {
                    return;
                }
                got.extend_from_slice(&buf[..n]);
                if got.ends_with(b"}") {
                    return;
                }
            }
        })
        .await;
        writer.abort();
        String::from_utf8(got).unwrap()
    };
    assert!(trickle.starts_with("HTTP/1.1 408"), "{trickle}");
    assert!(trickle.contains("did not arrive within 1 s"), "{trickle}");
    assert!(
        started.elapsed() < Duration::from_secs(call.len() as u64 * 3 / 10),
        "answered before the body could have arrived"
    );
    let r = app.get("/v1/threads/slow/history").await;
    assert_eq!(r.status(), 404, "nothing stored, not even the thread");
}

/// A client that stops reading its event stream neither holds the
/// thread's large results in memory (they travel to it from the log) nor
/// keeps toolgate from shutting down.
#[tokio::test]
async fn a_stalled_event_reader_does_not_hold_up_shutdown() {
    use tokio::io::AsyncWriteExt;
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.server.shutdown_grace_secs = 2).await;
    let addr = app.base.trim_start_matches("http://").to_string();
    // A live reader, to check large results arrive whole from the log.
    let mut sse = app.events("stall", "", None).await;
    sse.next(Duration::from_secs(5)).await.unwrap();
    // A reader that never reads.
    let mut stalled = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stalled
        .write_all(
            format!(
                "GET /v1/threads/stall/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
                app.token
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let big = "x".repeat(200_000);
    for i in 0..40 {
        let (s, _) = app
            .call(
                "stall",
                json!({"id": format!("b{i}"), "name": "echo", "arguments": {"text": big}}),
            )
            .await;
        assert_eq!(s, 200);
    }
    for i in 0..40 {
        let result = sse.until("TOOL_CALL_RESULT").await.pop().unwrap();
        assert_eq!(result.data["toolCallId"], format!("b{i}"));
        assert_eq!(
            result.data["content"].as_str().unwrap().len(),
            big.len() + 11,
            "the whole result"
        );
    }
    assert!(
        app.ended_within(Duration::from_secs(30)).await,
        "toolgate waited on a client that reads nothing"
    );
    drop(stalled);
}

/// A reader far behind when toolgate shuts down gets what was already
/// queued for it and then its stream's one terminal event; what it had not
/// been sent yet waits in the log for its resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_behind_at_shutdown_still_gets_its_terminal_event() {
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.server.shutdown_grace_secs = 10).await;
    let mut sse = app.events("behind", "", None).await;
    assert_eq!(
        sse.next(Duration::from_secs(5)).await.unwrap().kind(),
        "RUN_STARTED"
    );
    // More than the stream's queue and the socket's buffers hold, unread.
    let big = "x".repeat(100_000);
    for i in 0..100 {
        let (s, _) = app
            .call(
                "behind",
                json!({"id": format!("b{i}"), "name": "echo", "arguments": {"text": big}}),
            )
            .await;
        assert_eq!(s, 200);
    }
    app.shutdown.cancel();
    let mut frames = Vec::new();
    while let Some(f) = sse.next(Duration::from_secs(10)).await {
        frames.push(f);
    }
    let terminal: Vec<&str> = frames
        .iter()
        .map(|f| f.kind())
        .filter(|k| matches!(*k, "RUN_FINISHED" | "RUN_ERROR"))
        .collect();
    assert_eq!(terminal, ["RUN_FINISHED"], "one terminal event");
    assert_eq!(frames.last().unwrap().kind(), "RUN_FINISHED");
    let ids: Vec<i64> = frames.iter().filter_map(|f| f.id).collect();
    assert_eq!(
        ids,
        (1..=ids.len() as i64).collect::<Vec<_>>(),
        "no gap before the end"
    );
    assert!(
        ids.len() < 400,
        "shutdown did not wait to send the whole backlog ({} events)",
        ids.len()
    );
}

/// HEAD is safe: it neither opens a thread's stream nor claims the thread.
#[tokio::test]
async fn head_on_an_event_stream_is_refused_and_claims_nothing() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let r = app
        .client
        .head(app.url("/v1/threads/headed/events"))
        .bearer_auth(&app.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "GET");
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert_eq!(app.get("/v1/threads/headed/history").await.status(), 404);
}

/// A TCP proxy in front of Postgres that, once armed, lets one `COMMIT`
/// reach the server and cuts the connection before the answer comes back:
/// the commit happened, and its client cannot know.
struct CommitCutter {
    addr: String,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl CommitCutter {
    async fn start(target: String) -> CommitCutter {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let cutter = CommitCutter {
            addr: listener.local_addr().unwrap().to_string(),
            armed: Default::default(),
        };
        let armed = cutter.armed.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let server = tokio::net::TcpStream::connect(&target).await.unwrap();
                let armed = armed.clone();
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let (mut client_rx, mut client_tx) = client.into_split();
                    let (mut server_rx, mut server_tx) = server.into_split();
                    let cut = tokio_util::sync::CancellationToken::new();
                    let answers = {
                        let cut = cut.clone();
                        tokio::spawn(async move {
                            let mut buf = vec![0u8; 65536];
                            loop {
                                tokio::select! {
                                    n = server_rx.read(&mut buf) => match n {
                                        Ok(n) if n > 0 => {
                                            if client_tx.write_all(&buf[..n]).await.is_err() { return; }
                                        }
                                        _ => return,
                                    },
                                    _ = cut.cancelled() => return,
                                }
                            }
                        })
                    };
                    // Untyped start-up messages (SSLRequest, then StartupMessage),
                    // then typed messages: type byte, length, body.
                    let mut started = false;
                    loop {
                        let mut typ = [0u8; 1];
                        if started && client_rx.read_exact(&mut typ).await.is_err() {
                            break;
                        }
                        let mut len = [0u8; 4];
                        if client_rx.read_exact(&mut len).await.is_err() {
                            break;
                        }
                        let mut body = vec![0u8; u32::from_be_bytes(len) as usize - 4];
                        if client_rx.read_exact(&mut body).await.is_err() {
                            break;
                        }
                        let mut message = if started { typ.to_vec() } else { Vec::new() };
                        message.extend_from_slice(&len);
                        message.extend_from_slice(&body);
                        let query = match typ[0] {
                            b'Q' if started => &body[..],
                            b'P' if started => body.splitn(2, |b| *b == 0).nth(1).unwrap_or(&[]),
                            _ => &[],
                        };
                        let commit = query.to_ascii_uppercase().starts_with(b"COMMIT");
                        if !started && body.len() >= 4 && body[..4] == [0, 3, 0, 0] {
                            started = true;
                        }
                        if server_tx.write_all(&message).await.is_err() {
                            break;
                        }
                        if commit && armed.swap(false, Ordering::SeqCst) {
                            cut.cancel();
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            break;
                        }
                    }
                    cut.cancel();
                    let _ = answers.await;
                });
            }
        });
        cutter
    }
}

/// Postgres: a write-ahead whose commit went through but whose answer was
/// lost is found stored, and the call goes on and finishes, instead of
/// being answered 503 while it stays `running` for good (every retry a 409).
#[tokio::test]
async fn a_write_ahead_committed_without_an_answer_goes_on() {
    use std::sync::atomic::Ordering;
    let data_dir = tempfile::tempdir().unwrap();
    let mut settings = common::test_settings(data_dir.path());
    let pg = common::create_pg_database().await;
    let (before, after) = pg.url.split_once('@').unwrap();
    let (host, path) = after.split_once('/').unwrap();
    let cutter = CommitCutter::start(host.to_string()).await;
    settings.storage.database_url = Some(format!("{before}@{}/{path}", cutter.addr).into());
    let app = TestApp::start(settings, data_dir, Some(pg)).await;
    let call = json!({"id": "w1", "name": "write_file", "arguments": {"path": "w.txt", "content": "kept"}});
    cutter.armed.store(true, Ordering::SeqCst);
    let (s, out) = app.call("lost", call.clone()).await;
    assert!(
        !cutter.armed.load(Ordering::SeqCst),
        "a commit's answer was cut"
    );
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["tool_agent_output"]["status"], "success", "{out}");
    let ws = app.get_json("/v1/workspace").await;
    let file = std::path::Path::new(ws["root"].as_str().unwrap()).join("w.txt");
    assert_eq!(std::fs::read_to_string(file).unwrap(), "kept\n");
    let (s, again) = app.call("lost", call).await;
    assert_eq!((s, &again["replayed"]), (200, &json!(true)), "{again}");
}

/// Postgres only: the embedded SQLite file cannot become unreachable while open.
#[tokio::test]
async fn readiness_fails_when_the_database_is_gone() {
    let app = TestApp::spawn(Backend::Postgres).await;
    let pg = app.pg.as_ref().unwrap();
    {
        use sqlx::Connection;
        let mut admin = sqlx::PgConnection::connect(&pg.admin_url).await.unwrap();
        sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", pg.name))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let detail = not_ready(&app).await;
    assert!(detail.contains("postgres"), "{detail}");
    // The probe needs no token: the database's own words (which name it,
    // its host and user) stay in the log.
    assert!(!detail.contains(&pg.name), "{detail}");
    assert!(!detail.contains("does not exist"), "{detail}");
}

/// `/readyz` answers 503 (within 30 s): its detail.
async fn not_ready(app: &TestApp) -> String {
    let resp = app
        .client
        .get(app.url("/readyz"))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("an answer, not a hang");
    assert_eq!(resp.status(), 503);
    let p: Value = resp.json().await.unwrap();
    p["detail"].as_str().unwrap().to_string()
}

/// While the database is away the approval sweep, which runs every second,
/// says so once (then once a minute), and says when it works again.
#[tokio::test]
async fn an_outage_is_logged_once_by_the_approval_sweep() {
    let data_dir = tempfile::tempdir().unwrap();
    let pg = common::create_pg_database().await;
    let served = serve_binary(data_dir.path(), Some(&pg.url)).await;
    let failed = || {
        served
            .stderr
            .lock()
            .unwrap()
            .matches("approval expiry sweep failed")
            .count()
    };
    set_database_reachable(&pg, false).await;
    eventually(
        Duration::from_secs(30),
        || failed() >= 1,
        || "no failure logged".into(),
    )
    .await;
    // Three more sweeps fail meanwhile.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(failed(), 1, "{}", served.stderr.lock().unwrap());
    set_database_reachable(&pg, true).await;
    eventually(
        Duration::from_secs(30),
        || {
            served
                .stderr
                .lock()
                .unwrap()
                .contains("approval expiry sweep works again")
        },
        || served.stderr.lock().unwrap().clone(),
    )
    .await;
}

/// A database a newer toolgate migrated while this process serves it (an
/// upgrade that started the new version before stopping this one) takes no
/// more writes from this process: `/readyz` says why, and a write is a 503
/// that stores nothing, as in an outage. This process went on writing rows
/// without what the newer schema keeps beside them.
async fn a_database_a_newer_toolgate_migrated_takes_no_more_writes(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let r = app
        .post(
            "/v1/threads/newer/messages",
            &json!({"role": "user", "content": "before"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    let from_the_future = "INSERT INTO _sqlx_migrations \
        (version, description, success, checksum, execution_time) \
        VALUES (99990101000000, 'a newer toolgate', true, ";
    match &app.pg {
        Some(pg) => {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&pg.url).await.unwrap();
            sqlx::query(&format!("{from_the_future}'\\x00'::bytea, 0)"))
                .execute(&mut conn)
                .await
                .unwrap();
        }
        None => {
            use sqlx::Connection;
            let file = app.data_dir.path().join("toolgate.db");
            let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", file.display()))
                .await
                .unwrap();
            sqlx::query(&format!("{from_the_future}x'00', 0)"))
                .execute(&mut conn)
                .await
                .unwrap();
        }
    }
    let detail = not_ready(&app).await;
    assert!(detail.contains("migrated by a newer toolgate"), "{detail}");
    assert!(detail.contains("99990101000000"), "{detail}");
    let r = app
        .post(
            "/v1/threads/newer/messages",
            &json!({"role": "user", "content": "after"}),
        )
        .await;
    assert_eq!(r.status(), 503, "{}", r.text().await.unwrap());
    let (s, out) = app
        .call(
            "newer",
            json!({"id": "e", "name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(s, 503, "{out}");
    let history = app.history("newer").await;
    assert_eq!(history.len(), 1, "{history:?}");
}

/// A database that lacks a migration (an older schema) is not ready, and
/// the answer says what is missing and what applies it.
#[tokio::test]
async fn readiness_names_a_missing_migration() {
    use sqlx::Connection;
    let app = TestApp::spawn(Backend::Sqlite).await;
    let file = app.data_dir.path().join("toolgate.db");
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", file.display()))
        .await
        .unwrap();
    sqlx::query(
        "DELETE FROM _sqlx_migrations WHERE version = (SELECT max(version) FROM _sqlx_migrations)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let detail = not_ready(&app).await;
    assert!(
        detail.contains("is not applied") && detail.contains("toolgate migrate"),
        "{detail}"
    );
    assert!(!detail.contains("corrupt"), "{detail}");
}

/// A TCP proxy in front of Postgres. Frozen (`frozen` cancelled), it
/// passes nothing on and closes nothing, as a database host that hangs;
/// closed (`closed` cancelled), it stops listening and drops the
/// connections it carried, as a server that is down (new connections
/// refused). Cut (`cut` set to true), it drops the connections it carried
/// and every new one at once, as a network between this process and the
/// database that is down, until `cut` is false again.
struct PgProxy {
    url: String,
    frozen: tokio_util::sync::CancellationToken,
    closed: tokio_util::sync::CancellationToken,
    cut: tokio::sync::watch::Sender<bool>,
}

async fn pg_proxy(pg: &common::PgDatabase) -> PgProxy {
    use tokio_util::sync::CancellationToken;
    // postgres://user@host:port/name
    let (head, rest) = pg.url.split_once('@').unwrap();
    let (target, name) = rest.split_once('/').unwrap();
    let target = target.to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("{head}@{}/{name}", listener.local_addr().unwrap());
    let (frozen, closed) = (CancellationToken::new(), CancellationToken::new());
    let (freeze, close) = (frozen.clone(), closed.clone());
    let (cut, is_cut) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let mut client = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((client, _)) => client,
                    Err(_) => return,
                },
                // The listener is dropped with this task.
                _ = close.cancelled() => return,
            };
            if freeze.is_cancelled() {
                held.push(client);
                continue;
            }
            if *is_cut.borrow() {
                continue;
            }
            let (freeze, close, target) = (freeze.clone(), close.clone(), target.clone());
            let mut is_cut = is_cut.clone();
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(&target).await else {
                    return;
                };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    // Frozen: both ends stay open, and nothing passes.
                    _ = freeze.cancelled() => std::future::pending::<()>().await,
                    _ = close.cancelled() => {}
                    _ = async { is_cut.wait_for(|cut| *cut).await.is_ok() } => {}
                }
            });
        }
    });
    PgProxy {
        url,
        frozen,
        closed,
        cut,
    }
}

/// A process cut off from the database while its call finishes keeps the
/// result on disk; if another process meanwhile finishes that call as
/// abandoned (INTERRUPTED, once no process could still be running it, as
/// it sees it), the kept result is refused when the database is back, and
/// it is set aside on disk rather than deleted: the real result is not
/// lost. It was deleted.
#[tokio::test]
async fn a_kept_result_refused_for_an_interrupted_call_is_set_aside() {
    let pg = common::create_pg_database().await;
    let proxy = pg_proxy(&pg).await;
    let start = |url: String| async move {
        let data_dir = tempfile::tempdir().unwrap();
        let mut settings = common::test_settings(data_dir.path());
        settings.storage.database_url = Some(url.into());
        TestApp::start(settings, data_dir, None).await
    };
    let cut_off = start(proxy.url.clone()).await;
    let other = start(pg.url.clone()).await;
    let caller = {
        let (base, token) = (cut_off.base.clone(), cut_off.token.clone());
        tokio::spawn(async move {
            reqwest::Client::new()
                .post(format!("{base}/v1/threads/parted/tool-calls"))
                .bearer_auth(token)
                .json(&json!({"id": "w", "name": "wait", "arguments": {"ms": 1500}}))
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    let mut running = false;
    for _ in 0..100 {
        let r = other.get("/v1/threads/parted/tool-calls/w").await;
        if r.status() == 200 && r.json::<Value>().await.unwrap()["status"] == "running" {
            running = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(running, "the call's record is running");
    proxy.cut.send(true).unwrap();
    assert_eq!(caller.await.unwrap(), 503);
    // The other process takes the call for abandoned.
    age_call(&pg, "w", 2 * 3600 * 1000).await;
    assert_eq!(other.engine.finish_orphans().await.unwrap(), 1);
    proxy.cut.send(false).unwrap();
    let aside = cut_off.data_dir.path().join("kept-results/set-aside");
    eventually(
        Duration::from_secs(60),
        || std::fs::read_dir(&aside).is_ok_and(|mut d| d.next().is_some()),
        || format!("nothing set aside in {}", aside.display()),
    )
    .await;
    let file = std::fs::read_dir(&aside)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let kept = std::fs::read_to_string(&file).unwrap();
    assert!(kept.contains("waited_ms"), "the real result: {kept}");
    let history = other.history("parted").await;
    assert_eq!(history.len(), 1, "one result: {history:?}");
    assert_eq!(
        history[0]["tool_agent_output"]["error"]["code"], "INTERRUPTED",
        "{history:?}"
    );
}

/// A call posted again is answered from storage and counted once in
/// `toolgate_tool_calls_total`, although a read-only tool may run again
/// until its record meets the stored one (a process of its own: the
/// metrics are the process's).
#[tokio::test]
async fn a_call_posted_again_is_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve_binary(dir.path(), None).await;
    let client = reqwest::Client::new();
    for (id, ms) in [("w1", 300), ("e1", 0)] {
        let (name, arguments) = if ms > 0 {
            ("wait", json!({"ms": ms}))
        } else {
            ("echo", json!({"text": "x"}))
        };
        for _ in 0..3 {
            let r = client
                .post(format!("{}/v1/threads/once/tool-calls", served.base))
                .bearer_auth(&served.token)
                .json(&json!({"id": id, "name": name, "arguments": arguments}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
        }
    }
    let text = served.metrics().await;
    let count = |tool: &str, status: &str| calls_counted(&text, tool, status);
    assert_eq!(count("wait", "success"), Some(1.0), "{text}");
    assert_eq!(count("wait", "failure"), None, "{text}");
    assert_eq!(count("echo", "success"), Some(1.0), "{text}");
}

/// A database that answers its check but whose writes fail (a full disk)
/// is not ready: `/readyz` says so until a write commits again.
#[tokio::test]
async fn readyz_is_not_ready_while_writes_fail() {
    let app = TestApp::spawn(Backend::Postgres).await;
    app.refuse_messages_holding("no-room", common::Refusal::DiskFull)
        .await;
    let ready = |app: &TestApp| {
        let url = app.url("/readyz");
        async move { reqwest::get(url).await.unwrap() }
    };
    assert_eq!(ready(&app).await.status(), 200);
    let r = app
        .post(
            "/v1/threads/full/messages",
            &json!({"role": "user", "content": "no-room"}),
        )
        .await;
    assert_eq!(r.status(), 503);
    let resp = ready(&app).await;
    assert_eq!(resp.status(), 503);
    let detail: Value = resp.json().await.unwrap();
    assert!(
        detail["detail"]
            .as_str()
            .unwrap()
            .contains("last writes failed"),
        "{detail}"
    );
    let r = app
        .post(
            "/v1/threads/full/messages",
            &json!({"role": "user", "content": "fits"}),
        )
        .await;
    assert_eq!(r.status(), 201);
    assert_eq!(ready(&app).await.status(), 200);
}

/// An AG-UI run the database cannot store ends with the code an event
/// stream ends with for the same cause, `STORE_UNAVAILABLE` (it was
/// `RUN_FAILED`, the code of an internal error); a 503 says when to retry.
#[tokio::test]
async fn a_run_the_database_cannot_store_ends_store_unavailable() {
    let app = TestApp::spawn(Backend::Postgres).await;
    app.refuse_messages_holding("no-room", common::Refusal::DiskFull)
        .await;
    let input = json!({
        "threadId": "ro-run", "runId": "run_1", "state": {}, "tools": [], "context": [],
        "forwardedProps": {},
        "messages": [
            {"id": "u1", "role": "user", "content": "echo it"},
            {"id": "a1", "role": "assistant", "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"no-room\"}"}}]}
        ]
    });
    let resp = app.post("/v1/threads/ro-run/runs", &input).await;
    assert_eq!(resp.status(), 200);
    let frames = SseReader::new(resp).until("RUN_ERROR").await;
    let error = frames.last().unwrap();
    assert_eq!(error.data["code"], "STORE_UNAVAILABLE", "{:?}", error.data);
    let r = app
        .post(
            "/v1/threads/ro-run/messages",
            &json!({"role": "user", "content": "no-room"}),
        )
        .await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
}

/// A read-only call whose record would commit with its result leaves
/// nothing behind when the database cannot take it: its caller, told
/// `503`, runs it again. It was kept in memory and stored once the
/// database answered, so a model told the call failed found its result in
/// the thread (twice, had it retried under a new id), and an outage grew
/// the memory without bound.
#[tokio::test]
async fn a_read_only_call_answered_503_is_not_stored_later() {
    let app = TestApp::spawn(Backend::Postgres).await;
    app.refuse_messages_holding("no-room", common::Refusal::DiskFull)
        .await;
    let (s, p) = app
        .call(
            "later",
            json!({"id": "e1", "name": "echo", "arguments": {"text": "no-room"}}),
        )
        .await;
    assert_eq!(s, 503, "{p}");
    // The database takes writes again.
    common::allow_pg_messages(&app.pg.as_ref().unwrap().url).await;
    // A result kept would be written again within 200 ms, then 400 ms.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = app.get("/v1/threads/later/tool-calls/e1").await;
    assert_eq!(r.status(), 404, "{}", r.text().await.unwrap());
    // Posted again, it runs again and is stored.
    let (s, out) = app
        .call(
            "later",
            json!({"id": "e1", "name": "echo", "arguments": {"text": "no-room"}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["tool_agent_output"]["status"], "success", "{out}");
}

/// A database that does not answer at all is not ready either: `/readyz`
/// says so within a probe's usual timeout instead of hanging with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_fails_when_the_database_does_not_answer() {
    let pg = common::create_pg_database().await;
    let proxy = pg_proxy(&pg).await;
    let url = proxy.url.clone();
    let data_dir = tempfile::tempdir().unwrap();
    let mut settings = common::test_settings(data_dir.path());
    settings.storage.database_url = Some(url.into());
    let app = TestApp::start(settings, data_dir, Some(pg)).await;
    let resp = reqwest::get(app.url("/readyz")).await.unwrap();
    assert_eq!(resp.status(), 200);
    proxy.frozen.cancel();
    let detail = not_ready(&app).await;
    assert!(detail.contains("no answer"), "{detail}");
}

/// While Postgres refuses connections (it is down), a request waits for
/// one `storage.database_wait_secs`, then is answered 503 with
/// Retry-After; it waited the pool's fixed 10 s before the setting.
#[tokio::test]
async fn a_request_waits_for_a_refusing_database_as_long_as_set() {
    let pg = common::create_pg_database().await;
    let proxy = pg_proxy(&pg).await;
    let data_dir = tempfile::tempdir().unwrap();
    let mut settings = common::test_settings(data_dir.path());
    settings.storage.database_url = Some(proxy.url.clone().into());
    settings.storage.database_wait_secs = 1;
    let app = TestApp::start(settings, data_dir, Some(pg)).await;
    let r = app
        .post(
            "/v1/threads/down/messages",
            &json!({"role": "user", "content": "hi"}),
        )
        .await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    proxy.closed.cancel();
    let started = std::time::Instant::now();
    let r = app.get("/v1/threads/down/history").await;
    let waited = started.elapsed();
    assert_eq!(r.status(), 503, "{}", r.text().await.unwrap());
    assert_eq!(r.headers()["retry-after"], "1");
    // One second set; the default is ten.
    assert!(waited < Duration::from_secs(6), "{waited:?}");
    let r = app
        .post(
            "/v1/threads/down/messages",
            &json!({"role": "user", "content": "again"}),
        )
        .await;
    assert_eq!(r.status(), 503, "{}", r.text().await.unwrap());
}

/// Refuse new connections to the test database and end the open ones, or
/// accept connections again.
async fn set_database_reachable(pg: &common::PgDatabase, reachable: bool) {
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(&pg.admin_url).await.unwrap();
    let mut statements = vec![format!(
        "ALTER DATABASE {} ALLOW_CONNECTIONS {reachable}",
        pg.name
    )];
    if !reachable {
        statements.push(format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}'",
            pg.name
        ));
    }
    for sql in statements {
        sqlx::query(&sql).execute(&mut admin).await.unwrap();
    }
}

/// Make the test database read-only for new transactions (as a failover
/// to a standby does) and end its open connections, or writable again.
async fn set_database_read_only(pg: &common::PgDatabase, read_only: bool) {
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(&pg.admin_url).await.unwrap();
    let value = if read_only { "on" } else { "off" };
    for sql in [
        format!(
            "ALTER DATABASE {} SET default_transaction_read_only = {value}",
            pg.name
        ),
        format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{}'",
            pg.name
        ),
    ] {
        sqlx::query(&sql).execute(&mut admin).await.unwrap();
    }
}

/// A Postgres that can only be read (a standby after a failover,
/// `default_transaction_read_only`) is an outage, as a SQLite file that
/// cannot be written is: requests are answered 503, /readyz is not
/// ready, and a running call's result waits until it can be stored. It
/// was a 500, /readyz said ready, and the call stayed `running` until a
/// restart finished it as INTERRUPTED.
#[tokio::test]
async fn a_read_only_postgres_is_an_outage() {
    let app = TestApp::spawn(Backend::Postgres).await;
    let pg = app.pg.as_ref().unwrap();
    let (_sse, caller) = {
        let mut sse = app.events("ro", "", None).await;
        sse.until("RUN_STARTED").await;
        let (base, token) = (app.base.clone(), app.token.clone());
        let caller = tokio::spawn(async move {
            reqwest::Client::new()
                .post(format!("{base}/v1/threads/ro/tool-calls"))
                .bearer_auth(token)
                .json(&json!({"id": "w", "name": "wait", "arguments": {"ms": 1500}}))
                .send()
                .await
                .unwrap()
        });
        sse.until("TOOL_CALL_END").await;
        (sse, caller)
    };
    set_database_read_only(pg, true).await;
    let r = app
        .post(
            "/v1/threads/ro/messages",
            &json!({"role": "user", "content": "hi"}),
        )
        .await;
    assert_eq!(r.status(), 503, "{}", r.text().await.unwrap());
    let answered = caller.await.unwrap();
    assert_eq!(answered.status(), 503);
    let ready = reqwest::get(app.url("/readyz")).await.unwrap();
    assert_eq!(ready.status(), 503);
    set_database_read_only(pg, false).await;
    // The kept result is stored once the database takes writes again.
    let mut call = Value::Null;
    for _ in 0..150 {
        let r = app.get("/v1/threads/ro/tool-calls/w").await;
        if r.status() == 200 {
            call = r.json().await.unwrap();
            if call["status"] != "running" {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(call["status"], "success", "{call}");
    assert_eq!(
        call["outcome"]["tool_agent_output"]["result"]["waited_ms"], 1500,
        "{call}"
    );
}

/// Rename the test database `from` → `to` (no connection may be open to it
/// meanwhile), then let clients connect to `to`.
async fn rename_database(pg: &common::PgDatabase, from: &str, to: &str) {
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(&pg.admin_url).await.unwrap();
    for sql in [
        format!("ALTER DATABASE {from} ALLOW_CONNECTIONS false"),
        format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{from}'"),
        format!("ALTER DATABASE {from} RENAME TO {to}"),
        format!("ALTER DATABASE {to} ALLOW_CONNECTIONS true"),
    ] {
        sqlx::query(&sql).execute(&mut admin).await.unwrap();
    }
}

/// How the database goes away in an outage test.
#[derive(Clone, Copy)]
enum Outage {
    /// Connections refused (the database does not allow them).
    Refused,
    /// Gone by name: renamed, as one dropped to be restored (Postgres
    /// refuses the connection with 3D000, "does not exist").
    Renamed,
}

impl Outage {
    async fn begin(self, pg: &common::PgDatabase) {
        match self {
            Outage::Refused => set_database_reachable(pg, false).await,
            Outage::Renamed => rename_database(pg, &pg.name, &format!("{}_moved", pg.name)).await,
        }
    }

    async fn end(self, pg: &common::PgDatabase) {
        match self {
            Outage::Refused => set_database_reachable(pg, true).await,
            Outage::Renamed => rename_database(pg, &format!("{}_moved", pg.name), &pg.name).await,
        }
    }
}

/// Post `call` (a `wait` long enough), take the database away while it
/// runs, and check its caller hears 503.
async fn lose_the_database_during(app: &TestApp, thread: &str, call: &Value) {
    lose_the_database_by(Outage::Refused, app, thread, call).await
}

async fn lose_the_database_by(outage: Outage, app: &TestApp, thread: &str, call: &Value) {
    let url = app.url(&format!("/v1/threads/{thread}/tool-calls"));
    let request = app.client.post(&url).bearer_auth(&app.token).json(call);
    let posted = tokio::spawn(request.send());
    tokio::time::sleep(Duration::from_millis(600)).await;
    outage.begin(app.pg.as_ref().unwrap()).await;
    let resp = posted.await.unwrap().unwrap();
    assert_eq!(resp.status(), 503, "{}", resp.text().await.unwrap());
}

/// The files in toolgate's spool of results kept during an outage.
fn kept_results(data_dir: &std::path::Path) -> usize {
    std::fs::read_dir(data_dir.join("kept-results"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".json")
        })
        .count()
}

/// Post `call` again until its outcome is stored (meanwhile: 409 "post it
/// again later", or 503); the stored answer.
async fn post_until_stored(app: &TestApp, thread: &str, call: &Value) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = app.call(thread, call.clone()).await;
        if status == 200 {
            return body;
        }
        assert!(matches!(status, 409 | 503), "{status}: {body}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "never stored: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Wait until the spool of kept results is empty.
async fn until_nothing_is_kept(app: &TestApp) {
    eventually(
        Duration::from_secs(10),
        || kept_results(app.data_dir.path()) == 0,
        || "kept file not deleted".into(),
    )
    .await;
}

/// Polls `done` every 50 ms until it holds; fails with `why()` once
/// `within` has passed.
async fn eventually(within: Duration, done: impl FnMut() -> bool, why: impl Fn() -> String) {
    eventually_every(within, Duration::from_millis(50), done, why).await
}

/// [`eventually`], polling every `every`.
async fn eventually_every(
    within: Duration,
    every: Duration,
    mut done: impl FnMut() -> bool,
    why: impl Fn() -> String,
) {
    let deadline = tokio::time::Instant::now() + within;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{}", why());
        tokio::time::sleep(every).await;
    }
}

/// The database goes away while a tool runs: its caller hears 503, and
/// the result is stored once the database is back, without a restart (the
/// call does not stay `running`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_is_stored_once_the_database_is_back() {
    a_result_waits_out(Outage::Refused).await
}

/// The same when the database is gone by name, which is an outage as a
/// refused connection is, not an internal error that leaves the call
/// `running` until a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_waits_out_a_database_gone_by_name() {
    a_result_waits_out(Outage::Renamed).await
}

async fn a_result_waits_out(outage: Outage) {
    let app = TestApp::spawn(Backend::Postgres).await;
    let call = json!({"id": "blip", "name": "wait", "arguments": {"ms": 1500}});
    lose_the_database_by(outage, &app, "blip", &call).await;
    assert_eq!(
        kept_results(app.data_dir.path()),
        1,
        "kept on disk meanwhile"
    );
    // A call posted while the database is away is refused before it runs,
    // and nothing is kept for it.
    let quick = json!({"id": "quick", "name": "echo", "arguments": {"text": "x"}});
    let (status, body) = app.call("blip", quick).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(kept_results(app.data_dir.path()), 1);
    outage.end(app.pg.as_ref().unwrap()).await;
    let stored = post_until_stored(&app, "blip", &call).await;
    assert_eq!(stored["replayed"], true, "{stored}");
    assert_eq!(stored["tool_agent_output"]["status"], "success", "{stored}");
    let history = app.get_json("/v1/threads/blip/history").await;
    let tool = history["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned();
    assert!(tool.is_some(), "{history}");
    // The kept file goes once the result is stored.
    until_nothing_is_kept(&app).await;
}

/// As above, but toolgate stops before the database is back, its runtime
/// dropped with the background tries (as in a crash): the next start-up
/// stores the result kept on disk, instead of finishing the call as
/// INTERRUPTED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_kept_during_an_outage_survives_a_restart() {
    let call = json!({"id": "kept", "name": "wait", "arguments": {"ms": 1500}});
    let first_call = call.clone();
    let (settings, data_dir, pg) = std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async move {
            let app = TestApp::spawn(Backend::Postgres).await;
            lose_the_database_during(&app, "kept", &first_call).await;
            assert_eq!(kept_results(app.data_dir.path()), 1);
            let TestApp {
                settings,
                data_dir,
                pg,
                ..
            } = app;
            (settings, data_dir, pg)
        })
        // The runtime ends here, and every task on it.
    })
    .join()
    .unwrap();
    set_database_reachable(pg.as_ref().unwrap(), true).await;
    // A start on another database (here, without DATABASE_URL: the SQLite
    // file of the data directory) leaves the kept result alone.
    let mut elsewhere = settings.clone();
    elsewhere.storage.database_url = None;
    let app = TestApp::start(elsewhere, data_dir, None).await;
    assert_eq!(
        kept_results(app.data_dir.path()),
        1,
        "kept for its database"
    );
    let (_, data_dir, _) = app.stop().await;
    let app = TestApp::start(settings, data_dir, pg).await;
    assert_eq!(kept_results(app.data_dir.path()), 0);
    let (status, stored) = app.call("kept", call).await;
    assert_eq!(status, 200, "{stored}");
    assert_eq!(stored["replayed"], true, "{stored}");
    assert_eq!(stored["tool_agent_output"]["status"], "success", "{stored}");
    let history = app.history("kept").await;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0]["role"], "tool");
    assert!(
        !history[0]["content"]
            .as_str()
            .unwrap()
            .contains("INTERRUPTED"),
        "{history:?}"
    );
}

/// The database goes away while a tool runs, and once back refuses the
/// result's data (a trigger): the background write finishes the call as a
/// `RESULT_NOT_STORED` failure instead of leaving it open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_refused_after_an_outage_still_finishes_its_call() {
    let app = TestApp::spawn(Backend::Postgres).await;
    app.refuse_messages_holding("waited_ms", Refusal::Data)
        .await;
    let call = json!({"id": "late", "name": "wait", "arguments": {"ms": 1500}});
    lose_the_database_during(&app, "late", &call).await;
    set_database_reachable(app.pg.as_ref().unwrap(), true).await;
    let stored = post_until_stored(&app, "late", &call).await;
    assert_eq!(stored["replayed"], true, "{stored}");
    let output = &stored["tool_agent_output"];
    assert_eq!(output["status"], "failure", "{stored}");
    assert_eq!(output["error"]["code"], "RESULT_NOT_STORED", "{stored}");
    until_nothing_is_kept(&app).await;
}

#[tokio::test]
async fn openapi_document_is_served_and_checked_in() {
    let generated = toolgate::http::openapi::document_json();
    let checked_in =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/openapi.json"))
            .unwrap();
    assert!(
        generated == checked_in,
        "openapi/openapi.json is out of date: regenerate it with `cargo run -- openapi > openapi/openapi.json`"
    );
    let app = TestApp::spawn(Backend::Sqlite).await;
    let served: Value = reqwest::get(app.url("/openapi.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(served, serde_json::from_str::<Value>(&checked_in).unwrap());
    for path in [
        "/v1/threads/{thread_id}/tool-calls",
        "/v1/threads/{thread_id}/events",
        "/v1/threads/{thread_id}/runs",
        "/readyz",
    ] {
        assert!(served["paths"].get(path).is_some(), "{path} documented");
    }
    assert_eq!(
        served["components"]["schemas"]["UiSchema"]["properties"]["version"]["const"],
        "ui_schema/1"
    );
    let docs = reqwest::get(app.url("/docs/")).await.unwrap();
    assert_eq!(docs.status(), 200);
    let html = docs.text().await.unwrap();
    assert!(
        html.to_lowercase().contains("swagger"),
        "Swagger UI served offline"
    );
    // Nothing the page loads calls out: not the online spec validator
    // Swagger UI asks by default from any host but localhost.
    let init = reqwest::get(app.url("/docs/swagger-initializer.js"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(init.contains("\"validatorUrl\": \"none\""), "{init}");
    assert!(init.contains("/openapi.json"), "{init}");
    for page in [&html, &init] {
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "{page}"
        );
    }
    let resp = app.get("/v1/tools").await;
    let id = resp
        .headers()
        .get("x-request-id")
        .expect("request id echoed");
    assert!(!id.is_empty());
}

/// Every request example the document offers (a body's `example` or
/// `examples`, or its schema's `example`), sent as it is to its operation
/// on the thread the path's example names, succeeds: what the explorer
/// prefills works.
#[tokio::test]
async fn the_documents_examples_work_as_given() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let doc: Value = reqwest::get(app.url("/openapi.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut sent = 0;
    for (path, operations) in doc["paths"].as_object().unwrap() {
        let Some(post) = operations.get("post") else {
            continue;
        };
        let media = &post["requestBody"]["content"]["application/json"];
        let mut examples: Vec<Value> = Vec::new();
        examples.extend(media.get("example").cloned());
        if let Some(named) = media.get("examples").and_then(Value::as_object) {
            examples.extend(named.values().map(|e| e["value"].clone()));
        }
        if let Some(component) = media["schema"]["$ref"].as_str() {
            let name = component.rsplit('/').next().unwrap();
            examples.extend(doc["components"]["schemas"][name].get("example").cloned());
        }
        for example in examples {
            let mut url = path.clone();
            for param in post["parameters"].as_array().into_iter().flatten() {
                let name = param["name"].as_str().unwrap();
                if param["in"] == "path" {
                    let value = param["example"]
                        .as_str()
                        .unwrap_or_else(|| panic!("{path}: no example for {name}"));
                    url = url.replace(&format!("{{{name}}}"), value);
                }
            }
            let r = app.post(&url, &example).await;
            let status = r.status();
            let body = r.text().await.unwrap();
            assert!(status.is_success(), "{url} {example}: {status} {body}");
            sent += 1;
        }
    }
    // The three call shapes, a batch, a message, a run, permission rules.
    assert!(sent >= 6, "{sent} examples");
}

/// A client's request id is echoed (and logged) when it is one; a value
/// that could write fields of its own into a log line, or of any length,
/// is replaced by a new id.
#[tokio::test]
async fn a_clients_request_id_is_kept_only_when_it_is_one() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let echoed = |ids: &[&str]| {
        let mut req = app.client.get(app.url("/healthz"));
        for id in ids {
            req = req.header("x-request-id", *id);
        }
        async move {
            let resp = req.send().await.unwrap();
            let ids: Vec<String> = resp
                .headers()
                .get_all("x-request-id")
                .iter()
                .map(|v| v.to_str().unwrap().to_string())
                .collect();
            assert_eq!(ids.len(), 1, "{ids:?}");
            ids[0].clone()
        }
    };
    for kept in [
        "my-req-42",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ] {
        assert_eq!(echoed(&[kept]).await, kept);
    }
    let long = "a".repeat(129);
    for replaced in [
        vec!["a b\" injected=1"],
        vec![long.as_str()],
        vec!["x", "y"],
    ] {
        let id = echoed(&replaced).await;
        assert!(uuid::Uuid::parse_str(&id).is_ok(), "{replaced:?} → {id}");
    }
}

/// Every `/v1` operation the served document lists, asked without a token
/// and (with one) with a body of the wrong media type or of the wrong
/// shape, answers with a problem whose status the document lists for it.
#[tokio::test]
async fn every_documented_operation_answers_bad_requests_as_documented() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let rules = json!({"allow": ["bash(git status)"], "ask": [], "deny": []});
    let r = app.put("/v1/permissions", &rules).await;
    assert_eq!(r.status(), 200);
    let doc = app.get_json("/openapi.json").await;
    let mut asked = 0;
    for (template, item) in doc["paths"].as_object().unwrap() {
        if !template.starts_with("/v1/") {
            continue;
        }
        let path = template
            .replace("{thread_id}", "t-doc")
            .replace("{run_id}", "r-doc")
            .replace("{tool_call_id}", "c-doc")
            .replace("{approval_id}", "apr-doc")
            .replace("{name}", "echo");
        for (method, op) in item.as_object().unwrap() {
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let documented = |status: u16| op["responses"].get(status.to_string()).is_some();
            let request = || app.client.request(method.clone(), app.url(&path));
            let mut asks = vec![
                ("no token", request(), 401),
                // Checked before routing, with or without a body to take.
                (
                    "encoded body",
                    request()
                        .bearer_auth(&app.token)
                        .header("content-type", "application/json")
                        .header("content-encoding", "gzip")
                        .body("{}"),
                    415,
                ),
            ];
            if op.get("requestBody").is_some() {
                asks.push((
                    "text body",
                    request()
                        .bearer_auth(&app.token)
                        .header("content-type", "text/plain")
                        .body("x"),
                    415,
                ));
                asks.push((
                    "array body",
                    request()
                        .bearer_auth(&app.token)
                        .header("content-type", "application/json")
                        .body("[]"),
                    422,
                ));
            }
            for (what, ask, expected) in asks {
                let resp = ask.send().await.unwrap();
                let status = resp.status().as_u16();
                assert_eq!(status, expected, "{method} {path}, {what}");
                assert!(
                    documented(status),
                    "{method} {template}: {status} is not documented"
                );
                if status == 401 {
                    assert!(
                        resp.headers().contains_key("www-authenticate"),
                        "{method} {path}"
                    );
                }
                let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
                assert_eq!(
                    content_type, "application/problem+json",
                    "{method} {path}, {what}"
                );
                let problem: Value = resp.json().await.unwrap();
                assert_eq!(problem["status"], status, "{problem}");
                asked += 1;
            }
        }
    }
    assert!(asked > 25, "only {asked} requests");
    // A struct body sent as an array changed nothing.
    let view = app.get_json("/v1/permissions").await;
    assert_eq!(view["owner"], rules, "{view}");
}

#[tokio::test]
async fn tool_listings_and_system_prompt() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let native = app.get_json("/v1/tools").await;
    assert_eq!(native["format"], "native");
    let echo = native["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "echo")
        .unwrap()
        .clone();
    assert_eq!(echo["metadata"]["read_only"], true);
    assert_eq!(echo["metadata"]["concurrency_safe"], true);
    assert_eq!(echo["metadata"]["permission_class"], "readonly");
    assert_eq!(echo["capability"]["min_confidence"], 0);
    assert_eq!(echo["safety_level"], 0);
    let openai = app.get_json("/v1/tools?format=openai").await;
    assert!(
        openai["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["type"] == "function" && t["function"]["name"] == "wait")
    );
    let anthropic = app.get_json("/v1/tools?format=anthropic").await;
    assert_eq!(anthropic["tools"][0]["input_schema"]["type"], "object");
    let mcp = app.get_json("/v1/tools?format=mcp").await;
    assert_eq!(mcp["tools"][0]["inputSchema"]["type"], "object");
    let by_alias = app.get_json("/v1/tools/sleep?format=anthropic").await;
    assert_eq!(by_alias["name"], "wait");
    let xml = app.get_json("/v1/system-prompt?format=xml").await;
    let names: Vec<String> = native["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "apply_diff",
            "bash",
            "echo",
            "edit_file",
            "glob",
            "grep",
            "read_file",
            "undo_edit",
            "wait",
            "write_file"
        ]
    );
    assert_eq!(xml["tool_count"], names.len());
    assert!(
        xml["prompt"]
            .as_str()
            .unwrap()
            .contains("<tool name=\"echo\">")
    );
    let js = app.get_json("/v1/system-prompt?format=json").await;
    assert!(
        js["prompt"]
            .as_str()
            .unwrap()
            .contains("\"name\": \"wait\"")
    );
}

/// The real binary, as an operator runs it.
struct Served {
    child: tokio::process::Child,
    base: String,
    token: String,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

/// `toolgate_tool_calls_total{tool, status}` in a `/metrics` text.
fn calls_counted(metrics: &str, tool: &str, status: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| {
            l.starts_with("toolgate_tool_calls_total{")
                && l.contains(&format!("tool=\"{tool}\""))
                && l.contains(&format!("status=\"{status}\""))
        })
        .and_then(|l| l.rsplit(' ').next())
        .map(|n| n.parse::<f64>().unwrap())
}

impl Served {
    /// The process's `/metrics` text.
    async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// `GET path` with the served token, as JSON.
    async fn get_json(&self, path: &str) -> Value {
        reqwest::Client::new()
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

async fn serve_binary(data_dir: &std::path::Path, database_url: Option<&str>) -> Served {
    serve_binary_with(data_dir, database_url, &[]).await
}

/// [`serve_binary`] with settings of its own (`TOOLGATE_…` variables).
async fn serve_binary_with(
    data_dir: &std::path::Path,
    database_url: Option<&str>,
    env: &[(&str, &str)],
) -> Served {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    cmd.env("RUST_LOG", "debug");
    cmd.envs(env.iter().copied());
    cmd.args([
        "--data-dir",
        data_dir.to_str().unwrap(),
        "serve",
        "--bind",
        "127.0.0.1:0",
    ])
    .env_remove("DATABASE_URL")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    if let Some(url) = database_url {
        cmd.env("DATABASE_URL", url);
    }
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    lines.next_line().await.unwrap();
    let token = lines.next_line().await.unwrap().unwrap().trim().to_string();
    let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let sink = stderr.clone();
    let mut err_lines = BufReader::new(child.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = err_lines.next_line().await {
            sink.lock().unwrap().push_str(&line);
            sink.lock().unwrap().push('\n');
        }
    });
    Served {
        child,
        base: format!("http://{addr}"),
        token,
        stderr,
    }
}

/// A `wait` call of `ms` posted to `served` in `thread`, once it is
/// recorded as running (its TOOL_CALL_END seen on the thread's stream): the
/// stream, and the caller's request, which ends with the call.
async fn a_running_wait(
    served: &Served,
    thread: &str,
    id: &str,
    ms: u64,
) -> (
    SseReader,
    tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
) {
    let stream = reqwest::Client::new()
        .get(format!("{}/v1/threads/{thread}/events", served.base))
        .bearer_auth(&served.token)
        .send()
        .await
        .unwrap();
    let mut sse = SseReader::new(stream);
    sse.next(Duration::from_secs(5)).await.unwrap();
    let (base, token) = (served.base.clone(), served.token.clone());
    let body = json!({"id": id, "name": "wait", "arguments": {"ms": ms}});
    let url = format!("{base}/v1/threads/{thread}/tool-calls");
    let caller = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
    });
    // Recorded as running (write-ahead) before it executes.
    sse.until("TOOL_CALL_END").await;
    (sse, caller)
}

/// A call whose client has gone runs on after SIGTERM for the shutdown
/// grace, as one whose client still waits does: it is stored as it ran,
/// not finished as INTERRUPTED at the next start.
#[tokio::test]
async fn a_call_whose_client_left_gets_the_shutdown_grace() {
    let data_dir = tempfile::tempdir().unwrap();
    let grace = [("TOOLGATE_SERVER__SHUTDOWN_GRACE_SECS", "30")];
    let mut first = serve_binary_with(data_dir.path(), None, &grace).await;
    let (sse, caller) = a_running_wait(&first, "left", "w", 1500).await;
    // The client leaves, its stream too: no connection holds the process.
    caller.abort();
    assert!(caller.await.is_err(), "the caller left before its answer");
    drop(sse);
    let pid = first.child.id().unwrap() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let exited = tokio::time::timeout(Duration::from_secs(60), first.child.wait())
        .await
        .expect("it exits once the call is stored")
        .unwrap();
    assert!(exited.success(), "{exited:?}");
    let second = serve_binary(data_dir.path(), None).await;
    let call = second.get_json("/v1/threads/left/tool-calls/w").await;
    assert_eq!(call["status"], "success", "{call}");
}

/// A start that must finish an interrupted call while the database cannot
/// take writes (a full disk) serves anyway, and the call's INTERRUPTED
/// result is written once the database takes writes. The start failed,
/// and failed again at every restart until the disk had room.
#[tokio::test]
async fn a_start_on_a_full_disk_finishes_interrupted_calls_later() {
    let data_dir = tempfile::tempdir().unwrap();
    let pg = common::create_pg_database().await;
    let mut first = serve_binary(data_dir.path(), Some(&pg.url)).await;
    let (_sse, _caller) = a_running_wait(&first, "full", "w", 30_000).await;
    first.child.kill().await.unwrap();
    first.child.wait().await.unwrap();
    // A full disk for the result of the interrupted call.
    common::refuse_pg_messages_holding(&pg.url, "INTERRUPTED", Refusal::DiskFull).await;
    let second = serve_binary(data_dir.path(), Some(&pg.url)).await;
    let call = second.get_json("/v1/threads/full/tool-calls/w").await;
    assert_eq!(call["status"], "running", "{call}");
    common::allow_pg_messages(&pg.url).await;
    let mut call = Value::Null;
    for _ in 0..150 {
        call = second.get_json("/v1/threads/full/tool-calls/w").await;
        if call["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(call["status"], "failure", "{call}");
    assert!(call.to_string().contains("INTERRUPTED"), "{call}");
}

/// A second SIGTERM does not wait for the shutdown grace: the process
/// exits at once (status 1), and the call it cut off is finished as
/// INTERRUPTED at the next start, which counts it.
#[tokio::test]
async fn a_second_shutdown_signal_exits_at_once() {
    let data_dir = tempfile::tempdir().unwrap();
    let grace = [("TOOLGATE_SERVER__SHUTDOWN_GRACE_SECS", "60")];
    let mut first = serve_binary_with(data_dir.path(), None, &grace).await;
    let (_sse, _caller) = a_running_wait(&first, "twice", "w", 50_000).await;
    let pid = first.child.id().unwrap() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    // The first signal starts the grace: the process waits for the call.
    let waited = tokio::time::timeout(Duration::from_millis(1500), first.child.wait()).await;
    assert!(waited.is_err(), "the first signal gives the call its grace");
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let exited = tokio::time::timeout(Duration::from_secs(10), first.child.wait())
        .await
        .expect("the second signal ends the process at once")
        .unwrap();
    assert_eq!(exited.code(), Some(1), "{exited:?}");
    // Its last lines may still be on their way from the pipe.
    for _ in 0..50 {
        if first
            .stderr
            .lock()
            .unwrap()
            .contains("second shutdown signal")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        first
            .stderr
            .lock()
            .unwrap()
            .contains("second shutdown signal"),
        "{}",
        first.stderr.lock().unwrap()
    );
    let second = serve_binary(data_dir.path(), None).await;
    let call = second.get_json("/v1/threads/twice/tool-calls/w").await;
    assert_eq!(call["status"], "failure", "{call}");
    assert!(call.to_string().contains("INTERRUPTED"), "{call}");
    // Counted by the start that finished it (the count was lost: the
    // start finished calls before the metrics were set up).
    assert_eq!(
        calls_counted(&second.metrics().await, "wait", "failure"),
        Some(1.0)
    );
}

/// Every result recorded as a call's own is counted in
/// `toolgate_tool_calls_total`, refusals included (they were not: a
/// dashboard of failures missed every denied call); a tool name no tool
/// has is counted as `unknown`, so clients add no series.
#[tokio::test]
async fn refused_calls_are_counted_as_results() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve_binary_with(
        dir.path(),
        None,
        &[("TOOLGATE_PERMISSIONS__DENY", "[\"wait\"]")],
    )
    .await;
    let client = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        client
            .post(format!("{}/v1/threads/counted/{path}", served.base))
            .bearer_auth(&served.token)
            .json(&body)
            .send()
    };
    let r = post(
        "tool-calls",
        json!({"id": "d1", "name": "wait", "arguments": {"ms": 1}}),
    )
    .await
    .unwrap();
    let out: Value = r.json().await.unwrap();
    assert_eq!(
        out["tool_agent_output"]["error"]["code"], "PERMISSION_DENIED",
        "{out}"
    );
    let r = post(
        "messages",
        json!({"role": "assistant", "tool_calls": [{"id": "u1", "type": "function",
            "function": {"name": "no_such_tool", "arguments": "{}"}}]}),
    )
    .await
    .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let r = post(
        "tool-calls",
        json!({"id": "u1", "name": "no_such_tool", "arguments": {}}),
    )
    .await
    .unwrap();
    let out: Value = r.json().await.unwrap();
    assert_eq!(
        out["tool_agent_output"]["error"]["code"], "TOOL_NOT_FOUND",
        "{out}"
    );
    let text = served.metrics().await;
    let count = |tool: &str, status: &str| calls_counted(&text, tool, status);
    assert_eq!(count("wait", "failure"), Some(1.0), "{text}");
    assert_eq!(count("unknown", "failure"), Some(1.0), "{text}");
    assert!(!text.contains("no_such_tool"), "{text}");
    // Each family says what it counts, and durations are told apart up to
    // the longest a request may take (the buckets stopped at 60 s).
    for family in [
        "toolgate_http_requests_total",
        "toolgate_tool_calls_total",
        "toolgate_http_request_duration_seconds",
        "toolgate_sse_subscribers",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("# HELP {family} ")) && l.len() > family.len() + 12),
            "{family}: {text}"
        );
    }
    assert!(
        text.lines().any(
            |l| l.starts_with("toolgate_http_request_duration_seconds_bucket{")
                && l.contains("le=\"600\"")
        ),
        "{text}"
    );
}

/// A request answered 503 because the database is unavailable (here a
/// full disk on Postgres) logs the database's own error with the request's
/// id. Before, the log said only that a 503 was sent.
#[tokio::test]
async fn an_unavailable_database_is_logged_with_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let pg = common::create_pg_database().await;
    let served = serve_binary(dir.path(), Some(&pg.url)).await;
    // A full disk for one marked message.
    common::refuse_pg_messages_holding(&pg.url, "no-room", Refusal::DiskFull).await;
    let r = reqwest::Client::new()
        .post(format!("{}/v1/threads/full/messages", served.base))
        .bearer_auth(&served.token)
        .header("x-request-id", "full-1")
        .json(&json!({"role": "user", "content": "no-room"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let mut logged = String::new();
    for _ in 0..50 {
        logged = served.stderr.lock().unwrap().clone();
        if logged.contains("the database is unavailable") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let line = logged
        .lines()
        .find(|l| l.contains("the database is unavailable"))
        .unwrap_or_else(|| panic!("{logged}"));
    assert!(line.contains("request_id=full-1"), "{line}");
    assert!(line.contains("refused by the test trigger"), "{line}");
    // More of them, and probes meanwhile: the outage is said once per few
    // seconds, not in an error line per answer.
    for i in 0..5 {
        let r = reqwest::Client::new()
            .post(format!("{}/v1/threads/full/messages", served.base))
            .bearer_auth(&served.token)
            .json(&json!({"id": format!("m{i}"), "role": "user", "content": "no-room"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let logged = served.stderr.lock().unwrap().clone();
    let lines = |what: &str| logged.lines().filter(|l| l.contains(what)).count();
    assert_eq!(lines("the database is unavailable"), 1, "{logged}");
    assert_eq!(lines("response failed"), 0, "{logged}");
}

/// A path is logged quoted and escaped: a `"` or `}` in it cannot end the
/// field and write one of the caller's own into the line.
#[tokio::test]
async fn a_path_writes_no_fields_of_its_own_into_a_log_line() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let served = serve_binary(dir.path(), None).await;
    let addr = served.base.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    stream
        .write_all(b"GET /v1/x}\"fake=1{ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let logged = served.stderr.lock().unwrap().clone();
    let lines: Vec<&str> = logged.lines().filter(|l| l.contains("fake=1")).collect();
    assert!(!lines.is_empty(), "{logged}");
    for line in lines {
        assert!(line.contains(r#"path="/v1/x}\"fake=1{""#), "{line}");
    }
}

/// `server.access_log` writes a line at `info` for every answer, with its
/// method, path, status and request id; without it `info` has none.
#[tokio::test]
async fn the_access_log_has_a_line_per_answer() {
    for on in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let setting = if on { "true" } else { "false" };
        let served = serve_binary_with(
            dir.path(),
            None,
            &[
                ("RUST_LOG", "info"),
                ("TOOLGATE_SERVER__ACCESS_LOG", setting),
            ],
        )
        .await;
        let client = reqwest::Client::new();
        for (path, id) in [("/healthz", "acc-1"), ("/v1/nothing-here", "acc-2")] {
            client
                .get(format!("{}{path}", served.base))
                .header("x-request-id", id)
                .send()
                .await
                .unwrap();
        }
        let line = |id: &str| {
            served
                .stderr
                .lock()
                .unwrap()
                .lines()
                .find(|l| l.contains(&format!("request_id={id}")) && l.contains("answered"))
                .map(str::to_string)
        };
        if on {
            let mut lines = Vec::new();
            for id in ["acc-1", "acc-2"] {
                let mut found = None;
                for _ in 0..50 {
                    found = line(id);
                    if found.is_some() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                lines.push(found.unwrap_or_else(|| {
                    panic!("no line for {id}: {}", served.stderr.lock().unwrap())
                }));
            }
            assert!(lines[0].contains("INFO"), "{}", lines[0]);
            assert!(lines[0].contains(r#"path="/healthz""#), "{}", lines[0]);
            assert!(lines[0].contains("status=200"), "{}", lines[0]);
            assert!(lines[1].contains("status=404"), "{}", lines[1]);
        } else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(line("acc-1"), None);
            assert_eq!(line("acc-2"), None);
        }
    }
}

/// Work a request hands to tasks of its own (an AG-UI run, its calls, a
/// batch's calls) logs under the request's span, with its request id.
#[tokio::test]
async fn a_runs_log_lines_carry_its_request_id() {
    let dir = tempfile::tempdir().unwrap();
    let served = serve_binary(dir.path(), None).await;
    let input = json!({"threadId": "ri", "runId": "r1", "state": {}, "tools": [],
        "context": [], "forwardedProps": {}, "unheard_of": 1,
        "messages": [{"id": "u1", "role": "user", "content": "hi"}]});
    let r = reqwest::Client::new()
        .post(format!("{}/v1/threads/ri/runs", served.base))
        .bearer_auth(&served.token)
        .header("x-request-id", "run-req-1")
        .json(&input)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("RUN_FINISHED"));
    let said = "a run's input has fields toolgate does not know";
    let mut logged = String::new();
    for _ in 0..50 {
        logged = served.stderr.lock().unwrap().clone();
        if logged.contains(said) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let line = logged
        .lines()
        .find(|l| l.contains(said))
        .unwrap_or_else(|| panic!("{logged}"));
    assert!(line.contains("request_id=run-req-1"), "{line}");
}

/// A SQLite file removed (or replaced) under the running service is not
/// ready: the connections already open go on with the removed file, new
/// ones fail, and /readyz said ready throughout.
#[tokio::test]
async fn a_removed_database_file_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    let served = serve_binary(&data_dir, None).await;
    let client = reqwest::Client::new();
    let ready = || async {
        client
            .get(format!("{}/readyz", served.base))
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(ready().await, 200);
    let db = data_dir.join("toolgate.db");
    let aside = dir.path().join("aside.db");
    std::fs::copy(&db, &aside).unwrap();
    // Replaced by a copy: another file under the same name.
    std::fs::rename(&aside, &db).unwrap();
    assert_eq!(ready().await, 503);
    // Nothing is committed into the file no longer there: a write the
    // caller is told is done would be lost at the next start.
    let r = client
        .post(format!("{}/v1/threads/replaced/messages", served.base))
        .bearer_auth(&served.token)
        .json(&json!({"role": "user", "content": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "{}", r.text().await.unwrap());
    std::fs::remove_dir_all(&data_dir).unwrap();
    assert_eq!(ready().await, 503);
    let logged = served.stderr.lock().unwrap().clone();
    assert!(
        logged.contains("was removed or replaced while toolgate served it"),
        "{logged}"
    );
}

/// A SQLite file damaged while toolgate was stopped (a copy taken while it
/// was written, a disk fault) starts, since the tables the start reads are
/// intact, but is not ready: the whole file is read once after it opens,
/// and `/readyz` says it is damaged, as the log does.
#[tokio::test]
async fn a_damaged_database_file_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let mut served = serve_binary(dir.path(), None).await;
    let client = reqwest::Client::new();
    for i in 0..150 {
        let r = client
            .post(format!("{}/v1/threads/big/messages", served.base))
            .bearer_auth(&served.token)
            .json(&json!({"role": "user", "content": format!("{i} {}", "x".repeat(1000))}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    served.child.start_kill().unwrap();
    served.child.wait().await.unwrap();
    // Garbage over a page in the middle of the messages table.
    let path = dir.path().join("toolgate.db");
    let (page, size) = {
        let db = rusqlite::Connection::open(&path).unwrap();
        db.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
        let pages: Vec<i64> = db
            .prepare("SELECT pageno FROM dbstat WHERE name = 'messages' AND pagetype = 'leaf' ORDER BY pageno")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(pages.len() > 10, "{pages:?}");
        let size: i64 = db
            .query_row("PRAGMA page_size", [], |row| row.get(0))
            .unwrap();
        (pages[pages.len() / 2], size)
    };
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.seek(SeekFrom::Start(((page - 1) * size) as u64))
            .unwrap();
        file.write_all(&vec![0xa5; size as usize]).unwrap();
    }

    let served = serve_binary(dir.path(), None).await;
    let mut detail = String::new();
    for _ in 0..100 {
        let r = client
            .get(format!("{}/readyz", served.base))
            .send()
            .await
            .unwrap();
        if r.status() == 503 {
            let p: Value = r.json().await.unwrap();
            detail = p["detail"].as_str().unwrap().to_string();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        detail.contains("integrity check found the file damaged"),
        "{detail:?}"
    );
    assert!(detail.contains("restore it from a backup"), "{detail}");
    // Where, only in the log: the probe needs no token.
    assert!(!detail.contains("page"), "{detail}");
    let logged = served.stderr.lock().unwrap().clone();
    assert!(
        logged.contains("the SQLite database file is damaged"),
        "{logged}"
    );
}

/// The caller of a [`a_running_wait`] call of `ms` is answered with its
/// whole wait: nothing cut it short.
async fn finished_as_it_ran(
    caller: tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>,
    ms: u64,
) {
    let result: Value = caller.await.unwrap().unwrap().json().await.unwrap();
    assert_eq!(result["tool_agent_output"]["status"], "success", "{result}");
    assert_eq!(
        result["tool_agent_output"]["result"]["waited_ms"], ms,
        "{result}"
    );
}

/// A second process started on a data directory another serves from stops
/// before it touches anything: it would otherwise finish the live one's
/// running calls as INTERRUPTED and end its commands.
async fn a_second_process_on_a_served_data_dir_refuses_to_start(backend: Backend) {
    let data_dir = tempfile::tempdir().unwrap();
    let pg = common::database_for(backend).await;
    let url = pg.as_ref().map(|p| p.url.as_str());
    let first = serve_binary(data_dir.path(), url).await;
    let (_sse, running) = a_running_wait(&first, "two", "live", 3000).await;
    let mut second = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
    second
        .args([
            "--data-dir",
            data_dir.path().to_str().unwrap(),
            "serve",
            "--bind",
            "127.0.0.1:0",
        ])
        .env_remove("DATABASE_URL")
        .kill_on_drop(true);
    if let Some(url) = url {
        second.env("DATABASE_URL", url);
    }
    let out = tokio::time::timeout(Duration::from_secs(30), second.output())
        .await
        .expect("the second process stops at once")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("another toolgate process is serving from the data directory"),
        "{stderr}"
    );
    // The live process's call was left to it: it finishes as it ran.
    finished_as_it_ran(running, 3000).await;
    drop(first);
}

/// Two processes on one new Postgres database, each with a data directory
/// of its own; the owner's permission rules `rules` put through the first.
struct TwoProcesses {
    first: Served,
    second: Served,
    client: reqwest::Client,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    _pg: common::PgDatabase,
}

impl TwoProcesses {
    async fn start(rules: Value) -> TwoProcesses {
        let pg = common::create_pg_database().await;
        let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let two = TwoProcesses {
            first: serve_binary(dirs.0.path(), Some(&pg.url)).await,
            second: serve_binary(dirs.1.path(), Some(&pg.url)).await,
            client: reqwest::Client::new(),
            _dirs: dirs,
            _pg: pg,
        };
        two.put_rules(&two.first, rules).await;
        two
    }

    async fn put_rules(&self, through: &Served, rules: Value) {
        let r = self
            .client
            .put(format!("{}/v1/permissions", through.base))
            .bearer_auth(&through.token)
            .json(&rules)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }

    /// A `read_file` of `path` posted as call `id` of the thread `thread`
    /// through `served`.
    async fn read(&self, served: &Served, thread: &str, id: &str, path: &str) -> reqwest::Response {
        self.client
            .post(format!("{}/v1/threads/{thread}/tool-calls", served.base))
            .bearer_auth(&served.token)
            .json(&json!({"id": id, "name": "read_file", "arguments": {"path": path}}))
            .send()
            .await
            .unwrap()
    }

    /// The record of call `id` of `thread`, through `served`, once it has
    /// an outcome (or as it is after ten seconds).
    async fn finished(&self, served: &Served, thread: &str, id: &str) -> Value {
        let mut record = Value::Null;
        for _ in 0..100 {
            record = served
                .get_json(&format!("/v1/threads/{thread}/tool-calls/{id}"))
                .await;
            if !record["outcome"].is_null() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        record
    }

    /// The id of the owner's first pending approval, as `served` lists it.
    async fn pending_approval(&self, served: &Served) -> String {
        for _ in 0..100 {
            let page = served.get_json("/v1/approvals?status=pending").await;
            if let Some(id) = page["approvals"][0]["id"].as_str() {
                return id.to_string();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no approval is pending");
    }

    /// Reads of `path` posted to `served` until one is denied (the change
    /// of rules is told to every process as it commits, within
    /// milliseconds, not before the answer to the change): at most ten
    /// seconds' worth.
    async fn denied_on(&self, served: &Served, thread: &str, path: &str) {
        let mut out = Value::Null;
        for attempt in 0..100 {
            out = self
                .read(served, thread, &format!("probe-{attempt}"), path)
                .await
                .json()
                .await
                .unwrap();
            if error_code(&out) == "PERMISSION_DENIED" {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the new deny rule never held: {out}");
    }

    async fn approve(&self, served: &Served, approval: &str) {
        let r = self
            .client
            .post(format!("{}/v1/approvals/{approval}/decision", served.base))
            .bearer_auth(&served.token)
            .json(&json!({"decision": "approve"}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
}

fn error_code(out: &Value) -> &Value {
    &out["tool_agent_output"]["error"]["code"]
}

/// An owner's permission rules changed through one process hold on every
/// other process of the same Postgres database as soon as the change is
/// told to it (`NOTIFY`, as it commits), though the other process keeps
/// the rules it read: a call judged there after the change meets the new
/// deny rule, and so does a waiting call approved there (its verdict is
/// taken again at the decision).
#[tokio::test]
async fn a_rule_changed_through_one_process_holds_on_the_others() {
    // The first process judges with the owner's rules (and may keep them).
    let two = TwoProcesses::start(json!({"ask": ["read_file(asked.txt)"]})).await;
    let (first, second) = (&two.first, &two.second);
    let out: Value = two
        .read(first, "rules", "c1", "notes.txt")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        error_code(&out),
        "FILE_NOT_FOUND",
        "allowed, and read: {out}"
    );
    let waiting = two.read(first, "rules", "c2", "asked.txt").await;
    assert_eq!(waiting.status(), 202);
    let waiting: Value = waiting.json().await.unwrap();
    let approval = waiting["approval"]["id"].as_str().unwrap().to_string();

    // The same owner denies both paths through the second process.
    two.put_rules(
        second,
        json!({"deny": ["read_file(notes.txt)", "read_file(asked.txt)"]}),
    )
    .await;
    two.denied_on(first, "rules", "notes.txt").await;
    // The waiting call, approved on the first process, is judged again.
    two.approve(first, &approval).await;
    let record = two.finished(first, "rules", "c2").await;
    assert_eq!(
        record["outcome"]["tool_agent_output"]["error"]["code"], "PERMISSION_DENIED",
        "{record}"
    );
}

/// A message declaring a call, recorded through one process, holds on
/// another that has just found the thread to declare nothing: the call
/// posted there right after is announced under that message.
#[tokio::test]
async fn a_call_declared_through_another_process_is_announced_under_its_message() {
    let two = TwoProcesses::start(json!({})).await;
    let (first, second) = (&two.first, &two.second);
    let post = |served: &Served, path: &str, body: Value| {
        two.client
            .post(format!("{}/v1/threads/{path}", served.base))
            .bearer_auth(&served.token)
            .json(&body)
            .send()
    };
    let echo = |id: &str| json!({"id": id, "name": "echo", "arguments": {"text": id}});
    let declaring = |id: &str, call: &str| json!({"id": id, "role": "assistant", "content": "", "tool_calls": [echo(call)]});
    for thread in ["linked", "elsewhere", "other"] {
        // The first process looks, and finds the thread declares nothing.
        let r = post(first, &format!("{thread}/tool-calls"), echo("c0"))
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let r = post(second, &format!("{thread}/messages"), declaring("m1", "c1"))
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    let r = post(first, "linked/tool-calls", echo("c1")).await.unwrap();
    assert_eq!(r.status(), 200);
    // Posted as another message's call, it is refused.
    let mut elsewhere = echo("c1");
    elsewhere["parent_message_id"] = json!("m0");
    let refused_saying = |r: reqwest::Response, says: &'static str| async move {
        assert_eq!(r.status(), 409);
        let refused: Value = r.json().await.unwrap();
        assert!(
            refused["detail"].as_str().unwrap().contains(says),
            "{refused}"
        );
    };
    let r = post(first, "elsewhere/tool-calls", elsewhere)
        .await
        .unwrap();
    refused_saying(r, "is declared by message \"m1\", not \"m0\"").await;
    // Posted as another call, a read-only one, it is refused and stopped
    // once its record meets the declaration (20 ms in), not after its 30 s;
    // posted again, at once.
    for _ in 0..2 {
        let other = json!({"id": "c1", "name": "wait", "arguments": {"ms": 30000}});
        let r = tokio::time::timeout(
            Duration::from_secs(20),
            post(first, "other/tool-calls", other),
        )
        .await
        .expect("refused before the wait is over")
        .unwrap();
        refused_saying(r, "already declared").await;
    }

    let stream = two
        .client
        .get(format!("{}/v1/threads/linked/events?after=0", first.base))
        .bearer_auth(&first.token)
        .send()
        .await
        .unwrap();
    let mut sse = SseReader::new(stream);
    assert_eq!(
        sse.call_starts(2).await,
        [(json!("c0"), None), (json!("c1"), Some(json!("m1")))]
    );
}

/// Thread `thread`'s event stream on `served`, read past its RUN_STARTED.
async fn opened_stream(served: &Served, thread: &str) -> common::SseReader {
    let resp = reqwest::Client::new()
        .get(format!("{}/v1/threads/{thread}/events", served.base))
        .bearer_auth(&served.token)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut sse = common::SseReader::new(resp);
    let opened = sse.next(Duration::from_secs(10)).await.unwrap();
    assert_eq!(opened.data["type"], "RUN_STARTED");
    sse
}

/// A thread deleted through one process is gone on the others as the
/// deletion commits: their streams of it end with `RUN_ERROR`
/// `THREAD_DELETED`, and a process that had read its owner answers `410`
/// for it, not an empty thread.
#[tokio::test]
async fn a_thread_deleted_through_one_process_is_gone_on_the_others() {
    let two = TwoProcesses::start(json!({})).await;
    let (first, second) = (&two.first, &two.second);
    let echo = json!({"id": "c1", "name": "echo", "arguments": {"text": "hi"}});
    let r = two
        .client
        .post(format!("{}/v1/threads/gone/tool-calls", second.base))
        .bearer_auth(&second.token)
        .json(&echo)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    second.get_json("/v1/threads/gone/history").await;
    let mut sse = opened_stream(second, "gone").await;
    let r = two
        .client
        .delete(format!("{}/v1/threads/gone", first.base))
        .bearer_auth(&first.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let frames = sse.until("RUN_ERROR").await;
    let end = frames.last().expect("the other process's stream ends");
    assert_eq!(end.data["code"], "THREAD_DELETED", "{}", end.raw);
    let r = two
        .client
        .get(format!("{}/v1/threads/gone/history", second.base))
        .bearer_auth(&second.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 410);
    let r = two
        .client
        .post(format!("{}/v1/threads/gone/tool-calls", second.base))
        .bearer_auth(&second.token)
        .json(&echo)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 410, "the old call does not run again");
}

/// A deletion that cancels (`?cancel=true`) closes the thread in the
/// database first: while a call it cannot cancel (it runs in another
/// process) keeps it, no process records a new call or turn in it, so
/// nothing new can keep it alive; the process that runs the call cancels
/// it and the deletion goes through.
#[tokio::test]
async fn a_thread_closed_for_deletion_takes_nothing_new_in_any_process() {
    let two = TwoProcesses::start(json!({})).await;
    let (first, second) = (&two.first, &two.second);
    let post = |through: &Served, path: &str, body: Value| {
        two.client
            .post(format!("{}{path}", through.base))
            .bearer_auth(&through.token)
            .json(&body)
            .send()
    };
    let delete = |through: &Served, query: &str| {
        two.client
            .delete(format!("{}/v1/threads/closing{query}", through.base))
            .bearer_auth(&through.token)
            .send()
    };
    let long = post(
        first,
        "/v1/threads/closing/tool-calls",
        json!({"id": "w1", "name": "wait", "arguments": {"ms": 25000}}),
    );
    let long = tokio::spawn(async move { long.await.unwrap().json::<Value>().await.unwrap() });
    let mut status = Value::Null;
    for _ in 0..200 {
        // Announced once it has run a moment (`wait` reads nothing, so
        // its record may wait for its result).
        let r = two
            .client
            .get(format!("{}/v1/threads/closing/tool-calls/w1", first.base))
            .bearer_auth(&first.token)
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            status = r.json::<Value>().await.unwrap()["status"].clone();
        }
        if status == "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(status, "running");

    // `wait` is for a deletion that cancels, and at most a minute.
    for query in ["?wait=5", "?cancel=true&wait=61", "?cancel=maybe"] {
        let r = delete(second, query).await.unwrap();
        assert_eq!(r.status(), 400, "{query}");
    }
    // The other process cannot stop the call: after its wait, `409`, and
    // the thread stays closed.
    let r = delete(second, "?cancel=true&wait=1").await.unwrap();
    assert_eq!(r.status(), 409);
    let busy: Value = r.json().await.unwrap();
    assert_eq!(busy["code"], "THREAD_BUSY", "{busy}");
    assert_eq!(
        busy["errors"],
        json!([{"tool_call_id": "w1", "status": "running"}])
    );
    assert!(
        busy["detail"].as_str().unwrap().contains("stays closed"),
        "{busy}"
    );
    for (through, path, body) in [
        (
            second,
            "/v1/threads/closing/tool-calls",
            json!({"id": "c2", "name": "echo", "arguments": {"text": "hi"}}),
        ),
        (
            first,
            "/v1/threads/closing/messages",
            json!({"id": "m1", "role": "user", "content": "more"}),
        ),
    ] {
        let r = post(through, path, body).await.unwrap();
        assert_eq!(r.status(), 409, "{path}");
        let refused: Value = r.json().await.unwrap();
        assert_eq!(refused["code"], "THREAD_CLOSING", "{refused}");
    }
    let history = first.get_json("/v1/threads/closing/history").await;
    let roles: Vec<&str> = history["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert!(roles.is_empty(), "nothing new went in: {roles:?}");
    assert_eq!(
        first.get_json("/v1/threads/closing/tool-calls/w1").await["status"],
        "running"
    );

    // The process that runs it cancels it, and deletes the thread.
    let r = delete(first, "?cancel=true").await.unwrap();
    assert_eq!(r.status(), 204);
    let answered = long.await.unwrap();
    assert_eq!(
        answered["tool_agent_output"]["error"]["code"], "CANCELLED",
        "{answered}"
    );
    // The other process answers 410 once it hears of the deletion
    // (a notice, milliseconds after the DELETE is answered).
    let mut status = 0;
    for _ in 0..100 {
        let r = two
            .client
            .get(format!("{}/v1/threads/closing/history", second.base))
            .bearer_auth(&second.token)
            .send()
            .await
            .unwrap();
        status = r.status().as_u16();
        if status == 410 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 410);
}

/// A caller waiting in one process for a call's outcome (`?wait=`) while
/// another process deletes its thread is told the thread is gone, not
/// kept waiting for a call nothing will finish.
#[tokio::test]
async fn a_wait_for_a_call_whose_thread_another_process_deletes_ends() {
    let two = TwoProcesses::start(json!({})).await;
    let (first, second) = (&two.first, &two.second);
    let call = json!({"id": "b1", "name": "bash", "arguments": {"command": "uname -a"}});
    let r = two
        .client
        .post(format!("{}/v1/threads/waited/tool-calls", first.base))
        .bearer_auth(&first.token)
        .json(&call)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "it waits for approval");
    let waiting = two
        .client
        .post(format!(
            "{}/v1/threads/waited/tool-calls?wait=20",
            second.base
        ))
        .bearer_auth(&second.token)
        .json(&call)
        .send();
    let waiting = tokio::spawn(async move {
        let r = waiting.await.unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = two
        .client
        .delete(format!("{}/v1/threads/waited?cancel=true", first.base))
        .bearer_auth(&first.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let (status, answer) = waiting.await.unwrap();
    let denied = status == 200 && answer["tool_agent_output"]["error"]["code"] == "APPROVAL_DENIED";
    assert!(
        denied || (status == 410 && answer["code"] == "THREAD_DELETED"),
        "{status} {answer}"
    );
}

/// A subscriber hears of what another process of the same database
/// commits (or what committed with no word on the bus, its commit's answer
/// lost): each heartbeat its stream reads the log after its last event.
#[tokio::test]
async fn a_stream_hears_of_events_committed_elsewhere_at_its_next_heartbeat() {
    let pg = common::create_pg_database().await;
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = serve_binary_with(
        dirs.0.path(),
        Some(&pg.url),
        &[("TOOLGATE_SERVER__SSE_HEARTBEAT_SECS", "1")],
    )
    .await;
    let second = serve_binary(dirs.1.path(), Some(&pg.url)).await;
    let client = reqwest::Client::new();
    let mut sse = opened_stream(&first, "elsewhere").await;
    let r = client
        .post(format!("{}/v1/threads/elsewhere/messages", second.base))
        .bearer_auth(&second.token)
        .json(&json!({"id": "m1", "role": "user", "content": "from the other process"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let frame = sse
        .next(Duration::from_secs(10))
        .await
        .expect("the message committed by the other process arrives");
    assert_eq!(frame.data["type"], "TEXT_MESSAGE_START", "{}", frame.raw);
    assert_eq!(frame.id, Some(1));
}

/// Two processes of one Postgres database: what one commits reaches the
/// other's subscribers through the database's notices, with no heartbeat
/// to wait for (the subscriber's is an hour), events in order, each once.
#[tokio::test]
async fn a_stream_hears_at_once_of_events_another_process_commits() {
    let pg = common::create_pg_database().await;
    let dirs = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = serve_binary_with(
        dirs.0.path(),
        Some(&pg.url),
        &[("TOOLGATE_SERVER__SSE_HEARTBEAT_SECS", "3600")],
    )
    .await;
    let second = serve_binary(dirs.1.path(), Some(&pg.url)).await;
    let client = reqwest::Client::new();
    let mut sse = opened_stream(&first, "noticed").await;
    let post = |path: &str, body: Value| {
        client
            .post(format!("{}/v1/threads/noticed/{path}", second.base))
            .bearer_auth(&second.token)
            .json(&body)
            .send()
    };
    let r = post(
        "messages",
        json!({"id": "m1", "role": "user", "content": "hi"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 201);
    let r = post(
        "tool-calls",
        json!({"id": "c1", "name": "echo", "arguments": {"text": "x"}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let mut seen = Vec::new();
    while seen.len() < 7 {
        let frame = sse
            .next(Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("only {seen:?} arrived"));
        seen.push((frame.id, frame.data["type"].as_str().unwrap().to_string()));
    }
    let ids: Vec<Option<i64>> = seen.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (1..=7).map(Some).collect::<Vec<_>>(), "{seen:?}");
    assert_eq!(seen[6].1, "TOOL_CALL_RESULT", "{seen:?}");
}

/// A caller waiting (`?wait=N`) on one process for a call that waits for
/// approval gets its outcome when the approval is decided, and the call
/// run, through another process of the same database.
#[tokio::test]
async fn a_wait_hears_of_a_decision_made_on_another_process() {
    let two = TwoProcesses::start(json!({"ask": ["read_file(asked.txt)"]})).await;
    let (first, second) = (&two.first, &two.second);
    let waiter = tokio::spawn(
        two.client
            .post(format!(
                "{}/v1/threads/waits/tool-calls?wait=60",
                first.base
            ))
            .bearer_auth(&first.token)
            .json(&json!({"id": "asked", "name": "read_file", "arguments": {"path": "asked.txt"}}))
            .send(),
    );
    let approval = two.pending_approval(second).await;
    two.approve(second, &approval).await;
    // Long before its 60 s are up, the waiting caller has the outcome.
    let answer = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiting caller is answered once the call has run")
        .unwrap()
        .unwrap();
    assert_eq!(answer.status(), 200);
    let out: Value = answer.json().await.unwrap();
    assert_eq!(
        error_code(&out),
        "FILE_NOT_FOUND",
        "approved and run: {out}"
    );
}

/// A write approved through another process, whose workspace is not the
/// one its preview was made in (workspaces are per process), does not run
/// on a file the person never saw: the preview made again there differs,
/// and the call ends `APPROVAL_STALE`, creating nothing on either side.
#[tokio::test]
async fn a_write_approved_through_another_process_does_not_write_blind() {
    let two = TwoProcesses::start(json!({"ask": ["write_file"]})).await;
    let (first, second) = (&two.first, &two.second);
    let root = |workspace: Value| std::path::PathBuf::from(workspace["root"].as_str().unwrap());
    let first_root = root(first.get_json("/v1/workspace").await);
    let second_root = root(second.get_json("/v1/workspace").await);
    assert_ne!(first_root, second_root);
    std::fs::create_dir_all(&first_root).unwrap();
    std::fs::write(first_root.join("app.conf"), "a=1\nb=2\n").unwrap();
    let r = two
        .client
        .post(format!("{}/v1/threads/blind/tool-calls", first.base))
        .bearer_auth(&first.token)
        .json(&json!({"id": "w", "name": "write_file", "arguments": {"path": "app.conf", "content": "a=1\nb=20\n"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let approval = two.pending_approval(second).await;
    two.approve(second, &approval).await;
    let record = two.finished(first, "blind", "w").await;
    assert_eq!(
        record["outcome"]["tool_agent_output"]["error"]["code"], "APPROVAL_STALE",
        "{record}"
    );
    assert_eq!(
        std::fs::read_to_string(first_root.join("app.conf")).unwrap(),
        "a=1\nb=2\n"
    );
    assert!(!second_root.join("app.conf").exists());
}

/// A call posted again through another process while it runs on the
/// first is answered with its outcome once it finishes there, as a repost
/// to the process running it is, not with a 409 saying to try later; and
/// it runs once.
#[tokio::test]
async fn a_call_reposted_through_another_process_gets_its_outcome() {
    let two = TwoProcesses::start(json!({})).await;
    let (_sse, running) = a_running_wait(&two.first, "elsewhere", "w", 1500).await;
    let r = two
        .client
        .post(format!(
            "{}/v1/threads/elsewhere/tool-calls",
            two.second.base
        ))
        .bearer_auth(&two.second.token)
        .json(&json!({"id": "w", "name": "wait", "arguments": {"ms": 1500}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let out: Value = r.json().await.unwrap();
    assert_eq!(out["replayed"], true, "{out}");
    assert_eq!(
        out["tool_agent_output"]["result"]["waited_ms"], 1500,
        "{out}"
    );
    finished_as_it_ran(running, 1500).await;
    let history = common::history_at(&two.second.base, &two.second.token, "elsewhere").await;
    assert_eq!(history.len(), 1, "one result: {history:?}");
}

/// A Postgres database emptied under the running service (its tables
/// dropped, to be restored) is an outage, not a fault of toolgate's: a
/// write is a `503` (it was a `500`), nothing is told stored, and
/// `/readyz` says the tables are missing (it said only that the check
/// failed).
#[tokio::test]
async fn an_emptied_database_is_an_outage() {
    use sqlx::Connection;
    let data_dir = tempfile::tempdir().unwrap();
    let pg = common::create_pg_database().await;
    let served = serve_binary(data_dir.path(), Some(&pg.url)).await;
    let client = reqwest::Client::new();
    let post = |content: &str| {
        client
            .post(format!("{}/v1/threads/emptied/messages", served.base))
            .bearer_auth(&served.token)
            .json(&json!({"role": "user", "content": content}))
            .send()
    };
    assert_eq!(post("before").await.unwrap().status(), 201);
    let mut conn = sqlx::PgConnection::connect(&pg.url).await.unwrap();
    sqlx::raw_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public;")
        .execute(&mut conn)
        .await
        .unwrap();
    let r = post("after").await.unwrap();
    assert_eq!(r.status(), 503, "{}", r.text().await.unwrap());
    let r = client
        .get(format!("{}/readyz", served.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let p: Value = r.json().await.unwrap();
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("the database has none of toolgate's tables"),
        "{p}"
    );
}

/// Move call `id`'s record back in time by `ms`, as if it had been
/// recorded that long ago.
async fn age_call(pg: &common::PgDatabase, id: &str, ms: i64) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&pg.url).await.unwrap();
    let done =
        sqlx::query("UPDATE tool_calls SET created_at_ms = created_at_ms - $1 WHERE id = $2")
            .bind(ms)
            .bind(id)
            .execute(&mut conn)
            .await
            .unwrap();
    assert_eq!(done.rows_affected(), 1, "{id}");
}

/// A toolgate in this test process on the Postgres database `pg`, with a
/// data directory of its own.
async fn app_on(pg: &common::PgDatabase) -> TestApp {
    let data_dir = tempfile::tempdir().unwrap();
    let mut settings = common::test_settings(data_dir.path());
    settings.storage.database_url = Some(pg.url.clone().into());
    TestApp::start(settings, data_dir, None).await
}

/// A call left `running` by a process gone for good (its data directory
/// restored into a new one, a replica removed) is finished as INTERRUPTED
/// by any process once no process could still be running it: at start-up,
/// and by the sweep of a process already serving. Two processes starting
/// together both start, and the call gets one result. It stayed `running`
/// for ever (posting it again was a 409 "post it again later" each time),
/// and of two processes starting together one exited on the other's
/// result.
#[tokio::test]
async fn a_call_no_process_can_still_run_is_finished_by_any() {
    let pg = common::create_pg_database().await;
    let gone_dir = tempfile::tempdir().unwrap();
    let mut gone = serve_binary(gone_dir.path(), Some(&pg.url)).await;
    let mut held = Vec::new();
    for (thread, id) in [("orphan-1", "young"), ("orphan-2", "old")] {
        held.push(a_running_wait(&gone, thread, id, 30000).await);
    }
    gone.child.start_kill().unwrap();
    gone.child.wait().await.unwrap();
    // "old" was recorded two hours ago: no process runs a call that long.
    age_call(&pg, "old", 2 * 3600 * 1000).await;
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = tokio::join!(
        serve_binary(a_dir.path(), Some(&pg.url)),
        serve_binary(b_dir.path(), Some(&pg.url))
    );
    for served in [&a, &b] {
        let ready = reqwest::get(format!("{}/readyz", served.base))
            .await
            .unwrap();
        assert_eq!(ready.status(), 200);
    }
    let history = common::history_at(&a.base, &a.token, "orphan-2").await;
    assert_eq!(history.len(), 1, "one result: {history:?}");
    assert_eq!(
        history[0]["tool_agent_output"]["error"]["code"], "INTERRUPTED",
        "{history:?}"
    );
    // The young one may still run somewhere: left alone, by the sweep too.
    assert_eq!(
        a.get_json("/v1/threads/orphan-1/tool-calls/young").await["status"],
        "running"
    );
    let sweeper = app_on(&pg).await;
    assert_eq!(sweeper.engine.finish_orphans().await.unwrap(), 0);
    age_call(&pg, "young", 2 * 3600 * 1000).await;
    assert_eq!(sweeper.engine.finish_orphans().await.unwrap(), 1);
    let call = a.get_json("/v1/threads/orphan-1/tool-calls/young").await;
    assert_eq!(call["status"], "failure", "{call}");
    assert_eq!(
        call["outcome"]["tool_agent_output"]["error"]["code"],
        "INTERRUPTED"
    );
    assert_eq!(sweeper.engine.finish_orphans().await.unwrap(), 0);
    drop(held);
}

/// A process on a shared database says it is alive every ten seconds; a
/// call left `running` by one silent for a minute (killed, its machine
/// gone, its data directory never started again) is finished as
/// INTERRUPTED by another, long before its age alone would tell (half an
/// hour by default). A process heard from lately keeps its calls.
#[tokio::test]
async fn a_call_of_a_process_gone_silent_is_finished_by_another() {
    let pg = common::create_pg_database().await;
    let gone_dir = tempfile::tempdir().unwrap();
    let mut gone = serve_binary(gone_dir.path(), Some(&pg.url)).await;
    let held = a_running_wait(&gone, "silent", "left", 60_000).await;
    gone.child.start_kill().unwrap();
    gone.child.wait().await.unwrap();
    let sweeper = app_on(&pg).await;
    // Seen a moment ago: it may be alive, cut off for a while.
    assert_eq!(sweeper.engine.finish_orphans().await.unwrap(), 0);
    let instance = std::fs::read_to_string(gone_dir.path().join("instance.id")).unwrap();
    {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&pg.url).await.unwrap();
        let seen: i64 = sqlx::query_scalar("SELECT seen_at_ms FROM instances WHERE id = $1")
            .bind(instance.trim())
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert!(seen > 0);
        // Silent for more than a minute now.
        sqlx::query("UPDATE instances SET seen_at_ms = seen_at_ms - 61000 WHERE id = $1")
            .bind(instance.trim())
            .execute(&mut conn)
            .await
            .unwrap();
        // The sweeper itself is heard from: none of its calls is judged.
        let own: i64 = sqlx::query_scalar("SELECT count(*) FROM instances")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(own, 2, "each process beats");
    }
    assert_eq!(sweeper.engine.finish_orphans().await.unwrap(), 1);
    let call = sweeper.get_json("/v1/threads/silent/tool-calls/left").await;
    assert_eq!(call["status"], "failure", "{call}");
    assert_eq!(
        call["outcome"]["tool_agent_output"]["error"]["code"], "INTERRUPTED",
        "{call}"
    );
    assert_eq!(sweeper.engine.finish_orphans().await.unwrap(), 0);
    drop(held);
}

/// A data directory that served Postgres, started again without
/// `DATABASE_URL`, says in its log that it serves a new, empty SQLite
/// file: every thread looked gone, and nothing said why.
#[tokio::test]
async fn a_data_dir_that_served_postgres_warns_when_started_without_it() {
    let pg = common::create_pg_database().await;
    let dir = tempfile::tempdir().unwrap();
    let mut first = serve_binary(dir.path(), Some(&pg.url)).await;
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    let logged = |served: &Served, text: &'static str| {
        let log = served.stderr.clone();
        let shown = served.stderr.clone();
        eventually(
            Duration::from_secs(10),
            move || log.lock().unwrap().contains(text),
            move || shown.lock().unwrap().clone(),
        )
    };
    let mut second = serve_binary(dir.path(), None).await;
    logged(&second, "If it served Postgres, set DATABASE_URL").await;
    // Its own SQLite file from then on: no warning at the next start.
    second.child.start_kill().unwrap();
    second.child.wait().await.unwrap();
    let third = serve_binary(dir.path(), None).await;
    logged(&third, "toolgate listening").await;
    let log = third.stderr.lock().unwrap().clone();
    assert!(!log.contains("set DATABASE_URL"), "{log}");
}

/// A call recorded by a toolgate from before calls named their process/// A call recorded by a toolgate from before calls named their process
/// (no instance) may be running in that version's process during an
/// upgrade: a new process's start leaves it alone, and it ends with its
/// own result. The new process finished it as INTERRUPTED, and the real
/// result of what ran was lost.
#[tokio::test]
async fn a_start_leaves_a_young_call_of_an_older_version_alone() {
    use sqlx::Connection;
    let pg = common::create_pg_database().await;
    let (old_dir, new_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let old = serve_binary(old_dir.path(), Some(&pg.url)).await;
    let (_sse, running) = a_running_wait(&old, "upgrading", "live", 3000).await;
    let mut conn = sqlx::PgConnection::connect(&pg.url).await.unwrap();
    sqlx::query("UPDATE tool_calls SET instance = NULL WHERE id = 'live'")
        .execute(&mut conn)
        .await
        .unwrap();
    let new = serve_binary(new_dir.path(), Some(&pg.url)).await;
    assert_eq!(
        new.get_json("/v1/threads/upgrading/tool-calls/live").await["status"],
        "running"
    );
    finished_as_it_ran(running, 3000).await;
    let history = common::history_at(&new.base, &new.token, "upgrading").await;
    assert_eq!(history.len(), 1, "one result: {history:?}");
}

/// Two processes on one Postgres database, each with its own data
/// directory: the second's start leaves the first's running call to it,
/// and finishes only what its own data directory's process left behind.
#[tokio::test]
async fn a_process_starting_on_a_shared_database_leaves_the_others_calls_alone() {
    let pg = common::create_pg_database().await;
    let (first_dir, second_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = serve_binary(first_dir.path(), Some(&pg.url)).await;
    let (_sse, running) = a_running_wait(&first, "shared", "live", 3000).await;
    // A process of the second directory dies with a call running.
    let mut crashed = serve_binary(second_dir.path(), Some(&pg.url)).await;
    let (_crash_sse, lost) = a_running_wait(&crashed, "shared-2", "lost", 30000).await;
    crashed.child.start_kill().unwrap();
    crashed.child.wait().await.unwrap();
    assert!(lost.await.unwrap().is_err());
    // Its restart finishes its own call, not the first process's.
    let second = serve_binary(second_dir.path(), Some(&pg.url)).await;
    let history = common::history_at(&second.base, &second.token, "shared-2").await;
    assert_eq!(
        history[0]["tool_agent_output"]["error"]["code"], "INTERRUPTED",
        "{history:?}"
    );
    finished_as_it_ran(running, 3000).await;
    drop((first, second));
}

async fn a_crash_mid_call_is_finished_as_interrupted(backend: Backend) {
    let data_dir = tempfile::tempdir().unwrap();
    let pg = common::database_for(backend).await;
    let url = pg.as_ref().map(|p| p.url.as_str());
    let mut first = serve_binary(data_dir.path(), url).await;
    let client = reqwest::Client::new();
    let (_sse, pending) = a_running_wait(&first, "crash", "long", 30000).await;
    // A second call, run once a person approved it, elsewhere.
    let token = first.token.clone();
    let send = |request: reqwest::RequestBuilder| {
        let request = request.bearer_auth(&token);
        async move {
            let r = request.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (s, _) = send(
        client
            .put(format!("{}/v1/permissions", first.base))
            .json(&json!({"ask": ["wait"]})),
    )
    .await;
    assert_eq!(s, 200);
    let (s, asked) = send(
        client
            .post(format!("{}/v1/threads/crash-2/tool-calls", first.base))
            .json(&json!({"id": "approved", "name": "wait", "arguments": {"ms": 30000}})),
    )
    .await;
    assert_eq!(s, 202, "{asked}");
    let approval_id = asked["approval"]["id"].as_str().unwrap().to_string();
    let (s, _) = send(
        client
            .post(format!(
                "{}/v1/approvals/{approval_id}/decision",
                first.base
            ))
            .json(&json!({"decision": "approve"})),
    )
    .await;
    assert_eq!(s, 200);
    while first
        .get_json("/v1/threads/crash-2/tool-calls/approved")
        .await["status"]
        != "running"
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    assert!(
        pending.await.unwrap().is_err(),
        "the caller was never told `done`"
    );

    let second = serve_binary(data_dir.path(), url).await;
    let history = second.get_json("/v1/threads/crash/history").await;
    let msgs = history["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 1, "{history}");
    assert_eq!(msgs[0]["tool_agent_output"]["status"], "failure");
    assert_eq!(msgs[0]["tool_agent_output"]["error"]["code"], "INTERRUPTED");
    // Each is audited as interrupted at the moment its result was
    // recorded, the approved one under its approval.
    let audit = second.get_json("/v1/audit?action=call.interrupted").await;
    let mut entries: Vec<(Value, Value, Value)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["tool_call_id"].clone(),
                e["at_ms"].clone(),
                e["approval_id"].clone(),
            )
        })
        .collect();
    entries.sort_by_key(|e| e.0.to_string());
    let approved_at = second
        .get_json("/v1/threads/crash-2/tool-calls/approved")
        .await["finished_at_ms"]
        .clone();
    let long_at =
        second.get_json("/v1/threads/crash/tool-calls/long").await["finished_at_ms"].clone();
    assert_eq!(
        entries,
        [
            (json!("approved"), approved_at, json!(approval_id)),
            (json!("long"), long_at, Value::Null),
        ]
    );
    let resp = client
        .get(format!("{}/v1/threads/crash/events", second.base))
        .bearer_auth(&second.token)
        .header("last-event-id", "3")
        .send()
        .await
        .unwrap();
    let mut sse = SseReader::new(resp);
    sse.next(Duration::from_secs(5)).await.unwrap();
    let result = sse.until("TOOL_CALL_RESULT").await.pop().unwrap();
    assert_eq!(result.data["metadata"]["error"]["code"], "INTERRUPTED");
    assert_eq!(result.data["toolCallId"], "long");
    // Re-posting the id answers with the recorded outcome.
    let again: Value = client
        .post(format!("{}/v1/threads/crash/tool-calls", second.base))
        .bearer_auth(&second.token)
        .json(&json!({"id": "long", "name": "wait", "arguments": {"ms": 30000}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["replayed"], true);
    assert_eq!(again["tool_agent_output"]["error"]["code"], "INTERRUPTED");
}

/// The live processes whose command line is exactly `argv`.
fn processes_running(argv: &[&str]) -> Vec<i32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    processes_where(|cmdline| cmdline == wanted.as_slice())
}

/// The live processes whose raw command line (NUL after each argument)
/// satisfies `wanted`.
fn processes_where(wanted: impl Fn(&[u8]) -> bool) -> Vec<i32> {
    let mut found = vec![];
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let state = stat[stat.rfind(')')? + 1..]
                    .split_whitespace()
                    .next()?
                    .to_string();
                Some(state != "Z" && state != "X")
            })
            .unwrap_or(false);
        if alive
            && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| wanted(&cmdline))
        {
            found.push(pid);
        }
    }
    found
}

/// The live session watchdogs of the service serving `data_dir`.
fn watchdogs_of(data_dir: &std::path::Path) -> Vec<i32> {
    let dir = data_dir.to_string_lossy().into_owned();
    processes_where(|cmdline| {
        let text = String::from_utf8_lossy(cmdline);
        text.contains("\0watch-sessions\0") && text.contains(dir.as_str())
    })
}

/// Durations no other test uses, to find a test's processes by.
struct Sleeps {
    background: [&'static str; 2],
    foreground: [&'static str; 2],
}

/// Serve the binary on `data_dir`, start a command that leaves a process
/// in the background (`sleep … & sleep …`), and kill the service with
/// SIGKILL mid-command (first its session watchdog too, when
/// `kill_watchdog`). Returns the orphan's pids, which must be alive.
async fn crash_mid_command(
    data_dir: &std::path::Path,
    sleeps: &Sleeps,
    kill_watchdog: bool,
    namespaces: &str,
) -> Vec<i32> {
    let mut first = serve_binary_with(
        data_dir,
        None,
        &[("TOOLGATE_SANDBOX__NAMESPACES", namespaces)],
    )
    .await;
    let client = reqwest::Client::new();
    let r = client
        .put(format!("{}/v1/permissions", first.base))
        .bearer_auth(&first.token)
        .json(&json!({"allow": ["bash"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let command = format!(
        "{} & {}",
        sleeps.background.join(" "),
        sleeps.foreground.join(" ")
    );
    let (base, token) = (first.base.clone(), first.token.clone());
    let pending = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("{base}/v1/threads/orphans/tool-calls"))
            .bearer_auth(token)
            .json(&json!({"id": "bg", "name": "bash", "arguments": {
                "command": command, "timeout_ms": 120000}}))
            .send()
            .await
    });
    eventually(
        Duration::from_secs(20),
        || {
            !processes_running(&sleeps.background).is_empty()
                && !processes_running(&sleeps.foreground).is_empty()
        },
        || "the command never started".into(),
    )
    .await;
    let watchdogs = watchdogs_of(data_dir);
    assert_eq!(watchdogs.len(), 1, "one watchdog per serving process");
    if kill_watchdog {
        // SAFETY: signalling one process by pid.
        assert_eq!(unsafe { libc::kill(watchdogs[0], libc::SIGKILL) }, 0);
    }
    let orphans = processes_running(&sleeps.background);
    assert_eq!(orphans.len(), 1);
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    assert!(pending.await.unwrap().is_err());
    orphans
}

/// Waits (up to 10 s) until none of `sleeps` runs.
async fn until_ended(sleeps: &Sleeps, orphans: &[i32], what: &str) {
    eventually(
        Duration::from_secs(10),
        || {
            processes_running(&sleeps.background).is_empty()
                && processes_running(&sleeps.foreground).is_empty()
        },
        || format!("still running {what}: {orphans:?}"),
    )
    .await;
}

/// How many workspaces still hold a command's temporary directory, and
/// how many sessions are still recorded.
fn leftovers(data_dir: &std::path::Path) -> (usize, usize) {
    let temporary = std::fs::read_dir(data_dir.join("workspaces"))
        .unwrap()
        .filter(|w| w.as_ref().unwrap().path().join(".toolgate-tmp").exists())
        .count();
    let records = std::fs::read_dir(data_dir.join("command-sessions"))
        .unwrap()
        .count();
    (temporary, records)
}

/// Killed with SIGKILL, the service cannot end its commands; its watchdog
/// process, which sees it die, ends what a command started in the
/// background at once, with no restart.
#[tokio::test]
async fn a_commands_background_processes_end_when_the_service_is_killed() {
    let data_dir = tempfile::tempdir().unwrap();
    let sleeps = Sleeps {
        background: ["sleep", "4321.125"],
        foreground: ["sleep", "4321.375"],
    };
    // Without namespaces of their own (where the kernel offers none), the
    // watchdog is what ends them.
    let orphans = crash_mid_command(data_dir.path(), &sleeps, false, "off").await;
    until_ended(&sleeps, &orphans, "after the service died").await;
    // The command's temporary directory and its record go too.
    eventually(
        Duration::from_secs(5),
        || leftovers(data_dir.path()) == (0, 0),
        || format!("left behind: {:?}", leftovers(data_dir.path())),
    )
    .await;
    // The watchdog itself is gone.
    eventually(
        Duration::from_secs(5),
        || watchdogs_of(data_dir.path()).is_empty(),
        || "the watchdog stays".into(),
    )
    .await;
}

/// In a PID namespace of its own, a command's main process is the
/// namespace's init: when the service dies (and with it, by
/// PR_SET_PDEATHSIG, the main process), the kernel ends everything else the
/// command started, with no watchdog and no restart.
#[tokio::test]
async fn a_commands_background_processes_end_with_it_even_when_nothing_watches() {
    let data_dir = tempfile::tempdir().unwrap();
    let sleeps = Sleeps {
        background: ["sleep", "4321.0625"],
        foreground: ["sleep", "4321.1875"],
    };
    let orphans = crash_mid_command(data_dir.path(), &sleeps, true, "require").await;
    until_ended(&sleeps, &orphans, "after the service and its watchdog died").await;
}

/// Without namespaces, should the watchdog die with the service (both
/// killed), what a command started in the background is ended by the next
/// start on the same data directory.
#[tokio::test]
async fn a_commands_background_processes_do_not_outlive_a_crash_for_long() {
    let data_dir = tempfile::tempdir().unwrap();
    let sleeps = Sleeps {
        background: ["sleep", "4321.25"],
        foreground: ["sleep", "4321.5"],
    };
    let orphans = crash_mid_command(data_dir.path(), &sleeps, true, "off").await;
    // The shell died with the service; what it started did not.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        processes_running(&sleeps.background),
        orphans,
        "the background process outlived the crash"
    );
    assert_eq!(
        leftovers(data_dir.path()),
        (1, 1),
        "the command's temporary directory and record are left"
    );

    let second = serve_binary(data_dir.path(), None).await;
    until_ended(&sleeps, &orphans, "after the restart").await;
    let said = || {
        second
            .stderr
            .lock()
            .unwrap()
            .contains("previous toolgate process left running")
    };
    eventually(Duration::from_secs(5), said, || {
        format!(
            "the start-up says what it ended: {}",
            second.stderr.lock().unwrap()
        )
    })
    .await;
    // So are the commands' temporary directories, and their records.
    assert_eq!(leftovers(data_dir.path()), (0, 0));
}

/// One request of the kill-under-load test: an `echo` call or a user
/// message, with the text it carries.
#[derive(Debug, Clone)]
struct Sent {
    call: bool,
    id: String,
    text: String,
}

/// What one client of the kill-under-load test was told: the requests
/// answered `2xx`, in order, and the one in flight when the service died.
#[derive(Debug, Default)]
struct Told {
    done: Vec<Sent>,
    unanswered: Option<Sent>,
}

/// Posts calls and messages to `thread` one after another until a request
/// gets no answer (the service is gone).
async fn post_until_killed(
    base: String,
    token: String,
    thread: String,
    client_no: usize,
    acknowledged: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    killed: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Told {
    let client = reqwest::Client::new();
    let mut told = Told::default();
    for i in 0.. {
        let sent = Sent {
            call: i % 3 != 2,
            id: format!("r-{client_no}-{i}"),
            text: format!("text {client_no} {i}"),
        };
        match post_request(&client, &base, &token, &thread, &sent).await {
            Ok(resp) => {
                assert!(resp.status().is_success(), "{sent:?}: {}", resp.status());
                told.done.push(sent);
                acknowledged.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(err) => {
                assert!(
                    killed.load(std::sync::atomic::Ordering::SeqCst),
                    "{sent:?} failed before the service was killed: {err}"
                );
                told.unanswered = Some(sent);
                return told;
            }
        }
    }
    unreachable!("the loop ends when the service is gone")
}

/// Post `sent` (an echo call, or a user message) to `thread`.
async fn post_request(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    thread: &str,
    sent: &Sent,
) -> reqwest::Result<reqwest::Response> {
    let (path, body) = if sent.call {
        (
            "tool-calls",
            json!({"id": sent.id, "name": "echo", "arguments": {"text": sent.text}}),
        )
    } else {
        (
            "messages",
            json!({"id": sent.id, "role": "user", "content": sent.text}),
        )
    };
    client
        .post(format!("{base}/v1/threads/{thread}/{path}"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
}

/// Post `sent` to `thread` again, on the restarted service.
async fn post_again(served: &Served, thread: &str, sent: &Sent) -> reqwest::Response {
    post_request(
        &reqwest::Client::new(),
        &served.base,
        &served.token,
        thread,
        sent,
    )
    .await
    .unwrap()
}

/// The id a stored message answers to: a tool message's call id, else
/// its own id.
fn request_id(message: &Value) -> String {
    let id = match message["role"].as_str() {
        Some("tool") => &message["tool_call_id"],
        _ => &message["id"],
    };
    id.as_str().unwrap().to_string()
}

/// Whether `message` is what `sent` asked to store.
fn holds(message: &Value, sent: &Sent) -> bool {
    if sent.call {
        message["role"] == "tool"
            && message["tool_agent_output"]["status"] == "success"
            && message["tool_agent_output"]["result"]["text"] == sent.text.as_str()
    } else {
        message["role"] == "user" && message["content"] == sent.text.as_str()
    }
}

/// The service is SIGKILLed while clients post calls and messages as fast
/// as it answers. After a restart, everything it acknowledged is there,
/// whole, in the order it was acknowledged, with its events; the request
/// in flight is either all there or not at all; nothing else is.
async fn nothing_acknowledged_is_lost_when_the_service_is_killed(backend: Backend) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const CLIENTS: usize = 12;
    const BEFORE_KILL: usize = 300;

    let data_dir = tempfile::tempdir().unwrap();
    let pg = common::database_for(backend).await;
    let url = pg.as_ref().map(|p| p.url.as_str());
    let mut first = serve_binary(data_dir.path(), url).await;
    // A frontend watches each thread: what it sees live, until the stream
    // breaks.
    let mut watchers = Vec::new();
    for k in 0..CLIENTS {
        let resp = reqwest::Client::new()
            .get(format!("{}/v1/threads/load-{k}/events", first.base))
            .bearer_auth(&first.token)
            .send()
            .await
            .unwrap();
        let mut sse = SseReader::new(resp);
        assert_eq!(
            sse.next(Duration::from_secs(10)).await.unwrap().kind(),
            "RUN_STARTED"
        );
        watchers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(frame) = sse.next(Duration::from_secs(60)).await {
                seen.push(frame);
            }
            seen
        }));
    }
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let killed = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|k| {
            tokio::spawn(post_until_killed(
                first.base.clone(),
                first.token.clone(),
                format!("load-{k}"),
                k,
                acknowledged.clone(),
                killed.clone(),
            ))
        })
        .collect();
    eventually_every(
        Duration::from_secs(120),
        Duration::from_millis(5),
        || acknowledged.load(Ordering::Relaxed) >= BEFORE_KILL,
        || {
            format!(
                "only {} requests answered; stderr: {}",
                acknowledged.load(Ordering::Relaxed),
                first.stderr.lock().unwrap()
            )
        },
    )
    .await;
    killed.store(true, Ordering::SeqCst);
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    let mut told = Vec::new();
    for client in clients {
        told.push(client.await.unwrap());
    }
    let mut watched = Vec::new();
    for watcher in watchers {
        watched.push(watcher.await.unwrap());
    }

    let second = serve_binary(data_dir.path(), url).await;
    let client = reqwest::Client::new();
    let mut in_flight_stored = 0;
    for (k, told) in told.iter().enumerate() {
        let thread = format!("load-{k}");
        let history = common::history_at(&second.base, &second.token, &thread).await;
        let unanswered = told.unanswered.as_ref().unwrap();
        // Acknowledged requests, in order, then at most the one in flight.
        let stored_ids: Vec<String> = history.iter().map(request_id).collect();
        let done_ids: Vec<String> = told.done.iter().map(|s| s.id.clone()).collect();
        assert!(
            stored_ids.len() == done_ids.len()
                || (stored_ids.len() == done_ids.len() + 1
                    && stored_ids.last() == Some(&unanswered.id)),
            "{thread}: stored {} messages for {} acknowledged requests (+ {} in flight)",
            stored_ids.len(),
            done_ids.len(),
            unanswered.id
        );
        assert_eq!(stored_ids[..done_ids.len()], done_ids[..], "{thread}");
        for (message, sent) in history.iter().zip(&told.done) {
            assert!(holds(message, sent), "{thread}: {message} for {sent:?}");
        }
        if let Some(last) = history.get(told.done.len()) {
            in_flight_stored += 1;
            // Whole: the call's result (or, had it been recorded before it
            // ran, its INTERRUPTED failure), or the message as sent.
            let interrupted =
                unanswered.call && last["tool_agent_output"]["error"]["code"] == "INTERRUPTED";
            assert!(holds(last, unanswered) || interrupted, "{thread}: {last}");
        }

        // The event log: gap-free from 1, and each stored request's events
        // whole and in order.
        let calls = history.iter().filter(|m| m["role"] == "tool").count();
        let messages = history.len() - calls;
        let resp = client
            .get(format!(
                "{}/v1/threads/{thread}/events?after=0",
                second.base
            ))
            .bearer_auth(&second.token)
            .send()
            .await
            .unwrap();
        let mut sse = SseReader::new(resp);
        let mut logged = Vec::new();
        while logged.len() < 4 * calls + 3 * messages {
            let frame = sse
                .next(Duration::from_secs(10))
                .await
                .unwrap_or_else(|| panic!("{thread}: log ended after {} events", logged.len()));
            if frame.id.is_some() {
                logged.push(frame);
            }
        }
        // Nothing logged beyond the stored requests' events.
        while let Some(frame) = sse.next(Duration::from_millis(300)).await {
            assert!(frame.id.is_none(), "{thread}: an event more: {}", frame.raw);
        }
        let ids: Vec<i64> = logged.iter().map(|f| f.id.unwrap()).collect();
        assert_eq!(ids, (1..=ids.len() as i64).collect::<Vec<_>>(), "{thread}");
        // Events are streamed only once committed: whatever the frontend saw
        // live is in the log after the restart, the same bytes at the same
        // ids (a result event rebuilt from its stored message included).
        let seen = &watched[k];
        let seen_ids: Vec<i64> = seen.iter().map(|f| f.id.unwrap()).collect();
        assert_eq!(
            seen_ids,
            (1..=seen_ids.len() as i64).collect::<Vec<_>>(),
            "{thread}: streamed live in order, without gaps"
        );
        for frame in seen {
            let id = frame.id.unwrap();
            let stored = logged
                .get(id as usize - 1)
                .unwrap_or_else(|| panic!("{thread}: event {id} streamed but not stored"));
            assert_eq!(stored.raw, frame.raw, "{thread}: event {id}");
        }
        let mut at = 0;
        for message in &history {
            let kinds: &[&str] = if message["role"] == "tool" {
                &[
                    "TOOL_CALL_START",
                    "TOOL_CALL_ARGS",
                    "TOOL_CALL_END",
                    "TOOL_CALL_RESULT",
                ]
            } else {
                &[
                    "TEXT_MESSAGE_START",
                    "TEXT_MESSAGE_CONTENT",
                    "TEXT_MESSAGE_END",
                ]
            };
            for kind in kinds {
                let frame = &logged[at];
                assert_eq!(frame.kind(), *kind, "{thread} event {}", at + 1);
                let names = if message["role"] == "tool" {
                    frame.data["toolCallId"] == request_id(message).as_str()
                } else {
                    frame.data["messageId"] == request_id(message).as_str()
                };
                assert!(names, "{thread} event {}: {}", at + 1, frame.raw);
                at += 1;
            }
        }

        // The last acknowledged call is answered from storage; the one in
        // flight, posted again, runs now if it was lost, once either way.
        if let Some(sent) = told.done.iter().rev().find(|s| s.call) {
            let again: Value = post_again(&second, &thread, sent)
                .await
                .json()
                .await
                .unwrap();
            assert_eq!(again["replayed"], true, "{thread}: {again}");
            assert_eq!(
                again["tool_agent_output"]["result"]["text"],
                sent.text.as_str()
            );
        }
        let was_stored = history.len() > told.done.len();
        let again = post_again(&second, &thread, unanswered).await;
        if unanswered.call {
            let again: Value = again.json().await.unwrap();
            assert_eq!(again["replayed"], was_stored, "{thread}: {again}");
            if !was_stored {
                assert_eq!(
                    again["tool_agent_output"]["result"]["text"],
                    unanswered.text.as_str()
                );
            }
        } else {
            // The same message, already recorded, answers as recorded.
            let expected = if was_stored { 200 } else { 201 };
            assert_eq!(again.status(), expected, "{thread}: {unanswered:?}");
            let again: Value = again.json().await.unwrap();
            assert_eq!(
                again["replayed"].as_bool().unwrap_or(false),
                was_stored,
                "{thread}: {again}"
            );
        }
        let after = common::history_at(&second.base, &second.token, &thread).await;
        assert_eq!(after.len(), told.done.len() + 1, "{thread}: stored once");
    }
    eprintln!(
        "acknowledged before the kill: {}; in flight and stored anyway: {in_flight_stored} of \
         {CLIENTS}; events streamed live: {}",
        told.iter().map(|t| t.done.len()).sum::<usize>(),
        watched.iter().map(Vec::len).sum::<usize>()
    );
}

async fn tokens_never_reach_logs_or_storage(backend: Backend) {
    let data_dir = tempfile::tempdir().unwrap();
    let pg = common::database_for(backend).await;
    let url = pg.as_ref().map(|p| p.url.as_str());
    // The crates that log what the file tools give them, at their most
    // talkative.
    let mut served = serve_binary_with(
        data_dir.path(),
        url,
        &[(
            "RUST_LOG",
            "debug,grep_regex=trace,grep_searcher=trace,globset=trace",
        )],
    )
    .await;
    let client = reqwest::Client::new();
    let secret_in_args = "sk-live-0123456789abcdef";
    let secret_pattern = "skgrep0123456789abcdef";
    for call in [
        json!({"id": "w", "name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}),
        json!({"id": "g", "name": "grep", "arguments": {"pattern": secret_pattern}}),
        json!({"id": "f", "name": "glob", "arguments": {"pattern": format!("**/{secret_pattern}*")}}),
    ] {
        let r = client
            .post(format!("{}/v1/threads/logs/tool-calls", served.base))
            .bearer_auth(&served.token)
            .json(&call)
            .send()
            .await
            .unwrap();
        let out: Value = r.json().await.unwrap();
        assert_eq!(out["tool_agent_output"]["status"], "success", "{out}");
    }
    let r = client
        .post(format!("{}/v1/threads/logs/tool-calls", served.base))
        .bearer_auth(&served.token)
        .header("x-api-key", secret_in_args)
        .json(&json!({"id": "c", "name": "echo", "arguments": {"text": "hello"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = client
        .get(format!("{}/v1/threads/logs/history", served.base))
        .header("authorization", format!("Bearer {}x", served.token))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    tokio::time::sleep(Duration::from_millis(300)).await;
    served.child.start_kill().unwrap();
    served.child.wait().await.unwrap();
    let logs = served.stderr.lock().unwrap().clone();
    assert!(logs.contains("request"), "debug logs were captured: {logs}");
    let signature = served.token.rsplit('.').next().unwrap();
    assert!(
        !logs.contains(signature),
        "the bearer token is never logged"
    );
    assert!(
        !logs.to_lowercase().contains("authorization: bearer"),
        "no Authorization header in logs"
    );
    assert!(!logs.contains(secret_in_args));
    assert!(
        !logs.contains(secret_pattern),
        "a tool's arguments are never logged"
    );
    // Nor stored: scan the whole database.
    let dump = match (&pg, backend) {
        (Some(pg), _) => {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect(&pg.url).await.unwrap();
            let mut all = String::new();
            for table in ["threads", "messages", "tool_calls", "events"] {
                let rows: Vec<(String,)> =
                    sqlx::query_as(&format!("SELECT t::text FROM {table} t"))
                        .fetch_all(&mut conn)
                        .await
                        .unwrap();
                all.extend(rows.into_iter().map(|r| r.0));
            }
            all
        }
        _ => {
            let mut all = String::new();
            for entry in std::fs::read_dir(data_dir.path()).unwrap() {
                let path = entry.unwrap().path();
                if path
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("toolgate.db")
                {
                    all.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
                }
            }
            all
        }
    };
    assert!(dump.contains("hello"), "the scan sees stored data");
    assert!(
        !dump.contains(signature),
        "the bearer token is never stored"
    );
}

both_backends!(
    a_database_a_newer_toolgate_migrated_takes_no_more_writes,
    health_readiness_and_metrics,
    a_crash_mid_call_is_finished_as_interrupted,
    a_second_process_on_a_served_data_dir_refuses_to_start,
    nothing_acknowledged_is_lost_when_the_service_is_killed,
    tokens_never_reach_logs_or_storage,
);

/// `--version` names the last migration of each backend, so two builds of
/// one version number with other schemas are told apart.
#[test]
fn the_version_names_the_schema() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let last = |backend: &str| {
        std::fs::read_dir(format!(
            "{}/migrations/{backend}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
        .filter_map(|e| {
            e.unwrap()
                .file_name()
                .to_str()?
                .get(..4)?
                .parse::<u32>()
                .ok()
        })
        .max()
        .unwrap()
    };
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!(
            "toolgate {} (schema: sqlite {}, postgres {})\n",
            env!("CARGO_PKG_VERSION"),
            last("sqlite"),
            last("postgres")
        )
    );
}

#[tokio::test]
async fn cli_token_migrate_and_layered_settings() {
    let data_dir = tempfile::tempdir().unwrap();
    let dir = data_dir.path().to_str().unwrap();
    let bin = env!("CARGO_BIN_EXE_toolgate");
    // Before any key exists, `token` refuses and creates none: a token signed
    // with a key no server holds would be refused everywhere.
    let keyless = std::process::Command::new(bin)
        .args(["--data-dir", dir, "token", "--sub", "alice"])
        .output()
        .unwrap();
    assert!(!keyless.status.success());
    let why = String::from_utf8_lossy(&keyless.stderr);
    assert!(
        why.contains("no signing key") && why.contains("signing.key"),
        "{why}"
    );
    assert!(!data_dir.path().join("signing.key").exists());
    let migrate = std::process::Command::new(bin)
        .args(["--data-dir", dir, "migrate"])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    assert!(String::from_utf8_lossy(&migrate.stdout).contains("migrations applied (sqlite)"));
    let token = std::process::Command::new(bin)
        .args(["--data-dir", dir, "token", "--sub", "alice", "--ttl", "1h"])
        .output()
        .unwrap();
    assert!(
        token.status.success(),
        "{}",
        String::from_utf8_lossy(&token.stderr)
    );
    let token = String::from_utf8(token.stdout).unwrap().trim().to_string();
    let bad_ttl = std::process::Command::new(bin)
        .args([
            "--data-dir",
            dir,
            "token",
            "--sub",
            "alice",
            "--ttl",
            "soon",
        ])
        .output()
        .unwrap();
    assert!(!bad_ttl.status.success());
    let zero_ttl = std::process::Command::new(bin)
        .args(["--data-dir", dir, "token", "--sub", "alice", "--ttl", "0s"])
        .output()
        .unwrap();
    assert!(!zero_ttl.status.success());
    assert!(
        String::from_utf8_lossy(&zero_ttl.stderr).contains("--ttl must be at least 1s"),
        "{}",
        String::from_utf8_lossy(&zero_ttl.stderr)
    );

    // Environment variables override the defaults; JSON logs on request.
    let mut child = tokio::process::Command::new(bin)
        .args(["--data-dir", dir, "serve", "--bind", "127.0.0.1:0"])
        .env_remove("DATABASE_URL")
        .env("TOOLGATE_TOOLS__WAIT_MAX_MS", "1234")
        .env("TOOLGATE_SERVER__JSON_LOGS", "true")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), out.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let base = format!(
        "http://{}",
        first
            .split("http://")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
    );
    let wait: Value = reqwest::Client::new()
        .get(format!("{base}/v1/tools/wait"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        wait["input_schema"]["properties"]["ms"]["maximum"], 1234,
        "{wait}"
    );
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let mut err = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().unwrap(), &mut err)
        .await
        .unwrap();
    let line = err
        .lines()
        .find(|l| l.contains("toolgate listening"))
        .unwrap_or_else(|| panic!("{err}"));
    let parsed: Value = serde_json::from_str(line).expect("JSON log line");
    assert_eq!(parsed["level"], "INFO");
    // The start-up line says what the service runs with: the data
    // directory, the settings files read and what verifies tokens.
    assert_eq!(parsed["data_dir"], dir, "{parsed}");
    assert_eq!(parsed["settings"], "config/default.toml", "{parsed}");
    assert_eq!(
        parsed["auth"],
        format!("HS256 with {dir}/signing.key"),
        "{parsed}"
    );
}

/// `toolgate migrate` in a new data directory with `args` before the
/// command and `env` set: whether it succeeded, and its stderr.
fn migrate_with(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let data_dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(args)
        .args(["--data-dir", data_dir.path().to_str().unwrap(), "migrate"])
        .env_remove("DATABASE_URL")
        .env_remove("RUST_BACKTRACE")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A misspelt section or key, in a settings file or a `TOOLGATE_…`
/// variable, stops the start naming it: ignored, `[permisions]` would
/// drop the deployment's deny rules without a word.
#[test]
fn settings_toolgate_does_not_have_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let fine = file("fine.toml", "[permissions]\ndeny = [\"echo\"]\n");
    let (ok, err) = migrate_with(&["--config", &fine], &[]);
    assert!(ok, "{err}");
    for (name, text, named) in [
        (
            "section.toml",
            "[permisions]\ndeny = [\"echo\"]\n",
            "permisions",
        ),
        ("key.toml", "[server]\nbnid = \"127.0.0.1:1\"\n", "bnid"),
        // The database's URL, which may hold a password, only ever comes
        // from DATABASE_URL.
        (
            "url.toml",
            "[storage]\ndatabase_url = \"postgres://u:p@127.0.0.1/x\"\n",
            "database_url",
        ),
    ] {
        let (ok, err) = migrate_with(&["--config", &file(name, text)], &[]);
        assert!(!ok && err.contains(named), "{name}: {err}");
        assert!(!err.contains("u:p@"), "{err}");
    }
    for (var, named) in [
        ("TOOLGATE_SERVER__BINDD", "bindd"),
        ("TOOLGATE_SERVR__BIND", "servr"),
        ("TOOLGATE_STORAGE__DATABASE_URL", "database_url"),
    ] {
        let (ok, err) = migrate_with(&[], &[(var, "1")]);
        assert!(!ok && err.contains(named), "{var}: {err}");
    }
    // A variable with no `SECTION__KEY` shape names no setting: left alone.
    let (ok, err) = migrate_with(&[], &[("TOOLGATE_SOMETHING_ELSE", "1")]);
    assert!(ok, "{err}");
    // A directory is no settings file.
    let (ok, err) = migrate_with(&["--config", dir.path().to_str().unwrap()], &[]);
    assert!(!ok && err.contains("is not a file"), "{err}");
    // A secret that does not parse (an unclosed quote, a key twice, a
    // number) is named with where it is, never quoted.
    let secret = "CFGSECRET_abcdefghijklmnopqrstuvwxyz0123";
    for (name, text) in [
        ("open.toml", format!("[auth]\nhs256_secret = \"{secret}\n")),
        (
            "twice.toml",
            format!("[auth]\nhs256_secret = \"{secret}\"\nhs256_secret = \"{secret}\"\n"),
        ),
    ] {
        let (ok, err) = migrate_with(&["--config", &file(name, &text)], &[]);
        assert!(!ok, "{name}: {err}");
        assert!(!err.contains("CFGSECRET"), "{name}: {err}");
        assert!(
            err.contains(name) && err.contains("TOML parse error at line"),
            "{name}: {err}"
        );
    }
    // A secret that looks like a number is taken as its text.
    let (ok, err) = migrate_with(
        &[],
        &[(
            "TOOLGATE_AUTH__HS256_SECRET",
            "3.14159265358979323846264338327950288419",
        )],
    );
    assert!(ok, "{err}");
    assert!(!err.contains("3.14"), "{err}");
    // One too short is refused, named and not quoted.
    let (ok, err) = migrate_with(&[], &[("TOOLGATE_AUTH__HS256_SECRET", "3.14159")]);
    assert!(!ok, "{err}");
    assert!(!err.contains("3.14"), "{err}");
    assert!(err.contains("hs256_secret"), "{err}");
}

/// Start-up errors name the setting behind them; with JSON logs the error
/// that stops the process is a JSON line too.
#[test]
fn a_missing_key_file_is_named_and_logged_as_json() {
    let (ok, err) = migrate_with(
        &[],
        &[("TOOLGATE_AUTH__PUBLIC_KEY_PEM", "/nonexistent/jwt.pem")],
    );
    assert!(!ok, "{err}");
    assert!(
        err.contains("auth.public_key_pem") && err.contains("/nonexistent/jwt.pem"),
        "{err}"
    );
    let (ok, err) = migrate_with(
        &[],
        &[
            ("TOOLGATE_AUTH__PUBLIC_KEY_PEM", "/nonexistent/jwt.pem"),
            ("TOOLGATE_SERVER__JSON_LOGS", "true"),
        ],
    );
    assert!(!ok, "{err}");
    let last = err.lines().last().unwrap_or_default();
    let line: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(line["level"], "ERROR", "{line}");
    assert!(
        line["error"]
            .as_str()
            .unwrap()
            .contains("auth.public_key_pem"),
        "{line}"
    );
    // Text logs written to a pipe carry no colour codes.
    let (_, err) = migrate_with(&[], &[("RUST_LOG", "debug")]);
    assert!(!err.is_empty() && !err.contains('\u{1b}'), "{err:?}");
}

/// A value of the right type that cannot work stops the start, naming the
/// setting and where it was set; so does a variable that misspells one
/// with a single `_`. Before any of this, such settings were served: a
/// body limit of 0 refused every request while /readyz said ready.
#[test]
fn settings_that_cannot_work_stop_the_start_naming_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("zero.toml");
    std::fs::write(&file, "[server]\nbody_limit_bytes = 0\n").unwrap();
    let file = file.to_str().unwrap();
    let (ok, err) = migrate_with(&["--config", file], &[]);
    assert!(!ok, "{err}");
    assert!(
        err.contains(&format!("server.body_limit_bytes is 0 (set in {file})")),
        "{err}"
    );
    for (env, named) in [
        (
            vec![("TOOLGATE_TOOLS__MAX_CONCURRENT_CALLS", "0")],
            "tools.max_concurrent_calls is 0 (set by TOOLGATE_TOOLS__MAX_CONCURRENT_CALLS)",
        ),
        (
            vec![
                ("TOOLGATE_SANDBOX__BASH_DEFAULT_TIMEOUT_MS", "900000"),
                ("TOOLGATE_SANDBOX__BASH_MAX_TIMEOUT_MS", "1000"),
            ],
            "sandbox.bash_default_timeout_ms (900000, set by \
             TOOLGATE_SANDBOX__BASH_DEFAULT_TIMEOUT_MS) is above \
             sandbox.bash_max_timeout_ms (1000, set by TOOLGATE_SANDBOX__BASH_MAX_TIMEOUT_MS)",
        ),
        (
            vec![("TOOLGATE_STORAGE__DATABASE_WAIT_SECS", "0")],
            "storage.database_wait_secs is 0 (set by TOOLGATE_STORAGE__DATABASE_WAIT_SECS)",
        ),
        (
            vec![("TOOLGATE_STORAGE__WRITER_NICE", "50")],
            "storage.writer_nice is 50 (set by TOOLGATE_STORAGE__WRITER_NICE)",
        ),
        (
            vec![("TOOLGATE_APPROVALS__APPROVER_SCOPE", "")],
            "approvals.approver_scope is \"\"",
        ),
        (
            vec![("TOOLGATE_AUTH__LEEWAY_SECS", "18446744073709551615")],
            "auth.leeway_secs is 18446744073709551615",
        ),
        // A value of the wrong type names the variable as it was written.
        (
            vec![("TOOLGATE_SERVER__BODY_LIMIT_BYTES", "lots")],
            "TOOLGATE_SERVER__BODY_LIMIT_BYTES: invalid type",
        ),
        (
            vec![("TOOLGATE_SERVER_BIND", "0.0.0.0:1")],
            "TOOLGATE_SERVER_BIND names no setting",
        ),
    ] {
        let (ok, err) = migrate_with(&[], &env);
        assert!(!ok && err.contains(named), "{env:?}: {err}");
    }
    // JSON logs asked for in the environment hold for the error that
    // stops a start whose settings did not load.
    let (ok, err) = migrate_with(
        &[],
        &[
            ("TOOLGATE_SERVER__JSON_LOGS", "true"),
            ("TOOLGATE_SERVER__BND", "1"),
        ],
    );
    assert!(!ok);
    let line: Value = serde_json::from_str(err.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {err}"));
    assert!(
        line["error"]
            .as_str()
            .unwrap()
            .starts_with("TOOLGATE_SERVER__BND: unknown field"),
        "{line}"
    );
    // A filter RUST_LOG cannot be is said, not silently replaced.
    let (ok, err) = migrate_with(&[], &[("RUST_LOG", "debug,toolgate=notalevel")]);
    assert!(ok, "{err}");
    assert!(err.contains("RUST_LOG is not a filter"), "{err}");
}

/// The key files behind `auth.public_key_pem` (tests/fixtures/jwt).
fn jwt_fixture(name: &str) -> String {
    format!("{}/tests/fixtures/jwt/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Signing settings that disagree stop the start naming them: before,
/// a secret left beside key files silently replaced them, an algorithm
/// without its key fell back to the data directory's HS256 key, and a
/// private key that did not match the public one minted tokens every
/// server refused.
#[test]
fn signing_keys_that_disagree_stop_the_start() {
    let (rsa_pub, rsa, rsa_other) = (
        jwt_fixture("rsa.pub.pem"),
        jwt_fixture("rsa.pem"),
        jwt_fixture("rsa-other.pem"),
    );
    let (ed_pub, ed) = (jwt_fixture("ed25519.pub.pem"), jwt_fixture("ed25519.pem"));
    let secret = "0123456789abcdef0123456789abcdef-leftover";
    for (env, named) in [
        (
            vec![
                ("TOOLGATE_AUTH__HS256_SECRET", secret),
                ("TOOLGATE_AUTH__PUBLIC_KEY_PEM", rsa_pub.as_str()),
            ],
            "auth.hs256_secret and auth.public_key_pem are both set".to_string(),
        ),
        (
            vec![("TOOLGATE_AUTH__ALGORITHM", "RS256")],
            "auth.algorithm is \"RS256\", but auth.public_key_pem is not set".into(),
        ),
        (
            vec![("TOOLGATE_AUTH__ALGORITHM", "HS512")],
            "auth.algorithm is \"HS512\"".into(),
        ),
        (
            vec![("TOOLGATE_AUTH__PRIVATE_KEY_PEM", rsa.as_str())],
            "auth.private_key_pem is set without auth.public_key_pem".into(),
        ),
        (
            vec![
                ("TOOLGATE_AUTH__PUBLIC_KEY_PEM", rsa_pub.as_str()),
                ("TOOLGATE_AUTH__PRIVATE_KEY_PEM", ed.as_str()),
            ],
            format!("auth.private_key_pem: {ed} is not an RSA private key"),
        ),
        (
            vec![
                ("TOOLGATE_AUTH__ALGORITHM", "EdDSA"),
                ("TOOLGATE_AUTH__PUBLIC_KEY_PEM", rsa_pub.as_str()),
            ],
            format!("auth.public_key_pem: {rsa_pub} is not an Ed25519 public key"),
        ),
        (
            vec![
                ("TOOLGATE_AUTH__PUBLIC_KEY_PEM", rsa_pub.as_str()),
                ("TOOLGATE_AUTH__PRIVATE_KEY_PEM", rsa_other.as_str()),
            ],
            "auth.private_key_pem does not match auth.public_key_pem".into(),
        ),
    ] {
        let (ok, err) = migrate_with(&[], &env);
        assert!(!ok && err.contains(&named), "{env:?}: {err}");
        assert!(
            !err.contains("leftover"),
            "the secret is never repeated: {err}"
        );
    }
    for env in [
        vec![
            ("TOOLGATE_AUTH__PUBLIC_KEY_PEM", rsa_pub.as_str()),
            ("TOOLGATE_AUTH__PRIVATE_KEY_PEM", rsa.as_str()),
        ],
        vec![
            ("TOOLGATE_AUTH__ALGORITHM", "EdDSA"),
            ("TOOLGATE_AUTH__PUBLIC_KEY_PEM", ed_pub.as_str()),
            ("TOOLGATE_AUTH__PRIVATE_KEY_PEM", ed.as_str()),
        ],
        vec![
            ("TOOLGATE_AUTH__ALGORITHM", "HS256"),
            ("TOOLGATE_AUTH__HS256_SECRET", secret),
        ],
    ] {
        let (ok, err) = migrate_with(&[], &env);
        assert!(ok, "{env:?}: {err}");
    }
}

/// A data directory's `signing.key` that is not one toolgate wrote is
/// named with what it should hold (it was `Invalid input length: 5`).
#[test]
fn an_unreadable_signing_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("signing.key");
    for text in ["short", "not base64 at all"] {
        std::fs::write(&key, text).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["--data-dir", dir.path().to_str().unwrap(), "migrate"])
            .env_remove("DATABASE_URL")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains(&format!(
                "{} is not a signing key toolgate wrote",
                key.display()
            )),
            "{err}"
        );
    }
}

/// A signing key that cannot be written whole (here: files limited to 8
/// bytes, as a full disk would cut it) leaves no key file behind, and the
/// error names it. It left an empty `signing.key`, which stopped every
/// later start until removed by hand.
#[tokio::test]
async fn a_signing_key_cut_short_leaves_no_key_file() {
    use std::os::unix::process::CommandExt as _;
    let pg = common::create_pg_database().await;
    let dir = tempfile::tempdir().unwrap();
    let migrate = |limited: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"));
        cmd.args(["--data-dir", dir.path().to_str().unwrap(), "migrate"])
            .env("DATABASE_URL", &pg.url);
        if limited {
            // SAFETY: setrlimit and signal are async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    let limit = libc::rlimit {
                        rlim_cur: 8,
                        rlim_max: 8,
                    };
                    libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
                    if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd.output().unwrap()
    };
    let out = migrate(true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let key = dir.path().join("signing.key");
    assert!(
        err.contains(&format!("cannot write the signing key {}", key.display())),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("signing.key"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let out = migrate(false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::read_to_string(&key).unwrap().trim().len() >= 43);
}

/// A `DATABASE_URL` without a scheme may be anything pasted there (a
/// password): it is not repeated. One with a scheme names it.
#[test]
fn a_database_url_without_a_scheme_is_not_repeated() {
    let (ok, err) = migrate_with(&[], &[("DATABASE_URL", "Hunter2Secret")]);
    assert!(!ok);
    assert!(err.contains("it has no scheme"), "{err}");
    assert!(!err.contains("Hunter2"), "{err}");
    let (ok, err) = migrate_with(&[], &[("DATABASE_URL", "mysql://u:Hunter2@h/db")]);
    assert!(!ok);
    assert!(err.contains("it starts with mysql://"), "{err}");
    assert!(!err.contains("Hunter2"), "{err}");
}

/// A Postgres server that refuses connections is named, with the reason,
/// not reported as a pool that timed out; the password never appears.
#[test]
fn an_unreachable_postgres_is_named_with_the_reason() {
    // Port 1 on loopback: nothing listens there.
    let (ok, err) = migrate_with(
        &[],
        &[(
            "DATABASE_URL",
            "postgres://someone:Hunter2@127.0.0.1:1/somedb",
        )],
    );
    assert!(!ok);
    assert!(
        err.contains(
            "cannot open the Postgres database \"somedb\" on 127.0.0.1:1 as user \"someone\""
        ),
        "{err}"
    );
    assert!(err.to_lowercase().contains("refused"), "{err}");
    assert!(!err.contains("Hunter2"), "{err}");
}

/// A database a newer toolgate migrated is said to be one, not reported
/// as a migration "missing in the resolved migrations".
#[tokio::test]
async fn a_database_from_a_newer_toolgate_is_said_to_be_one() {
    use sqlx::Connection as _;
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().to_str().unwrap();
    let migrate = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["--data-dir", data_dir, "migrate"])
            .env_remove("DATABASE_URL")
            .output()
            .unwrap()
    };
    assert!(migrate().status.success());
    let url = format!("sqlite:{}", dir.path().join("toolgate.db").display());
    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99990101, 'from a newer build', 1, x'00', 0)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
    let out = migrate();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("migrated by a newer toolgate: its migration 99990101"),
        "{err}"
    );
}

/// A token lifetime past what a token can say is refused, not wrapped
/// around into a token that has already expired.
#[test]
fn a_token_lifetime_too_long_is_refused() {
    let data_dir = tempfile::tempdir().unwrap();
    let dir = data_dir.path().to_str().unwrap();
    let bin = env!("CARGO_BIN_EXE_toolgate");
    let migrate = std::process::Command::new(bin)
        .args(["--data-dir", dir, "migrate"])
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    assert!(migrate.status.success());
    let token = |ttl: &str| {
        std::process::Command::new(bin)
            .args(["--data-dir", dir, "token", "--sub", "a", "--ttl", ttl])
            .output()
            .unwrap()
    };
    let long = token("18446744073700000000s");
    assert!(!long.status.success());
    assert!(
        String::from_utf8_lossy(&long.stderr).contains("too long"),
        "{}",
        String::from_utf8_lossy(&long.stderr)
    );
    assert!(long.stdout.is_empty());
    assert!(token("100y").status.success());
}

/// A run's stream, quiet while its call runs, gets the same heartbeats.
#[tokio::test]
async fn a_runs_stream_heartbeats_while_its_calls_run() {
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.permissions.allow = vec!["bash(sleep *)".into()];
    })
    .await;
    // A command reports no progress while it runs.
    let run = json!({"threadId": "hb-run", "runId": "r1", "messages": [
        {"id": "a1", "role": "assistant", "toolCalls": [{"id": "w1", "type": "function",
            "function": {"name": "bash", "arguments": "{\"command\": \"sleep 2.5\"}"}}]}]});
    let r = app.post("/v1/threads/hb-run/runs", &run).await;
    assert_eq!(r.status(), 200);
    let stream = r.text().await.unwrap();
    let quiet = stream
        .split("TOOL_CALL_END")
        .nth(1)
        .and_then(|after| after.split("TOOL_CALL_RESULT").next())
        .unwrap_or_else(|| panic!("{stream}"));
    assert!(
        quiet.contains("\n\n: heartbeat\n\n"),
        "a heartbeat while the call ran: {stream}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_heartbeat_and_end_with_one_terminal_event_at_shutdown() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let mut sse = app.events("hb", "", None).await;
    assert_eq!(
        sse.next(Duration::from_secs(5)).await.unwrap().kind(),
        "RUN_STARTED"
    );
    assert!(sse.next(Duration::from_millis(2500)).await.is_none());
    assert!(
        sse.transcript.contains("\n\n: heartbeat\n\n"),
        "idle streams get comment heartbeats: {:?}",
        sse.transcript
    );
    app.shutdown.cancel();
    let last = sse
        .next(Duration::from_secs(5))
        .await
        .expect("a terminal event");
    assert_eq!(last.kind(), "RUN_FINISHED");
    assert_eq!(last.data["threadId"], "hb");
    assert!(
        sse.next(Duration::from_secs(2)).await.is_none(),
        "nothing after the terminal event"
    );
}

/// A run that would not finish within the shutdown grace ends with
/// RUN_ERROR before its connection is closed: never without a terminal
/// event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_unfinished_at_shutdown_ends_with_run_error() {
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.server.shutdown_grace_secs = 2).await;
    let run = json!({"threadId": "down", "runId": "r1", "messages": [
        {"id": "a1", "role": "assistant", "toolCalls": [{"id": "w1", "type": "function",
            "function": {"name": "wait", "arguments": "{\"ms\": 20000}"}}]}]});
    let resp = app.post("/v1/threads/down/runs", &run).await;
    assert_eq!(resp.status(), 200);
    let mut sse = common::SseReader::new(resp);
    sse.until("TOOL_CALL_END").await;
    app.shutdown.cancel();
    let frames = sse.until("RUN_ERROR").await;
    let last = frames.last().unwrap();
    assert_eq!(last.data["code"], "SHUTTING_DOWN", "{:?}", last.data);
    common::assert_agui_conformant(last);
    assert!(
        sse.next(Duration::from_secs(2)).await.is_none(),
        "nothing after the terminal event"
    );
}

/// A tool call or a batch that would not finish within the shutdown grace
/// is answered `503` just before the grace runs out, a problem that says
/// to post it again, not a connection closed without an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_unfinished_at_shutdown_is_answered_503() {
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.server.shutdown_grace_secs = 2).await;
    let mut sse = app.events("down-call", "", None).await;
    sse.until("RUN_STARTED").await;
    let call = app
        .client
        .post(app.url("/v1/threads/down-call/tool-calls"))
        .bearer_auth(&app.token)
        .json(&json!({"id": "w", "name": "wait", "arguments": {"ms": 20000}}))
        .send();
    let answered = tokio::spawn(call);
    sse.until("TOOL_CALL_END").await;
    // A batch, too.
    let batch = app
        .client
        .post(app.url("/v1/threads/down-call/batches"))
        .bearer_auth(&app.token)
        .json(&json!({"calls": [{"id": "b", "name": "wait", "arguments": {"ms": 20000}}]}))
        .send();
    let batch = tokio::spawn(batch);
    sse.until("TOOL_CALL_END").await;
    app.shutdown.cancel();
    for answered in [answered, batch] {
        let r = tokio::time::timeout(Duration::from_secs(10), answered)
            .await
            .expect("answered within the grace")
            .unwrap()
            .unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let p: Value = r.json().await.unwrap();
        assert!(
            p["detail"].as_str().unwrap().contains("post it again"),
            "{p}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_times_out_still_finishes_its_call() {
    let app = TestApp::spawn_with(Backend::Sqlite, |s| s.server.request_timeout_secs = 1).await;
    let resp = app
        .post(
            "/v1/threads/slow/tool-calls",
            &json!({"id": "w", "name": "wait", "arguments": {"ms": 2000}}),
        )
        .await;
    assert_eq!(resp.status(), 408);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    // The answer says the call goes on, and how to get its outcome.
    let p: Value = resp.json().await.unwrap();
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains("goes on and is recorded")
            && detail.contains("post it again with the same id"),
        "{p}"
    );
    // Counted under the route it timed out on.
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    assert!(
        requests_counted(&metrics, "/v1/threads/{thread_id}/tool-calls", "408"),
        "{metrics}"
    );
    // The call was not cut off with the response: re-posting the id waits
    // for it and answers with its result.
    let (s, out) = app
        .call(
            "slow",
            json!({"id": "w", "name": "wait", "arguments": {"ms": 2000}}),
        )
        .await;
    assert!(s == 200 || s == 408, "{s} {out}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (s, out) = app
        .call(
            "slow",
            json!({"id": "w", "name": "wait", "arguments": {"ms": 2000}}),
        )
        .await;
    assert_eq!(s, 200, "{out}");
    assert_eq!(out["replayed"], true);
    assert_eq!(
        out["tool_agent_output"]["result"],
        json!({"waited_ms": 2000})
    );
}

/// Sends a CORS preflight for `POST path` from `origin`.
async fn preflight(app: &TestApp, path: &str, origin: &str) -> reqwest::Response {
    app.client
        .request(reqwest::Method::OPTIONS, app.url(path))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "authorization,content-type,last-event-id",
        )
        .send()
        .await
        .unwrap()
}

fn allowed_origin(resp: &reqwest::Response) -> Option<&str> {
    resp.headers()
        .get("access-control-allow-origin")
        .map(|v| v.to_str().unwrap())
}

/// Without `server.cors_origins` no answer carries CORS headers; with an
/// origin listed, that origin's pages get their preflights answered without
/// a token and can read every answer, a `401`'s challenge and an event
/// stream included, and no other origin gets anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_pages_of_listed_origins_only_can_read_answers() {
    let app = TestApp::spawn(Backend::Sqlite).await;
    let resp = preflight(&app, "/v1/threads/t/tool-calls", "https://app.example").await;
    assert_eq!(allowed_origin(&resp), None, "off by default");
    let resp = app
        .client
        .get(app.url("/v1/tools"))
        .bearer_auth(&app.token)
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(allowed_origin(&resp), None, "off by default");
    let plain_options = |app: &TestApp, path: &str| {
        app.client
            .request(reqwest::Method::OPTIONS, app.url(path))
            .header("origin", "https://app.example")
            .send()
    };
    let mut off = Vec::new();
    for path in ["/v1/tools", "/no/such/route"] {
        off.push(plain_options(&app, path).await.unwrap().status());
    }

    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.server.cors_origins = vec!["https://app.example".into(), "tauri://localhost".into()];
    })
    .await;
    // An OPTIONS request that is not a preflight (no
    // Access-Control-Request-Method) is answered as with CORS off.
    for (path, status_off) in ["/v1/tools", "/no/such/route"].into_iter().zip(off) {
        let resp = plain_options(&app, path).await.unwrap();
        assert_eq!(resp.status(), status_off, "{path}");
        assert!(resp.status().is_client_error(), "{path}: {}", resp.status());
        assert_eq!(
            resp.headers()["content-type"],
            "application/problem+json",
            "{path}"
        );
    }
    // A desktop app's web view is an origin of its own scheme.
    let resp = preflight(&app, "/v1/threads/t/tool-calls", "tauri://localhost").await;
    assert_eq!(allowed_origin(&resp), Some("tauri://localhost"));
    let resp = preflight(&app, "/v1/threads/t/tool-calls", "https://app.example").await;
    assert!(resp.status().is_success(), "{}", resp.status());
    assert_eq!(allowed_origin(&resp), Some("https://app.example"));
    let allowed = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_ascii_lowercase())
            .unwrap_or_default()
    };
    for wanted in ["authorization", "content-type", "last-event-id"] {
        assert!(
            allowed("access-control-allow-headers").contains(wanted),
            "{wanted}"
        );
    }
    assert!(allowed("access-control-allow-methods").contains("post"));
    // Another origin: no permission, whatever it asks.
    let resp = preflight(&app, "/v1/threads/t/tool-calls", "https://evil.example").await;
    assert_eq!(allowed_origin(&resp), None);

    // The listed origin reads a call's answer and its request id...
    let resp = app
        .client
        .post(app.url("/v1/threads/cors/tool-calls"))
        .bearer_auth(&app.token)
        .header("origin", "https://app.example")
        .json(&json!({"id": "c1", "name": "echo", "arguments": {"text": "hi"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(allowed_origin(&resp), Some("https://app.example"));
    let exposed = resp.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_ascii_lowercase();
    assert!(exposed.contains("x-request-id"), "{exposed}");
    assert!(exposed.contains("www-authenticate"), "{exposed}");
    // ...an event stream...
    let resp = app
        .client
        .get(app.url("/v1/threads/cors/events"))
        .bearer_auth(&app.token)
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(allowed_origin(&resp), Some("https://app.example"));
    let mut sse = SseReader::new(resp);
    assert_eq!(
        sse.next(Duration::from_secs(10)).await.unwrap().kind(),
        "RUN_STARTED"
    );
    // ...and why it was refused, with no token: allowing an origin grants
    // nothing by itself.
    let resp = app
        .client
        .get(app.url("/v1/threads/cors/history"))
        .header("origin", "https://app.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(allowed_origin(&resp), Some("https://app.example"));
    assert!(resp.headers().contains_key("www-authenticate"));
    let resp = app
        .client
        .get(app.url("/v1/threads/cors/history"))
        .bearer_auth(&app.token)
        .header("origin", "https://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(allowed_origin(&resp), None);
}

/// An undo cut by a restart after it had taken effect (its file restored,
/// its edit-history entry marked undone, its call `INTERRUPTED`, the
/// original not marked undone) is found out by the next attempt, which
/// finds the change undone already: the original is marked undone by the
/// cut attempt, the rollback reports it `already_undone`, and the run's
/// next rollback replays that report, not another failed attempt. An attempt cut
/// before it took effect, whose change has since been dropped from the
/// history as too old, is no such proof: that rollback says `undo_failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undo_cut_by_a_restart_after_it_took_effect_counts_as_done() {
    let data_dir = tempfile::tempdir().unwrap();
    let mut first = serve_binary(data_dir.path(), None).await;
    let client = reqwest::Client::new();
    let post = |served: &Served, path: &str, body: Value| {
        let request = client
            .post(format!("{}{path}", served.base))
            .bearer_auth(&served.token)
            .json(&body);
        async move {
            let r = request.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let (s, out) = post(
        &first,
        "/v1/threads/cut/tool-calls",
        json!({"id": "w1", "run_id": "R", "name": "write_file", "arguments": {"path": "w1.txt", "content": "x"}}),
    )
    .await;
    assert_eq!(s, 200, "{out}");
    let (s, report) = post(&first, "/v1/threads/cut/runs/R/rollback", json!({})).await;
    assert_eq!(s, 200, "{report}");
    assert_eq!(report["steps"][0]["action"], "undone", "{report}");
    // w2's entry dropped by 20 later writes of its file; its undo fails.
    let write = |id: &str, run: &str| json!({"id": id, "run_id": run, "name": "write_file", "arguments": {"path": "w2.txt", "content": id}});
    let (s, out) = post(&first, "/v1/threads/drop/tool-calls", write("w2", "R2")).await;
    assert_eq!(s, 200, "{out}");
    for i in 0..20 {
        let (s, out) = post(
            &first,
            "/v1/threads/drop/tool-calls",
            write(&format!("n{i}"), "R3"),
        )
        .await;
        assert_eq!(s, 200, "{out}");
    }
    let (s, report) = post(&first, "/v1/threads/drop/runs/R2/rollback", json!({})).await;
    assert_eq!(s, 200, "{report}");
    assert_eq!(report["steps"][0]["action"], "undo_failed", "{report}");
    first.child.start_kill().unwrap();
    first.child.wait().await.unwrap();
    // What a kill between the undo's effect and its result leaves: the
    // undo finished as interrupted, the original not marked undone.
    let db = rusqlite::Connection::open(data_dir.path().join("toolgate.db")).unwrap();
    let interrupted = json!({"tool_name": "undo_edit", "tool_call_id": "undo_w1",
        "status": "failure", "result": null, "error": {"code": "INTERRUPTED",
        "message": "toolgate stopped while the call was running", "retryable": true}});
    db.execute_batch(&format!(
        "UPDATE tool_calls SET undone_by = NULL WHERE id = 'w1';
         UPDATE tool_calls SET status = 'failure', output = '{interrupted}' WHERE id = 'undo_w1';
         UPDATE tool_calls SET output = '{interrupted}' WHERE id = 'undo_w2';"
    ))
    .unwrap();
    drop(db);

    let second = serve_binary(data_dir.path(), None).await;
    assert_eq!(
        second.get_json("/v1/threads/cut/tool-calls/w1").await["undo"],
        "available"
    );
    let (s, report) = post(&second, "/v1/threads/cut/runs/R/rollback", json!({})).await;
    assert_eq!(s, 200, "{report}");
    let step = &report["steps"][0];
    assert_eq!(step["action"], "already_undone", "{report}");
    assert_eq!(step["undo_call_id"], "undo_w1", "{report}");
    assert_eq!(
        step["detail"],
        "undo_w1 undid it before a restart cut it short; undo2_w1 found it undone already"
    );
    let w1 = second.get_json("/v1/threads/cut/tool-calls/w1").await;
    assert_eq!(
        (&w1["undo"], &w1["undone_by"]),
        (&json!("undone"), &json!("undo_w1")),
        "{w1}"
    );
    let (s, again) = post(&second, "/v1/threads/cut/runs/R/rollback", json!({})).await;
    assert_eq!(s, 200, "{again}");
    assert_eq!(
        (&again["replayed"], &again["steps"]),
        (&json!(true), &report["steps"]),
        "the last report, not another attempt: {again}"
    );
    let (s, report) = post(&second, "/v1/threads/drop/runs/R2/rollback", json!({})).await;
    assert_eq!(s, 200, "{report}");
    assert_eq!(report["steps"][0]["action"], "undo_failed", "{report}");
    assert!(
        report["steps"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("dropped as too old"),
        "{report}"
    );
    let w2 = second.get_json("/v1/threads/drop/tool-calls/w2").await;
    assert!(w2.get("undone_by").is_none(), "{w2}");
}
