use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use toolgate::config::Settings;
use toolgate::startup::Application;

/// The command line, its `--version` naming the last migration of each
/// backend: two builds of one version number with other schemas are told
/// apart (an upgrade, a downgrade refused).
fn parse_command_line() -> Cli {
    let (sqlite, postgres) = toolgate::store::schema_versions();
    let version: &'static str = Box::leak(
        format!(
            "{} (schema: sqlite {sqlite}, postgres {postgres})",
            env!("CARGO_PKG_VERSION")
        )
        .into_boxed_str(),
    );
    let matches = Cli::command().version(version).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

#[derive(Parser)]
#[command(
    name = "toolgate",
    version,
    about = "Tool execution for agent backends"
)]
struct Cli {
    /// Settings file layered over config/default.toml.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Directory for the SQLite file and the generated signing key.
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve {
        /// Address to listen on, e.g. 0.0.0.0:8080.
        #[arg(long)]
        bind: Option<std::net::SocketAddr>,
    },
    /// Apply database migrations (and create the data directory's signing
    /// key when none is configured), then exit.
    Migrate,
    /// Print a bearer token signed with the configured key, or the data
    /// directory's (which must exist: it is never created here).
    Token {
        /// The subject (owner) of the token.
        #[arg(long)]
        sub: String,
        /// Lifetime, e.g. 1h, 30m, 7d.
        #[arg(long, default_value = "24h")]
        ttl: humantime::Duration,
        /// Space-separated scopes, e.g. `toolgate:approve` for an approver.
        #[arg(long)]
        scope: Option<String>,
    },
    /// Print the OpenAPI document.
    Openapi,
    /// Started by `serve`: wait until standard input ends (the serving
    /// process exited, however), then end the background processes its
    /// commands left running.
    #[command(hide = true)]
    WatchSessions {
        /// The serving process's directory of command sessions.
        #[arg(long)]
        dir: PathBuf,
        /// The serving process, as PID:START (start time in clock ticks).
        #[arg(long)]
        service: String,
    },
}

/// mimalloc instead of the system allocator: the request path allocates
/// many small, short-lived objects from several threads (see BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    match run(parse_command_line()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // Settings that failed to load never turned the logs on: JSON
            // asked for by the environment is honoured all the same.
            if !toolgate::telemetry::json_logs() && json_logs_asked_for() {
                toolgate::telemetry::init_logging(true);
            }
            let error = describe(&err);
            if toolgate::telemetry::json_logs() {
                tracing::error!(error, "toolgate stopped");
            } else {
                eprintln!("Error: {error}");
            }
            ExitCode::FAILURE
        }
    }
}

/// `TOOLGATE_SERVER__JSON_LOGS` says true.
fn json_logs_asked_for() -> bool {
    std::env::var("TOOLGATE_SERVER__JSON_LOGS").is_ok_and(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "true" | "1" | "yes" | "on"
        )
    })
}

/// The error and its causes on one line, each said once: an error that
/// repeats its cause's words (`database error: pool timed out`) is not
/// followed by them again.
fn describe(err: &anyhow::Error) -> String {
    let mut said: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if said.last().is_some_and(|last| last.contains(&text)) {
            continue;
        }
        said.push(text);
    }
    said.join(": ")
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let command = cli.command.unwrap_or(Command::Serve { bind: None });
    // The watchdog reads no settings: it must start whatever they say.
    if let Command::WatchSessions { dir, service } = &command {
        let killed = toolgate::sandbox::watch_sessions(dir, service)?;
        if killed > 0 {
            eprintln!(
                "toolgate: ended {killed} background processes of commands that the exited toolgate process left running"
            );
        }
        return Ok(());
    }
    let mut settings = Settings::load(cli.config.as_deref())?;
    if let Some(dir) = cli.data_dir {
        settings.storage.data_dir = dir;
    }
    match command {
        Command::Openapi => {
            print!("{}", toolgate::http::openapi::document_json());
        }
        Command::Token { sub, ttl, scope } => {
            anyhow::ensure!(ttl.as_secs() >= 1, "--ttl must be at least 1s, got {ttl}");
            let keys =
                toolgate::auth::Keys::load_existing(&settings.auth, &settings.storage.data_dir)?;
            println!(
                "{}",
                keys.mint_scoped(&sub, ttl.as_secs(), scope.as_deref())?
            );
        }
        Command::Migrate => {
            toolgate::telemetry::init_logging(settings.server.json_logs);
            let url = settings
                .storage
                .database_url
                .as_ref()
                .map(|s| secrecy::ExposeSecret::expose_secret(s).to_string());
            let store = toolgate::store::open(url.as_deref(), &settings.storage).await?;
            store.ready().await?;
            // The data directory's signing key too (when none is configured),
            // so `toolgate token` can sign before the first start.
            toolgate::auth::Keys::load(&settings.auth, &settings.storage.data_dir)?;
            println!("migrations applied ({})", store.backend());
        }
        // Answered above, before the settings were read.
        Command::WatchSessions { .. } => {}
        Command::Serve { bind } => {
            if let Some(bind) = bind {
                settings.server.bind = bind;
            }
            toolgate::telemetry::init_logging(settings.server.json_logs);
            for caution in settings.cautions() {
                tracing::warn!("{caution}");
            }
            let data_dir = settings.storage.data_dir.clone();
            let sessions = data_dir.join(toolgate::startup::COMMAND_SESSIONS);
            let files = if settings.files.is_empty() {
                "built-in defaults (no config/default.toml in the working directory)".to_string()
            } else {
                settings
                    .files
                    .iter()
                    .map(|f| f.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let app = Application::build(settings).await?;
            // Kept until the process exits; see SessionWatchdog.
            let _watchdog = match std::env::current_exe()
                .and_then(|exe| toolgate::sandbox::SessionWatchdog::spawn(&exe, &sessions))
            {
                Ok(watchdog) => Some(watchdog),
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        "no session watchdog: if this process dies, its commands' background processes run until the next start"
                    );
                    None
                }
            };
            let addr = app.local_addr();
            tracing::info!(
                %addr,
                database = app.backend(),
                data_dir = %data_dir.display(),
                settings = files,
                auth = app.auth(),
                "toolgate listening"
            );
            println!("toolgate serving on http://{addr} (docs: http://{addr}/docs)");
            if let Some(token) = &app.dev_token {
                // Printed, never logged: a ready token for local use.
                println!("dev bearer token (sub=dev):\n  {token}");
            }
            let shutdown = app.shutdown_token();
            tokio::spawn(async move {
                shutdown_signal().await;
                tracing::info!("shutting down");
                shutdown.cancel();
                // A second signal does not wait for the grace period: the
                // calls it cuts off are finished as INTERRUPTED at the next
                // start, as after a crash.
                shutdown_signal().await;
                tracing::warn!("second shutdown signal: exiting now");
                std::process::exit(1);
            });
            app.run().await?;
        }
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
