//! Load benchmark: the real server in-process on 127.0.0.1:0, driven over
//! loopback HTTP by N keep-alive connections, each sending requests one
//! after another.
//!
//!   cargo bench --bench load [-- --connections 64 --seconds 10]
//!
//! Env: BENCH_CONNECTIONS, BENCH_SECONDS, TOOLGATE_TEST_PG (the Postgres
//! admin URL), and any TOOLGATE_SECTION__KEY setting (e.g.
//! TOOLGATE_STORAGE__WRITER_LINGER_MS=2). Scenarios, all in one run:
//!   (a) GET /healthz (baseline: HTTP + routing, no auth, no storage)
//!   (a2) POST /v1/threads/{t}/messages (a user message) and GET
//!        /v1/threads/{t}/history?limit=1 on SQLite: a durable write without
//!        a tool, and an authenticated read
//!   (b) POST /v1/threads/{t}/tool-calls `echo` on SQLite, one thread per connection
//!   (b1) GET /v1/threads/{t}/events on threads holding 25 echo results:
//!        resumed at the last event (nothing to replay), then from the start
//!        (every result event rebuilt from its tool message)
//!   (b2) `bash {command: "true"}` and `read_file` of a 1 MB file (the
//!        256,000 characters one call shows at most), same server
//!   (c) the same on Postgres (a fresh database, dropped at the end)
//!
//! The server runs on its own multi-thread runtime (own OS thread), the load
//! generator on another, so they do not share a scheduler. Requests started
//! during the 1 s warm-up, or finished after the window, are not counted.
//! Before every scenario but the first baseline, a baseline window on the
//! same server: the scenario's ratio is taken against it, since the host's
//! speed drifts.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use sqlx::Connection;
use tokio_util::sync::CancellationToken;
use toolgate::config::Settings;
use toolgate::startup::Application;

const WARMUP: Duration = Duration::from_secs(1);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound per connection and scenario, whatever the duration.
const MAX_REQUESTS_PER_CONNECTION: u64 = 1_000_000;
const PG_ADMIN_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/postgres";

const USAGE: &str = "\
toolgate load benchmark: the real server over HTTP, each scenario's req/s,
latency and CPU per request against the raw endpoint of the same run.

usage: cargo bench --bench load [-- OPTIONS]
  --connections N   concurrent connections (BENCH_CONNECTIONS, default 64)
  --seconds N       window per scenario (BENCH_SECONDS, default 10)
  --only TEXT       the baseline plus the scenarios whose label holds TEXT
                    (BENCH_ONLY)
  -h, --help        this text
Settings of the server under test: TOOLGATE_SECTION__KEY variables.
Postgres admin URL: TOOLGATE_TEST_PG.";

struct Options {
    connections: usize,
    seconds: u64,
    /// Run only the scenarios whose label contains this text (the baseline
    /// always runs): `--only echo`, or BENCH_ONLY.
    only: Option<String>,
}

impl Options {
    /// Flags win over the environment; unknown arguments (cargo passes
    /// `--bench`) are ignored.
    fn parse() -> Options {
        let env = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let mut opts = Options {
            connections: env("BENCH_CONNECTIONS", 64) as usize,
            seconds: env("BENCH_SECONDS", 10),
            only: std::env::var("BENCH_ONLY").ok().filter(|v| !v.is_empty()),
        };
        let args: Vec<String> = std::env::args().collect();
        if args.iter().any(|a| a == "--help" || a == "-h") {
            println!("{USAGE}");
            std::process::exit(0);
        }
        for pair in args.windows(2) {
            match (pair[0].as_str(), pair[1].parse::<u64>()) {
                ("--connections", Ok(n)) => opts.connections = n as usize,
                ("--seconds", Ok(n)) => opts.seconds = n,
                ("--only", _) => opts.only = Some(pair[1].clone()),
                _ => {}
            }
        }
        opts.connections = opts.connections.max(1);
        opts.seconds = opts.seconds.max(1);
        opts
    }
}

