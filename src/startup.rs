//! Builds the application: settings → store → writer → registry → engine →
//! router, bound to a listener. Tests start exactly this on port 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use secrecy::ExposeSecret;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::{KeySource, Keys};
use crate::config::Settings;
use crate::engine::spool::Spool;
use crate::engine::{ApprovalSettings, Engine, EngineConfig, publish_hook};
use crate::events::EventBus;
use crate::http::{self, AppState, Shared};
use crate::sandbox::{Sandbox, SystemPaths};
use crate::store::writer::{Writer, WriterConfig};
use crate::tools::{Registry, builtin};
use crate::workspace::Workspaces;

pub struct Application {
    listener: TcpListener,
    state: AppState,
    cors: Option<http::cors::CorsLayer>,
    pub dev_token: Option<String>,
    /// Held until the server has stopped: see [`lock_data_dir`].
    _data_dir_lock: std::fs::File,
}

/// The file in the data directory that names its process to the database.
pub const INSTANCE_FILE: &str = "instance.id";

/// The data directory's instance id, created on its first start: the calls
/// its process runs are recorded as this instance's, and a process finishes
/// only its own instance's calls left `running` (with several processes on
/// one database, each has its own data directory, so its own id; the data
/// directory's lock makes it one process at a time).
fn instance_id(data_dir: &std::path::Path) -> anyhow::Result<String> {
    let path = data_dir.join(INSTANCE_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    // Written whole, then renamed: a crash leaves the old file or the new one.
    let partial = data_dir.join(format!("{INSTANCE_FILE}.partial"));
    let write = || -> std::io::Result<()> {
        use std::io::Write as _;
        let mut file = std::fs::File::create(&partial)?;
        file.write_all(id.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&partial, &path)?;
        std::fs::File::open(data_dir)?.sync_all()
    };
    write().with_context(|| format!("cannot write {}", path.display()))?;
    Ok(id)
}

/// The file in the data directory that the serving process holds locked.
pub const DATA_DIR_LOCK: &str = "toolgate.lock";

/// Lock the data directory for this process, or fail if another process
/// serves from it. What a starting process does assumes it is the only
/// one: it finishes the calls left running as INTERRUPTED, writes the
/// results kept on disk during an outage, and ends the commands a previous
/// process left behind. A second process on the same directory would do
/// all of that to a live one's calls and commands. The lock (`flock`) goes
/// with the process, however it ends.
fn lock_data_dir(data_dir: &std::path::Path) -> anyhow::Result<std::fs::File> {
    crate::private_dir(data_dir)
        .with_context(|| format!("cannot create the data directory {}", data_dir.display()))?;
    let path = data_dir.join(DATA_DIR_LOCK);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    use std::os::fd::AsRawFd as _;
    // SAFETY: flock on a descriptor this function owns, open until `file`
    // is dropped.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(file);
    }
    let error = std::io::Error::last_os_error();
    if error.kind() == std::io::ErrorKind::WouldBlock {
        anyhow::bail!(
            "another toolgate process is serving from the data directory {} (it holds {} \
             locked); stop it first, or give this one a data directory of its own \
             (--data-dir)",
            data_dir.display(),
            path.display()
        );
    }
    Err(error).with_context(|| format!("cannot lock {}", path.display()))
}

/// May other processes write the database: any named by `DATABASE_URL`
/// but one in memory (the default SQLite file is the data directory's,
/// which one process locks).
fn engine_shares_database(database_url: &Option<String>) -> bool {
    database_url
        .as_deref()
        .is_some_and(|url| !crate::store::is_in_memory(url))
}

/// The data directory's record of running commands' sessions.
pub const COMMAND_SESSIONS: &str = "command-sessions";

