//! Test harness: the real server on port 0, with a fresh SQLite file or a
//! fresh Postgres database, spoken to over HTTP and SSE.
#![allow(dead_code)]

pub mod node;

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;
use toolgate::config::Settings;
use toolgate::startup::Application;

pub const PG_ADMIN_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// How [`TestApp::refuse_messages_holding`] turns a message down.
#[derive(Clone, Copy, Debug)]
pub enum Refusal {
    /// As data the database refuses (a constraint, a trigger's exception).
    Data,
    /// With an error nobody can classify (an internal error, a function
    /// failing on its input).
    Failure,
    /// As a database that cannot write just now (Postgres `disk_full`).
    DiskFull,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    pub token: String,
    pub settings: Settings,
    pub shutdown: tokio_util::sync::CancellationToken,
    pub data_dir: tempfile::TempDir,
    pub pg: Option<PgDatabase>,
    pub registry: std::sync::Arc<toolgate::tools::Registry>,
    pub engine: std::sync::Arc<toolgate::engine::Engine>,
    handle: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// A database created for one test and dropped after it.
pub struct PgDatabase {
    pub admin_url: String,
    pub name: String,
    pub url: String,
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let admin = self.admin_url.clone();
        let name = self.name.clone();
        // Best effort, on a fresh runtime: the test's runtime may be gone.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                use sqlx::Connection;
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}

/// A fresh Postgres database for `Backend::Postgres`; nothing for SQLite.
pub async fn database_for(backend: Backend) -> Option<PgDatabase> {
    match backend {
        Backend::Sqlite => None,
        Backend::Postgres => Some(create_pg_database().await),
    }
}

pub async fn create_pg_database() -> PgDatabase {
    use sqlx::Connection;
    let admin_url =
        std::env::var("TOOLGATE_TEST_PG").unwrap_or_else(|_| PG_ADMIN_DEFAULT.to_string());
    let name = format!("toolgate_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(&admin_url)
        .await
        .expect("Postgres must be reachable for the tests (see README: Postgres)");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .expect("create test database");
    let base = admin_url
        .rsplit_once('/')
        .map(|(b, _)| b)
        .unwrap_or(&admin_url);
    PgDatabase {
        url: format!("{base}/{name}"),
        admin_url,
        name,
    }
}

/// On the Postgres database at `url`, refuse every message whose content
/// holds `marker`, `how` the database would: a trigger raising that error.
pub async fn refuse_pg_messages_holding(url: &str, marker: &str, how: Refusal) {
    use sqlx::Connection;
    // P0001 (raise_exception): refused data; XX000: an internal error
    // nobody can classify; 53100: a full disk.
    let code = match how {
        Refusal::Data => "P0001",
        Refusal::Failure => "XX000",
        Refusal::DiskFull => "53100",
    };
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(&format!(
        "CREATE FUNCTION refuse_marker() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN IF NEW.content LIKE '%{marker}%' THEN \
         RAISE EXCEPTION 'refused by the test trigger' USING ERRCODE = '{code}'; \
         END IF; RETURN NEW; END $$; \
         CREATE TRIGGER refuse_marker BEFORE INSERT ON messages \
         FOR EACH ROW EXECUTE FUNCTION refuse_marker();"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
}

/// Undo [`refuse_pg_messages_holding`]: the database takes every message.
pub async fn allow_pg_messages(url: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql("DROP TRIGGER refuse_marker ON messages")
        .execute(&mut conn)
        .await
        .unwrap();
}

pub fn test_settings(data_dir: &std::path::Path) -> Settings {
    let mut settings = Settings::default();
    settings.server.bind = "127.0.0.1:0".parse().unwrap();
    settings.server.sse_heartbeat_secs = 1;
    settings.storage.data_dir = data_dir.to_path_buf();
    settings.tools.wait_max_ms = 30_000;
    settings
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> TestApp {
        Self::spawn_with(backend, |_| {}).await
    }

    pub async fn spawn_with(backend: Backend, tweak: impl FnOnce(&mut Settings)) -> TestApp {
        let data_dir = tempfile::tempdir().unwrap();
        let mut settings = test_settings(data_dir.path());
        let pg = database_for(backend).await;
        if let Some(pg) = &pg {
            settings.storage.database_url = Some(pg.url.clone().into());
        }
        tweak(&mut settings);
        Self::start(settings, data_dir, pg).await
    }

    pub async fn start(
        settings: Settings,
        data_dir: tempfile::TempDir,
        pg: Option<PgDatabase>,
    ) -> TestApp {
        let app = Application::build(settings.clone())
            .await
            .expect("application builds");
        let base = format!("http://{}", app.local_addr());
        let token = app
            .dev_token
            .clone()
            .expect("test apps use a generated key");
        let shutdown = app.shutdown_token();
        let registry = app.registry();
        let engine = app.engine();
        let handle = tokio::spawn(app.run());
        TestApp {
            base,
            client: reqwest::Client::new(),
            token,
            settings,
            shutdown,
            data_dir,
            pg,
            registry,
            engine,
            handle,
        }
    }

    /// Stop serving and give back what a restart needs.
    pub async fn stop(self) -> (Settings, tempfile::TempDir, Option<PgDatabase>) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.handle).await;
        (self.settings, self.data_dir, self.pg)
    }

    /// Signal shutdown; whether the server has ended within `limit`.
    pub async fn ended_within(self, limit: Duration) -> bool {
        self.shutdown.cancel();
        tokio::time::timeout(limit, self.handle).await.is_ok()
    }

    /// A trigger that makes the database turn down any message whose
    /// content holds `marker`, the way `how` says.
    /// The embedded SQLite database's URL (meaningful on that backend).
    fn sqlite_url(&self) -> String {
        let path = self.data_dir.path().join("toolgate.db");
        format!("sqlite://{}", path.display())
    }

    /// What `sql` (one row, one column, `$1` bound to `bind`) reads from
    /// the database, as it holds it.
    pub async fn stored_scalar<T>(&self, sql: &str, bind: &str) -> T
    where
        T: Send + Unpin,
        for<'r> T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
        for<'r> T: sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
    {
        use sqlx::Connection;
        match &self.pg {
            Some(pg) => {
                let mut conn = sqlx::PgConnection::connect(&pg.url).await.unwrap();
                let row: (T,) = sqlx::query_as(sql)
                    .bind(bind)
                    .fetch_one(&mut conn)
                    .await
                    .unwrap();
                row.0
            }
            None => {
                let mut conn = sqlx::SqliteConnection::connect(&self.sqlite_url())
                    .await
                    .unwrap();
                let row: (T,) = sqlx::query_as(sql)
                    .bind(bind)
                    .fetch_one(&mut conn)
                    .await
                    .unwrap();
                row.0
            }
        }
    }

    /// How many rows the database holds for `thread` in the tables of a
    /// thread's content.
    pub async fn rows_of_thread(&self, thread: &str) -> i64 {
        let mut total = 0;
        for table in [
            "messages",
            "events",
            "tool_calls",
            "approvals",
            "declared_calls",
            "closed_runs",
        ] {
            let sql = format!("SELECT COUNT(*) FROM {table} WHERE thread_id = $1");
            total += self.stored_scalar::<i64>(&sql, thread).await;
        }
        total
    }

    /// A message's `metadata` as the database holds it, as text.
    pub async fn stored_metadata(&self, message_id: &str) -> String {
        self.stored_scalar(
            "SELECT CAST(metadata AS TEXT) FROM messages WHERE id = $1",
            message_id,
        )
        .await
    }

    /// Put a file into the dev owner's workspace.
    pub fn put_file(&self, name: &str, contents: &str) {
        let dir = self
            .data_dir
            .path()
            .join("workspaces")
            .join(toolgate::workspace::Workspaces::owner_dir_name("dev"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), contents).unwrap();
    }

    pub async fn refuse_messages_holding(&self, marker: &str, how: Refusal) {
        use sqlx::Connection;
        match &self.pg {
            Some(pg) => refuse_pg_messages_holding(&pg.url, marker, how).await,
            None => {
                // RAISE(ABORT): a constraint failure, so refused data; a
                // function failing on its input: SQLITE_ERROR.
                let body = match how {
                    Refusal::Data => "SELECT RAISE(ABORT, 'refused by the test trigger');",
                    Refusal::Failure => "SELECT json('not json');",
                    Refusal::DiskFull => panic!("a SQLite trigger cannot raise SQLITE_FULL"),
                };
                let mut conn = sqlx::SqliteConnection::connect(&self.sqlite_url())
                    .await
                    .unwrap();
                sqlx::raw_sql(&format!(
                    "CREATE TRIGGER refuse_marker BEFORE INSERT ON messages \
                     WHEN NEW.content LIKE '%{marker}%' BEGIN {body} END;"
                ))
                .execute(&mut conn)
                .await
                .unwrap();
            }
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// A token for another owner, signed with this server's key.
    pub fn token_for(&self, sub: &str) -> String {
        self.token_with_ttl(sub, 3600)
    }

    /// A token of `sub` valid for `ttl_secs` seconds.
    pub fn token_with_ttl(&self, sub: &str, ttl_secs: u64) -> String {
        let keys = toolgate::auth::Keys::load(&self.settings.auth, self.data_dir.path()).unwrap();
        keys.mint(sub, ttl_secs).unwrap()
    }

    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn put(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .put(self.url(path))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn delete_as(&self, token: &str, path: &str) -> reqwest::Response {
        self.client
            .delete(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    pub async fn post_as(&self, token: &str, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
    }

    pub async fn get_json(&self, path: &str) -> Value {
        let resp = self.get(path).await;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap();
        assert!(status.is_success(), "GET {path} → {status}: {body}");
        body
    }

    pub async fn call(&self, thread: &str, body: Value) -> (u16, Value) {
        let resp = self
            .post(&format!("/v1/threads/{thread}/tool-calls"), &body)
            .await;
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// Re-post `call` in `thread` until it answers `200` (a call decided
    /// or expired finishes in the background; until then a re-post is a
    /// `202`); its outcome. Panics after 30 s.
    pub async fn call_until_done(&self, thread: &str, call: &Value) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (status, out) = self.call(thread, call.clone()).await;
            if status == 200 {
                return out;
            }
            assert!(
                status == 202 && std::time::Instant::now() < deadline,
                "{call} answers {status} and no outcome: {out}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    pub async fn events(
        &self,
        thread: &str,
        query: &str,
        last_event_id: Option<&str>,
    ) -> SseReader {
        self.events_as(&self.token, thread, query, last_event_id)
            .await
    }

    /// [`events`](Self::events) opened with `token`. Nothing is read
    /// before the reader's first `next`.
    pub async fn events_as(
        &self,
        token: &str,
        thread: &str,
        query: &str,
        last_event_id: Option<&str>,
    ) -> SseReader {
        let mut req = self
            .client
            .get(self.url(&format!("/v1/threads/{thread}/events{query}")))
            .bearer_auth(token)
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200, "events stream opens");
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        SseReader::new(resp)
    }

    /// Every message of a thread, through the public history API.
    pub async fn history(&self, thread: &str) -> Vec<Value> {
        history_at(&self.base, &self.token, thread).await
    }
}

/// Every message of `thread` on the server at `base`, oldest first, through
/// `/history`'s pages; none for a thread the server answers `404` for.
pub async fn history_at(base: &str, token: &str, thread: &str) -> Vec<Value> {
    let client = reqwest::Client::new();
    let mut all = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let q = match &before {
            Some(c) => format!("?limit=200&before={c}"),
            None => "?limit=200".into(),
        };
        let resp = client
            .get(format!("{base}/v1/threads/{thread}/history{q}"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        if resp.status() == 404 {
            return all;
        }
        let page: Value = resp.json().await.unwrap();
        let mut msgs = page["messages"].as_array().unwrap().clone();
        msgs.append(&mut all);
        all = msgs;
        match page.get("next_cursor").and_then(Value::as_str) {
            Some(c) => before = Some(c.to_string()),
            None => return all,
        }
    }
}

/// One SSE frame.
#[derive(Debug, Clone)]
pub struct Frame {
    pub id: Option<i64>,
    /// The `data:` text exactly as sent.
    pub raw: String,
    pub data: Value,
}

impl Frame {
    pub fn kind(&self) -> &str {
        self.data["type"].as_str().unwrap_or("")
    }
}

pub struct SseReader {
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: String,
    /// Raw bytes seen, to check framing.
    pub transcript: String,
}

impl SseReader {
    pub fn new(resp: reqwest::Response) -> Self {
        SseReader {
            stream: resp.bytes_stream().boxed(),
            buffer: String::new(),
            transcript: String::new(),
        }
    }

    /// The next event frame (comments skipped), or None at end of stream or
    /// after `wait` without one.
    pub async fn next(&mut self, wait: Duration) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(pos) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..pos + 2).collect();
                let mut id = None;
                let mut data = Vec::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id: ") {
                        id = Some(v.parse().expect("numeric ids"));
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data.push(v.to_string());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.to_string());
                    }
                }
                if data.is_empty() {
                    continue; // heartbeat comment
                }
                let raw = data.join("\n");
                let parsed = serde_json::from_str(&raw).expect("data is JSON");
                return Some(Frame {
                    id,
                    raw,
                    data: parsed,
                });
            }
            let chunk = tokio::time::timeout_at(deadline, self.stream.next())
                .await
                .ok()??;
            let text = String::from_utf8(chunk.ok()?.to_vec()).expect("utf-8 stream");
            self.transcript.push_str(&text);
            self.buffer.push_str(&text);
        }
    }

    /// Read frames until one of type `kind` (inclusive).
    pub async fn until(&mut self, kind: &str) -> Vec<Frame> {
        let mut frames = Vec::new();
        while let Some(f) = self.next(Duration::from_secs(10)).await {
            let done = f.kind() == kind;
            frames.push(f);
            if done {
                return frames;
            }
        }
        panic!(
            "stream ended or stalled before {kind}; got {:?}",
            frames
                .iter()
                .map(|f| f.kind().to_string())
                .collect::<Vec<_>>()
        );
    }

    /// The next `n` calls announced: each `TOOL_CALL_START`'s `toolCallId`
    /// and `parentMessageId` (if it names one).
    pub async fn call_starts(&mut self, n: usize) -> Vec<(Value, Option<Value>)> {
        let mut starts = Vec::new();
        while starts.len() < n {
            let f = self
                .next(Duration::from_secs(5))
                .await
                .unwrap_or_else(|| panic!("{n} calls announced; got {starts:?}"));
            if f.kind() == "TOOL_CALL_START" {
                starts.push((
                    f.data["toolCallId"].clone(),
                    f.data.get("parentMessageId").cloned(),
                ));
            }
        }
        starts
    }
}

/// Checks the AG-UI wire rules on one event: camelCase keys at the top
/// level, integer timestamp, no nulls anywhere, no empty delta.
pub fn assert_agui_conformant(frame: &Frame) {
    let obj = frame.data.as_object().expect("event is an object");
    assert!(obj["type"].is_string());
    assert!(
        obj.get("timestamp").is_some_and(|t| t.is_i64()),
        "integer timestamp: {}",
        frame.raw
    );
    for key in obj.keys() {
        assert!(
            !key.contains('_'),
            "top-level key {key} is camelCase: {}",
            frame.raw
        );
    }
    fn no_nulls(v: &Value, raw: &str) {
        match v {
            Value::Null => panic!("null in event: {raw}"),
            Value::Array(a) => a.iter().for_each(|x| no_nulls(x, raw)),
            Value::Object(o) => {
                for (k, x) in o {
                    // ui_schema / tool data may legitimately hold nulls from a tool result.
                    if k != "metadata" {
                        no_nulls(x, raw)
                    }
                }
            }
            _ => {}
        }
    }
    no_nulls(&frame.data, &frame.raw);
    if let Some(delta) = obj.get("delta") {
        assert!(
            !delta.as_str().unwrap_or("").is_empty(),
            "empty delta: {}",
            frame.raw
        );
    }
}

/// Generates one test per backend from an async fn taking the backend.
#[macro_export]
macro_rules! both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() { super::$name(super::common::Backend::Sqlite).await }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() { super::$name(super::common::Backend::Postgres).await }
            )*
        }
    };
}

/// The message of the entry of a tool error's `errors` at `path` (a JSON
/// pointer into the call's arguments).
pub fn error_at(errors: &Value, path: &str) -> String {
    errors
        .as_array()
        .unwrap_or_else(|| panic!("errors: {errors}"))
        .iter()
        .find(|e| e["path"] == path)
        .unwrap_or_else(|| panic!("{path}: {errors}"))["message"]
        .as_str()
        .unwrap()
        .to_string()
}