/// A server on its own runtime and OS thread.
struct Server {
    base: String,
    token: String,
    shutdown: CancellationToken,
    thread: JoinHandle<()>,
    _data_dir: tempfile::TempDir,
}

impl Server {
    fn start(database_url: Option<String>) -> anyhow::Result<Server> {
        let data_dir = tempfile::tempdir()?;
        let mut settings = Settings::load(None)?;
        settings.server.bind = "127.0.0.1:0".parse()?;
        settings.storage.data_dir = data_dir.path().to_path_buf();
        settings.storage.database_url = database_url.map(Into::into);
        // The bash scenario runs `true`: allow exactly that without approval.
        settings.permissions.allow = vec!["bash(true)".into()];
        let (ready_tx, ready_rx) = std_mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .thread_name("server")
                .enable_all()
                .build()
                .expect("server runtime");
            rt.block_on(async move {
                let app = match Application::build(settings).await {
                    Ok(app) => app,
                    Err(e) => return ready_tx.send(Err(e)).unwrap(),
                };
                let token = app
                    .dev_token
                    .clone()
                    .expect("a generated key mints a dev token");
                ready_tx
                    .send(Ok((
                        format!("http://{}", app.local_addr()),
                        token,
                        app.shutdown_token(),
                    )))
                    .unwrap();
                if let Err(e) = app.run().await {
                    eprintln!("server stopped with an error: {e:#}");
                }
            });
        });
        let (base, token, shutdown) = ready_rx.recv()??;
        Ok(Server {
            base,
            token,
            shutdown,
            thread,
            _data_dir: data_dir,
        })
    }

    /// Put a file in the dev owner's workspace.
    fn put_file(&self, name: &str, contents: &[u8]) -> anyhow::Result<()> {
        let dir = self._data_dir.path().join("workspaces").join("u_dev");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), contents)?;
        Ok(())
    }

    fn stop(self) {
        self.shutdown.cancel();
        let _ = self.thread.join();
    }
}

/// A database created for this run, dropped at the end.
struct PgDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl PgDatabase {
    async fn create() -> anyhow::Result<PgDatabase> {
        let admin_url =
            std::env::var("TOOLGATE_TEST_PG").unwrap_or_else(|_| PG_ADMIN_DEFAULT.to_string());
        let name = format!("toolgate_bench_{}", uuid::Uuid::new_v4().simple());
        let mut conn = tokio::time::timeout(
            Duration::from_secs(5),
            sqlx::PgConnection::connect(&admin_url),
        )
        .await??;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await?;
        let base = admin_url
            .rsplit_once('/')
            .map(|(b, _)| b)
            .unwrap_or(&admin_url);
        Ok(PgDatabase {
            url: format!("{base}/{name}"),
            admin_url,
            name,
        })
    }

    async fn drop_database(self) {
        match sqlx::PgConnection::connect(&self.admin_url).await {
            Ok(mut conn) => {
                let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
                if let Err(e) = sqlx::query(&sql).execute(&mut conn).await {
                    eprintln!("could not drop {}: {e}", self.name);
                }
            }
            Err(e) => eprintln!("could not drop {}: {e}", self.name),
        }
    }
}

#[derive(Default)]
struct Tally {
    /// Durations of the requests started and finished inside the window.
    latencies: Vec<Duration>,
    /// Non-2xx answers and transport errors, warm-up included.
    errors: u64,
    first_error: Option<String>,
}

/// Sums of the writer's histograms from `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
struct WriterFigures {
    batches: f64,
    units: f64,
    busy_seconds: f64,
    wall_seconds: f64,
    /// CPU time of the writer threads (user + system).
    cpu_seconds: f64,
}

impl WriterFigures {
    async fn read(base: &str) -> Option<WriterFigures> {
        let text = reqwest::get(format!("{base}/metrics"))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let value = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        Some(WriterFigures {
            batches: value("toolgate_writer_batch_units_count"),
            units: value("toolgate_writer_batch_units_sum"),
            busy_seconds: value("toolgate_writer_batch_seconds_sum"),
            wall_seconds: 0.0,
            cpu_seconds: writer_cpu_seconds(),
        })
    }

