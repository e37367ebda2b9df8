//! The command sandbox: runs one argv, confined to a workspace, and returns
//! its output. It knows nothing of tools; tools hand it a [`CommandSpec`]
//! and do not know which confinement is in force.
//!
//! What a command gets:
//! - **Its own session** (`setsid` before exec): a new process group with no
//!   controlling terminal. On timeout, cancellation, and also when the
//!   command's main process exits, the whole session is SIGKILLed: the
//!   group, plus any process that moved to another group of the session
//!   (found through /proc). Leaving the session is denied by seccomp, so
//!   background grandchildren neither outlive the command nor hold its
//!   pipes open. Should the service itself die, the main process gets
//!   SIGKILL (`PR_SET_PDEATHSIG`, tied to the thread that spawned it: call
//!   `run` from a runtime worker or a thread that outlives the command),
//!   and the rest of the session is ended at once by the service's
//!   watchdog process ([`SessionWatchdog`], started by `toolgate serve`)
//!   or, failing that, by the next start on the same data directory
//!   ([`Sandbox::recording_sessions_in`]).
//! - **PID and mount namespaces of its own** (`sandbox.namespaces`, where
//!   the kernel lets this process create a user namespace): the command
//!   starts in new user, PID and mount namespaces, keeping the service's
//!   uid and gid, and mounts a `/proc` of its own, so it sees only its own
//!   processes (not the service, nor another owner's command line). Its
//!   main process is the namespace's init: when it ends, however it ends
//!   (PR_SET_PDEATHSIG when the service dies included), the kernel ends
//!   every process the command started, watchdog or not. Like any init, it
//!   ignores signals it sends itself without a handler. Every mount it
//!   sees is read-only but a mount of its workspace of its own (child.rs):
//!   Landlock governs what a file holds, not its mode, times or extended
//!   attributes, which the service's uid could otherwise change on the
//!   service's own files.
//! - **No terminal, no input**: stdin is /dev/null; the environment is
//!   cleared and rebuilt from an allow-list (see [`base_environment`])
//!   that turns pagers, editors and credential prompts off. The service's
//!   own variables (`DATABASE_URL`, `TOOLGATE_*`, keys) never reach it.
//! - **Landlock** (when the kernel has it): writes only beneath the
//!   workspace; reads beneath the workspace and the read-only system paths
//!   of [`SystemPaths`] (programs, libraries, /etc minus its secrets,
//!   /proc, CPU and cgroup information); execution from the program trees
//!   and the workspace; /dev/null, /dev/zero, /dev/full, /dev/random and
//!   /dev/urandom read-write. No /tmp, no /dev/shm, no /dev/tty. With ABI
//!   ≥ 4 and network = deny, TCP bind/connect are refused too; with ABI ≥ 6
//!   the command cannot signal processes outside it or reach abstract UNIX
//!   sockets created outside it. Landlock also keeps it from ptrace-ing
//!   (or reading `/proc/<pid>/environ` of) processes outside it.
//! - **A private temporary directory inside the workspace**:
//!   `<workspace>/.toolgate-tmp/<uuid>`, created before the command and
//!   removed after it; `TMPDIR`, `TMP`, `TEMP` point there. Nothing is
//!   shared between commands or with the host's /tmp, and writing there is
//!   writing in the workspace, the only writable place.
//! - **seccomp**: always denied (EPERM) `setsid`, io_uring (it performs
//!   socket and file operations that bypass seccomp), the kernel keyring
//!   calls, and namespaces of the command's own making (`unshare`, `setns`,
//!   `clone` with a namespace flag; `clone3`, whose flags seccomp cannot
//!   read, answers ENOSYS and the C library falls back to `clone`): in a
//!   user namespace it made, a command would hold every capability again;
//!   with network = deny, `socket()` of every family (EACCES; UNIX
//!   too: before Landlock ABI 9 nothing else keeps a command from
//!   connecting to a pathname socket such as the database's) and datagram
//!   or non-UNIX `socketpair()`. On x86-64, x32 syscalls are refused and
//!   foreign-ABI (i386) syscalls kill the process.
//! - **Resource limits** (soft = hard): CPU seconds, file size, processes,
//!   open files, and no core dumps. Linux never enforces RLIMIT_NPROC for
//!   uid 0, and for another uid it counts every process and thread of that
//!   user, the service's included; so where the service can make cgroups in
//!   the cgroup v1 `pids` hierarchy (as root, typically), each command also
//!   gets a pids cgroup of its own that counts its tasks alone (pids.rs).
//! - **No privileges**: `no_new_privs`, and every capability dropped
//!   (bounding, ambient, inheritable, permitted, effective) — as root,
//!   the command is root without its powers, and cannot raise its limits.
//!
//! Where the kernel lacks Landlock, `landlock = require` refuses to run
//! anything ([`SandboxError::Unavailable`]) and `best_effort` runs with
//! everything else. [`Sandbox::status`] reports which case holds.
//!
//! `setsid` is used instead of `process_group(0)`: it gives the same
//! killable group, and also drops the controlling terminal (a service
//! started from a shell would otherwise let commands prompt on it).
//!
//! Known limits: Landlock does not govern `stat`, path traversal or
//! directory listing granted on a split tree, so names (not contents) of
//! hidden entries such as /etc/ssh are visible; /etc entries created after
//! start-up are not readable until restart; without namespaces, other
//! processes' command lines in /proc are readable; 32-bit binaries are
//! killed by the seccomp architecture check.

