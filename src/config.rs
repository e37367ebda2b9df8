//! Typed settings, layered: built-in defaults < `config/default.toml` (when
//! present) < `--config FILE` < `TOOLGATE_…` environment variables <
//! command-line flags. Secrets are `SecretString`s so they cannot be printed
//! by accident.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub storage: StorageSettings,
    pub auth: AuthSettings,
    pub tools: ToolSettings,
    pub workspace: WorkspaceSettings,
    pub sandbox: SandboxSettings,
    pub permissions: PermissionSettings,
    pub approvals: ApprovalSettings,
    /// The settings files these were read from (`config/default.toml`,
    /// `--config`): commands never see them, since they may hold secrets.
    #[serde(skip)]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    pub bind: SocketAddr,
    pub request_timeout_secs: u64,
    pub body_limit_bytes: usize,
    /// Largest accepted body of an AG-UI run (`POST /v1/threads/{id}/runs`):
    /// an AG-UI client sends the whole conversation with every run, the
    /// results toolgate streamed included.
    pub run_body_limit_bytes: usize,
    pub json_logs: bool,
    /// A log line at `info` for every answer (method, path, status,
    /// latency, request id), as an access log.
    pub access_log: bool,
    pub sse_heartbeat_secs: u64,
    /// Browser origins (`https://app.example.com`) that may call the API
    /// from their pages; `["*"]` for any. Empty: no CORS headers.
    pub cors_origins: Vec<String>,
    /// Seconds a connection may take to send a request's headers (and an
    /// idle kept-alive connection may wait for the next request) before it
    /// is closed; also how long a body may take to arrive once read (408).
    pub header_read_timeout_secs: u64,
    /// Seconds a write may wait for its client (its socket's buffers full)
    /// with nothing sent acknowledged meanwhile before the connection is
    /// closed: a client that stops reading holds neither its connection
    /// nor what was written for it past this.
    pub write_stall_secs: u64,
    /// Connections served at once; one more is answered `503` with
    /// `Retry-After` and closed. 0: the process's open-file limit, less a
    /// reserve for everything else.
    pub max_connections: usize,
    /// Seconds in-flight requests get to finish after a shutdown signal
    /// (event streams end at once) before toolgate exits anyway.
    pub shutdown_grace_secs: u64,
    /// Whole-thread reads (`/context`, `?snapshot=true`) served at once,
    /// all owners together, and per owner; a read beyond them waits up to
    /// `thread_read_wait_secs`, then is answered 429.
    pub max_thread_reads: usize,
    pub max_thread_reads_per_owner: usize,
    pub thread_read_wait_secs: u64,
    /// Pages of history or of the event log (`GET …/history`, a stream's
    /// replay) one owner reads from the database at once (a history page
    /// until it is serialized); a page beyond them waits up to
    /// `page_read_wait_secs` (a history request is then answered 429; a
    /// stream goes on waiting).
    pub max_page_reads_per_owner: usize,
    pub page_read_wait_secs: u64,
    /// Event streams (`GET …/events`) one owner may hold open at once; one
    /// more is answered 429.
    pub max_streams_per_owner: usize,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            bind: ([127, 0, 0, 1], 8080).into(),
            request_timeout_secs: 660,
            body_limit_bytes: 1024 * 1024,
            run_body_limit_bytes: 32 * 1024 * 1024,
            json_logs: false,
            access_log: false,
            sse_heartbeat_secs: 15,
            cors_origins: Vec::new(),
            header_read_timeout_secs: 30,
            write_stall_secs: 60,
            max_connections: 0,
            shutdown_grace_secs: 30,
            max_thread_reads: 8,
            max_thread_reads_per_owner: 4,
            thread_read_wait_secs: 10,
            max_page_reads_per_owner: 8,
            page_read_wait_secs: 10,
            max_streams_per_owner: 256,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageSettings {
    pub data_dir: PathBuf,
    /// From `DATABASE_URL`; never read from a file or a `TOOLGATE_…`
    /// variable (a key of that name there is refused as unknown), never
    /// serialized.
    #[serde(skip)]
    pub database_url: Option<SecretString>,
    pub writer_max_batch: usize,
    pub writer_linger_ms: u64,
    /// The writer thread's nice value (-20..=19); 0 leaves it as inherited.
    pub writer_nice: i32,
    /// Milliseconds between copies of a SQLite file's WAL back into the
    /// database (at least 1).
    pub sqlite_checkpoint_ms: u64,
    /// Seconds a request waits for a Postgres connection (a free one, or
    /// a new one while the server refuses them) before it is answered
    /// `503` (at least 1).
    pub database_wait_secs: u64,
    /// Milliseconds between the chunks in which a long thread's rows are
    /// removed after its deletion (the writer's batches go first).
    pub purge_pause_ms: u64,
}