/// The workspaces and the command sandbox, as configured.
pub fn workspace_and_sandbox(
    settings: &Settings,
) -> anyhow::Result<(Arc<Workspaces>, Arc<Sandbox>)> {
    let data_dir = &settings.storage.data_dir;
    crate::private_dir(data_dir)?;
    let workspaces = Arc::new(Workspaces::new(
        &settings.workspace.root(data_dir),
        &settings.workspace.history_root(data_dir),
    )?);
    // Commands never see the service's data (database file, signing key,
    // edit history), other owners' workspaces, nor the settings files and
    // keys the service reads its secrets from.
    let secrets = settings
        .files
        .iter()
        .chain(&settings.auth.private_key_pem)
        .chain(&settings.auth.public_key_pem);
    let paths = secrets.fold(
        SystemPaths::default()
            .hide(data_dir)
            .hide(settings.workspace.root(data_dir)),
        |paths, file| paths.hide(file),
    );
    let (sandbox, ended) = Sandbox::with_paths(&settings.sandbox, paths)
        .recording_sessions_in(&data_dir.join(COMMAND_SESSIONS))?;
    if ended > 0 {
        tracing::warn!(
            processes = ended,
            "ended commands' background processes that a previous toolgate process left running when it died"
        );
    }
    let sandbox = Arc::new(sandbox);
    for warning in &sandbox.status().warnings {
        tracing::warn!("sandbox: {warning}");
    }
    Ok((workspaces, sandbox))
}

/// The registry with the built-in tools.
pub fn builtin_registry(
    settings: &Settings,
    workspaces: &Arc<Workspaces>,
    sandbox: &Arc<Sandbox>,
) -> anyhow::Result<Arc<Registry>> {
    let registry = Registry::new();
    registry.register(Arc::new(builtin::Echo))?;
    registry.register(Arc::new(builtin::Wait {
        max_ms: settings.tools.wait_max_ms,
    }))?;
    registry.register(Arc::new(builtin::Bash {
        sandbox: sandbox.clone(),
        workspaces: workspaces.clone(),
        settings: settings.sandbox.clone(),
    }))?;
    for tool in builtin::file_tools(workspaces.clone(), &settings.workspace) {
        registry.register(tool)?;
    }
    Ok(Arc::new(registry))
}

/// Expires approvals past their deadline, once a second, reads the
/// database's migrations again every five seconds
/// ([`Engine::check_schema`]), says this process is alive on a shared
/// database every ten ([`Engine::beat`]), and finishes calls no process can
/// still be running ([`Engine::finish_orphans`]) once a minute (every
/// fifteen seconds on a shared database, where a process gone silent
/// leaves some), until shutdown. A sweep that keeps failing (the database
/// away) is logged when it starts failing, then once a minute, and when it
/// works again: not every second.
fn spawn_expiry_sweeper(engine: Arc<Engine>, shutdown: CancellationToken) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut failing: Option<(tokio::time::Instant, u64)> = None;
        let mut ticks: u64 = 0;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => match sweep(&engine, &mut ticks).await {
                    Ok(_) => {
                        if let Some((_, failures)) = failing.take() {
                            tracing::info!(failures, "approval expiry sweep works again");
                        }
                    }
                    Err(e) => {
                        let now = tokio::time::Instant::now();
                        match &mut failing {
                            Some((logged, failures)) => {
                                *failures += 1;
                                if now.duration_since(*logged) >= Duration::from_secs(60) {
                                    *logged = now;
                                    tracing::warn!(error = %e, failures = *failures, "approval expiry sweep still failing");
                                }
                            }
                            None => {
                                failing = Some((now, 1));
                                tracing::warn!(error = %e, "approval expiry sweep failed");
                            }
                        }
                    }
                },
            }
        }
    });
}