    fn since(self, before: WriterFigures, wall: Duration) -> Option<WriterFigures> {
        let batches = self.batches - before.batches;
        (batches > 0.0).then_some(WriterFigures {
            batches,
            units: self.units - before.units,
            busy_seconds: self.busy_seconds - before.busy_seconds,
            wall_seconds: wall.as_secs_f64(),
            cpu_seconds: self.cpu_seconds - before.cpu_seconds,
        })
    }
}

/// Which part of this process a thread belongs to, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    /// The server's tokio runtime: HTTP, auth, the pipeline, the tools.
    Server,
    /// The group-commit writer thread(s).
    Writer,
    /// SQLite's checkpointer thread(s).
    Checkpointer,
    /// sqlx's SQLite connection threads, which run the reads.
    Reads,
    /// The load generator's runtime.
    Load,
}

impl Part {
    const ALL: [Part; 5] = [
        Part::Server,
        Part::Writer,
        Part::Checkpointer,
        Part::Reads,
        Part::Load,
    ];

    fn of(comm: &str) -> Option<Part> {
        match comm {
            "server" => Some(Part::Server),
            "toolgate-writer" => Some(Part::Writer),
            // The kernel keeps 15 bytes of a thread's name.
            "toolgate-checkp" => Some(Part::Checkpointer),
            "load" => Some(Part::Load),
            _ if comm.starts_with("sqlx-sqlite-wor") => Some(Part::Reads),
            _ => None,
        }
    }
}

/// CPU time (user + system) so far of each of this process's threads that
/// belongs to a [`Part`], by thread id, from `/proc` (empty elsewhere).
/// Unlike wall time it hardly moves when the host is noisy.
fn thread_cpu() -> BTreeMap<u32, (Part, f64)> {
    let mut threads = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return threads;
    };
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let Some(part) = Part::of(comm.trim_end()) else {
            continue;
        };
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // After the command name in parentheses: state, then utime and stime
        // as the 12th and 13th fields.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks: u64 = [11, 12]
            .iter()
            .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
            .sum();
        threads.insert(tid, (part, ticks as f64 / ticks_per_second));
    }
    threads
}

/// CPU seconds per [`Part`] between two [`thread_cpu`] readings, over the
/// threads present in both (a thread that started or ended in between is
/// left to the process total).
fn cpu_by_part(
    before: &BTreeMap<u32, (Part, f64)>,
    after: &BTreeMap<u32, (Part, f64)>,
) -> BTreeMap<Part, f64> {
    let mut parts = BTreeMap::new();
    for (tid, (part, seconds)) in after {
        if let Some((_, earlier)) = before.get(tid) {
            *parts.entry(*part).or_insert(0.0) += seconds - earlier;
        }
    }
    parts
}

/// CPU time so far of this process's group-commit writer threads.
fn writer_cpu_seconds() -> f64 {
    thread_cpu()
        .values()
        .filter(|(part, _)| *part == Part::Writer)
        .map(|(_, seconds)| seconds)
        .sum()
}

struct Row {
    name: &'static str,
    requests: usize,
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
    errors: u64,
    first_error: Option<String>,
    /// CPU time of this whole process (server, load generator, writer) over
    /// the window, per counted request, in µs (a Postgres server's own
    /// processes are not included).
    cpu_us_per_request: f64,
    /// That CPU time split by part of the process, in µs per counted
    /// request (what no part's threads account for is the rest).
    cpu_us_by_part: BTreeMap<Part, f64>,
    /// The group-commit writer over the scenario (warm-up included).
    writer: Option<WriterFigures>,
    /// req/s of `GET /healthz` on the same server in the window just before
    /// this scenario's (none for the baseline row itself).
    paired_baseline_rps: Option<f64>,
}

impl Row {
    /// req/s as a share of the paired baseline's, or of `first` (the run's
    /// first baseline) for the baseline row.
    fn ratio(&self, first: f64) -> f64 {
        self.rps / self.paired_baseline_rps.unwrap_or(first)
    }
}