mod child;
mod filesystem;
mod output;
mod paths;
mod pids;
mod session;
mod spawn;
mod syscalls;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

use crate::config::{FeatureMode, LandlockMode, NamespaceMode, NetworkPolicy, SandboxSettings};

pub use paths::SystemPaths;
pub use session::{SessionWatchdog, watch_sessions};

use child::{Confinement, Limits, Namespaces};
use output::CappedText;
use session::{SessionGuard, SessionRecords, kill_session};
use spawn::Program;

/// `PATH` of every command.
pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Where the per-command temporary directories live, inside the workspace.
pub const TMP_DIR_NAME: &str = ".toolgate-tmp";

/// A command's `HOME`, inside its temporary directory: made empty for
/// each command and removed after it. Programs read their start-up files
/// from `HOME` (git's `.gitconfig`, `.lesskey`, `.wgetrc`, Python's user
/// site); with `HOME` at the workspace root a file the workspace tracks
/// or a file tool wrote would be read as one, and run what it says.
pub const HOME_DIR_NAME: &str = "home";

/// How long the pipes are still read once the command's processes are
/// dead: enough to drain what they wrote, not enough to hang on a
/// descriptor something else kept open.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// What the kernel offers the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSupport {
    /// Landlock ABI version, `None` without Landlock.
    pub landlock_abi: Option<i32>,
    pub seccomp: bool,
    /// Whether a command can start in user, PID and mount namespaces of
    /// its own, with a `/proc` of its own.
    pub namespaces: bool,
    /// The service's cgroup in the v1 `pids` hierarchy, when it may create
    /// cgroups there: each command then gets one of its own, beneath it,
    /// limited to `sandbox.max_processes` tasks.
    pub pids_cgroup: Option<PathBuf>,
}

impl KernelSupport {
    /// Asks the running kernel.
    pub fn probe() -> Self {
        KernelSupport {
            landlock_abi: filesystem::probe_abi(),
            seccomp: syscalls::probe(),
            namespaces: spawn::probe_namespaces(false, false),
            pids_cgroup: pids::probe(),
        }
    }
}

/// One command to run. Commands are data until the last moment: `argv` is
/// passed to `execve` as it is, nothing builds shell text.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// Program and arguments; the program is looked up in [`PATH`] when it
    /// has no `/`.
    pub argv: Vec<String>,
    /// Working directory; must be the workspace or beneath it.
    pub cwd: PathBuf,
    /// The only writable tree (and `HOME`).
    pub workspace: PathBuf,
    /// When given, the (device, inode) the workspace directory must have
    /// when the command is confined to it: a `workspace` path that names
    /// another directory by then (a symlink swapped in) is refused.
    pub workspace_identity: Option<(u64, u64)>,
    /// Added to (and overriding) the allow-listed environment.
    pub env: BTreeMap<String, String>,
    pub timeout: Duration,
    pub cancel: CancellationToken,
    /// Characters kept per stream (half from the start, half from the end).
    pub output_cap: usize,
    /// Told, every [`PROGRESS_EVERY`] while the command runs, how long it
    /// has run and how many bytes it has written (both streams).
    pub progress: Option<Ticks>,
}

/// How often a running command's [`CommandSpec::progress`] is told.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// A running command's progress callback: how long it has run, and the
/// bytes it has written so far.
#[derive(Clone)]
pub struct Ticks(pub Arc<dyn Fn(Duration, usize) + Send + Sync>);

impl std::fmt::Debug for Ticks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ticks")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommandOutput {
    pub stdout: String,
    pub stderr: String,
    /// `None` when killed by a signal.
    pub exit_code: Option<i32>,
    /// The signal that ended the command, if one did.
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub duration_ms: u64,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Characters the command wrote, kept or not.
    pub stdout_chars: usize,
    pub stderr_chars: usize,
    /// The pipes were still open after every process of the command was
    /// killed (a descriptor passed outside it); what they held afterwards
    /// is lost.
    pub output_incomplete: bool,
}