/// One tick of [`spawn_expiry_sweeper`].
async fn sweep(engine: &Engine, ticks: &mut u64) -> Result<(), crate::store::StoreError> {
    *ticks += 1;
    if ticks.is_multiple_of(5) {
        engine.check_schema().await;
    }
    if ticks.is_multiple_of(crate::engine::BEAT_EVERY.as_secs()) {
        engine.beat().await?;
    }
    engine.expire_due().await?;
    let orphans_every = match engine.shares_database() {
        true => 15,
        false => 60,
    };
    if ticks.is_multiple_of(orphans_every) {
        engine.finish_orphans().await?;
    }
    Ok(())
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Application> {
        let cors = http::cors::layer(&settings.server.cors_origins)?;
        let data_dir = settings.storage.data_dir.clone();
        // Before anything that assumes this process is the directory's only one.
        let data_dir_lock = lock_data_dir(&data_dir)?;
        let served_before = data_dir.join(INSTANCE_FILE).exists();
        let instance = instance_id(&data_dir)?;
        let database_url = settings
            .storage
            .database_url
            .as_ref()
            .map(|s| s.expose_secret().to_string());
        // A data directory that served before but holds no SQLite file
        // served another database: most likely `DATABASE_URL` is missing
        // this time, and every thread would look gone.
        if database_url.is_none() && served_before && !data_dir.join("toolgate.db").exists() {
            tracing::warn!(
                data_dir = %data_dir.display(),
                "the data directory served a database before, but not its own SQLite file: a new, empty one is created. If it served Postgres, set DATABASE_URL"
            );
        }
        let store = crate::store::open(database_url.as_deref(), &settings.storage).await?;
        let keys = Keys::load(&settings.auth, &data_dir)?;
        let dev_token = match keys.source {
            KeySource::Secret | KeySource::KeyFiles => None,
            _ => Some(
                keys.mint("dev", settings.auth.dev_token_ttl_secs)
                    .context("auth.dev_token_ttl_secs")?,
            ),
        };
        let bus = Arc::new(EventBus::new(1024));
        let replay_cache = Arc::new(crate::engine::ReplayCache::new(
            crate::engine::ReplayCache::DEFAULT_BYTES,
        ));
        let writer = Writer::spawn(
            store.clone(),
            WriterConfig {
                max_batch: settings.storage.writer_max_batch.max(1),
                linger: Duration::from_millis(settings.storage.writer_linger_ms),
                nice: writer_nice(settings.storage.writer_nice)?,
                ..WriterConfig::default()
            },
            publish_hook(bus.clone(), replay_cache.clone()),
        );
        let (workspaces, sandbox) = workspace_and_sandbox(&settings)?;
        let registry = builtin_registry(&settings, &workspaces, &sandbox)?;
        let tool_timeout = Duration::from_secs(settings.tools.timeout_secs.max(1));
        let kept_results = data_dir.join("kept-results");
        let shared_database = engine_shares_database(&database_url);
        let engine = Arc::new(Engine::new(
            registry,
            store.clone(),
            writer.clone(),
            EngineConfig {
                tool_timeout,
                announce_after: Duration::from_millis(settings.tools.announce_after_ms),
                approvals: ApprovalSettings {
                    enabled: settings.approvals.enabled,
                    ttl: Duration::from_secs(settings.approvals.ttl_secs.max(1)),
                    owners_approve: settings.approvals.owners_approve,
                },
                permissions: crate::engine::PermissionConfig {
                    workspaces: Some(workspaces.clone()),
                    ..settings.permissions.engine_config()?
                },
                result_spool: Spool::open(&kept_results)
                    .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", kept_results.display()))?,
                instance,
                shared_database,
            },
        ));
        let thread_owners: Arc<crate::http::KnownOwners> = Default::default();
        if shared_database {
            follow_other_processes_events(&*store, &bus, &thread_owners).await;
            match store.watch_owner_rules().await {
                Ok(Some(changes)) => engine.follow_rule_changes(changes),
                Ok(None) => {}
                Err(e) => tracing::warn!(
                    error = %e,
                    "cannot watch permission rule changes: owners' rules are read for every call"
                ),
            }
        }
        // Installed before the start finishes calls, which it counts.
        let metrics = crate::telemetry::metrics_handle();
        let kept = engine.write_kept_results().await?;
        if kept > 0 {
            tracing::warn!(
                count = kept,
                "stored results kept on disk during a database outage"
            );
        }
        // Alive from the start: another process takes none of this one's
        // calls for abandoned.
        engine.beat().await?;
        let recovered = engine.recover_interrupted().await?;
        if recovered > 0 {
            tracing::warn!(
                count = recovered,
                "finished tool calls interrupted by the previous shutdown"
            );
        }
        let listener = TcpListener::bind(settings.server.bind)
            .await
            .with_context(|| format!("cannot listen on {}", settings.server.bind))?;
        let limits_settings = settings.tools.clone();
        let streams = Arc::new(crate::engine::limits::Streams::new(
            settings.server.max_streams_per_owner,
        ));
        let thread_reads = Arc::new(crate::engine::limits::Reads::new(
            crate::engine::limits::ReadKind::WholeThreads,
            settings.server.max_thread_reads,
            settings.server.max_thread_reads_per_owner,
            Duration::from_secs(settings.server.thread_read_wait_secs),
        ));
        // All owners' pages together are bounded by the read connections.
        let page_reads = Arc::new(crate::engine::limits::Reads::new(
            crate::engine::limits::ReadKind::Pages,
            usize::MAX >> 4,
            settings.server.max_page_reads_per_owner,
            Duration::from_secs(settings.server.page_read_wait_secs),
        ));
        let shutdown = CancellationToken::new();
        let purger = crate::store::purge::Purger::new(
            store.clone(),
            shutdown.clone(),
            Duration::from_millis(settings.storage.purge_pause_ms),
        );
        let unpurged = purger.resume().await?;
        if unpurged > 0 {
            tracing::info!(
                count = unpurged,
                "purging the rows of threads deleted before the last stop"
            );
        }
        let state = AppState::new(Shared {
            engine,
            store,
            writer,
            bus,
            keys: Arc::new(keys),
            settings: Arc::new(settings),
            metrics,
            limits: Arc::new(crate::engine::limits::Limits::new(
                limits_settings.max_concurrent_calls,
                limits_settings.max_concurrent_calls_per_owner,
            )),
            thread_reads,
            page_reads,
            streams,
            purger,
            shutdown,
            calls: tokio_util::task::TaskTracker::new(),
            workspaces,
            sandbox,
            thread_owners,
            replay_cache,
        });
        spawn_expiry_sweeper(state.engine.clone(), state.shutdown.clone());
        Ok(Application {
            listener,
            state,
            cors,
            dev_token,
            _data_dir_lock: data_dir_lock,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("bound listener has an address")
    }

    /// A handle that stops the server (open SSE streams end with RUN_FINISHED).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.state.shutdown.clone()
    }

    /// The live registry: tools registered here are served at once.
    pub fn registry(&self) -> Arc<Registry> {
        self.state.engine.registry().clone()
    }

    /// The engine the server runs calls with.
    pub fn engine(&self) -> Arc<Engine> {
        self.state.engine.clone()
    }

    pub fn backend(&self) -> &'static str {
        self.state.store.backend()
    }

    /// What verifies bearer tokens (algorithm and key), for the start-up log.
    pub fn auth(&self) -> String {
        self.state
            .keys
            .describe(&self.state.settings.storage.data_dir)
    }

    /// Serve until the shutdown token is cancelled, then give in-flight
    /// requests `server.shutdown_grace_secs` to finish.
    ///
    /// Each connection is served by hyper with a header-read timeout (a
    /// connection that sends no complete request, or idles between
    /// requests, is closed), and at most `server.max_connections` are
    /// served at once: without a token, nobody can hold the process's
    /// files.
    pub async fn run(self) -> anyhow::Result<()> {
        use tower::ServiceExt as _;
        let shutdown = self.state.shutdown.clone();
        let calls = self.state.calls.clone();
        let server = self.state.settings.server.clone();
        let service = http::service(self.state, self.cors).map_request(
            |req: hyper::Request<hyper::body::Incoming>| req.map(axum::body::Body::new),
        );
        let service = hyper_util::service::TowerToHyperService::new(service);
        let mut http1 = hyper::server::conn::http1::Builder::new();
        http1
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(Duration::from_secs(server.header_read_timeout_secs.max(1)));
        let write_stall = Duration::from_secs(server.write_stall_secs.max(1));
        let limit = connection_limit(server.max_connections);
        let slots = Arc::new(tokio::sync::Semaphore::new(limit));
        let refusals = Arc::new(tokio::sync::Semaphore::new(REFUSALS_AT_ONCE));
        let connections = tokio_util::task::TaskTracker::new();
        loop {
            let stream = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of files, or a connection reset before it was
                        // accepted: try again shortly.
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = shutdown.cancelled() => break,
            };
            let _ = stream.set_nodelay(true);
            // Past the limit a connection is answered at once with a 503,
            // not left waiting to be accepted: a client (a load balancer's
            // health check too) learns the service is full and when to
            // retry. Past the refusals' own bound it is closed unanswered.
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                if let Ok(refusal) = refusals.clone().try_acquire_owned() {
                    tokio::spawn(async move {
                        refuse_connection(stream).await;
                        drop(refusal);
                    });
                }
                continue;
            };
            // A client that stops reading is cut off once it has taken
            // nothing it was sent for `write_stall_secs`: otherwise its
            // connection, and the answer waiting in it (a stalled stream's
            // events, a whole thread's context), stay for as long as it
            // keeps the socket open.
            let stream = crate::stall::StallGuard::new(stream, write_stall);
            let connection =
                http1.serve_connection(hyper_util::rt::TokioIo::new(stream), service.clone());
            let shutdown = shutdown.clone();
            connections.spawn(async move {
                let _slot = slot;
                let mut connection = std::pin::pin!(connection);
                tokio::select! {
                    _ = connection.as_mut() => {}
                    _ = shutdown.cancelled() => {
                        connection.as_mut().graceful_shutdown();
                        let _ = connection.await;
                    }
                }
            });
        }
        drop(self.listener);
        connections.close();
        let grace = Duration::from_secs(server.shutdown_grace_secs);
        let deadline = tokio::time::Instant::now() + grace;
        if tokio::time::timeout_at(deadline, connections.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                open = connections.len(),
                "connections still open {}s after the shutdown signal; exiting anyway",
                grace.as_secs()
            );
        }
        // Calls whose client has gone run on: they get the same grace.
        calls.close();
        if tokio::time::timeout_at(deadline, calls.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                running = calls.len(),
                "calls still running {}s after the shutdown signal; exiting anyway (the next \
                 start finishes them as INTERRUPTED)",
                grace.as_secs()
            );
        }
        Ok(())
    }
}