/// CPU time (user + system) of this process so far.
fn process_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a rusage for RUSAGE_SELF into the pointer,
    // which points at a zeroed rusage we own.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The q-quantile of sorted durations (nearest rank), in milliseconds.
fn quantile_ms(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e3
}

/// Drive `connections` loops of `request(client, connection, i)` for the
/// warm-up plus `window`.
async fn measure<F, Fut>(
    name: &'static str,
    connections: usize,
    window: Duration,
    request: F,
) -> Row
where
    F: Fn(reqwest::Client, usize, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), String>> + Send,
{
    let begin = Instant::now() + WARMUP;
    let end = begin + window;
    let cpu = tokio::spawn(async move {
        tokio::time::sleep_until(begin.into()).await;
        let at_begin = (process_cpu(), thread_cpu());
        tokio::time::sleep_until(end.into()).await;
        let at_end = (process_cpu(), thread_cpu());
        (at_end.0 - at_begin.0, cpu_by_part(&at_begin.1, &at_end.1))
    });
    let mut tasks = Vec::with_capacity(connections);
    for conn in 0..connections {
        let request = request.clone();
        tasks.push(tokio::spawn(async move {
            // One client per connection: its pool holds exactly one
            // keep-alive connection, since requests are sequential.
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(1)
                .timeout(REQUEST_TIMEOUT)
                .build()
                .expect("http client");
            let mut tally = Tally::default();
            for i in 0..MAX_REQUESTS_PER_CONNECTION {
                let started = Instant::now();
                if started >= end {
                    break;
                }
                let outcome = request(client.clone(), conn, i).await;
                let finished = Instant::now();
                match outcome {
                    Ok(()) if started >= begin && finished <= end => {
                        tally.latencies.push(finished - started)
                    }
                    Ok(()) => {}
                    Err(e) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert(e);
                    }
                }
            }
            tally
        }));
    }
    let mut all = Tally::default();
    for task in tasks {
        let mut t = task.await.expect("load task");
        all.latencies.append(&mut t.latencies);
        all.errors += t.errors;
        if all.first_error.is_none() {
            all.first_error = t.first_error;
        }
    }
    all.latencies.sort_unstable();
    let (cpu, by_part) = cpu.await.expect("cpu sampler");
    let per_request = |seconds: f64| seconds * 1e6 / all.latencies.len().max(1) as f64;
    Row {
        cpu_us_per_request: per_request(cpu.as_secs_f64()),
        cpu_us_by_part: by_part
            .into_iter()
            .map(|(part, seconds)| (part, per_request(seconds)))
            .collect(),
        name,
        requests: all.latencies.len(),
        rps: all.latencies.len() as f64 / window.as_secs_f64(),
        p50_ms: quantile_ms(&all.latencies, 0.50),
        p99_ms: quantile_ms(&all.latencies, 0.99),
        errors: all.errors,
        first_error: all.first_error,
        writer: None,
        paired_baseline_rps: None,
    }
}

fn healthz(
    server: &Server,
) -> impl Fn(reqwest::Client, usize, u64) -> reqwest::RequestBuilder + Clone + use<> {
    let url = format!("{}/healthz", server.base);
    move |client, _, _| client.get(&url)
}

/// Requests to `/v1/threads/bench-{tag}-{conn}{path}` with the dev token,
/// one thread per connection, with the JSON body `body(conn, i)` if any.
fn on_thread<B>(
    server: &Server,
    tag: &'static str,
    method: reqwest::Method,
    path: &'static str,
    body: B,
) -> impl Fn(reqwest::Client, usize, u64) -> reqwest::RequestBuilder + Clone + use<B>
where
    B: Fn(usize, u64) -> Option<serde_json::Value> + Clone,
{
    let (base, token) = (server.base.clone(), server.token.clone());
    move |client, conn, i| {
        let request = client
            .request(
                method.clone(),
                format!("{base}/v1/threads/bench-{tag}-{conn}{path}"),
            )
            .bearer_auth(&token);
        match body(conn, i) {
            Some(body) => request.json(&body),
            None => request,
        }
    }
}