impl CommandOutput {
    /// Whether anything was printed at all.
    pub fn has_output(&self) -> bool {
        self.stdout_chars > 0 || self.stderr_chars > 0
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The configured confinement cannot be provided on this host.
    #[error("the command sandbox is unavailable: {0}")]
    Unavailable(String),
    #[error("invalid command: {0}")]
    InvalidSpec(String),
    /// Preparing the confinement (temporary directory, Landlock ruleset)
    /// failed.
    #[error("could not prepare the sandbox: {0}")]
    Setup(String),
    /// Starting it failed: the program does not exist or cannot be
    /// executed, or the kernel refused a confinement step.
    #[error("could not start `{program}`: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct LandlockStatus {
    /// `require` or `best_effort`.
    #[schema(value_type = String)]
    pub mode: LandlockMode,
    pub available: bool,
    /// ABI version the kernel offers.
    pub abi: Option<i32>,
    /// Whether commands run under Landlock.
    pub enforced: bool,
    /// TCP bind/connect also refused by Landlock (ABI ≥ 4, network = deny).
    pub tcp_denied: bool,
    /// Signals and abstract UNIX sockets scoped to the command (ABI ≥ 6).
    pub scoped: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct SeccompStatus {
    pub available: bool,
    pub active: bool,
    /// What the filters refuse.
    pub denied: Vec<String>,
}

/// PID and mount namespaces of each command's own: a `/proc` that shows
/// only its own processes, and a process tree that ends with its main
/// process, even when the service and its watchdog were killed.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct NamespaceStatus {
    /// `require`, `best_effort` or `off` (`sandbox.namespaces`).
    #[schema(value_type = String)]
    pub mode: NamespaceMode,
    /// Whether this kernel lets the service create them.
    pub available: bool,
    /// Whether commands run in them.
    pub enforced: bool,
    /// Whether every mount a command sees is read-only but its
    /// workspace's (Linux 5.12+).
    pub read_only_mounts: bool,
    /// Whether commands also get a network namespace of their own (with
    /// `network = deny`): no interface but a loopback that is down, and a
    /// `/proc/net` that shows none of the host's sockets.
    pub network: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RlimitStatus {
    pub cpu_secs: u64,
    pub file_size_bytes: u64,
    /// Tasks (processes and threads) a command may have at once.
    pub max_processes: u64,
    /// False when the service runs as root and no pids cgroup can be made
    /// for each command: Linux exempts uid 0 from `RLIMIT_NPROC`.
    pub max_processes_enforced: bool,
    /// Whether each command gets a pids cgroup of its own with this limit
    /// (counting the command's tasks only, for any user).
    pub max_processes_cgroup: bool,
    pub max_open_files: u64,
    /// RLIMIT_DATA of each process: heap and private writable memory.
    pub max_memory_bytes: u64,
    pub core_bytes: u64,
}

/// What confinement commands get on this host; for start-up logs,
/// `/readyz` and `/v1/workspace`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct SandboxStatus {
    /// Whether commands may run at all.
    pub bash_enabled: bool,
    pub landlock: LandlockStatus,
    pub namespaces: NamespaceStatus,
    /// `deny` or `allow`.
    #[schema(value_type = String)]
    pub network: NetworkPolicy,
    pub seccomp: SeccompStatus,
    pub rlimits: RlimitStatus,
    pub capabilities_dropped: bool,
    /// Readable (and for programs executable) system trees.
    pub read_only_paths: Vec<String>,
    /// Never readable, even beneath a granted tree.
    pub hidden_paths: Vec<String>,
    /// `TMPDIR` of a command, relative to its workspace.
    pub tmpdir: String,
    /// `HOME` of a command, relative to its workspace: an empty directory
    /// made for the command and removed with its `TMPDIR`, so no file of
    /// the workspace (a tracked `.gitconfig`, a `.lesskey` a file tool
    /// wrote) is read as a program's own start-up file.
    pub home: String,
    /// Why commands are refused, or run less confined than configured.
    pub warnings: Vec<String>,
}

pub struct Sandbox {
    settings: SandboxSettings,
    kernel: KernelSupport,
    rules: Vec<paths::Rule>,
    filters: Option<Arc<syscalls::Filters>>,
    /// What commands do in namespaces of their own, when they get them.
    namespaces: Option<Arc<Namespaces>>,
    status: SandboxStatus,
    /// Where running commands' sessions are recorded (see
    /// [`Sandbox::recording_sessions_in`]); none in tests that run the
    /// sandbox alone.
    records: Option<Arc<SessionRecords>>,
    /// Where each command's pids cgroup is made, when commands get one.
    pids_cgroup: Option<PathBuf>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

/// The allow-listed environment of every command, before the per-command
/// entries (`HOME`, `TMPDIR`, …) and the caller's extras. Everything that
/// could wait for a human is turned off.
pub fn base_environment() -> BTreeMap<String, String> {
    [
        ("PATH", PATH),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
        ("TERM", "dumb"),
        ("PAGER", "cat"),
        ("GIT_PAGER", "cat"),
        ("MANPAGER", "cat"),
        ("SYSTEMD_PAGER", "cat"),
        ("PSQL_PAGER", "cat"),
        ("AWS_PAGER", ""),
        ("EDITOR", "true"),
        ("VISUAL", "true"),
        ("GIT_EDITOR", "true"),
        ("GIT_SEQUENCE_EDITOR", "true"),
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_ASKPASS", ""),
        // A repository's (or HOME's) `core.fsmonitor` runs a program at
        // every `git status` and `git diff`: never in a command. Nor is a
        // directory git finds that merely looks like a bare repository
        // (`HEAD`, `objects/`, `refs/` and a `config` a command wrote
        // anywhere) taken as one: its configuration would run programs
        // just the same (`safe.bareRepository`, honoured from this scope).
        // The automatic maintenance after a commit runs in the foreground:
        // detached, it would call `setsid`, which seccomp denies a command
        // (git ≥ 2.46 detaches `maintenance run --auto`, older git `gc
        // --auto`).
        ("GIT_CONFIG_COUNT", "4"),
        ("GIT_CONFIG_KEY_0", "core.fsmonitor"),
        ("GIT_CONFIG_VALUE_0", "false"),
        ("GIT_CONFIG_KEY_1", "safe.bareRepository"),
        ("GIT_CONFIG_VALUE_1", "explicit"),
        ("GIT_CONFIG_KEY_2", "maintenance.autoDetach"),
        ("GIT_CONFIG_VALUE_2", "false"),
        ("GIT_CONFIG_KEY_3", "gc.autoDetach"),
        ("GIT_CONFIG_VALUE_3", "false"),
        ("SSH_ASKPASS", ""),
        ("SSH_ASKPASS_REQUIRE", "never"),
        ("GCM_INTERACTIVE", "never"),
        ("DEBIAN_FRONTEND", "noninteractive"),
        ("CI", "1"),
        ("NO_COLOR", "1"),
        ("PIP_NO_INPUT", "1"),
        ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
        ("NPM_CONFIG_YES", "true"),
        ("NPM_CONFIG_UPDATE_NOTIFIER", "false"),
        ("NO_UPDATE_NOTIFIER", "1"),
        ("PYTHONUNBUFFERED", "1"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

impl Sandbox {
    /// A sandbox with the default system paths, probing the kernel.
    pub fn new(settings: &SandboxSettings) -> Sandbox {
        Self::with_paths(settings, SystemPaths::default())
    }

    /// A sandbox with these system paths (typically the defaults with the
    /// service's data directory and configuration hidden), probing the
    /// kernel.
    pub fn with_paths(settings: &SandboxSettings, paths: SystemPaths) -> Sandbox {
        Self::with_kernel(settings, paths, KernelSupport::probe())
    }

    /// A sandbox that uses at most what `kernel` says is there (tests use
    /// it to see the behaviour on a kernel without Landlock).
    pub fn with_kernel(
        settings: &SandboxSettings,
        paths: SystemPaths,
        kernel: KernelSupport,
    ) -> Sandbox {
        let deny_network = settings.network == NetworkPolicy::Deny;
        let mut warnings = Vec::new();
        let filters = if kernel.seccomp {
            match syscalls::build(deny_network) {
                Ok(filters) => Some(Arc::new(filters)),
                Err(e) => {
                    warnings.push(format!("seccomp filters do not compile here: {e}"));
                    None
                }
            }
        } else {
            warnings.push("the kernel offers no seccomp filters".into());
            None
        };
        let landlock_available = kernel.landlock_abi.is_some();
        let mut bash_enabled = true;
        if !landlock_available {
            match settings.landlock {
                LandlockMode::Require => {
                    bash_enabled = false;
                    warnings.push(
                        "the kernel has no Landlock and sandbox.landlock = require: commands are refused"
                            .into(),
                    );
                }
                LandlockMode::BestEffort => warnings.push(
                    "the kernel has no Landlock: commands run without file-system confinement (sandbox.landlock = best_effort)"
                        .into(),
                ),
            }
        }
        let rules = paths::rules(&paths);
        // Built once: the ids to map and the service's pidfd do not change.
        // Whatever keeps commands out of namespaces counts the same way
        // for `require` and `best_effort`.
        let mut namespace_setup = None;
        let mut no_namespaces = None;
        if settings.namespaces != NamespaceMode::Off {
            if !kernel.namespaces {
                no_namespaces = Some(
                    "the kernel lets this process create no user, PID and mount namespaces"
                        .to_string(),
                );
            } else {
                let proc_access = kernel
                    .landlock_abi
                    .map_or(0, |abi| filesystem::proc_access(abi, &rules));
                match Namespaces::for_this_process(proc_access) {
                    Ok(mut setup) => {
                        // Read-only mounts, and with network = deny a
                        // network namespace, where the kernel allows them.
                        setup.read_only_mounts = spawn::probe_namespaces(true, false);
                        setup.new_network = settings.network == NetworkPolicy::Deny
                            && spawn::probe_namespaces(false, true);
                        if !setup.read_only_mounts {
                            warnings.push(
                                "commands cannot have read-only mounts here (mount_setattr, Linux \
                                 5.12+): a command can change the mode, times and extended \
                                 attributes of the service's own files outside its workspace"
                                    .to_string(),
                            );
                        }
                        namespace_setup = Some(Arc::new(setup))
                    }
                    Err(e) => {
                        no_namespaces = Some(format!(
                            "commands cannot be given namespaces of their own (a pidfd of the service: {e})"
                        ))
                    }
                }
            }
        }
        let namespaces = namespace_setup.is_some();
        if let Some(why) = no_namespaces {
            if settings.namespaces == NamespaceMode::Require {
                bash_enabled = false;
                warnings.push(format!(
                    "{why} and sandbox.namespaces = require: commands are refused"
                ));
            } else {
                warnings.push(format!(
                    "{why}: commands see every process in /proc, and what they start in the background outlives them if the service and its watchdog are both killed (sandbox.namespaces = best_effort)"
                ));
            }
        }
        if deny_network && filters.is_none() {
            bash_enabled = false;
            warnings.push(
                "sandbox.network = deny needs seccomp, which is unavailable: commands are refused"
                    .into(),
            );
        }
        // SAFETY: geteuid cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        // Where each command gets a pids cgroup of its own.
        let pids_cgroup = match settings.pids_cgroup {
            FeatureMode::Off => None,
            FeatureMode::Require | FeatureMode::BestEffort => kernel.pids_cgroup.clone(),
        };
        let cgroup = pids_cgroup.is_some();
        if settings.pids_cgroup == FeatureMode::Require && !cgroup {
            bash_enabled = false;
            warnings.push(
                "no pids cgroup can be made for each command (the service may not create cgroups in a cgroup v1 pids hierarchy) and sandbox.pids_cgroup = require: commands are refused"
                    .into(),
            );
        } else if root && !cgroup {
            warnings.push(
                "running as root without a pids cgroup for each command: the process limit is not enforced (Linux exempts uid 0 from RLIMIT_NPROC); capabilities are dropped"
                    .into(),
            );
        }
        let abi = kernel.landlock_abi.unwrap_or(0);
        let status = SandboxStatus {
            bash_enabled,
            landlock: LandlockStatus {
                mode: settings.landlock,
                available: landlock_available,
                abi: kernel.landlock_abi,
                enforced: landlock_available,
                tcp_denied: landlock_available && deny_network && abi >= 4,
                scoped: landlock_available && abi >= 6,
            },
            namespaces: NamespaceStatus {
                mode: settings.namespaces,
                available: kernel.namespaces,
                enforced: namespaces,
                read_only_mounts: namespace_setup.as_ref().is_some_and(|n| n.read_only_mounts),
                network: namespace_setup.as_ref().is_some_and(|n| n.new_network),
            },
            network: settings.network,
            seccomp: SeccompStatus {
                available: kernel.seccomp,
                active: filters.is_some(),
                denied: filters
                    .as_ref()
                    .map(|f| f.denied.clone())
                    .unwrap_or_default(),
            },
            rlimits: RlimitStatus {
                cpu_secs: settings.cpu_secs,
                file_size_bytes: settings.file_size_bytes,
                max_processes: settings.max_processes,
                max_processes_enforced: !root || cgroup,
                max_processes_cgroup: cgroup,
                max_open_files: settings.max_open_files,
                max_memory_bytes: settings.max_memory_bytes,
                core_bytes: 0,
            },
            capabilities_dropped: true,
            read_only_paths: paths
                .exec
                .iter()
                .chain(&paths.read)
                .map(|p| p.display().to_string())
                .collect(),
            hidden_paths: paths
                .hidden
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            tmpdir: format!("{TMP_DIR_NAME}/<per-command id>"),
            home: format!("{TMP_DIR_NAME}/<per-command id>/{HOME_DIR_NAME}"),
            warnings,
        };
        Sandbox {
            settings: settings.clone(),
            kernel,
            rules,
            filters,
            namespaces: namespace_setup,
            status,
            records: None,
            pids_cgroup,
        }
    }

    /// Record each running command's session in `dir` (a directory of the
    /// service's data directory), and first end the sessions that a
    /// service process which died without ending them (killed with
    /// SIGKILL, crashed) left recorded there: its commands' main processes
    /// died with it, but what they started in the background did not.
    /// Returns the sandbox and how many such processes were killed.
    pub fn recording_sessions_in(mut self, dir: &Path) -> std::io::Result<(Sandbox, usize)> {
        let records = SessionRecords::open(dir)?;
        let killed = records.end_orphans();
        self.records = Some(Arc::new(records));
        Ok((self, killed))
    }

    pub fn status(&self) -> SandboxStatus {
        self.status.clone()
    }

    /// Runs one command to completion, timeout or cancellation.
    pub async fn run(&self, spec: CommandSpec) -> Result<CommandOutput, SandboxError> {
        if !self.status.bash_enabled {
            return Err(SandboxError::Unavailable(self.status.warnings.join("; ")));
        }
        validate(&spec)?;
        let workspace = spec.workspace.canonicalize().map_err(|e| {
            SandboxError::InvalidSpec(format!("workspace {}: {e}", spec.workspace.display()))
        })?;
        let cwd = spec
            .cwd
            .canonicalize()
            .map_err(|e| SandboxError::InvalidSpec(format!("cwd {}: {e}", spec.cwd.display())))?;
        if !cwd.starts_with(&workspace) {
            return Err(SandboxError::InvalidSpec(format!(
                "cwd {} is outside the workspace",
                cwd.display()
            )));
        }

        let tmp = TempDir::create(&workspace, spec.workspace_identity)?;
        let mut env = base_environment();
        let home = tmp.path.join(HOME_DIR_NAME).display().to_string();
        let tmpdir = tmp.path.display().to_string();
        env.insert("HOME".into(), home);
        for key in ["TMPDIR", "TMP", "TEMP"] {
            env.insert(key.into(), tmpdir.clone());
        }
        env.extend(spec.env.clone());

        // The status promises the limit wherever a cgroup can be made: a
        // command that cannot have one does not run without it.
        let cgroup = match &self.pids_cgroup {
            Some(parent) => Some(
                pids::CommandCgroup::create(parent, self.settings.max_processes)
                    .map_err(|e| SandboxError::Setup(format!("the process-limit cgroup: {e}")))?,
            ),
            None => None,
        };
        let ruleset = match self.kernel.landlock_abi {
            Some(abi) => Some(
                filesystem::ruleset(
                    abi,
                    &self.rules,
                    &workspace,
                    spec.workspace_identity,
                    self.settings.network == NetworkPolicy::Deny,
                )
                .map_err(|e| SandboxError::Setup(format!("Landlock: {e}")))?,
            ),
            None => None,
        };
        // In namespaces of its own, the command's mounts are all read-only
        // but the workspace's (see child.rs), put in place through this.
        let workspace_fd = match &self.namespaces {
            Some(namespaces) if namespaces.read_only_mounts => {
                Some(open_workspace(&workspace, spec.workspace_identity)?)
            }
            _ => None,
        };
        let confinement = Confinement {
            limits: Limits {
                cpu_secs: self.settings.cpu_secs,
                file_size_bytes: self.settings.file_size_bytes,
                max_processes: self.settings.max_processes,
                max_open_files: self.settings.max_open_files,
                max_memory_bytes: self.settings.max_memory_bytes,
            },
            landlock_fd: ruleset.as_ref().map(std::os::fd::AsRawFd::as_raw_fd),
            filters: self.filters.clone(),
            parent_pid: std::process::id() as libc::pid_t,
            namespaces: self.namespaces.clone(),
            cgroup_procs: cgroup.as_ref().map(pids::CommandCgroup::procs_fd),
            workspace: match &workspace_fd {
                Some(fd) => Some(child::Writable {
                    fd: std::os::fd::AsRawFd::as_raw_fd(fd),
                    path: std::ffi::CString::new(workspace.as_os_str().as_encoded_bytes())
                        .map_err(|_| {
                            SandboxError::InvalidSpec("the workspace path holds a NUL".into())
                        })?,
                }),
                None => None,
            },
        };

        let program =
            Program::new(&spec.argv, &env, &cwd).map_err(|source| SandboxError::Spawn {
                program: spec.argv[0].clone(),
                source,
            })?;
        let started = Instant::now();
        let spawned = spawn::spawn(&program, &confinement);
        // The ruleset and workspace descriptors were needed until the child
        // restricted itself.
        drop(ruleset);
        drop(workspace_fd);
        let mut child = spawned.map_err(|source| SandboxError::Spawn {
            program: spec.argv[0].clone(),
            source,
        })?;
        let sid = child.id();
        if let Some(records) = &self.records
            && let Err(e) = records.record(sid, &workspace, &tmp.relative)
        {
            tracing::warn!(error = %e, "a command's session could not be recorded; a crash of the service would leave what it starts in the background running");
        }
        // Declared after `child`, so dropped first: the session is killed
        // while the leader is not yet reaped and its id cannot be reused.
        let mut guard = SessionGuard {
            sid,
            armed: true,
            records: self.records.clone(),
        };

        let mut stdout = child.stdout.take();
        let mut stderr = child.stderr.take();
        let mut out = CappedText::new(spec.output_cap);
        let mut err = CappedText::new(spec.output_cap);
        let mut timed_out = false;
        let mut cancelled = false;
        let mut output_incomplete = false;
        let written = std::sync::atomic::AtomicUsize::new(0);
        let status = {
            let reading = async {
                tokio::join!(
                    pump(stdout.as_mut(), &mut out, &written),
                    pump(stderr.as_mut(), &mut err, &written)
                )
            };
            tokio::pin!(reading);
            let mut read_all = false;
            let deadline = tokio::time::sleep(spec.timeout);
            tokio::pin!(deadline);
            let mut ticks = tokio::time::interval_at(
                tokio::time::Instant::now() + PROGRESS_EVERY,
                PROGRESS_EVERY,
            );
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let exited = loop {
                tokio::select! {
                    _ = &mut reading, if !read_all => read_all = true,
                    _ = ticks.tick(), if spec.progress.is_some() => {
                        if let Some(Ticks(tell)) = &spec.progress {
                            tell(started.elapsed(), written.load(std::sync::atomic::Ordering::Relaxed));
                        }
                    }
                    status = child.wait() => break status.ok(),
                    _ = &mut deadline => {
                        timed_out = true;
                        break None;
                    }
                    _ = spec.cancel.cancelled() => {
                        cancelled = true;
                        break None;
                    }
                }
            };
            // Whatever happened, nothing of the command survives it: the
            // main process may have exited leaving background jobs.
            // With a pids cgroup, its members are ended too, forks stopped
            // first: without namespaces, a process that keeps forking into
            // new groups outruns sweeps of the session.
            let cgroup = tokio::task::spawn_blocking(move || {
                kill_session(sid);
                if let Some(cgroup) = &cgroup {
                    cgroup.kill_members();
                }
                cgroup
            })
            .await
            .ok()
            .flatten();
            let status = match exited {
                Some(status) => Some(status),
                None => child.wait().await.ok(),
            };
            if let Some(cgroup) = cgroup {
                let _ = tokio::task::spawn_blocking(move || cgroup.remove()).await;
            }
            guard.armed = false;
            if !read_all
                && tokio::time::timeout(DRAIN_GRACE, &mut reading)
                    .await
                    .is_err()
            {
                output_incomplete = true;
            }
            status
        };
        out.finish();
        err.finish();
        let duration_ms = started.elapsed().as_millis() as u64;
        drop(tmp);

        use std::os::unix::process::ExitStatusExt;
        Ok(CommandOutput {
            stdout: out.render(),
            stderr: err.render(),
            exit_code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            timed_out,
            cancelled,
            duration_ms,
            stdout_truncated: out.omitted_chars() > 0,
            stderr_truncated: err.omitted_chars() > 0,
            stdout_chars: out.total_chars(),
            stderr_chars: err.total_chars(),
            output_incomplete,
        })
    }
}

/// The workspace directory as an `O_PATH` descriptor, refused when it is
/// no longer the directory `identity` names (a link swapped in).
fn open_workspace(
    workspace: &Path,
    identity: Option<(u64, u64)>,
) -> Result<std::os::fd::OwnedFd, SandboxError> {
    use std::os::unix::fs::OpenOptionsExt;
    let setup = |e: std::io::Error| {
        SandboxError::Setup(format!("the workspace {}: {e}", workspace.display()))
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(workspace)
        .map_err(setup)?;
    if let Some(expected) = identity
        && filesystem::fd_identity(&file).map_err(setup)? != expected
    {
        return Err(SandboxError::Setup(format!(
            "{} is no longer the workspace directory that was opened",
            workspace.display()
        )));
    }
    Ok(file.into())
}

fn validate(spec: &CommandSpec) -> Result<(), SandboxError> {
    let invalid = |m: String| Err(SandboxError::InvalidSpec(m));
    if spec.argv.is_empty() || spec.argv[0].is_empty() {
        return invalid("argv is empty".into());
    }
    if spec.argv.iter().any(|a| a.contains('\0')) {
        return invalid("an argument contains a NUL byte".into());
    }
    for (key, value) in &spec.env {
        if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
            return invalid(format!("invalid environment variable {key:?}"));
        }
    }
    Ok(())
}

/// Reads a pipe to its end into a capped buffer, counting what it read
/// (in bytes) in `written` too.
async fn pump<R: AsyncRead + Unpin>(
    reader: Option<&mut R>,
    into: &mut CappedText,
    written: &std::sync::atomic::AtomicUsize,
) {
    let Some(reader) = reader else {
        return;
    };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                into.push_bytes(&buf[..n]);
                written.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

/// The per-command temporary directory, removed (through the workspace's
/// capability, so a symlink planted by the command cannot redirect the
/// removal) when dropped.
struct TempDir {
    workspace: Option<Dir>,
    relative: PathBuf,
    path: PathBuf,
}

impl TempDir {
    /// In the workspace directory at `workspace`, which must be the one
    /// of `identity` (device, inode) when given: the path is looked up
    /// again here, and a command of the workspace may have swapped a link
    /// in by then, whose target (another owner's workspace, any directory
    /// of the host) this would otherwise clean up and write in.
    fn create(workspace: &Path, identity: Option<(u64, u64)>) -> Result<TempDir, SandboxError> {
        let setup = |e: std::io::Error| SandboxError::Setup(format!("temporary directory: {e}"));
        let dir = Dir::open_ambient_dir(workspace, ambient_authority()).map_err(setup)?;
        if let Some(expected) = identity
            && filesystem::fd_identity(&dir).map_err(setup)? != expected
        {
            return Err(SandboxError::Setup(format!(
                "{} is no longer the workspace directory that was opened",
                workspace.display()
            )));
        }
        let relative = Path::new(TMP_DIR_NAME).join(uuid::Uuid::new_v4().simple().to_string());
        // The name is toolgate's: a file or a link a command (or a file
        // tool) left there is removed, the link itself and not what it
        // leads to, and a directory a command closed (`chmod 500`) is
        // opened again, or no command of the workspace could run again.
        match dir.symlink_metadata(TMP_DIR_NAME) {
            Ok(meta) if !meta.is_dir() => match dir.remove_file(TMP_DIR_NAME) {
                // Another command of the workspace removed it first.
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(setup(e)),
                _ => {}
            },
            Ok(meta) if cap_std::fs::PermissionsExt::mode(&meta.permissions()) & 0o700 != 0o700 => {
                let open = cap_std::fs::Permissions::from_std(
                    std::os::unix::fs::PermissionsExt::from_mode(0o700),
                );
                dir.set_permissions(TMP_DIR_NAME, open).map_err(setup)?;
            }
            _ => {}
        }
        // A concurrent command may remove the (empty) parent between the
        // two steps of create_dir_all; once more is enough.
        let home = relative.join(HOME_DIR_NAME);
        if dir.create_dir_all(&home).is_err() {
            dir.create_dir_all(&home).map_err(setup)?;
        }
        Ok(TempDir {
            path: workspace.join(&relative),
            relative,
            workspace: Some(dir),
        })
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Some(dir) = self.workspace.take() {
            let _ = dir.remove_dir_all(&self.relative);
            // Only when empty: another command may be using it.
            let _ = dir.remove_dir(TMP_DIR_NAME);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> SandboxSettings {
        SandboxSettings::default()
    }

    #[test]
    fn status_without_landlock_depends_on_the_mode() {
        let no_landlock = KernelSupport {
            landlock_abi: None,
            seccomp: true,
            namespaces: true,
            pids_cgroup: None,
        };
        let strict = Sandbox::with_kernel(&settings(), SystemPaths::default(), no_landlock.clone());
        assert!(!strict.status().bash_enabled);
        assert!(!strict.status().landlock.enforced);
        let lenient = Sandbox::with_kernel(
            &SandboxSettings {
                landlock: LandlockMode::BestEffort,
                ..settings()
            },
            SystemPaths::default(),
            no_landlock,
        );
        assert!(lenient.status().bash_enabled);
        assert!(
            lenient
                .status()
                .warnings
                .iter()
                .any(|w| w.contains("without file-system confinement"))
        );
    }

    #[test]
    fn status_without_namespaces_depends_on_the_mode() {
        let kernel = KernelSupport {
            landlock_abi: Some(7),
            seccomp: true,
            namespaces: false,
            pids_cgroup: None,
        };
        let with = |namespaces| {
            let settings = SandboxSettings {
                namespaces,
                ..settings()
            };
            Sandbox::with_kernel(&settings, SystemPaths::default(), kernel.clone()).status()
        };
        let required = with(NamespaceMode::Require);
        assert!(!required.bash_enabled);
        assert!(
            required
                .warnings
                .iter()
                .any(|w| w.contains("namespaces = require"))
        );
        let lenient = with(NamespaceMode::BestEffort);
        assert!(lenient.bash_enabled && !lenient.namespaces.enforced);
        assert!(
            lenient
                .warnings
                .iter()
                .any(|w| w.contains("see every process"))
        );
        let off = with(NamespaceMode::Off);
        assert!(off.bash_enabled && !off.namespaces.enforced);
        assert!(!off.warnings.iter().any(|w| w.contains("namespaces")));
        // Where the kernel has them, "off" still keeps commands out of them.
        let kernel = KernelSupport {
            namespaces: true,
            ..kernel
        };
        let settings = SandboxSettings {
            namespaces: NamespaceMode::Off,
            ..settings()
        };
        let off = Sandbox::with_kernel(&settings, SystemPaths::default(), kernel.clone()).status();
        assert!(off.namespaces.available && !off.namespaces.enforced);
        let default =
            Sandbox::with_kernel(&super::tests::settings(), SystemPaths::default(), kernel);
        assert!(default.status().namespaces.enforced);
    }

    #[test]
    fn the_pids_cgroup_follows_its_mode_and_what_the_host_offers() {
        let status = |mode, offered: Option<&str>| {
            let kernel = KernelSupport {
                landlock_abi: Some(7),
                seccomp: true,
                namespaces: true,
                pids_cgroup: offered.map(PathBuf::from),
            };
            let settings = SandboxSettings {
                pids_cgroup: mode,
                ..settings()
            };
            Sandbox::with_kernel(&settings, SystemPaths::default(), kernel).status()
        };
        // SAFETY: geteuid cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let unenforced_as_root = |s: &SandboxStatus| {
            s.warnings
                .iter()
                .any(|w| w.contains("process limit is not enforced"))
        };
        for mode in [FeatureMode::BestEffort, FeatureMode::Require] {
            let offered = status(mode, Some("/sys/fs/cgroup/pids/svc"));
            assert!(offered.bash_enabled);
            assert!(offered.rlimits.max_processes_cgroup);
            assert!(offered.rlimits.max_processes_enforced);
            assert!(!unenforced_as_root(&offered), "{:?}", offered.warnings);
        }
        let lenient = status(FeatureMode::BestEffort, None);
        assert!(lenient.bash_enabled && !lenient.rlimits.max_processes_cgroup);
        assert_eq!(lenient.rlimits.max_processes_enforced, !root);
        assert_eq!(unenforced_as_root(&lenient), root);
        let required = status(FeatureMode::Require, None);
        assert!(!required.bash_enabled);
        assert!(
            required
                .warnings
                .iter()
                .any(|w| w.contains("pids_cgroup = require: commands are refused")),
            "{:?}",
            required.warnings
        );
        // "off" keeps commands out of a cgroup the host offers.
        let off = status(FeatureMode::Off, Some("/sys/fs/cgroup/pids/svc"));
        assert!(off.bash_enabled && !off.rlimits.max_processes_cgroup);
        assert_eq!(off.rlimits.max_processes_enforced, !root);
    }

    #[test]
    fn network_deny_without_seccomp_refuses() {
        let kernel = KernelSupport {
            landlock_abi: Some(7),
            seccomp: false,
            namespaces: true,
            pids_cgroup: None,
        };
        let sandbox = Sandbox::with_kernel(&settings(), SystemPaths::default(), kernel.clone());
        assert!(!sandbox.status().bash_enabled);
        let allow = SandboxSettings {
            network: NetworkPolicy::Allow,
            ..settings()
        };
        let sandbox = Sandbox::with_kernel(&allow, SystemPaths::default(), kernel);
        assert!(sandbox.status().bash_enabled);
        assert!(!sandbox.status().seccomp.active);
    }

    #[tokio::test]
    async fn refuses_to_run_when_landlock_is_required_but_missing() {
        let tmp = tempfile::tempdir().unwrap();
        let sandbox = Sandbox::with_kernel(
            &settings(),
            SystemPaths::default(),
            KernelSupport {
                landlock_abi: None,
                seccomp: true,
                namespaces: true,
                pids_cgroup: None,
            },
        );
        let err = sandbox
            .run(CommandSpec {
                argv: vec!["true".into()],
                cwd: tmp.path().into(),
                workspace: tmp.path().into(),
                workspace_identity: None,
                env: BTreeMap::new(),
                timeout: Duration::from_secs(5),
                cancel: CancellationToken::new(),
                output_cap: 100,
                progress: None,
            })
            .await
            .unwrap_err();
        assert!(matches!(err, SandboxError::Unavailable(ref m) if m.contains("Landlock")));
    }

    #[test]
    fn the_environment_turns_prompts_off_and_carries_no_secrets() {
        let env = base_environment();
        assert_eq!(env["GIT_TERMINAL_PROMPT"], "0");
        assert_eq!(env["PAGER"], "cat");
        assert!(
            env.keys()
                .all(|k| !k.starts_with("TOOLGATE") && k != "DATABASE_URL")
        );
    }
}