/// Connections answered `503` at once, past `server.max_connections`;
/// past them a connection is closed unanswered.
const REFUSALS_AT_ONCE: usize = 64;

/// The longest a refusal holds its connection (and its place among
/// [`REFUSALS_AT_ONCE`]): a client that sends nothing cannot keep others
/// from being answered for long.
const REFUSAL_TIME: Duration = Duration::from_millis(500);

/// Answer a connection past the limit with a `503` problem (and
/// `Retry-After`), then close it. The request's head is read first (an
/// HTTP client takes no answer before its request), for at most
/// [`REFUSAL_TIME`]: a client that sends nothing in that time is answered
/// all the same, one that closes without sending anything is not (nothing
/// was asked: a connect-and-close health check). What follows the head is
/// read only to let the answer arrive before the close (an unread request
/// would make the close a reset), for at most [`REFUSAL_TIME`] again.
/// Counted and timed as every answer is.
async fn refuse_connection(mut stream: tokio::net::TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let started = std::time::Instant::now();
    let body = serde_json::Value::Object(http::error::problem_body(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "Service unavailable",
        "toolgate is serving its maximum of connections (server.max_connections); retry after a second",
    ))
    .to_string();
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let read_head = tokio::time::timeout(REFUSAL_TIME, async {
        // The head ends at an empty line (CRLF, or a bare LF, which
        // servers accept); only the bytes just read are looked at.
        let ended = |head: &[u8], from: usize| {
            let tail = &head[from.saturating_sub(3)..];
            tail.windows(4).any(|w| w == b"\r\n\r\n") || tail.windows(2).any(|w| w == b"\n\n")
        };
        loop {
            let from = head.len();
            match stream.read(&mut chunk).await? {
                0 => return Ok::<_, std::io::Error>(true),
                n => head.extend_from_slice(&chunk[..n]),
            }
            if ended(&head, from) || head.len() >= 64 * 1024 {
                return Ok(false);
            }
        }
    })
    .await;
    match read_head {
        // Closed (or failed) before asking anything.
        Ok(Ok(true)) | Ok(Err(_)) if head.is_empty() => return,
        _ => {}
    }
    // Answered as any request is: with its request id (the client's own
    // when usable), counted, timed, and logged.
    let (method, request_id) = http::refused_request(&head);
    metrics::counter!(
        "toolgate_http_requests_total",
        "method" => method,
        "route" => "refused",
        "status" => "503"
    )
    .increment(1);
    metrics::histogram!(
        "toolgate_http_request_duration_seconds",
        "method" => method,
        "route" => "refused"
    )
    .record(started.elapsed().as_secs_f64());
    note_refusal(&request_id);
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\nretry-after: 1\r\nx-request-id: {request_id}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_TIME, async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        let mut read = 0;
        while read < 64 * 1024 {
            match stream.read(&mut chunk).await? {
                0 => break,
                n => read += n,
            }
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Log a connection refused past `server.max_connections`: the first of a
/// burst at once, then at most one line every 10 s with how many more
/// there were, so a flood of them does not flood the log.
fn note_refusal(request_id: &str) {
    static THROTTLE: crate::telemetry::Throttle =
        crate::telemetry::Throttle::new(Duration::from_secs(10));
    if let Some(held) = THROTTLE.allow() {
        tracing::warn!(
            request_id,
            refused_since_last_line = held,
            "a connection was refused: toolgate is serving its maximum of connections (server.max_connections)"
        );
    }
}

/// `server.max_connections`, or for 0 the process's open-file limit less a
/// reserve for the database, the writer, logs and commands' pipes.
fn connection_limit(configured: usize) -> usize {
    if configured > 0 {
        return configured;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limit into the struct it is given.
    let files = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        1024
    };
    files.saturating_sub(512).clamp(64, 1 << 20)
}

/// `storage.writer_nice` as the writer wants it: `None` for 0 (inherit).
fn writer_nice(nice: i32) -> anyhow::Result<Option<i32>> {
    anyhow::ensure!(
        (-20..=19).contains(&nice),
        "storage.writer_nice is {nice}; it must be between -20 and 19 (0 = inherit)"
    );
    Ok(Some(nice).filter(|&nice| nice != 0))
}

/// Events other processes commit to the shared database reach this
/// process's subscribers at once: each notice nudges the threads it names
/// (a stream then reads the log after the last event it sent). Without the
/// watch, streams still read the log at every heartbeat.
async fn follow_other_processes_events(
    store: &dyn crate::store::Store,
    bus: &Arc<EventBus>,
    owners: &Arc<crate::http::KnownOwners>,
) {
    use crate::store::Notice;
    match store.watch_events().await {
        Ok(Some(mut notices)) => {
            let bus = bus.clone();
            let owners = owners.clone();
            tokio::spawn(async move {
                while let Some(notice) = notices.recv().await {
                    match notice {
                        Notice::Events(Some(threads)) => {
                            for (thread, seq) in threads {
                                bus.nudge(&thread, seq);
                            }
                        }
                        // Back after a lost connection: deletions told
                        // meanwhile were missed too.
                        Notice::Events(None) => {
                            owners.forget_live();
                            bus.nudge_all();
                        }
                        // A deleted thread's streams end, and its requests
                        // answer 410, in this process too.
                        Notice::Deleted { thread, at_ms } => {
                            owners.deleted(&thread, at_ms);
                            bus.deleted(&thread, at_ms);
                        }
                    }
                }
            });
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(
            error = %e,
            "cannot watch other processes' events: their events reach this process's streams at each heartbeat"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::writer_nice;

    #[test]
    fn writer_nice_is_checked_and_zero_inherits() {
        assert_eq!(writer_nice(0).unwrap(), None);
        assert_eq!(writer_nice(-10).unwrap(), Some(-10));
        assert_eq!(writer_nice(19).unwrap(), Some(19));
        let err = writer_nice(25).unwrap_err().to_string();
        assert!(err.contains("storage.writer_nice is 25"), "{err}");
        assert!(writer_nice(-21).is_err());
    }
}