/// A user message: one durable unit (the message and its three
/// TEXT_MESSAGE events) through the same writer as a tool call, without a
/// tool or a ui_schema.
fn user_message(
    server: &Server,
    tag: &'static str,
) -> impl Fn(reqwest::Client, usize, u64) -> reqwest::RequestBuilder + Clone + use<> {
    on_thread(server, tag, reqwest::Method::POST, "/messages", |_, _| {
        Some(json!({"role": "user", "content": "hi"}))
    })
}

/// The newest message of the thread: a token check, the owner check and
/// one read, no write.
fn latest_message(
    server: &Server,
    tag: &'static str,
) -> impl Fn(reqwest::Client, usize, u64) -> reqwest::RequestBuilder + Clone + use<> {
    on_thread(
        server,
        tag,
        reqwest::Method::GET,
        "/history?limit=1",
        |_, _| None,
    )
}

/// Any tool call, every id new.
fn tool_call(
    server: &Server,
    tag: &'static str,
    name: &'static str,
    arguments: serde_json::Value,
) -> impl Fn(reqwest::Client, usize, u64) -> reqwest::RequestBuilder + Clone + use<> {
    on_thread(
        server,
        tag,
        reqwest::Method::POST,
        "/tool-calls",
        move |conn, i| {
            Some(json!({"id": format!("call-{conn}-{i}"), "name": name, "arguments": arguments}))
        },
    )
}

/// Replays of the thread's event log after event `after`
/// (`GET /v1/threads/bench-{tag}-{conn}/events?after=N`), each read until
/// `needle` has arrived `count` times and then closed: an event stream
/// does not end by itself, so every replay opens a new connection.
fn replayed(
    server: &Server,
    tag: &'static str,
    after: u64,
    needle: &'static str,
    count: usize,
) -> impl Fn(reqwest::Client, usize, u64) -> Exchange + Clone + Send + Sync + 'static {
    let (base, token) = (server.base.clone(), server.token.clone());
    move |client, conn, _| {
        let request = client
            .get(format!(
                "{base}/v1/threads/bench-{tag}-{conn}/events?after={after}"
            ))
            .bearer_auth(&token);
        Box::pin(read_until(request, needle, count))
    }
}

/// Send the request and read its answer until `needle` has appeared
/// `count` times.
async fn read_until(
    request: reqwest::RequestBuilder,
    needle: &'static str,
    count: usize,
) -> Result<(), String> {
    let mut resp = request.send().await.map_err(|e| e.to_string())?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!(
            "{status}: {}",
            resp.text().await.unwrap_or_default()
        ));
    }
    let needle = needle.as_bytes();
    // What is not yet searched, and the bytes of a needle split by a chunk.
    let mut pending = Vec::new();
    let mut seen = 0;
    while seen < count {
        let chunk = resp
            .chunk()
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("the stream ended after {seen} of {count}"))?;
        pending.extend_from_slice(&chunk);
        seen += pending
            .windows(needle.len())
            .filter(|w| *w == needle)
            .count();
        let keep = pending.len().min(needle.len() - 1);
        pending.drain(..pending.len() - keep);
    }
    Ok(())
}