impl Default for StorageSettings {
    fn default() -> Self {
        StorageSettings {
            data_dir: PathBuf::from("./data"),
            database_url: None,
            writer_max_batch: 256,
            writer_linger_ms: 0,
            writer_nice: -10,
            sqlite_checkpoint_ms: 20,
            database_wait_secs: 10,
            purge_pause_ms: 5,
        }
    }
}

impl StorageSettings {
    /// `sqlite_checkpoint_ms` as a duration; 0 counts as 1 ms.
    pub fn sqlite_checkpoint(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.sqlite_checkpoint_ms.max(1))
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSettings {
    #[serde(skip_serializing)]
    pub hs256_secret: Option<SecretString>,
    pub algorithm: Option<String>,
    pub public_key_pem: Option<PathBuf>,
    pub private_key_pem: Option<PathBuf>,
    pub audience: String,
    pub issuer: String,
    pub leeway_secs: u64,
    pub dev_token_ttl_secs: u64,
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings {
            hs256_secret: None,
            algorithm: None,
            public_key_pem: None,
            private_key_pem: None,
            audience: "toolgate".into(),
            issuer: "toolgate".into(),
            leeway_secs: 30,
            dev_token_ttl_secs: 30 * 24 * 3600,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolSettings {
    pub timeout_secs: u64,
    pub wait_max_ms: u64,
    /// Calls running at once, all owners together; beyond it: 429.
    pub max_concurrent_calls: usize,
    /// Calls running at once for one owner; beyond it: 429.
    pub max_concurrent_calls_per_owner: usize,
    /// Most calls one batch, or the assistant message an AG-UI run
    /// executes, may carry.
    pub max_batch_calls: usize,
    /// A read-only call's write-ahead shares its result's transaction when
    /// the tool finishes within this many ms; 0 commits it first always.
    pub announce_after_ms: u64,
}

impl Default for ToolSettings {
    fn default() -> Self {
        ToolSettings {
            timeout_secs: 120,
            wait_max_ms: 60_000,
            max_concurrent_calls: 256,
            max_concurrent_calls_per_owner: 64,
            max_batch_calls: 64,
            announce_after_ms: 20,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LineEndings {
    Lf,
    Crlf,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceSettings {
    /// Holds one directory per owner; default `<data_dir>/workspaces`.
    pub root: Option<PathBuf>,
    /// Line endings `write_file` normalises to.
    pub line_endings: LineEndings,
}

impl Default for WorkspaceSettings {
    fn default() -> Self {
        WorkspaceSettings {
            root: None,
            line_endings: LineEndings::Lf,
        }
    }
}

impl WorkspaceSettings {
    pub fn root(&self, data_dir: &Path) -> PathBuf {
        self.root
            .clone()
            .unwrap_or_else(|| data_dir.join("workspaces"))
    }

    pub fn history_root(&self, data_dir: &Path) -> PathBuf {
        data_dir.join("edit-history")
    }
}

/// What to do when the kernel cannot confine commands with Landlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LandlockMode {
    /// Refuse to run bash (and anything else that spawns) without it.
    Require,
    /// Run unconfined by Landlock, and say so in /readyz and /v1/workspace.
    BestEffort,
}

/// Whether commands get a confinement the host may not offer: PID and
/// mount namespaces of their own (`sandbox.namespaces`: a `/proc` that
/// shows only the command's own processes, and a process tree the kernel
/// ends as one when its main process ends), or a pids cgroup of their own
/// (`sandbox.pids_cgroup`: the process limit, counted per command, for
/// root too). See [`crate::sandbox`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FeatureMode {
    /// Refuse to run commands where the host does not offer it.
    Require,
    /// Use it where the host offers it (namespaces: not, typically, inside a
    /// container that forbids user namespaces; cgroups: where the service
    /// may create them), and say so in /readyz and /v1/workspace where it
    /// does not.
    BestEffort,
    /// Never.
    Off,
}

/// `sandbox.namespaces`.
pub type NamespaceMode = FeatureMode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkPolicy {
    /// Commands cannot open IP sockets (seccomp).
    Deny,
    Allow,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSettings {
    pub landlock: LandlockMode,
    pub namespaces: NamespaceMode,
    /// Each command in a pids cgroup of its own (cgroup v1) whose limit is
    /// `max_processes`.
    pub pids_cgroup: FeatureMode,
    pub network: NetworkPolicy,
    /// RLIMIT_CPU of a command, seconds.
    pub cpu_secs: u64,
    /// RLIMIT_FSIZE: largest file a command may write, bytes.
    pub file_size_bytes: u64,
    /// Tasks (processes and threads) a command may have at once: its pids
    /// cgroup's `pids.max` where the service can make one (cgroup v1), and
    /// RLIMIT_NPROC (which Linux does not enforce for root).
    pub max_processes: u64,
    /// RLIMIT_NOFILE.
    pub max_open_files: u64,
    /// RLIMIT_DATA: the heap and private writable memory of each process of
    /// a command, bytes (address space merely reserved does not count).
    pub max_memory_bytes: u64,
    pub bash_default_timeout_ms: u64,
    pub bash_max_timeout_ms: u64,
    /// Per stream (stdout, stderr), characters kept (head and tail).
    pub output_cap_chars: usize,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            landlock: LandlockMode::Require,
            namespaces: NamespaceMode::BestEffort,
            pids_cgroup: FeatureMode::BestEffort,
            network: NetworkPolicy::Deny,
            cpu_secs: 600,
            file_size_bytes: 1 << 30,
            max_processes: 512,
            max_open_files: 1024,
            max_memory_bytes: 4 << 30,
            bash_default_timeout_ms: 120_000,
            bash_max_timeout_ms: 600_000,
            output_cap_chars: 30_000,
        }
    }
}

/// The deployment's permission rules (`tool` or `tool(specifier)`),
/// evaluated deny → ask → allow before each owner's own rules of the same
/// kind; and the verdict for calls no rule matches, by the tool's nature.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct PermissionSettings {
    pub allow: Vec<String>,
    pub ask: Vec<String>,
    pub deny: Vec<String>,
    pub defaults: crate::permissions::Defaults,
}

impl PermissionSettings {
    /// Parse the rules; a bad rule names its list and index.
    pub fn engine_config(&self) -> anyhow::Result<crate::engine::PermissionConfig> {
        if let Some(e) = crate::permissions::rule_errors(&self.allow, &self.ask, &self.deny)
            .into_iter()
            .next()
        {
            anyhow::bail!("permissions: {e}");
        }
        let rules = crate::permissions::RuleSet::from_lists(&self.allow, &self.ask, &self.deny)
            .map_err(|e| anyhow::anyhow!("permissions: {e}"))?;
        Ok(crate::engine::PermissionConfig {
            rules,
            defaults: self.defaults,
            workspaces: None,
        })
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalSettings {
    /// Whether calls that need approval may be approved (by their owner or a
    /// token with `approver_scope`). Off: they are denied, never allowed.
    pub enabled: bool,
    /// Seconds an approval stays open before it expires.
    pub ttl_secs: u64,
    /// Tokens with this scope may see and decide any owner's approvals.
    pub approver_scope: String,
    /// Whether a call's owner may approve it. Off: only a token with
    /// `approver_scope` approves (the owner, who holds the model's token,
    /// may still deny or withdraw its own calls).
    pub owners_approve: bool,
    /// Seconds between the looks `GET /v1/approvals/events` takes at the
    /// database. Approvals this process asks or decides are told at once;
    /// the looks find those of other toolgate processes on the same
    /// database (and are the fallback for anything missed).
    pub stream_look_secs: u64,
}

impl Default for ApprovalSettings {
    fn default() -> Self {
        ApprovalSettings {
            enabled: true,
            ttl_secs: 900,
            approver_scope: "toolgate:approve".into(),
            owners_approve: true,
            stream_look_secs: 1,
        }
    }
}

impl Settings {
    /// Load the layered settings. `config_file` is `--config`.
    pub fn load(config_file: Option<&Path>) -> anyhow::Result<Settings> {
        let mut figment = Figment::from(Serialized::defaults(Settings::default()));
        let default_file = Path::new("config/default.toml");
        let mut files = Vec::new();
        if default_file.exists() {
            figment = figment.merge(Toml::file(default_file));
            files.push(default_file.to_path_buf());
        }
        if let Some(file) = config_file {
            anyhow::ensure!(
                file.exists(),
                "config file {} does not exist",
                file.display()
            );
            anyhow::ensure!(
                file.is_file(),
                "config file {} is not a file",
                file.display()
            );
            figment = figment.merge(Toml::file(file));
            files.push(file.to_path_buf());
        }
        // Every setting is in a section, so only `TOOLGATE_SECTION__KEY`
        // names one; other `TOOLGATE_…` variables are not settings, but one
        // that names a section with a single `_` is a misspelt setting.
        misspelt_variables(std::env::vars_os().map(|(name, _)| name))?;
        // The secret is taken as the variable's text whatever it looks like
        // (figment would read `1.5e5` as a number, and refuse it): below.
        figment = figment.merge(
            Env::prefixed("TOOLGATE_")
                .filter(|key| {
                    key.as_str().contains("__")
                        && !key.as_str().eq_ignore_ascii_case(SECRET_VARIABLE_KEY)
                })
                .split("__"),
        );
        // A section or key toolgate does not have (a misspelling) is an
        // error naming it and where it was read, never ignored.
        let mut settings: Settings = figment
            .extract()
            .map_err(|e| anyhow::anyhow!(describe_errors(e)))?;
        if let Some(secret) = std::env::var_os(format!("TOOLGATE_{SECRET_VARIABLE_KEY}")) {
            let secret = secret.into_string().map_err(|_| {
                anyhow::anyhow!("TOOLGATE_{SECRET_VARIABLE_KEY} is not valid UTF-8 text")
            })?;
            settings.auth.hs256_secret = Some(SecretString::from(secret));
        }
        settings.check(&figment)?;
        settings.files = files;
        if let Ok(url) = std::env::var("DATABASE_URL")
            && !url.trim().is_empty()
        {
            settings.storage.database_url = Some(SecretString::from(url));
        }
        Ok(settings)
    }
}

/// The sections of the settings, as `TOOLGATE_<SECTION>__<KEY>` names them.
const SECTIONS: [&str; 8] = [
    "SERVER",
    "STORAGE",
    "AUTH",
    "TOOLS",
    "WORKSPACE",
    "SANDBOX",
    "PERMISSIONS",
    "APPROVALS",
];

/// A variable such as `TOOLGATE_SERVER_BIND` looks like a setting but
/// sets none (a section and its key are joined by two underscores):
/// ignored, the setting would silently keep its default.
fn misspelt_variables(names: impl Iterator<Item = std::ffi::OsString>) -> anyhow::Result<()> {
    let mut misspelt: Vec<String> = names
        .filter_map(|name| name.into_string().ok())
        .filter(|name| {
            let Some(rest) = name.strip_prefix("TOOLGATE_") else {
                return false;
            };
            !rest.contains("__")
                && SECTIONS.iter().any(|section| {
                    rest.strip_prefix(section)
                        .is_some_and(|key| key.starts_with('_') && key.len() > 1)
                })
        })
        .collect();
    misspelt.sort();
    anyhow::ensure!(
        misspelt.is_empty(),
        "{} names no setting: a section and its key are joined by two underscores \
         (TOOLGATE_SERVER__BIND, not TOOLGATE_SERVER_BIND)",
        misspelt.join(", ")
    );
    Ok(())
}

/// The signing secret's variable, less `TOOLGATE_`: read as its text.
const SECRET_VARIABLE_KEY: &str = "AUTH__HS256_SECRET";

/// Settings whose values are secrets: an error about one never quotes
/// what was given. (`storage.database_url` is none: it is only ever read
/// from `DATABASE_URL`, and set anywhere else it is an unknown key, whose
/// error quotes no value.)
const SECRET_KEYS: [&str; 1] = ["auth.hs256_secret"];

/// A TOML syntax error without the lines of the file it quotes (a
/// misquoted secret would be written to the log whole): where it is, line
/// and column, and what is wrong stay.
fn without_source_lines(message: &str) -> String {
    let kept: Vec<&str> = message
        .lines()
        .filter(|line| {
            let gutter = line
                .trim_start()
                .trim_start_matches(|c: char| c.is_ascii_digit());
            !gutter.trim_start().starts_with('|')
        })
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    kept.join(": ")
}

/// Figment's errors, each naming its setting as it was written: the
/// variable (`TOOLGATE_SERVER__BIND`) or the key and its file.
fn describe_errors(errors: figment::Error) -> String {
    errors
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let place = match &e.metadata {
                Some(m) if m.name.contains("environment") => {
                    format!("TOOLGATE_{}", key.replace('.', "__").to_uppercase())
                }
                Some(figment::Metadata {
                    source: Some(figment::Source::File(file)),
                    ..
                }) if key.is_empty() => file.display().to_string(),
                Some(figment::Metadata {
                    source: Some(figment::Source::File(file)),
                    ..
                }) => format!("{key} in {}", file.display()),
                _ => key,
            };
            let secret = SECRET_KEYS.contains(&e.path.join(".").as_str());
            let kind = if secret {
                "not a valid value (a secret: what was given is not shown)".to_string()
            } else {
                without_source_lines(&e.kind.to_string())
            };
            if place.is_empty() {
                kind
            } else {
                format!("{place}: {kind}")
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Where a setting's value came from: `in FILE`, `from TOOLGATE_…`, or
/// the built-in default.
fn origin(figment: &Figment, key: &str) -> String {
    match figment.find_metadata(key) {
        Some(figment::Metadata {
            source: Some(figment::Source::File(file)),
            ..
        }) => format!("set in {}", file.display()),
        Some(m) if m.name.contains("environment") => {
            format!("set by TOOLGATE_{}", key.replace('.', "__").to_uppercase())
        }
        _ => "the default".into(),
    }
}

impl Settings {
    /// Values that type-check but cannot work (a body limit of 0, a default
    /// command timeout above the longest allowed) stop the start, each
    /// naming its setting and where it was set.
    fn check(&self, figment: &Figment) -> anyhow::Result<()> {
        let mut problems = Vec::new();
        let mut at_least = |key: &str, value: u64, min: u64| {
            if value < min {
                problems.push(format!(
                    "{key} is {value} ({}); it must be at least {min}",
                    origin(figment, key)
                ));
            }
        };
        let (server, tools, sandbox) = (&self.server, &self.tools, &self.sandbox);
        for (key, value) in [
            ("server.request_timeout_secs", server.request_timeout_secs),
            ("server.body_limit_bytes", server.body_limit_bytes as u64),
            (
                "server.run_body_limit_bytes",
                server.run_body_limit_bytes as u64,
            ),
            ("server.sse_heartbeat_secs", server.sse_heartbeat_secs),
            (
                "server.header_read_timeout_secs",
                server.header_read_timeout_secs,
            ),
            ("server.write_stall_secs", server.write_stall_secs),
            ("server.max_thread_reads", server.max_thread_reads as u64),
            (
                "server.max_thread_reads_per_owner",
                server.max_thread_reads_per_owner as u64,
            ),
            (
                "server.max_page_reads_per_owner",
                server.max_page_reads_per_owner as u64,
            ),
            (
                "server.max_streams_per_owner",
                server.max_streams_per_owner as u64,
            ),
            (
                "storage.writer_max_batch",
                self.storage.writer_max_batch as u64,
            ),
            (
                "storage.database_wait_secs",
                self.storage.database_wait_secs,
            ),
            ("tools.timeout_secs", tools.timeout_secs),
            (
                "tools.max_concurrent_calls",
                tools.max_concurrent_calls as u64,
            ),
            (
                "tools.max_concurrent_calls_per_owner",
                tools.max_concurrent_calls_per_owner as u64,
            ),
            ("tools.max_batch_calls", tools.max_batch_calls as u64),
            ("sandbox.cpu_secs", sandbox.cpu_secs),
            ("sandbox.file_size_bytes", sandbox.file_size_bytes),
            ("sandbox.max_processes", sandbox.max_processes),
            ("sandbox.max_open_files", sandbox.max_open_files),
            ("sandbox.max_memory_bytes", sandbox.max_memory_bytes),
            (
                "sandbox.bash_default_timeout_ms",
                sandbox.bash_default_timeout_ms,
            ),
            ("sandbox.bash_max_timeout_ms", sandbox.bash_max_timeout_ms),
            ("sandbox.output_cap_chars", sandbox.output_cap_chars as u64),
            ("approvals.ttl_secs", self.approvals.ttl_secs),
            (
                "approvals.stream_look_secs",
                self.approvals.stream_look_secs,
            ),
            ("auth.dev_token_ttl_secs", self.auth.dev_token_ttl_secs),
        ] {
            at_least(key, value, 1);
        }
        let nice = self.storage.writer_nice;
        if !(-20..=19).contains(&nice) {
            problems.push(format!(
                "storage.writer_nice is {nice} ({}); it must be between -20 and 19 (0 = inherit)",
                origin(figment, "storage.writer_nice")
            ));
        }
        // An hour of clock skew forgiven is already far more than any clock
        // is off; more would keep expired tokens working.
        if self.auth.leeway_secs > 3600 {
            problems.push(format!(
                "auth.leeway_secs is {} ({}); it must be at most 3600",
                self.auth.leeway_secs,
                origin(figment, "auth.leeway_secs")
            ));
        }
        for (key, value) in [
            ("auth.audience", &self.auth.audience),
            ("auth.issuer", &self.auth.issuer),
            ("approvals.approver_scope", &self.approvals.approver_scope),
        ] {
            if value.trim().is_empty() || value.chars().any(char::is_whitespace) {
                problems.push(format!(
                    "{key} is {value:?} ({}); it must be one word, not empty",
                    origin(figment, key)
                ));
            }
        }
        if sandbox.bash_default_timeout_ms > sandbox.bash_max_timeout_ms {
            problems.push(format!(
                "sandbox.bash_default_timeout_ms ({}, {}) is above sandbox.bash_max_timeout_ms \
                 ({}, {}): a command's default timeout must be one it may have",
                sandbox.bash_default_timeout_ms,
                origin(figment, "sandbox.bash_default_timeout_ms"),
                sandbox.bash_max_timeout_ms,
                origin(figment, "sandbox.bash_max_timeout_ms"),
            ));
        }
        anyhow::ensure!(problems.is_empty(), "{}", problems.join("; "));
        Ok(())
    }

    /// Settings that work but are likely not what was meant, for the
    /// start-up log.
    pub fn cautions(&self) -> Vec<String> {
        let mut cautions = Vec::new();
        // The longest a call may run: any tool's timeout, or bash's longest
        // (a command's own `timeout_ms` may reach it).
        let bash_secs = self.sandbox.bash_max_timeout_ms.div_ceil(1000);
        let (longest, setting) = if bash_secs > self.tools.timeout_secs {
            (bash_secs, "sandbox.bash_max_timeout_ms")
        } else {
            (self.tools.timeout_secs, "tools.timeout_secs")
        };
        if self.server.request_timeout_secs <= longest {
            cautions.push(format!(
                "server.request_timeout_secs ({}) is not above {setting} ({longest} s): a call \
                 that runs that long is answered 408 before its result (which is still \
                 stored: posting the call again returns it)",
                self.server.request_timeout_secs
            ));
        }
        if self.tools.wait_max_ms >= self.tools.timeout_secs.saturating_mul(1000) {
            cautions.push(format!(
                "tools.wait_max_ms ({}) is not below tools.timeout_secs ({} s): a `wait` as long \
                 as its schema allows times out",
                self.tools.wait_max_ms, self.tools.timeout_secs
            ));
        }
        if std::env::var_os("DATABASE_URL")
            .is_some_and(|url| url.to_string_lossy().trim().is_empty())
        {
            cautions.push(
                "DATABASE_URL is set but empty: serving from the data directory's SQLite file"
                    .into(),
            );
        }
        cautions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request timeout below what a call may run is a caution, naming
    /// the setting that lets it run so long: bash's longest as well as
    /// any tool's.
    #[test]
    fn a_request_timeout_below_a_calls_longest_run_is_a_caution() {
        let mut settings = Settings::default();
        assert!(settings.cautions().is_empty(), "{:?}", settings.cautions());
        settings.server.request_timeout_secs = 8;
        settings.tools.timeout_secs = 3;
        settings.tools.wait_max_ms = 2_000;
        let cautions = settings.cautions();
        assert_eq!(cautions.len(), 1, "{cautions:?}");
        assert!(
            cautions[0].contains("is not above sandbox.bash_max_timeout_ms (600 s)"),
            "{cautions:?}"
        );
        settings.sandbox.bash_max_timeout_ms = 1_000;
        assert!(settings.cautions().is_empty(), "{:?}", settings.cautions());
        settings.server.request_timeout_secs = 3;
        let cautions = settings.cautions();
        assert!(
            cautions[0].contains("is not above tools.timeout_secs (3 s)"),
            "{cautions:?}"
        );
        settings.server.request_timeout_secs = 4;
        assert!(settings.cautions().is_empty(), "{:?}", settings.cautions());
        // A wait its schema allows that would run into the tools' timeout.
        settings.tools.wait_max_ms = 3_000;
        let cautions = settings.cautions();
        assert!(
            cautions[0].starts_with("tools.wait_max_ms (3000) is not below"),
            "{cautions:?}"
        );
    }
}