/// Give each connection's thread `bench-{tag}-{conn}` one user message.
async fn seed_messages(
    server: &Server,
    tag: &'static str,
    connections: usize,
) -> anyhow::Result<()> {
    let post = user_message(server, tag);
    let client = reqwest::Client::new();
    for conn in 0..connections {
        whole_answer(post(client.clone(), conn, 0))
            .await
            .map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// Give each connection's thread `bench-{tag}-{conn}` `calls` echo
/// results; the id of each thread's last event (the same in all).
async fn fill_threads(
    server: &Server,
    tag: &'static str,
    connections: usize,
    calls: u64,
) -> anyhow::Result<u64> {
    let post = tool_call(server, tag, "echo", json!({"text": "hi"}));
    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for conn in 0..connections {
        let (post, client) = (post.clone(), client.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..calls {
                whole_answer(post(client.clone(), conn, i)).await?;
            }
            Ok::<_, String>(())
        }));
    }
    for task in tasks {
        task.await?.map_err(anyhow::Error::msg)?;
    }
    let mut resp = client
        .get(format!("{}/v1/threads/bench-{tag}-0/events", server.base))
        .bearer_auth(&server.token)
        .send()
        .await?
        .error_for_status()?;
    let mut text = String::new();
    while text.matches("TOOL_CALL_RESULT").count() < calls as usize {
        let chunk = resp.chunk().await?.context("the stream ended")?;
        text.push_str(std::str::from_utf8(&chunk)?);
    }
    let last = text
        .lines()
        .filter_map(|line| line.strip_prefix("id: ")?.parse().ok())
        .max()
        .context("no event ids")?;
    Ok(last)
}

/// 2,000 lines of 523 characters + newline (≈ 1 MB), of which one
/// `read_file` call returns the most it shows: 489 lines, 255,747
/// characters (a call shows at most 256,000).
fn one_mb_text() -> Vec<u8> {
    let line = format!("{}\n", "x".repeat(523));
    line.repeat(2000).into_bytes()
}

/// One request and the reading of its answer: `Err` for a transport error
/// or a non-2xx answer.
type Exchange = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// Whether `--only` leaves the scenario `name` in (the baseline always is).
fn selected(name: &str, opts: &Options) -> bool {
    name.contains("baseline")
        || opts
            .only
            .as_ref()
            .is_none_or(|only| name.contains(only.as_str()))
}

/// Send the request and read its whole answer.
async fn whole_answer(request: reqwest::RequestBuilder) -> Result<(), String> {
    let resp = request.send().await.map_err(|e| e.to_string())?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!(
            "{status}: {}",
            resp.text().await.unwrap_or_default()
        ));
    }
    resp.bytes().await.map(drop).map_err(|e| e.to_string())
}

/// The exchanges of requests from `build`, each answer read whole.
fn answered(
    build: impl Fn(reqwest::Client, usize, u64) -> reqwest::RequestBuilder
    + Clone
    + Send
    + Sync
    + 'static,
) -> impl Fn(reqwest::Client, usize, u64) -> Exchange + Clone + Send + Sync + 'static {
    move |client, conn, i| Box::pin(whole_answer(build(client, conn, i)))
}

async fn run_scenario(
    name: &'static str,
    opts: &Options,
    server: &Server,
    exchange: impl Fn(reqwest::Client, usize, u64) -> Exchange + Clone + Send + Sync + 'static,
) -> Option<Row> {
    if !selected(name, opts) {
        return None;
    }
    let baseline = name.contains("baseline");
    // The host's speed drifts within minutes: each scenario's ratio is taken
    // against a baseline window measured on the same server just before it.
    let paired = if baseline {
        None
    } else {
        let row = measure(
            name,
            opts.connections,
            Duration::from_secs(opts.seconds),
            answered(healthz(server)),
        )
        .await;
        if row.errors > 0 {
            eprintln!(
                "  baseline before {name}: {} errors; first: {}",
                row.errors,
                row.first_error.as_deref().unwrap_or("?")
            );
        }
        Some(row.rps)
    };
    let before = WriterFigures::read(&server.base).await;
    let started = Instant::now();
    let mut row = measure(
        name,
        opts.connections,
        Duration::from_secs(opts.seconds),
        exchange,
    )
    .await;
    let after = WriterFigures::read(&server.base).await;
    if let (Some(before), Some(after)) = (before, after) {
        row.writer = after.since(before, started.elapsed());
    }
    row.paired_baseline_rps = paired;
    eprintln!("  done: {name}");
    Some(row)
}

/// mimalloc instead of the system allocator: the request path allocates
/// many small, short-lived objects from several threads (see BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let opts = Options::parse();
    let settings = Settings::load(None)?;
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!("toolgate load benchmark");
    println!(
        "  machine: {cores} cores; server and load generator in one process, separate tokio runtimes ({cores} workers each), loopback"
    );
    println!(
        "  connections: {}, window: {} s per scenario after {} s warm-up, sequential requests per connection",
        opts.connections,
        opts.seconds,
        WARMUP.as_secs()
    );
    println!(
        "  writer_max_batch: {}, writer_linger_ms: {}, writer_nice: {}, logging: off",
        settings.storage.writer_max_batch,
        settings.storage.writer_linger_ms,
        settings.storage.writer_nice
    );

    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("load")
        .enable_all()
        .build()?;
    let mut rows = Vec::new();

    let sqlite = Server::start(None)?;
    // Run a scenario on a server and keep its row.
    macro_rules! scenario {
        ($name:expr, $server:expr, $build:expr) => {
            rows.extend(client_rt.block_on(run_scenario($name, &opts, $server, answered($build))))
        };
    }
    scenario!("GET /healthz (baseline)", &sqlite, healthz(&sqlite));
    // A ladder from the raw endpoint to a tool call: a durable write without
    // a tool, an authenticated read of what it wrote, then the tool call.
    scenario!(
        "POST messages (user), SQLite",
        &sqlite,
        user_message(&sqlite, "msg")
    );
    let history = "GET history limit=1, SQLite";
    if selected(history, &opts) {
        // Its threads must exist whether or not the rung above ran.
        client_rt.block_on(seed_messages(&sqlite, "msg", opts.connections))?;
    }
    scenario!(history, &sqlite, latest_message(&sqlite, "msg"));
    scenario!(
        "POST tool-calls echo, SQLite",
        &sqlite,
        tool_call(&sqlite, "sqlite", "echo", json!({"text": "hi"}))
    );
    // Replays: a resumed stream rebuilds each result's event from its tool
    // message. The rung below: a stream resumed at the end, nothing missed.
    const REPLAYED_RESULTS: u64 = 25;
    let resume_end = "GET events resumed at the end, SQLite";
    let replay = "GET events replaying 25 results, SQLite";
    if selected(resume_end, &opts) || selected(replay, &opts) {
        let last = client_rt.block_on(fill_threads(
            &sqlite,
            "replay",
            opts.connections,
            REPLAYED_RESULTS,
        ))?;
        rows.extend(client_rt.block_on(run_scenario(
            resume_end,
            &opts,
            &sqlite,
            replayed(&sqlite, "replay", last, "RUN_STARTED", 1),
        )));
        rows.extend(client_rt.block_on(run_scenario(
            replay,
            &opts,
            &sqlite,
            replayed(
                &sqlite,
                "replay",
                0,
                "TOOL_CALL_RESULT",
                REPLAYED_RESULTS as usize,
            ),
        )));
    }
    // bash before read_file: the megabyte responses grow this process (server
    // and load generator share it), and every command forks a copy of it.
    scenario!(
        "POST bash `true`, SQLite",
        &sqlite,
        tool_call(&sqlite, "bash", "bash", json!({"command": "true"}))
    );
    sqlite.put_file("big.txt", &one_mb_text())?;
    scenario!(
        "POST read_file 256 KB (a call's most), SQLite",
        &sqlite,
        tool_call(&sqlite, "read", "read_file", json!({"path": "big.txt"}))
    );
    sqlite.stop();

    // For scale: the same calls on a SQLite database held in memory, where
    // nothing is durable (no WAL, no sync, no checkpoint). What it costs
    // above the raw endpoint is the request, the pipeline and the rows;
    // what the file database costs above it is durability.
    let memory_echo = "POST tool-calls echo, in-memory";
    if selected(memory_echo, &opts) {
        let memory = Server::start(Some("sqlite::memory:".into()))?;
        scenario!(
            memory_echo,
            &memory,
            tool_call(&memory, "memory", "echo", json!({"text": "hi"}))
        );
        memory.stop();
    }

    let mut skipped = None;
    match client_rt.block_on(PgDatabase::create()) {
        Ok(db) => {
            let server = Server::start(Some(db.url.clone()));
            match server {
                Ok(server) => {
                    scenario!(
                        "POST tool-calls echo, Postgres",
                        &server,
                        tool_call(&server, "pg", "echo", json!({"text": "hi"}))
                    );
                    server.stop();
                }
                Err(e) => skipped = Some(format!("the server did not start on Postgres: {e:#}")),
            }
            client_rt.block_on(db.drop_database());
        }
        Err(e) => {
            skipped = Some(format!(
                "Postgres is unreachable ({e:#}); set TOOLGATE_TEST_PG to its admin URL"
            ))
        }
    }

    let baseline = rows[0].rps;
    println!();
    println!(
        "| {:<32} | {:>9} | {:>9} | {:>8} | {:>8} | {:>6} | {:>11} | {:>10} | {:>10} |",
        "scenario",
        "requests",
        "req/s",
        "p50 ms",
        "p99 ms",
        "errors",
        "baseline/s",
        "÷ baseline",
        "CPU µs/req"
    );
    println!(
        "|{:-<34}|{:->11}|{:->11}|{:->10}|{:->10}|{:->8}|{:->13}|{:->12}|{:->12}|",
        "", "", "", "", "", "", "", "", ""
    );
    for r in &rows {
        println!(
            "| {:<32} | {:>9} | {:>9.0} | {:>8.2} | {:>8.2} | {:>6} | {:>11.0} | {:>10.2} | {:>10.0} |",
            r.name,
            r.requests,
            r.rps,
            r.p50_ms,
            r.p99_ms,
            r.errors,
            r.paired_baseline_rps.unwrap_or(baseline),
            r.ratio(baseline),
            r.cpu_us_per_request
        );
    }
    println!();
    println!(
        "| {:<32} | {:>9} | {:>11} | {:>9} | {:>11} | {:>11} |",
        "group-commit writer", "batches/s", "units/batch", "ms/batch", "busy", "CPU µs/unit"
    );
    println!(
        "|{:-<34}|{:->11}|{:->13}|{:->11}|{:->13}|{:->13}|",
        "", "", "", "", "", ""
    );
    for r in &rows {
        if let Some(w) = r.writer {
            println!(
                "| {:<32} | {:>9.0} | {:>11.1} | {:>9.2} | {:>10.0} % | {:>11.0} |",
                r.name,
                w.batches / w.wall_seconds,
                w.units / w.batches,
                1000.0 * w.busy_seconds / w.batches,
                100.0 * w.busy_seconds / w.wall_seconds,
                1e6 * w.cpu_seconds / w.units
            );
        }
    }
    println!();
    println!(
        "| {:<32} | {:>9} | {:>9} | {:>12} | {:>9} | {:>9} | {:>9} | {:>9} |",
        "CPU µs/req by part",
        "server",
        "writer",
        "checkpointer",
        "reads",
        "load gen",
        "rest",
        "total"
    );
    println!(
        "|{:-<34}|{:->11}|{:->11}|{:->14}|{:->11}|{:->11}|{:->11}|{:->11}|",
        "", "", "", "", "", "", "", ""
    );
    for r in &rows {
        let part = |p: Part| r.cpu_us_by_part.get(&p).copied().unwrap_or(0.0);
        let named: f64 = Part::ALL.iter().map(|&p| part(p)).sum();
        println!(
            "| {:<32} | {:>9.0} | {:>9.0} | {:>12.0} | {:>9.0} | {:>9.0} | {:>9.0} | {:>9.0} |",
            r.name,
            part(Part::Server),
            part(Part::Writer),
            part(Part::Checkpointer),
            part(Part::Reads),
            part(Part::Load),
            (r.cpu_us_per_request - named).max(0.0),
            r.cpu_us_per_request
        );
    }
    if let Some(reason) = skipped {
        println!("\n(c) skipped: {reason}");
    }
    for r in rows.iter().filter(|r| r.errors > 0) {
        println!(
            "\n{}: {} errors; first: {}",
            r.name,
            r.errors,
            r.first_error.as_deref().unwrap_or("?")
        );
    }
    Ok(())
}
