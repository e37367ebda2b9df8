//! The pipeline. Every entry point (REST call, AG-UI run, and later batch,
//! MCP and undo) hands its call to [`Engine::execute`], which walks the steps
//! of DESIGN.md in order. Reading this file top to bottom is following a call
//! through toolgate.

mod approvals;
pub use approvals::{approval_decided_event, approval_required, rfc3339_millis, status_word};
pub mod audit;
mod declarations;
pub use declarations::Declared;
use declarations::{Undeclaring, link};
use tracing::Instrument as _;
pub mod gates;
pub mod limits;
mod postprocess;
pub mod spool;
mod undo;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::events::EventBus;
use crate::protocol::agui::{Event, EventBody};
use crate::protocol::calls::IncomingCall;
use crate::protocol::now_ms;
use crate::protocol::tool_output::{FieldError, ToolAgentOutput, ToolError, ToolStatus, codes};
use crate::store::writer::Writer;
use crate::store::{
    ApprovalRecord, CallStatus, DynStore, FinishedToolCall, JsonText, NewEvent, NewMessage,
    NewToolCall, Role, StoreError, StoredEvent, ToolCallRecord, WriteOp, WriteUnit,
};
use crate::tools::registry::RegisteredTool;
use crate::tools::{ProgressSink, Registry, ToolContext, ToolSuccess};

pub use approvals::{ApprovalError, ApprovalSettings, Decision, EXPIRY_BATCH};
pub use postprocess::compile_ui;
pub use undo::{RollbackReport, RollbackStep, UndoError};

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Longest a tool may run before it is stopped with `TIMEOUT`.
    pub tool_timeout: Duration,
    /// How long a read-only call may run before its write-ahead is committed
    /// on its own rather than with its result; zero: always first.
    pub announce_after: Duration,
    pub approvals: ApprovalSettings,
    pub permissions: PermissionConfig,
    /// Where results wait on disk while the database is unreachable.
    pub result_spool: spool::Spool,
    /// This process's instance id (its data directory's): the calls it
    /// runs are recorded as its own, and at start-up it finishes only its
    /// own calls left `running`, never another live process's.
    pub instance: String,
    /// Other processes may write the database (Postgres, or a SQLite file
    /// named by `DATABASE_URL`, which need not be this data directory's
    /// alone): an owner's permission rules are then kept in memory only
    /// while the database's watch tells of every change
    /// ([`Engine::follow_rule_changes`]), and read for every call
    /// otherwise. On the process's own database they are kept, and
    /// dropped when they change through it.
    pub shared_database: bool,
}

/// Is `call` the call `record` recorded (its tool aside): the same
/// arguments, in the same sub-workspace, a dry run or not alike? Calls
/// recorded before the sub-workspace and dry-run flag were are compared by
/// their arguments. A whole number is the same written `1` or `1.0`, as the
/// tool gets it.
fn same_call(record: &ToolCallRecord, call: &crate::protocol::calls::IncomingCall) -> bool {
    call_difference(record, &record.tool_name, call).is_none()
}

/// What makes `call` of the tool `tool_name` another call than `record`, as
/// the field a conflict names: `name`, `arguments`, `workspace` or
/// `dry_run`.
fn call_difference(
    record: &ToolCallRecord,
    tool_name: &str,
    call: &crate::protocol::calls::IncomingCall,
) -> Option<&'static str> {
    if record.tool_name != tool_name {
        return Some("name");
    }
    if !crate::protocol::json::same_json(&record.args, &call.arguments) {
        return Some("arguments");
    }
    match record.dry_run {
        Some(dry_run) if dry_run != call.dry_run => Some("dry_run"),
        Some(_) if record.workspace != call.workspace => Some("workspace"),
        _ => None,
    }
}

/// What a model is told to do about a call the permission rules deny.
const DENIED_HINT: &str = "The rules forbid this action, not only this call: do not retry it, \
     and do not bring about the same effect another way (another tool, command or path). Ask the \
     user, or go on without it.";

/// What the file rules know of a file tool's path ([`Engine::file_facts`]).
#[derive(Debug, Default)]
struct FileFacts {
    workspace: Option<std::path::PathBuf>,
    resolved: Option<String>,
    /// The workspace exists and the path was resolved in it.
    judged: bool,
    /// For a call in a sub-workspace: its name, and where it really is in
    /// the owner's workspace (the name itself until it exists).
    sub_workspace: Option<(String, String)>,
    /// For a `bash` call: the paths its line names that lead into git's
    /// configuration through links ([`crate::permissions::CallFacts::git_links`]).
    git_links: Vec<String>,
}

/// A call's failure when the owner's permission rules cannot be read now
/// (the database is unavailable): worth retrying.
fn rules_unreadable(e: &dyn std::fmt::Display) -> ToolError {
    ToolError::new(
        codes::EXECUTION_FAILED,
        format!("the permission rules could not be read: {e}"),
        true,
    )
}

/// The paths a `bash` call's line names that lead into git's
/// configuration through a symbolic or hard link in `workspace` (see
/// [`crate::permissions::bash_named_paths`]): each is resolved on disk, as
/// far as it exists, and judged as where it leads in the owner's workspace
/// (`owners`, the main workspace's absolute path); a file with more than
/// one name is judged by whether it is one of git's configuration files,
/// and a directory a command may copy from by whether it holds some.
/// Creates nothing.
fn git_links(
    workspace: &std::path::Path,
    owners: &std::path::Path,
    arguments: &Value,
) -> Vec<String> {
    let Some(named) = crate::permissions::bash_named_paths(arguments, Some(workspace)) else {
        return vec![crate::permissions::NAMED_PATHS_UNCHECKED.to_string()];
    };
    let owners = owners
        .canonicalize()
        .unwrap_or_else(|_| owners.to_path_buf());
    let mut git_files: Option<Vec<(u64, u64)>> = None;
    let mut looks = HOLDS_GIT_LOOKS;
    let git_dirs = linked_git_dirs(&owners, workspace);
    named
        .into_iter()
        .filter(|named| {
            let Some(real) = resolved_on_disk(&workspace.join(&named.path)) else {
                return false;
            };
            if git_dirs.iter().any(|dir| real.starts_with(dir))
                || in_bare_repository(&real, &owners)
                || (named.contents && real != owners && holds_git_configuration(&real, &mut looks))
            {
                return true;
            }
            let in_git = real
                .strip_prefix(&owners)
                .ok()
                .and_then(|rel| rel.to_str())
                .is_some_and(crate::permissions::is_guarded_write);
            in_git || {
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata(&real).is_ok_and(|m| {
                    m.is_file()
                        && m.nlink() > 1
                        && git_files
                            .get_or_insert_with(|| git_configuration_files(&owners, workspace))
                            .contains(&(m.dev(), m.ino()))
                })
            }
        })
        .map(|named| named.path)
        .collect()
}

/// `path`, a file tool's path in `workspace`, when it is in a repository's
/// configuration or hooks that git finds by other names than `.git`: the
/// directory a `.git` file (`gitdir: …`) in the owner's workspace or the
/// call's points to, or a bare repository (see [`in_bare_repository`]).
/// Creates nothing.
fn file_git_links(
    workspace: &std::path::Path,
    owners: &std::path::Path,
    path: &str,
) -> Option<String> {
    let owners = owners
        .canonicalize()
        .unwrap_or_else(|_| owners.to_path_buf());
    let real = resolved_on_disk(&workspace.join(path))?;
    let git_dirs = linked_git_dirs(&owners, workspace);
    (git_dirs.iter().any(|dir| real.starts_with(dir)) || in_bare_repository(&real, &owners))
        .then(|| path.to_string())
}

/// Where a `.git` file (`gitdir: …`, as `git init --separate-git-dir` and
/// worktrees leave) in the owner's workspace or the call's points: that
/// directory is a repository's, configuration and hooks included.
fn linked_git_dirs(
    owners: &std::path::Path,
    workspace: &std::path::Path,
) -> Vec<std::path::PathBuf> {
    [owners, workspace]
        .into_iter()
        .filter_map(|root| {
            let dot_git = root.join(".git");
            if !std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_file()) {
                return None;
            }
            let text = std::fs::read_to_string(&dot_git).ok()?;
            let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
            root.join(target).canonicalize().ok()
        })
        .collect()
}

/// Whether `path` is a bare repository's configuration or hook: its
/// parent or grandparent (inside the owner's workspace) holds `HEAD`,
/// `objects/` and `refs/`, as `git init --bare` leaves. git runs such a
/// repository's hooks when something is pushed to it (`git push ../evil`).
fn in_bare_repository(path: &std::path::Path, owners: &std::path::Path) -> bool {
    path.ancestors()
        .skip(1)
        .take(2)
        .filter(|dir| dir.starts_with(owners) && *dir != owners)
        .any(|dir| {
            dir.join("HEAD").is_file() && dir.join("objects").is_dir() && dir.join("refs").is_dir()
        })
}

/// How deep below a named directory [`holds_git_configuration`] looks.
const HOLDS_GIT_DEPTH: usize = 32;

/// How many directory entries [`holds_git_configuration`] looks at for
/// one call, in all the directories its line names; past that, a
/// directory is taken as holding some.
const HOLDS_GIT_LOOKS: usize = 10_000;

/// Whether the directory `dir` holds git's configuration somewhere beneath
/// it (an entry named `.git`, `.gnupg`, `.ssh` or `.gitconfig`, or
/// `.config/git`), links not followed; `true` when `looks` (the entries
/// left to look at, counted down) runs out first, or the tree is deeper
/// than [`HOLDS_GIT_DEPTH`]. `false` for a file.
fn holds_git_configuration(dir: &std::path::Path, looks: &mut usize) -> bool {
    let mut todo = vec![(dir.to_path_buf(), 0)];
    while let Some((dir, depth)) = todo.pop() {
        // Deeper than a tree is looked through in time: may hold some.
        if depth > HOLDS_GIT_DEPTH {
            return true;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Some(left) = looks.checked_sub(1) else {
                return true;
            };
            *looks = left;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let in_config = dir.file_name().is_some_and(|d| d == ".config");
            if crate::permissions::is_git_configuration(&name) || (in_config && name == "git") {
                return true;
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push((entry.path(), depth + 1));
            }
        }
    }
    false
}

/// `path` with its longest existing part resolved through every link and
/// `..`, and the rest as named; `None` when nothing of it exists. The
/// existing part is found by halving (a path whose first components do not
/// resolve resolves no longer), so a long path costs a few lookups.
fn resolved_on_disk(path: &std::path::Path) -> Option<std::path::PathBuf> {
    let parts: Vec<std::path::Component> = path.components().collect();
    let prefix = |n: usize| parts[..n].iter().collect::<std::path::PathBuf>();
    // Invariant: prefix(known) resolves (or known == 0); prefix(past) does not.
    let (mut known, mut past) = (0, parts.len() + 1);
    let mut real = None;
    while past - known > 1 {
        let mid = (known + past) / 2;
        match prefix(mid).canonicalize() {
            Ok(resolved) => {
                known = mid;
                real = Some(resolved);
            }
            Err(_) => past = mid,
        }
    }
    let real = real?;
    Some(parts[known..].iter().fold(real, |p, c| p.join(c)))
}

/// The (device, inode) of git's configuration files a command could reach
/// under another name (a hard link): `.git/config`, the hooks and
/// `info/` files, `.gitconfig` and `.config/git/*`, in the owner's
/// workspace and in the call's sub-workspace.
fn git_configuration_files(
    owners: &std::path::Path,
    workspace: &std::path::Path,
) -> Vec<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut files = Vec::new();
    for root in [owners, workspace] {
        let mut paths = vec![root.join(".git/config"), root.join(".gitconfig")];
        for dir in [".git/hooks", ".git/info", ".config/git"] {
            if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
                paths.extend(entries.flatten().map(|e| e.path()));
            }
        }
        files.extend(
            paths
                .iter()
                .filter_map(|p| std::fs::symlink_metadata(p).ok())
                .filter(|m| m.is_file())
                .map(|m| (m.dev(), m.ino())),
        );
    }
    files
}

/// What the permission rules see of a call.
fn call_facts<'a>(
    req: &'a CallRequest,
    tool: &'a RegisteredTool,
    file: &'a FileFacts,
) -> crate::permissions::CallFacts<'a> {
    let meta = &tool.definition.metadata;
    crate::permissions::CallFacts {
        tool_name: &tool.definition.name,
        aliases: &tool.definition.aliases,
        class: meta.permission_class,
        read_only: meta.read_only,
        destructive: tool
            .tool
            .destructive_call(&req.call.arguments)
            .unwrap_or(meta.destructive),
        arguments: &req.call.arguments,
        workspace: file.workspace.as_deref(),
        resolved_path: file.resolved.as_deref(),
        sub_workspace: file
            .sub_workspace
            .as_ref()
            .map(|(named, real)| crate::permissions::SubWorkspace { named, real }),
        git_links: &file.git_links,
    }
}

/// The deployment's permission rules and defaults (owners add their own).
#[derive(Debug, Clone, Default)]
pub struct PermissionConfig {
    pub rules: crate::permissions::RuleSet,
    pub defaults: crate::permissions::Defaults,
    /// Where the owners' workspaces are, so file rules see an absolute path
    /// inside one as the relative path it is.
    pub workspaces: Option<Arc<crate::workspace::Workspaces>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Ask,
    Deny,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        }
    }
}

/// Step 3's answer, as the rest of the pipeline and the audit log use it.
#[derive(Debug, Clone)]
pub struct Permission {
    pub verdict: Verdict,
    /// The rule that decided, e.g. `deny: bash(rm *)`; `None` for defaults.
    pub rule: Option<String>,
    pub reason: String,
    /// For a file tool: where its path led through links when the verdict
    /// was reached (recorded with an approval, compared when it resumes).
    pub resolved_path: Option<String>,
    /// For a file tool: the path rules its walk applies to what it meets
    /// (`ToolContext::path_rules`), from the same rules and facts as the
    /// verdict.
    pub path_rules: Option<Arc<crate::permissions::PathRules>>,
    /// For a file tool whose path was looked up in its workspace: where
    /// the path led (`ToolContext::judged_path`).
    pub judged_path: Option<crate::tools::JudgedPath>,
    /// For a call in a sub-workspace: where that really is in the owner's
    /// workspace when the verdict was reached (`None` while it does not
    /// exist); recorded with an approval, compared when it resumes.
    pub sub_workspace_at: Option<String>,
    /// For a file tool that writes: the verdict on reading its path, which
    /// its preview shows (a dry run's, or an approval request's; see
    /// [`Engine::execute`], step 6).
    pub reading: Option<Box<Permission>>,
    /// For an approved call: what its approval's preview showed of its
    /// file (`ToolContext::shown`).
    pub shown: Option<crate::tools::Shown>,
}

impl From<crate::permissions::Decision> for Permission {
    fn from(d: crate::permissions::Decision) -> Self {
        Permission {
            verdict: match d.verdict {
                crate::permissions::Verdict::Allow => Verdict::Allow,
                crate::permissions::Verdict::Ask => Verdict::Ask,
                crate::permissions::Verdict::Deny => Verdict::Deny,
            },
            rule: d.rule,
            reason: d.reason,
            resolved_path: None,
            path_rules: None,
            judged_path: None,
            sub_workspace_at: None,
            reading: None,
            shown: None,
        }
    }
}

/// One call handed to the pipeline.
#[derive(Debug, Clone)]
pub struct CallRequest {
    pub owner: String,
    pub thread_id: String,
    pub call: IncomingCall,
    /// Receives every event of this call once it has committed (the AG-UI
    /// run endpoint streams them).
    pub observer: Option<mpsc::UnboundedSender<Event>>,
    /// Set when this call undoes another one (the undo endpoint).
    pub undo_of: Option<String>,
    /// The message of the thread that declares this call, once looked up
    /// ([`Engine::link_to_declaration`]); its record commits only while the
    /// thread still declares it so ([`crate::store::NewToolCall::declared_by`]).
    pub declared: Declared,
    /// The name the declaring message calls the call by (an alias of its
    /// tool, or the tool's own name), once looked up with `declared`.
    pub declared_name: Option<String>,
    /// The owner's call slot the request holds, let go once the call turns
    /// out to be recorded already (it runs nothing then).
    pub slot: limits::SharedSlot,
}

impl CallRequest {
    pub fn new(owner: &str, thread_id: &str, call: IncomingCall) -> Self {
        CallRequest {
            owner: owner.to_string(),
            thread_id: thread_id.to_string(),
            call,
            observer: None,
            undo_of: None,
            declared: Declared::Unknown,
            declared_name: None,
            slot: limits::SharedSlot::default(),
        }
    }
}

/// How a call left the pipeline: finished (ran, failed, or refused by a
/// gate), or waiting for a human decision.
#[derive(Debug, Clone, PartialEq)]
pub enum Executed {
    Finished(CallOutcome),
    AwaitingApproval(ApprovalRecord),
}

/// The finished call as every entry point reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutcome {
    pub output: ToolAgentOutput,
    /// The compiled ui_schema, when the output has ui_hints.
    pub ui_schema: Option<Value>,
    /// The tool message that carries the result.
    pub message_id: String,
    /// True when the call was recorded before and nothing ran now.
    pub replayed: bool,
    /// The text the model receives (the output's text projection, which
    /// is also the tool message's `content`).
    pub tool_response: String,
    /// When the result was recorded: its `TOOL_CALL_RESULT`'s timestamp,
    /// the call's `finished_at_ms` and its tool message's `created_at_ms`.
    pub finished_at_ms: i64,
}

/// Why a call was refused before anything was recorded.
#[derive(Debug, thiserror::Error)]
pub enum Rejection {
    #[error("no tool named {name:?}")]
    ToolNotFound {
        name: String,
        available: Vec<String>,
    },
    #[error("arguments do not match the input schema of {tool:?}")]
    InvalidArguments { tool: String, error: Box<ToolError> },
    #[error("tool call {id:?} is already recorded in this thread with another {field}")]
    IdConflict {
        id: String,
        /// What differs: `name` (the tool), `arguments`, `workspace` or
        /// `dry_run`.
        field: &'static str,
    },
    #[error("tool call {id:?} is already declared in this thread with another {field}")]
    DeclaredConflict {
        id: String,
        /// What differs from the declaration: `name` or `arguments`.
        field: &'static str,
    },
    #[error("tool call {id:?} is running in another process, or its result is not stored yet")]
    InProgressElsewhere { id: String },
    #[error(
        "tool call {id:?} is declared by message {declared_by:?}, not {given:?}: post it with parent_message_id {declared_by:?}, or without one"
    )]
    OtherParent {
        id: String,
        declared_by: String,
        given: String,
    },
    #[error("thread not found")]
    NotOwner,
    #[error(transparent)]
    Store(StoreError),
}

impl Rejection {
    /// The structured error of a call refused before it runs (an unknown
    /// tool, arguments that do not match), as a model reads it.
    pub fn tool_error(&self) -> Option<ToolError> {
        match self {
            Rejection::ToolNotFound { name, available } => Some(
                ToolError::new(
                    codes::TOOL_NOT_FOUND,
                    format!(
                        "no tool named {name:?}; available tools: {}",
                        available.join(", ")
                    ),
                    false,
                )
                .with_hint("call one of the available tools by its exact name"),
            ),
            Rejection::InvalidArguments { error, .. } => Some((**error).clone()),
            _ => None,
        }
    }
}

impl From<StoreError> for Rejection {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotOwner => Rejection::NotOwner,
            other => Rejection::Store(other),
        }
    }
}

type CallKey = (String, String);

/// A call this process is executing: who waits for it and how to stop it.
struct InFlight {
    done: watch::Receiver<bool>,
    cancel: CancellationToken,
}

/// What cancelling a running call came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// It finished `CANCELLED`.
    Stopped,
    /// It has not finished yet; its result follows.
    Stopping,
    /// It finished with this status before the cancellation reached it.
    FinishedFirst(CallStatus),
    /// Another cancellation (a cancel, a timeout, a shutdown) reached it
    /// first: this one changed nothing, and its result follows or came.
    Already,
    /// A call of a batch or an AG-UI run that has not started: when its
    /// turn comes it is recorded `CANCELLED` and does not run.
    BeforeStart,
}

/// Calls a batch or an AG-UI run is going to run, by (thread, call id),
/// each marked once a cancel reached it before it started.
type Queue = Arc<Mutex<HashMap<CallKey, bool>>>;

/// How many times (10 ms apart) a cancel waits for a call that is
/// starting to be running or recorded.
const STARTING_WAITS: u32 = 300;

/// A call of a batch or run that has left its queue, until its execution
/// ends (by then it was running, or recorded).
struct Starting<'e> {
    engine: &'e Engine,
    key: Option<CallKey>,
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        if let Some(key) = &self.key {
            self.engine
                .starting
                .lock()
                .expect("starting lock")
                .remove(key);
        }
    }
}

/// The calls of one batch or run that have not started, in [`Engine`]'s
/// queue until this is dropped.
pub struct QueuedCalls {
    queue: Queue,
    keys: Vec<CallKey>,
}

impl Drop for QueuedCalls {
    fn drop(&mut self) {
        let mut queue = self.queue.lock().expect("queue lock");
        for key in &self.keys {
            queue.remove(key);
        }
    }
}

pub struct Engine {
    registry: Arc<Registry>,
    store: DynStore,
    writer: Writer,
    config: EngineConfig,
    in_flight: Mutex<HashMap<CallKey, InFlight>>,
    queued: Queue,
    /// Calls of batches and runs out of their queue and not yet running
    /// or recorded, as far as [`Engine::cancel`] can tell.
    starting: Mutex<std::collections::HashSet<CallKey>>,
    /// Announces every call this process finishes (for callers that wait on
    /// an approval's outcome).
    finished: tokio::sync::broadcast::Sender<CallKey>,
    /// Owners' permission rules, read once and dropped when they change
    /// (`forget_owner_rules`), while `rules_kept`.
    owner_rules: Mutex<KeptRules>,
    /// Whether rules are kept: always on the process's own database; on a
    /// shared one while its watch of rule changes listens.
    rules_kept: std::sync::atomic::AtomicBool,
    /// Threads found to declare no call (see [`Engine::link_to_declaration`]).
    undeclaring: Mutex<Undeclaring>,
    /// Runs being rolled back in this process: a rollback asked again
    /// meanwhile (a retry) waits for the first, then answers its report.
    rollbacks: Mutex<HashMap<CallKey, Arc<tokio::sync::Mutex<()>>>>,
}

/// Owners' rules as read, and how many times any were dropped: rules read
/// before a drop are not kept after it (they may be what was dropped).
#[derive(Default)]
struct KeptRules {
    rules: HashMap<String, Arc<crate::permissions::RuleSet>>,
    drops: u64,
}

impl Engine {
    pub fn new(
        registry: Arc<Registry>,
        store: DynStore,
        writer: Writer,
        config: EngineConfig,
    ) -> Self {
        let rules_kept = std::sync::atomic::AtomicBool::new(!config.shared_database);
        Engine {
            registry,
            store,
            writer,
            config,
            in_flight: Mutex::new(HashMap::new()),
            queued: Queue::default(),
            starting: Mutex::default(),
            finished: tokio::sync::broadcast::channel(1024).0,
            owner_rules: Mutex::new(KeptRules::default()),
            rules_kept,
            undeclaring: Mutex::new(Undeclaring::default()),
            rollbacks: Mutex::new(HashMap::new()),
        }
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Run one call through the pipeline. Refusals before anything is
    /// recorded (unknown tool, invalid arguments, id conflicts) are
    /// `Err(Rejection)` and change nothing; everything else, including a
    /// gate's refusal and a tool's own failure, is recorded and streamed.
    pub async fn execute(&self, mut req: CallRequest) -> Result<Executed, Rejection> {
        // 1. Resolve the tool by name or alias.
        let tool = match self.resolve(&req.call.name) {
            Ok(tool) => tool,
            Err(rejection) => {
                let _ = self.started(&req);
                let name = req.call.name.clone();
                return self.refused_before_running(req, &name, rejection).await;
            }
        };
        // A call of a batch or a run cancelled before its turn: recorded
        // CANCELLED, not run (one recorded already answers as recorded).
        let (cancelled, _starting) = self.started(&req);
        if cancelled == Some(true) {
            let error = ToolError::new(
                codes::CANCELLED,
                "the call was cancelled by its caller before it started; it did not run",
                false,
            )
            .with_hint("run it again only if the user asks for it");
            let audit = audit::refused(
                &req,
                &tool.definition.name,
                Some(&tool.definition.metadata.audit_operation),
                &error,
                None,
            );
            return self
                .record_refusal(req, &tool.definition.name, error, audit)
                .await
                .map(Executed::Finished)
                .map_err(Rejection::from);
        }

        // A read-only tool's write-ahead may be deferred (step 7).
        let deferred = tool.definition.metadata.read_only && !self.config.announce_after.is_zero();
        // The first pass is optimistic: a new call id is the common case,
        // and the write-ahead's unique key finds a recorded one anyway
        // (Conflict → look again, this time in the store). A deferred
        // write-ahead finds it when it is committed: with the result, or
        // after `announce_after`, when the repeated call is stopped.
        let mut optimistic = true;
        loop {
            // 2. Idempotency: a call id seen before in this thread answers
            //    with its stored outcome and runs nothing again.
            if let Some(recorded) = self
                .recorded(&req, &tool.definition.name, optimistic)
                .await?
            {
                return Ok(recorded);
            }
            optimistic = false;
            self.link_to_declaration(&mut req, &tool.definition.name)
                .await?;

            // 3. Permission: deployment and owner rules, deny → ask → allow.
            let permission = self.permission(&req, &tool).await?;
            if permission.verdict == Verdict::Deny {
                let error = ToolError::new(
                    codes::PERMISSION_DENIED,
                    format!(
                        "{} is not permitted: {}",
                        tool.definition.name, permission.reason
                    ),
                    false,
                )
                .with_hint(DENIED_HINT);
                return self.refuse(req, &tool, error, &permission).await;
            }

            // 4. Confidence gate: the model must state its confidence.
            let arguments = match gates::confidence(
                tool.definition.capability.min_confidence,
                &req.call.arguments,
            ) {
                Ok(arguments) => arguments,
                Err(error) => return self.refuse(req, &tool, error, &permission).await,
            };

            // 5. Validate the arguments against the compiled input schema.
            if let Err(rejection) = validate_arguments(&tool, &arguments) {
                return self
                    .refused_before_running(req, &tool.definition.name, rejection)
                    .await;
            }

            // A dry run previews and changes nothing: only tools that
            // declare it can, and it needs no checkpoint.
            if req.call.dry_run && !tool.definition.capability.dry_run {
                let error = ToolError::new(
                    codes::DRY_RUN_UNSUPPORTED,
                    format!(
                        "{} cannot preview its effects (safety level {})",
                        tool.definition.name,
                        tool.definition.capability.safety_level()
                    ),
                    false,
                )
                .with_hint("call it without dry_run, or choose a tool that supports dry runs");
                return self.refuse(req, &tool, error, &permission).await;
            }

            // 6. Human checkpoint: a tool that requires one, or an `ask`
            //    verdict, waits for a decision instead of running. A dry run
            //    changes nothing, so what the call would do needs no
            //    decision; but its preview (a diff, a failure's hint) shows
            //    the file's text, so it needs what reading the file needs:
            //    an `ask` on reading `.env` holds a dry-run write to it too.
            let checkpoint = match (&permission.reading, req.call.dry_run) {
                (_, false) => (tool.definition.metadata.requires_checkpoint
                    || permission.verdict == Verdict::Ask)
                    .then_some(&permission),
                (Some(reading), true) => match reading.verdict {
                    Verdict::Allow => None,
                    Verdict::Ask => Some(&**reading),
                    Verdict::Deny => {
                        let error = ToolError::new(
                            codes::PERMISSION_DENIED,
                            format!(
                                "a dry run of {} shows the file's text, and reading it is not permitted: {}",
                                tool.definition.name, reading.reason
                            ),
                            false,
                        )
                        .with_hint(DENIED_HINT);
                        let reading = (**reading).clone();
                        return self.refuse(req, &tool, error, &reading).await;
                    }
                },
                (None, true) => None,
            };
            if let Some(asking) = checkpoint {
                // The request shows the file only where reading it needs
                // no approval of its own.
                let preview = permission
                    .reading
                    .as_ref()
                    .is_none_or(|reading| reading.verdict == Verdict::Allow);
                match self
                    .request_approval(req.clone(), &tool, arguments, asking, preview)
                    .await?
                {
                    Some(executed) => return Ok(executed),
                    None => {
                        // The id was recorded, or the call declared, meanwhile.
                        self.look_again(&mut req);
                        continue;
                    }
                }
            }

            // 7. Write-ahead: the call is recorded `running` before it runs.
            //    A read-only tool changes nothing outside toolgate, so its
            //    record may wait: it is written with the result in one
            //    transaction if the tool finishes within `announce_after`, and
            //    on its own as soon as it takes longer or reports progress.
            let Some(guard) = self.claim_in_flight(&req.thread_id, &req.call.id) else {
                continue; // someone started the same id a moment ago: wait for it
            };
            let (unit, events) = self.write_ahead_unit(
                &req,
                &tool.definition.name,
                CallStatus::Running,
                vec![],
                now_ms(),
            );
            let write_ahead = if deferred {
                WriteAhead::deferred(self.writer.clone(), unit, events, req.observer.clone())
            } else {
                match self.commit_write_ahead(&req, unit, events).await {
                    Ok(()) => WriteAhead::Written,
                    Err(StoreError::Conflict(_)) => {
                        // Recorded by another process between 2 and 7, or
                        // declared by a message recorded since the look-up.
                        drop(guard);
                        self.look_again(&mut req);
                        continue;
                    }
                    Err(e) => return Err(self.refused_record(&mut req, e)),
                }
            };

            // 8.–11. Execute, capture undo, post-process, store and stream.
            let outcome = self
                .run_and_finish(
                    &req,
                    &tool,
                    arguments,
                    &guard,
                    &permission,
                    None,
                    write_ahead,
                )
                .await;
            drop(guard);
            match outcome {
                // A deferred record met one written by another process, or
                // a declaration recorded since the look-up.
                Err(StoreError::Conflict(_)) if deferred => self.look_again(&mut req),
                Err(e) => return Err(self.refused_record(&mut req, e)),
                Ok(outcome) => return Ok(Executed::Finished(outcome)),
            }
        }
    }

    /// Steps 8–11 for a call already recorded `running` (by the write-ahead,
    /// or by an approval's decision).
    #[allow(clippy::too_many_arguments)]
    async fn run_and_finish(
        &self,
        req: &CallRequest,
        tool: &Arc<RegisteredTool>,
        arguments: Value,
        guard: &InFlightGuard<'_>,
        permission: &Permission,
        approval_id: Option<&str>,
        write_ahead: WriteAhead,
    ) -> Result<CallOutcome, StoreError> {
        // 8. Execute with timeout, cancellation and progress events.
        let started = Instant::now();
        let executed = self
            .run_tool(
                req,
                tool,
                arguments.clone(),
                guard.cancel.clone(),
                &write_ahead,
                permission,
            )
            .await;
        // 9. Undo capture (a dry run has nothing to undo).
        let undo = executed
            .as_ref()
            .ok()
            .and_then(|s| s.undo.clone())
            .filter(|_| !req.call.dry_run);
        // 10. Post-process.
        let output = postprocess::build_output(tool, &req.call.id, &arguments, &executed);
        // 11. One transaction: result, message, event, audit (and the undo link).
        let mut extra = vec![WriteOp::AppendAudit(audit::executed(
            req,
            tool,
            &output,
            permission,
            approval_id,
            started.elapsed(),
        ))];
        if let Some(original) = &req.undo_of
            && output.status != ToolStatus::Failure
        {
            extra.push(WriteOp::MarkUndone {
                id: original.clone(),
                undone_by: req.call.id.clone(),
            });
        }
        // A change taken back by a tool (`undo_edit`) undoes the call that
        // made it: its lookup says `undone`, and no undo or rollback tries
        // it again.
        if let Ok(ToolSuccess {
            undoes: Some(undone),
            ..
        }) = &executed
            && !req.call.dry_run
            && req.undo_of.as_ref() != Some(undone)
        {
            extra.push(WriteOp::MarkUndoneIfOpen {
                id: undone.clone(),
                undone_by: req.call.id.clone(),
            });
        }
        // A write-ahead still deferred goes in the result's transaction.
        let (mut ops, announced) = write_ahead.into_unwritten().unwrap_or_default();
        ops.extend(extra);
        let finishing = Self::finish_ops(&output, undo, ops, announced);
        let ran_for = started.elapsed();
        let committed = self
            .commit_finish(
                &req.owner,
                &req.thread_id,
                output,
                req.observer.as_ref(),
                finishing,
            )
            .await;
        // Timed once its result is the call's: a read-only call posted
        // again runs until its record meets the stored one (a conflict),
        // and is then answered from storage, not timed again.
        if !matches!(&committed, Err(e) if e.refuses_call()) {
            metrics::histogram!("toolgate_tool_call_duration_seconds", "tool" => tool.definition.name.clone())
                .record(ran_for.as_secs_f64());
        }
        committed
    }

    /// A call refused before it runs (unknown tool, arguments that do not
    /// match) is a request error, and nothing is recorded, unless an
    /// assistant message of the thread declares the call: the model then
    /// waits for its result, and no other call can give one (a call posted
    /// under that id must match the declaration). So the refusal is
    /// recorded as the call's failed result, as a gate's refusal is, and
    /// the model reads it in the thread's history and context.
    async fn refused_before_running(
        &self,
        req: CallRequest,
        tool_name: &str,
        rejection: Rejection,
    ) -> Result<Executed, Rejection> {
        let Some(error) = rejection.tool_error() else {
            return Err(rejection);
        };
        // The thread's messages are read only for its owner.
        let owner = self.store.thread_owner(&req.thread_id).await?;
        if owner.is_none_or(|o| o.owner != req.owner || o.deleted_at_ms.is_some()) {
            return Err(rejection);
        }
        // An id the thread has recorded answers as recorded: its outcome
        // (a run records a call it could not run), or a 409 for another
        // call under it, rather than a refusal whose hint, to correct the
        // call and post it again, the id could never follow.
        if let Some(recorded) = self.recorded(&req, tool_name, false).await? {
            return Ok(recorded);
        }
        let outlines = self.store.message_outlines(&req.thread_id).await?;
        let Some(declared) =
            crate::protocol::context::declared_calls(&outlines).find(|d| d.id == req.call.id)
        else {
            return Err(rejection);
        };
        // Recorded under the message that declares it, as a call that runs
        // is ([`Engine::link_to_declaration`]).
        let mut req = req;
        link(&mut req, declared.message.id.clone())?;
        self.record_rejected_call(req, error)
            .await
            .map(Executed::Finished)
            .map_err(Rejection::from)
    }

    /// How long `tool` may run: the configured timeout, or longer for a
    /// tool that allows itself more (`bash` with its own `timeout_ms`).
    fn time_limit(&self, tool: &RegisteredTool) -> Duration {
        tool.tool
            .max_duration()
            .map_or(self.config.tool_timeout, |d| {
                d.max(self.config.tool_timeout)
            })
    }

    /// The refusal `call` gets from the pipeline's first steps whatever the
    /// thread holds and whoever posts it: a tool the registry lacks, or
    /// arguments that do not match its input schema. `None` for a call
    /// that goes on to the gates (which may refuse it in turn).
    pub fn refusal_of(&self, call: &IncomingCall) -> Option<ToolError> {
        let tool = match self.resolve(&call.name) {
            Ok(tool) => tool,
            Err(rejection) => return rejection.tool_error(),
        };
        // Arguments as step 5 validates them: without the confidence the
        // gate before it takes out (a call that states none is that gate's
        // to refuse, recorded wherever it is posted).
        let arguments =
            gates::confidence(tool.definition.capability.min_confidence, &call.arguments).ok()?;
        validate_arguments(&tool, &arguments)
            .err()
            .and_then(|rejection| rejection.tool_error())
    }

    fn resolve(&self, name: &str) -> Result<Arc<RegisteredTool>, Rejection> {
        self.registry
            .resolve(name)
            .ok_or_else(|| Rejection::ToolNotFound {
                // No name is longer than 64 characters: a longer one is
                // not echoed whole (three times) into the answer.
                name: crate::protocol::clip(name, 64),
                available: self.registry.names(),
            })
    }

    /// Step 2: the recorded outcome of this call id, if any. Waits for a call
    /// still running in this process.
    async fn recorded(
        &self,
        req: &CallRequest,
        tool_name: &str,
        optimistic: bool,
    ) -> Result<Option<Executed>, Rejection> {
        let key = (req.thread_id.clone(), req.call.id.clone());
        let mut optimistic = optimistic;
        let record = loop {
            // A call running here: wait for it to finish, then read its record.
            let waiting = self
                .in_flight
                .lock()
                .expect("in-flight lock")
                .get(&key)
                .map(|f| f.done.clone());
            if optimistic && waiting.is_none() {
                return Ok(None);
            }
            optimistic = false;
            if let Some(mut done) = waiting {
                // Only waited for: it holds a slot of its own.
                req.slot.release();
                // Posted again with other arguments (or another tool) while
                // it runs: refused at once, not once it has finished (which
                // may be minutes away). A write-ahead not committed yet is
                // checked when the call has finished, as before.
                if let Some(record) = self.store.tool_call(&req.thread_id, &req.call.id).await?
                    && let Some(field) = call_difference(&record, tool_name, &req.call)
                {
                    return Err(Rejection::IdConflict {
                        id: req.call.id.clone(),
                        field,
                    });
                }
                let _ = done.wait_for(|finished| *finished).await;
            }
            let Some(record) = self.store.tool_call(&req.thread_id, &req.call.id).await? else {
                return Ok(None);
            };
            if let Some(field) = call_difference(&record, tool_name, &req.call) {
                return Err(Rejection::IdConflict {
                    id: req.call.id.clone(),
                    field,
                });
            }
            if record.status == CallStatus::PendingApproval {
                match self.pending_approval_of(&record).await? {
                    // Past its deadline: its expiry is recorded now, and the
                    // call's APPROVAL_EXPIRED result read back, rather than
                    // a 202 for a decision nobody can make any more.
                    Some(approval) if approval.expires_at_ms <= now_ms() => {
                        self.expire(&approval).await?;
                        continue;
                    }
                    Some(approval) => return Ok(Some(Executed::AwaitingApproval(approval))),
                    // Decided since: it runs here now, or has finished.
                    None => continue,
                }
            }
            if record.status != CallStatus::Running {
                break record;
            }
            // Running: here (claimed just after we looked) or elsewhere. The
            // in-flight entry lives from before the write-ahead until after
            // the result, so its absence means another process: its outcome
            // is waited for as a call running here is, for as long as a
            // tool may run.
            if !self
                .in_flight
                .lock()
                .expect("in-flight lock")
                .contains_key(&key)
            {
                req.slot.release();
                let limit = self
                    .registry
                    .resolve(tool_name)
                    .map_or(self.config.tool_timeout, |tool| self.time_limit(&tool));
                let longest = limit + STOP_GRACE + SHARED_WAIT_POLL;
                match self
                    .wait_finished(&req.thread_id, &req.call.id, longest)
                    .await?
                {
                    Some(_) => continue,
                    None => {
                        return Err(Rejection::InProgressElsewhere {
                            id: req.call.id.clone(),
                        });
                    }
                }
            }
        };
        let outcome = outcome_from_record(&record)?;
        observe(
            req.observer.as_ref(),
            replay_events(&record, &outcome, &req.call),
        );
        Ok(Some(Executed::Finished(outcome)))
    }

    fn claim_in_flight(&self, thread_id: &str, call_id: &str) -> Option<InFlightGuard<'_>> {
        let key = (thread_id.to_string(), call_id.to_string());
        let mut map = self.in_flight.lock().expect("in-flight lock");
        if map.contains_key(&key) {
            return None;
        }
        let (tx, rx) = watch::channel(false);
        let cancel = CancellationToken::new();
        map.insert(
            key.clone(),
            InFlight {
                done: rx,
                cancel: cancel.clone(),
            },
        );
        Some(InFlightGuard {
            engine: self,
            key,
            done: tx,
            cancel,
        })
    }

    /// Cancel a call running in this process and wait, at most `within`,
    /// for it to finish. `None` if none runs here.
    ///
    /// A tool may finish its work just as the cancellation reaches it; its
    /// result then stands (the work was done), and the answer says so.
    pub async fn cancel(
        &self,
        thread_id: &str,
        call_id: &str,
        within: Duration,
    ) -> Result<Option<Cancelled>, StoreError> {
        let key = (thread_id.to_string(), call_id.to_string());
        // A call of a batch or run leaving its queue is, for a moment (its
        // permission checked, its preview made), neither queued nor
        // running nor recorded: it is waited for, so that the cancel finds
        // it running (and stops it) or recorded (and treats it so).
        let mut starting_waits = STARTING_WAITS;
        let mut done = loop {
            let running = {
                let map = self.in_flight.lock().expect("in-flight lock");
                match map.get(&key) {
                    // Under the lock: of cancels at once, one is first.
                    Some(f) if f.cancel.is_cancelled() => return Ok(Some(Cancelled::Already)),
                    Some(f) => {
                        f.cancel.cancel();
                        Some(f.done.clone())
                    }
                    None => None,
                }
            };
            if let Some(done) = running {
                break done;
            }
            if let Some(queued) = self.cancel_queued(key.clone()).await? {
                return Ok(Some(queued));
            }
            let starting = self.starting.lock().expect("starting lock").contains(&key);
            if !starting
                || starting_waits == 0
                || self.store.tool_call(thread_id, call_id).await?.is_some()
            {
                return Ok(None);
            }
            starting_waits -= 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        if tokio::time::timeout(within, done.wait_for(|finished| *finished))
            .await
            .is_err()
        {
            return Ok(Some(Cancelled::Stopping));
        }
        let record = self.store.tool_call(thread_id, call_id).await?;
        Ok(Some(match record {
            Some(record)
                if matches!(
                    record.status,
                    CallStatus::Success | CallStatus::Partial | CallStatus::Failure
                ) && record
                    .output
                    .as_ref()
                    .and_then(|output| output.pointer("/error/code"))
                    .and_then(Value::as_str)
                    != Some(codes::CANCELLED) =>
            {
                Cancelled::FinishedFirst(record.status)
            }
            _ => Cancelled::Stopped,
        }))
    }

    /// Put the calls `ids` of a batch or run in `thread_id` in the queue of
    /// calls about to run, until the guard is dropped: a cancel reaching
    /// one before it starts keeps it from running. An id queued already
    /// (by another request) is left to that one.
    pub fn queue(&self, thread_id: &str, ids: impl IntoIterator<Item = String>) -> QueuedCalls {
        let mut queue = self.queued.lock().expect("queue lock");
        let keys = ids
            .into_iter()
            .map(|id| (thread_id.to_string(), id))
            .filter(|key| {
                let new = !queue.contains_key(key);
                if new {
                    queue.insert(key.clone(), false);
                }
                new
            })
            .collect();
        QueuedCalls {
            queue: self.queued.clone(),
            keys,
        }
    }

    /// A cancel of a call no task of this process runs: one of a batch or
    /// run waiting its turn is marked, so that it is recorded `CANCELLED`
    /// when its turn comes (asked again, the same answer). A call the
    /// thread has recorded is no such call (a batch posted again names
    /// calls that ran, or wait for approval): `None`, as for one that is
    /// not queued, and the caller treats it by its record.
    async fn cancel_queued(&self, key: CallKey) -> Result<Option<Cancelled>, StoreError> {
        if !self.queued.lock().expect("queue lock").contains_key(&key) {
            return Ok(None);
        }
        if self.store.tool_call(&key.0, &key.1).await?.is_some() {
            return Ok(None);
        }
        let mut queued = self.queued.lock().expect("queue lock");
        Ok(queued.get_mut(&key).map(|cancelled| {
            *cancelled = true;
            Cancelled::BeforeStart
        }))
    }

    /// Whether a call of a batch or run waiting its turn was cancelled: a
    /// batch or run that would leave it for later (after an approval) runs
    /// it now instead, to record it `CANCELLED`.
    pub fn cancelled_in_queue(&self, thread_id: &str, call_id: &str) -> bool {
        self.queued
            .lock()
            .expect("queue lock")
            .get(&(thread_id.to_string(), call_id.to_string()))
            .copied()
            .unwrap_or(false)
    }

    /// The call's turn has come: out of the queue; whether a cancel
    /// reached it there (`None`: it was not queued). One that goes on is
    /// starting until `starting` is dropped (see [`Engine::cancel`]).
    fn started(&self, req: &CallRequest) -> (Option<bool>, Starting<'_>) {
        let key = (req.thread_id.clone(), req.call.id.clone());
        let cancelled = self.queued.lock().expect("queue lock").remove(&key);
        let starting = match cancelled {
            Some(false) => {
                self.starting
                    .lock()
                    .expect("starting lock")
                    .insert(key.clone());
                Some(key)
            }
            _ => None,
        };
        (
            cancelled,
            Starting {
                engine: self,
                key: starting,
            },
        )
    }

    /// The TOOL_CALL_START/ARGS/END announcing a call of tool `name`
    /// (`args`: its arguments' JSON text). A call a message declares is
    /// announced under the name that message calls it by (an alias stays
    /// an alias), whatever name it was posted under: an AG-UI client
    /// renames its copy of the call to the name announced, and the
    /// snapshot, the history and the context show the message's. Any other
    /// call is announced under its tool's own name, as they show it.
    fn announce(req: &CallRequest, name: &str, args: &JsonText, ms: i64) -> Vec<Event> {
        let call = &req.call;
        let shown = match (&req.declared, &req.declared_name) {
            (Declared::By(_), Some(declared)) => declared,
            _ => name,
        };
        announcement(&call.id, shown, call.parent_message_id.clone(), args, ms)
    }

    /// Record the call with `status` and announce it at the moment `ms`,
    /// in one transaction with `extra` operations (approval, audit).
    async fn write_ahead(
        &self,
        req: &CallRequest,
        name: &str,
        status: CallStatus,
        extra: Vec<WriteOp>,
        ms: i64,
    ) -> Result<(), StoreError> {
        let (unit, events) = self.write_ahead_unit(req, name, status, extra, ms);
        self.commit_write_ahead(req, unit, events).await
    }

    async fn commit_write_ahead(
        &self,
        req: &CallRequest,
        unit: WriteUnit,
        events: Vec<Event>,
    ) -> Result<(), StoreError> {
        let ours = unit.ops.iter().find_map(|op| match op {
            WriteOp::InsertToolCall(call) => Some((call.status, call.created_at_ms)),
            _ => None,
        });
        match self.writer.write(unit).await {
            Ok(_) => {}
            // The connection failed: perhaps after the database committed,
            // before its answer arrived. The record tells; if it is this
            // very write-ahead (same status, same arguments, same moment),
            // the call goes on: answering 503 would leave it recorded
            // `running` with nothing running it, and every retry a 409.
            Err(e) if e.is_unavailable() => {
                // A commit the connection lost may still be finishing on the
                // server: looked for a few times over about a second.
                let mut committed = false;
                for pause in [0, 100, 200, 300, 400] {
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    if let Ok(Some(record)) =
                        self.store.tool_call(&req.thread_id, &req.call.id).await
                    {
                        committed = ours.is_some_and(|(status, at)| {
                            record.status == status
                                && record.created_at_ms == at
                                && same_call(&record, &req.call)
                        });
                        break;
                    }
                }
                if !committed {
                    return Err(e);
                }
                tracing::warn!(
                    thread_id = %req.thread_id,
                    tool_call_id = %req.call.id,
                    error = %e,
                    "the write-ahead's commit was not acknowledged, but it is stored: the call goes on"
                );
            }
            Err(e) => return Err(e),
        }
        observe(req.observer.as_ref(), events);
        Ok(())
    }

    /// The write-ahead's unit (the call's record, its announcement and
    /// `extra` operations) and the announcement's events.
    fn write_ahead_unit(
        &self,
        req: &CallRequest,
        name: &str,
        status: CallStatus,
        extra: Vec<WriteOp>,
        ms: i64,
    ) -> (WriteUnit, Vec<Event>) {
        // Serialized once: the call's record and its TOOL_CALL_ARGS delta.
        let args = JsonText::of(&req.call.arguments);
        let events = Self::announce(req, name, &args, ms);
        let mut ops = vec![WriteOp::InsertToolCall(NewToolCall {
            id: req.call.id.clone(),
            run_id: req
                .call
                .run_id
                .clone()
                .unwrap_or_else(|| req.call.id.clone()),
            tool_name: name.to_string(),
            args,
            status,
            undo_of: req.undo_of.clone(),
            workspace: req.call.workspace.clone(),
            dry_run: req.call.dry_run,
            // The moment its announcement carries.
            created_at_ms: ms,
            instance: Some(self.config.instance.clone()),
            declared_by: req.declared.message(),
            parent_message_id: req.call.parent_message_id.clone(),
        })];
        let mut extra_events = Vec::new();
        for op in extra {
            match op {
                WriteOp::AppendEvents(evs) => extra_events.extend(evs),
                other => ops.push(other),
            }
        }
        let mut new_events: Vec<NewEvent> = events.iter().map(new_event).collect();
        new_events.extend(extra_events);
        ops.push(WriteOp::AppendEvents(new_events));
        let unit = WriteUnit {
            thread_id: req.thread_id.clone(),
            owner: req.owner.clone(),
            ops,
        };
        (unit, events)
    }

    async fn run_tool(
        &self,
        req: &CallRequest,
        tool: &Arc<RegisteredTool>,
        arguments: Value,
        cancel: CancellationToken,
        write_ahead: &WriteAhead,
        permission: &Permission,
    ) -> Result<ToolSuccess, ToolError> {
        let (progress_tx, progress_rx) = mpsc::unbounded_channel();
        let tool_done = CancellationToken::new();
        let progress_task = tokio::spawn(
            forward_progress(
                self.writer.clone(),
                (
                    req.owner.clone(),
                    req.thread_id.clone(),
                    req.call.id.clone(),
                ),
                progress_rx,
                req.observer.clone(),
                write_ahead.pending(),
                tool_done.clone(),
            )
            .in_current_span(),
        );
        let ctx = ToolContext {
            owner: req.owner.clone(),
            thread_id: req.thread_id.clone(),
            call_id: req.call.id.clone(),
            workspace: req.call.workspace.clone(),
            cancel: cancel.clone(),
            progress: ProgressSink::new(progress_tx),
            path_rules: permission.path_rules.clone(),
            judged_path: permission.judged_path.clone(),
            shown: permission.shown.clone(),
        };
        // The tool runs in its own task so a panic becomes a failure, not a
        // lost call.
        let handle = {
            let tool = tool.tool.clone();
            let dry_run = req.call.dry_run;
            let arguments = crate::protocol::json::integral_numbers(arguments);
            tokio::spawn(
                async move {
                    if dry_run {
                        tool.dry_run(arguments, ctx).await.map(|preview| {
                            let mut result =
                                serde_json::to_value(preview).expect("dry-run results serialize");
                            result["dry_run"] = Value::Bool(true);
                            ToolSuccess::complete(result)
                        })
                    } else {
                        tool.execute(arguments, ctx).await
                    }
                }
                .in_current_span(),
            )
        };
        let limit = self.time_limit(tool);
        let finished = await_tool(handle, limit, &cancel);
        let result = match write_ahead.pending() {
            None => finished.await,
            Some(pending) => {
                tokio::pin!(finished);
                tokio::select! {
                    result = &mut finished => result,
                    _ = tokio::time::sleep(self.config.announce_after) => {
                        // Taking longer: announce it now. Should that fail,
                        // the result's transaction tries again and answers;
                        // an id recorded meanwhile (a repeated call) stops
                        // this run, whose result would not be stored.
                        match pending.ensure_written().await {
                            Ok(()) => {}
                            // Or declared otherwise, or its run rolled back,
                            // meanwhile: refused too.
                            Err(e) if e.refuses_call() => cancel.cancel(),
                            Err(e) => {
                                tracing::debug!(error = %e, "deferred write-ahead not recorded")
                            }
                        }
                        finished.await
                    }
                }
            }
        };
        // Progress events must be in the log before the result: those
        // reported so far. A tool stopped by its timeout or a cancel may
        // still hold its progress sender (work on a blocking thread cannot
        // be aborted), so the forwarder is told the tool is done rather
        // than waited for until every sender is gone.
        tool_done.cancel();
        let _ = progress_task.await;
        result
    }

    /// Step 11: one transaction with the call's end, its tool message, the
    /// TOOL_CALL_RESULT event and `extra` operations (audit, approval
    /// decision, undo link); observers hear of it only after commit.
    async fn finish(
        &self,
        owner: &str,
        thread_id: &str,
        output: ToolAgentOutput,
        undo: Option<crate::protocol::tool_output::UndoInfo>,
        observer: Option<&mpsc::UnboundedSender<Event>>,
        extra: Vec<WriteOp>,
    ) -> Result<CallOutcome, StoreError> {
        let finishing = Self::finish_ops(&output, undo, extra, Vec::new());
        self.commit_finish(owner, thread_id, output, observer, finishing)
            .await
    }

    /// The result's unit: `ops` (and the events `announced` by them), then
    /// the call's end, its tool message and the TOOL_CALL_RESULT event.
    fn finish_ops(
        output: &ToolAgentOutput,
        undo: Option<crate::protocol::tool_output::UndoInfo>,
        mut ops: Vec<WriteOp>,
        announced: Vec<Event>,
    ) -> Finishing {
        let message_id = format!("msg_{}", uuid::Uuid::now_v7().simple());
        let ui_schema = compile_ui(output);
        // The text the model gets, the message's content and the event's:
        // a large result is serialized once.
        let content = output.text_projection();
        let event = result_event(output, content.clone(), &message_id, ui_schema.as_ref());
        // One moment: the event's, the call's end and its message's, and
        // that of what the unit records with them (its audit entries, the
        // approval it decides).
        let now = event.timestamp;
        for op in &mut ops {
            match op {
                WriteOp::AppendAudit(entry) => entry.at_ms = now,
                WriteOp::DecideApproval { decided_at_ms, .. } => *decided_at_ms = now,
                _ => {}
            }
        }
        let status = match output.status {
            ToolStatus::Success => CallStatus::Success,
            ToolStatus::Failure => CallStatus::Failure,
            ToolStatus::Partial => CallStatus::Partial,
        };
        /// The tool message's metadata: the one stored copy of the output,
        /// which the call's record reads too.
        #[derive(serde::Serialize)]
        struct Carrying<'a> {
            tool_agent_output: &'a ToolAgentOutput,
        }
        let metadata = JsonText::of(&Carrying {
            tool_agent_output: output,
        });
        ops.push(WriteOp::FinishToolCall(FinishedToolCall {
            id: output.tool_call_id.clone(),
            status,
            undo: undo.map(|u| JsonText::of(&u)),
            message_id: message_id.clone(),
            finished_at_ms: now,
        }));
        ops.push(WriteOp::InsertMessage(NewMessage {
            id: message_id.clone(),
            role: Role::Tool,
            content: content.clone(),
            metadata,
            tool_call_id: Some(output.tool_call_id.clone()),
            created_at_ms: now,
            declares: Vec::new(),
        }));
        // The log keeps the result event as a reference to its message.
        ops.push(WriteOp::AppendEvents(vec![NewEvent {
            announces: Some(message_id.clone()),
            ..new_event(&event)
        }]));
        Finishing {
            ops,
            announced,
            event,
            message_id,
            ui_schema,
            content,
        }
    }

    /// Commit a result's unit; observers hear of `announced` (a deferred
    /// write-ahead's events) and the result only after commit.
    async fn commit_finish(
        &self,
        owner: &str,
        thread_id: &str,
        mut output: ToolAgentOutput,
        observer: Option<&mpsc::UnboundedSender<Event>>,
        mut finishing: Finishing,
    ) -> Result<CallOutcome, StoreError> {
        let mut unit = WriteUnit {
            thread_id: thread_id.to_string(),
            owner: owner.to_string(),
            ops: std::mem::take(&mut finishing.ops),
        };
        let mut refused_once = false;
        loop {
            match self.writer.write_or_return(unit).await {
                Ok(_) => break,
                // The tool has run: if the database cannot be reached, its
                // result is written once it answers again, and the call
                // does not stay `running` until a restart.
                // A unit that records its call too (a read-only call whose
                // write-ahead was deferred, a refusal) is dropped: its call
                // left no trace and had no effect, and its caller, told
                // 503, posts it again.
                Err((e, Some(back))) if e.is_unavailable() => {
                    if spool::worth_keeping(&back) {
                        // Written once the database answers again.
                        self.count_result(&output);
                        if let Some((back, kept)) = self.keep_on_disk(back).await {
                            self.keep_writing(back, kept);
                        }
                    }
                    return Err(e);
                }
                // The database refused the result's data, or failed on it in
                // a way nobody can classify (writing it again would fail
                // again): the call is finished as a failure that says so,
                // once.
                Err((e, Some(back))) if e.is_raised_on_statement() && !refused_once => {
                    refused_once = true;
                    let announced = std::mem::take(&mut finishing.announced);
                    let Some(replaced) = Self::result_refused(back, announced, &e) else {
                        return Err(e);
                    };
                    (output, finishing, unit) = replaced;
                }
                Err((e, _)) => return Err(e),
            }
        }
        self.count_result(&output);
        let mut events = finishing.announced;
        events.push(finishing.event.clone());
        observe(observer, events);
        let _ = self
            .finished
            .send((thread_id.to_string(), output.tool_call_id.clone()));
        Ok(CallOutcome {
            output,
            ui_schema: finishing.ui_schema,
            message_id: finishing.message_id,
            replayed: false,
            tool_response: finishing.content,
            finished_at_ms: finishing.event.timestamp,
        })
    }

    /// `toolgate_tool_calls_total`: every result that is a call's own, by
    /// tool and status, refusals and interrupted calls included. A name no
    /// tool has is counted as `unknown`: a client choosing names must not
    /// add series.
    fn count_result(&self, output: &ToolAgentOutput) {
        let tool = match self.registry.resolve(&output.tool_name) {
            Some(tool) => tool.definition.name.clone(),
            None => "unknown".into(),
        };
        metrics::counter!(
            "toolgate_tool_calls_total",
            "tool" => tool,
            "status" => output.status.as_str()
        )
        .increment(1);
    }

    /// Keep a result unit on disk while the database is unreachable (one
    /// whose call is recorded: [`spool::worth_keeping`]); the file is
    /// written and synced off the request threads. The unit comes back with
    /// its file, if one was written; `None` only when the runtime is
    /// shutting down.
    async fn keep_on_disk(
        &self,
        unit: WriteUnit,
    ) -> Option<(WriteUnit, Option<std::path::PathBuf>)> {
        let on_disk = self.config.result_spool.clone();
        let (unit, kept) = tokio::task::spawn_blocking(move || {
            let kept = on_disk.keep(&unit);
            (unit, kept)
        })
        .await
        .ok()?;
        let kept = kept
            .map_err(|error| {
                tracing::error!(
                    tool_call_id = spool::finished_call(&unit).unwrap_or_default(),
                    error = %error,
                    "could not keep a result on disk; it waits in memory only"
                )
            })
            .ok();
        Some((unit, kept))
    }

    /// The database refused a result's unit for its data (a trigger, a
    /// value out of range, a row too large for an index) or failed on one
    /// of its statements for a reason that does not clear by itself: the
    /// same unit without the result's own operations (the call's end, its
    /// message and its event; so with the write-ahead and the audit entry),
    /// finishing the call as a `RESULT_NOT_STORED` failure instead. The call does not
    /// stay open, the model learns its result is lost, and a re-post
    /// answers with that failure. `None` if `unit` finishes no call.
    fn result_refused(
        mut unit: WriteUnit,
        announced: Vec<Event>,
        refused: &StoreError,
    ) -> Option<(ToolAgentOutput, Finishing, WriteUnit)> {
        /// What the failure repeats of the refused output.
        #[derive(serde::Deserialize)]
        struct Called {
            tool_name: String,
            tool_call_id: String,
            tool_call_args: Value,
        }
        /// The tool message's metadata, which holds the output.
        #[derive(serde::Deserialize)]
        struct Carried {
            tool_agent_output: Called,
        }
        let (at, message_id) = unit.ops.iter().enumerate().find_map(|(at, op)| match op {
            WriteOp::FinishToolCall(finished) => Some((at, finished.message_id.as_str())),
            _ => None,
        })?;
        let called = unit.ops[at..].iter().find_map(|op| match op {
            WriteOp::InsertMessage(message) if message.id == message_id => {
                serde_json::from_str::<Carried>(message.metadata.as_str())
                    .ok()
                    .map(|carried| carried.tool_agent_output)
            }
            _ => None,
        })?;
        tracing::error!(
            thread_id = %unit.thread_id,
            tool_call_id = %called.tool_call_id,
            error = %refused,
            "the database refused a tool result; the call is finished as RESULT_NOT_STORED"
        );
        let error = ToolError::new(
            codes::RESULT_NOT_STORED,
            "the tool ran, but the database refused to store its result, so the result is lost",
            false,
        )
        .with_hint(
            "check the current state before calling the tool again with a new tool call id; \
             a call with a smaller result may be stored",
        );
        let failure = postprocess::failure_output(
            &called.tool_name,
            &called.tool_call_id,
            &called.tool_call_args,
            error,
        );
        // finish_ops put the result's operations last, its end first.
        unit.ops.truncate(at);
        let mut replaced = Self::finish_ops(&failure, None, unit.ops, announced);
        unit.ops = std::mem::take(&mut replaced.ops);
        Some((failure, replaced, unit))
    }

    /// One try at writing a result unit outside a request (a kept or
    /// retried result): refused by the database, it is replaced once by its
    /// `RESULT_NOT_STORED` failure, which is tried at once.
    async fn write_result(writer: &Writer, unit: WriteUnit) -> crate::store::writer::Answer {
        match writer.write_or_return(unit).await {
            Err((e, Some(back))) if e.is_raised_on_statement() => {
                match Self::result_refused(back, Vec::new(), &e) {
                    Some((_, _, replaced)) => writer.write_or_return(replaced).await,
                    None => Err((e, None)),
                }
            }
            answer => answer,
        }
    }

    /// Write a call's result unit in the background until it commits, with
    /// a growing pause (up to 10 s) between tries. A unit the database
    /// refuses is replaced by the call's `RESULT_NOT_STORED` failure
    /// ([`write_result`](Self::write_result)); any other refusal (it was
    /// committed after all, say) ends the tries. Its `kept` file goes once
    /// the tries end.
    fn keep_writing(&self, unit: WriteUnit, kept: Option<std::path::PathBuf>) {
        let writer = self.writer.clone();
        let store = self.store.clone();
        let finished = self.finished.clone();
        tokio::spawn(async move {
            let thread_id = unit.thread_id.clone();
            let call_id = spool::finished_call(&unit).unwrap_or_default().to_string();
            let mut pause = Duration::from_millis(200);
            let mut unit = unit;
            loop {
                tokio::time::sleep(pause).await;
                match Self::write_result(&writer, unit).await {
                    Ok(_) => {
                        tracing::info!(call_id, "result stored once the database answered again");
                        let _ = finished.send((thread_id, call_id));
                        break;
                    }
                    Err((e, Some(again))) if e.is_unavailable() => {
                        tracing::warn!(call_id, error = %e, "result not stored yet; trying again");
                        unit = again;
                        pause = (pause * 2).min(Duration::from_secs(10));
                    }
                    Err((e, _)) => {
                        if let Some(path) = &kept
                            && interrupted_elsewhere(&store, &thread_id, &call_id, &e).await
                        {
                            spool::Spool::set_aside(path);
                            return;
                        }
                        tracing::error!(
                            call_id,
                            error = %e,
                            "result not written again (the first try may have committed it); \
                             if it was not, a restart finishes the call as INTERRUPTED"
                        );
                        break;
                    }
                }
            }
            if let Some(path) = kept {
                spool::Spool::forget(&path);
            }
        }.in_current_span());
    }

    /// Start-up, before [`recover_interrupted`](Self::recover_interrupted):
    /// write the results kept on disk during an outage (a restart cut their
    /// tries short). One the database still cannot take is tried again in
    /// the background, and its call is left open meanwhile. Returns how many
    /// were written.
    pub async fn write_kept_results(&self) -> Result<usize, StoreError> {
        let pending = self
            .config
            .result_spool
            .pending()
            .map_err(spool::unreadable)?;
        let mut written = 0;
        for (path, unit) in pending {
            let call_id = spool::finished_call(&unit).unwrap_or_default().to_string();
            let thread_id = unit.thread_id.clone();
            match Self::write_result(&self.writer, unit).await {
                Ok(_) => {
                    written += 1;
                    tracing::info!(call_id, "stored a result kept during an outage");
                }
                Err((e, Some(unit))) if e.is_unavailable() => {
                    self.keep_writing(unit, Some(path));
                    continue;
                }
                // No such call here: this is not the database it ran on (a
                // start with another DATABASE_URL, or none). The file stays
                // for a start on that one.
                Err((StoreError::NotFound(_) | StoreError::NotOwner, _)) => {
                    tracing::warn!(
                        call_id,
                        file = %path.display(),
                        "a result kept during an outage belongs to a call this database does not \
                         have: is DATABASE_URL the database it ran on? The file stays until a \
                         start on that database writes it (delete it to give the result up)"
                    );
                    continue;
                }
                Err((e, _))
                    if interrupted_elsewhere(&self.store, &thread_id, &call_id, &e).await =>
                {
                    spool::Spool::set_aside(&path);
                    continue;
                }
                // Committed before the restart, or refused even as a failure.
                Err((e, _)) => tracing::warn!(call_id, error = %e, "kept result not written"),
            }
            spool::Spool::forget(&path);
        }
        Ok(written)
    }

    /// A gate refused the call: it is recorded as a failed call with its
    /// result and an audit entry, so the model (and the history) sees why.
    async fn refuse(
        &self,
        req: CallRequest,
        tool: &RegisteredTool,
        error: ToolError,
        permission: &Permission,
    ) -> Result<Executed, Rejection> {
        let audit = audit::refused(
            &req,
            &tool.definition.name,
            Some(&tool.definition.metadata.audit_operation),
            &error,
            Some(permission),
        );
        self.record_refusal(req, &tool.definition.name, error, audit)
            .await
            .map(Executed::Finished)
            .map_err(Rejection::from)
    }

    /// Record a refused call as a failed call with its result: gate refusals,
    /// and for entry points that must answer every call in-stream (AG-UI
    /// runs) unknown tools and invalid arguments too. A call id already
    /// recorded answers with its stored outcome.
    pub async fn record_refusal(
        &self,
        mut req: CallRequest,
        tool_name: &str,
        error: ToolError,
        audit: crate::store::NewAuditEntry,
    ) -> Result<CallOutcome, StoreError> {
        // A second try follows a conflict: the id recorded, or the call
        // declared, since the first look.
        let mut tries = 2;
        loop {
            tries -= 1;
            if let Some(record) = self.store.tool_call(&req.thread_id, &req.call.id).await? {
                if let Some(field) = call_difference(&record, tool_name, &req.call) {
                    return Err(StoreError::CallConflict {
                        id: req.call.id.clone(),
                        field,
                    });
                }
                if record.status.is_finished() {
                    let outcome = outcome_from_record(&record)?;
                    observe(
                        req.observer.as_ref(),
                        replay_events(&record, &outcome, &req.call),
                    );
                    return Ok(outcome);
                }
                return Err(StoreError::Conflict(format!(
                    "tool call {} is still open",
                    req.call.id
                )));
            }
            self.link_to_declaration(&mut req, tool_name)
                .await
                .map_err(|rejection| match rejection {
                    Rejection::Store(e) => e,
                    other => StoreError::Conflict(other.to_string()),
                })?;
            // Nothing runs: the record and its result share one transaction.
            let (unit, announced) =
                self.write_ahead_unit(&req, tool_name, CallStatus::Running, vec![], now_ms());
            let output = postprocess::failure_output(
                tool_name,
                &req.call.id,
                &req.call.arguments,
                error.clone(),
            );
            let mut ops = unit.ops;
            ops.push(WriteOp::AppendAudit(audit.clone()));
            let finishing = Self::finish_ops(&output, None, ops, announced);
            match self
                .commit_finish(
                    &req.owner,
                    &req.thread_id,
                    output,
                    req.observer.as_ref(),
                    finishing,
                )
                .await
            {
                Err(StoreError::Conflict(_)) if tries > 0 => self.look_again(&mut req),
                outcome => return outcome,
            }
        }
    }

    /// A refusal an entry point records itself (AG-UI runs: unknown tool,
    /// invalid arguments), under the tool's own name when the call named
    /// it by an alias (as its declaration has it).
    pub async fn record_rejected_call(
        &self,
        req: CallRequest,
        error: ToolError,
    ) -> Result<CallOutcome, StoreError> {
        let name = self.registry.canonical_name(&req.call.name);
        let audit = audit::refused(&req, &name, None, &error, None);
        self.record_refusal(req, &name, error, audit).await
    }

    /// Start-up: calls this process (its data directory's instance) left
    /// `running` are finished as `failure`/`INTERRUPTED`, with their
    /// TOOL_CALL_RESULT, so nothing silently disappears; so are calls of
    /// any process that have outlived [`Engine::orphan_after`]. Calls of
    /// other processes, and those recorded before calls named their
    /// process, may still run (a replica, or the old version in an
    /// upgrade): [`Engine::finish_orphans`] finishes them once they can no
    /// longer be. Calls waiting for approval are left waiting. Returns how
    /// many were finished.
    pub async fn recover_interrupted(&self) -> Result<usize, StoreError> {
        let mut running = self.store.running_tool_calls(&self.config.instance).await?;
        let cutoff = now_ms() - self.orphan_after().as_millis() as i64;
        for record in self.store.running_calls_created_before(cutoff).await? {
            if !running
                .iter()
                .any(|r| r.thread_id == record.thread_id && r.id == record.id)
            {
                running.push(record);
            }
        }
        self.finish_interrupted(running).await
    }

    /// Finish as `INTERRUPTED` the calls of any process still `running`
    /// [`Engine::orphan_after`] after they were recorded: no process can
    /// still run them (its own stops them well before), so the process
    /// that did died, and no start of its data directory came to finish
    /// them (a restore into a new one, a replica gone for good, a version
    /// from before calls named their process). Every process sweeps them;
    /// the first to commit a result wins. Returns how many this one
    /// finished.
    pub async fn finish_orphans(&self) -> Result<usize, StoreError> {
        let now = now_ms();
        let cutoff = now - self.orphan_after().as_millis() as i64;
        let mut stale = self.store.running_calls_created_before(cutoff).await?;
        // On a shared database, also the calls of a process silent for
        // [`SILENT_AFTER`]: it died (its start would have finished them,
        // and no start of its data directory came), whatever their age.
        if self.config.shared_database {
            let silent_since = now - SILENT_AFTER.as_millis() as i64;
            let silent = self
                .store
                .running_calls_of_silent(silent_since, &self.config.instance)
                .await?;
            for record in silent {
                let listed = stale
                    .iter()
                    .any(|r| r.thread_id == record.thread_id && r.id == record.id);
                if !listed {
                    stale.push(record);
                }
            }
        }
        if stale.is_empty() {
            return Ok(0);
        }
        // Not one this process still has in hand (a hung tool is its own
        // to stop).
        let here: Vec<_> = {
            let in_flight = self.in_flight.lock().expect("in-flight lock");
            stale
                .into_iter()
                .filter(|r| !in_flight.contains_key(&(r.thread_id.clone(), r.id.clone())))
                .collect()
        };
        self.finish_interrupted(here).await
    }

    /// Whether other processes may serve the same database.
    pub fn shares_database(&self) -> bool {
        self.config.shared_database
    }

    /// Says this process is alive, on a shared database: another process
    /// finishes the calls of one silent for [`SILENT_AFTER`]
    /// ([`Engine::finish_orphans`]). Every [`BEAT_EVERY`], and at start.
    pub async fn beat(&self) -> Result<(), StoreError> {
        if !self.config.shared_database {
            return Ok(());
        }
        self.store.beat(&self.config.instance, now_ms()).await
    }

    /// Whether call `id` of `thread_id` finished in this process and its
    /// result waits on disk for the database.
    pub fn result_kept(&self, thread_id: &str, id: &str) -> bool {
        self.config
            .result_spool
            .pending_calls()
            .is_ok_and(|kept| kept.contains(&(thread_id.to_string(), id.to_string())))
    }

    /// Read the database's migrations again: one that a newer toolgate
    /// applied stops this process's writes from then on (they are answered
    /// as in an outage, results kept on disk for the newer toolgate's start
    /// on this data directory), said once in the log. Other trouble is
    /// `/readyz`'s to report.
    pub async fn check_schema(&self) {
        static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if let Err(e @ StoreError::Newer(_)) = self.store.ready().await
            && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::error!(error = %e, "this process takes no more writes: stop it, and serve its data directory with the newer toolgate");
        }
    }

    /// How long after its record a call may still be running in a live
    /// process: the approvals' lifetime (it may wait that long to start),
    /// the longest any registered tool may run and the grace of its stop,
    /// plus five minutes for processes whose settings differ a little.
    pub fn orphan_after(&self) -> Duration {
        let longest = self
            .registry
            .names()
            .iter()
            .filter_map(|name| self.registry.resolve(name))
            .map(|tool| self.time_limit(&tool))
            .max()
            .unwrap_or(self.config.tool_timeout);
        self.config.approvals.ttl + longest + STOP_GRACE + Duration::from_secs(300)
    }

    /// Finish `running` (calls no process runs any more) as `INTERRUPTED`,
    /// but a call whose result waits on disk: it gets that result.
    async fn finish_interrupted(&self, running: Vec<ToolCallRecord>) -> Result<usize, StoreError> {
        let kept = self
            .config
            .result_spool
            .pending_calls()
            .map_err(spool::unreadable)?;
        let mut count = 0;
        for record in running {
            if kept.contains(&(record.thread_id.clone(), record.id.clone())) {
                continue;
            }
            let error = ToolError::new(
                codes::INTERRUPTED,
                "the service stopped while this call was running; its effects may be incomplete",
                true,
            )
            .with_hint("check the current state before retrying with a new tool call id");
            let output =
                postprocess::failure_output(&record.tool_name, &record.id, &record.args, error);
            // A call that ran once approved names its approval, as its
            // `call.executed` entry would have.
            let approval = self
                .store
                .approval_of_call(&record.thread_id, &record.id)
                .await?
                .filter(|a| a.status == crate::store::ApprovalStatus::Approved);
            let audit = audit::interrupted(&record, approval.map(|a| a.id));
            match self
                .finish(
                    &record.owner,
                    &record.thread_id,
                    output,
                    None,
                    None,
                    vec![WriteOp::AppendAudit(audit)],
                )
                .await
            {
                Ok(_) => {
                    count += 1;
                    tracing::warn!(thread_id = %record.thread_id, tool_call_id = %record.id, "finished interrupted tool call")
                }
                // Another process finished it first (replicas starting
                // together, or sweeping alike): it has its one result.
                Err(StoreError::Conflict(why)) => tracing::debug!(
                    thread_id = %record.thread_id,
                    tool_call_id = %record.id,
                    %why,
                    "an interrupted tool call was finished by another process"
                ),
                // The database reads but cannot take writes (a full disk):
                // the result is kept and written once it can, as any
                // result in an outage; the service starts meanwhile.
                Err(e) if e.is_unavailable() => tracing::warn!(
                    thread_id = %record.thread_id,
                    tool_call_id = %record.id,
                    error = %e,
                    "an interrupted tool call's result is not stored yet; it is written once the database takes writes"
                ),
                Err(e) => return Err(e),
            }
        }
        Ok(count)
    }

    /// Step 3: the permission verdict for this call.
    async fn permission(
        &self,
        req: &CallRequest,
        tool: &RegisteredTool,
    ) -> Result<Permission, Rejection> {
        let owner_rules = self.owner_rules(&req.owner).await?;
        // The file system is looked at once per verdict: where the path
        // leads serves the verdict, the walk's rules and the approval, and
        // where the call's sub-workspace is serves the file rules and the
        // approval. A workspace that does not exist yet holds no links.
        let class = tool.definition.metadata.permission_class;
        let is_file = class == crate::tools::PermissionClass::File;
        let is_bash = class == crate::tools::PermissionClass::Bash;
        let opened = match self.config.permissions.workspaces.as_ref() {
            Some(workspaces) if is_file || is_bash || req.call.workspace.is_some() => workspaces
                .open_existing(&req.owner, req.call.workspace.as_deref())
                .ok(),
            _ => None,
        };
        let sub_workspace_at = req
            .call
            .workspace
            .as_ref()
            .and(opened.as_ref())
            .and_then(|workspace| self.place_in_owners(&req.owner, workspace));
        let mut file = self.file_facts(req, tool, opened.as_ref(), sub_workspace_at.as_deref());
        if is_bash
            && let Some(workspace) = opened.as_ref()
            && let Some(workspaces) = self.config.permissions.workspaces.as_ref()
            && let Ok(owners) = workspaces.path(&req.owner, None)
        {
            // File-system lookups, off the runtime's threads.
            let (path, arguments) = (workspace.path.clone(), req.call.arguments.clone());
            file.git_links =
                tokio::task::spawn_blocking(move || git_links(&path, &owners, &arguments))
                    .await
                    .unwrap_or_else(|_| {
                        vec![crate::permissions::NAMED_PATHS_UNCHECKED.to_string()]
                    });
            // An absolute `cwd` or path inside it is judged as the
            // relative one it names.
            file.workspace = Some(workspace.path.clone());
        }
        if is_file
            && !tool.definition.metadata.read_only
            && let Some(workspace) = opened.as_ref()
            && let Some(workspaces) = self.config.permissions.workspaces.as_ref()
            && let Ok(owners) = workspaces.path(&req.owner, None)
            && let Some(Value::String(path)) = req.call.arguments.get("path")
        {
            let (at, path) = (workspace.path.clone(), path.clone());
            file.git_links = tokio::task::spawn_blocking(move || {
                file_git_links(&at, &owners, &path).into_iter().collect()
            })
            .await
            .unwrap_or_default();
        }
        let facts = call_facts(req, tool, &file);
        let mut decision = crate::permissions::decide(
            &self.config.permissions.rules,
            owner_rules.as_ref(),
            &self.config.permissions.defaults,
            &facts,
        );
        // An undo writes where its original call wrote: the rules on the
        // original's tool judge it too (`deny: write_file(v/**)` holds for
        // the undo of a write_file), and the stricter verdict stands.
        if let Some(original) = &req.undo_of
            && let Some(record) = self.store.tool_call(&req.thread_id, original).await?
            && record.tool_name != tool.definition.name
        {
            let as_original = crate::permissions::CallFacts {
                tool_name: &record.tool_name,
                aliases: &[],
                ..facts
            };
            let theirs = crate::permissions::decide(
                &self.config.permissions.rules,
                owner_rules.as_ref(),
                &self.config.permissions.defaults,
                &as_original,
            );
            let weight = |v: crate::permissions::Verdict| match v {
                crate::permissions::Verdict::Allow => 0,
                crate::permissions::Verdict::Ask => 1,
                crate::permissions::Verdict::Deny => 2,
            };
            // Only a rule: the defaults by the tool's nature are the
            // undo's own.
            if theirs.source != crate::permissions::SOURCE_DEFAULT
                && weight(theirs.verdict) > weight(decision.verdict)
            {
                decision = theirs;
            }
        }
        let path_rules = crate::permissions::PathRules::new(
            &self.config.permissions.rules,
            owner_rules.as_ref(),
            &facts,
        );
        let mut permission = Permission::from(decision);
        permission.path_rules = (!path_rules.is_empty()).then(|| Arc::new(path_rules));
        permission.judged_path = file.judged.then(|| crate::tools::JudgedPath {
            leads_to: file.resolved.clone(),
        });
        // A writing file tool's preview (a dry run's result, or the one an
        // approval request carries) shows the file: judged as a read of
        // the same path (any reading tool's path rules cover them all).
        // Only a call that has a preview needs it: a dry run, or one that
        // will wait for a decision.
        let previews = req.call.dry_run
            || permission.verdict == Verdict::Ask
            || tool.definition.metadata.requires_checkpoint;
        if is_file && !tool.definition.metadata.read_only && previews {
            let reading = crate::permissions::CallFacts {
                tool_name: "read_file",
                aliases: &[],
                read_only: true,
                destructive: false,
                ..facts
            };
            let mut verdict = Permission::from(crate::permissions::decide(
                &self.config.permissions.rules,
                owner_rules.as_ref(),
                &self.config.permissions.defaults,
                &reading,
            ));
            verdict.path_rules = permission.path_rules.clone();
            verdict.judged_path = permission.judged_path.clone();
            verdict.resolved_path = file.resolved.clone();
            verdict.sub_workspace_at = sub_workspace_at.clone();
            permission.reading = Some(Box::new(verdict));
        }
        permission.resolved_path = file.resolved;
        permission.sub_workspace_at = sub_workspace_at;
        Ok(permission)
    }

    /// Where an opened sub-workspace of `owner` really is in the owner's
    /// workspace (a link to another of the owner's directories leads
    /// there), relative to it.
    fn place_in_owners(&self, owner: &str, opened: &crate::workspace::Workspace) -> Option<String> {
        let workspaces = self.config.permissions.workspaces.as_ref()?;
        let main = workspaces.path(owner, None).ok()?;
        let rel = opened.path.strip_prefix(main).ok()?.to_str()?;
        Some(if rel.is_empty() { "." } else { rel }.to_string())
    }

    /// What file rules need to know of a file tool's `path`: where the
    /// call's workspace really is (a sub-workspace may be a link to another
    /// directory of the owner's), so an absolute path inside it is matched
    /// as the relative path it names; and where the path really leads in
    /// it through symbolic links, so a link to `.env` is judged as `.env`
    /// too. Looked up as the file tools resolve paths, creating nothing:
    /// `opened` is the call's workspace if it exists, `sub_workspace_at`
    /// where its sub-workspace really is, both looked up once per verdict.
    fn file_facts(
        &self,
        req: &CallRequest,
        tool: &RegisteredTool,
        opened: Option<&crate::workspace::Workspace>,
        sub_workspace_at: Option<&str>,
    ) -> FileFacts {
        let mut facts = FileFacts::default();
        if tool.definition.metadata.permission_class != crate::tools::PermissionClass::File {
            return facts;
        }
        let Some(workspaces) = self.config.permissions.workspaces.as_ref() else {
            return facts;
        };
        let path = match req.call.arguments.get("path") {
            None | Some(Value::Null) => ".",
            Some(Value::String(path)) => path.as_str(),
            Some(_) => return facts,
        };
        let sub = req.call.workspace.as_deref();
        facts.workspace = match opened {
            Some(workspace) => Some(workspace.path.clone()),
            None if path.starts_with('/') => workspaces
                .path(&req.owner, sub)
                .ok()
                .map(|path| path.canonicalize().unwrap_or(path)),
            None => None,
        };
        facts.resolved =
            opened.and_then(|workspace| crate::tools::builtin::resolved_path(workspace, path));
        facts.judged = opened.is_some();
        facts.sub_workspace = sub.map(|named| {
            let real = sub_workspace_at.unwrap_or(named);
            (named.to_string(), real.to_string())
        });
        facts
    }

    async fn owner_rules(
        &self,
        owner: &str,
    ) -> Result<Arc<crate::permissions::RuleSet>, StoreError> {
        let kept = self.rules_kept.load(std::sync::atomic::Ordering::Acquire);
        let drops = {
            let cache = self.owner_rules.lock().expect("rules lock");
            if kept && let Some(rules) = cache.rules.get(owner) {
                return Ok(rules.clone());
            }
            cache.drops
        };
        let rules = match self.store.owner_rules(owner).await? {
            Some(v) => serde_json::from_value(v)
                .map_err(|e| StoreError::Corrupt(format!("owner rules: {e}")))?,
            None => crate::permissions::RuleSet::default(),
        };
        let rules = Arc::new(rules);
        let mut cache = self.owner_rules.lock().expect("rules lock");
        if kept && cache.drops == drops {
            if cache.rules.len() >= 10_000 {
                cache.rules.clear();
            }
            cache.rules.insert(owner.to_string(), rules.clone());
        }
        Ok(rules)
    }

    /// The owner's rules changed: read them again on the next call.
    pub fn forget_owner_rules(&self, owner: &str) {
        let mut cache = self.owner_rules.lock().expect("rules lock");
        cache.rules.remove(owner);
        cache.drops += 1;
    }

    /// Any rules may have changed: read each again on its next call.
    fn forget_all_rules(&self) {
        let mut cache = self.owner_rules.lock().expect("rules lock");
        cache.rules.clear();
        cache.drops += 1;
    }

    /// Follow the database's watch of rule changes (on a shared database):
    /// rules are kept while it listens, dropped as it tells of changes, and
    /// read for every call while it does not listen, or once it has ended.
    pub fn follow_rule_changes(self: &Arc<Self>, mut changes: crate::store::RuleChanges) {
        use crate::store::RulesWatch;
        use std::sync::atomic::Ordering;
        // The watch listens from before it is handed over.
        self.forget_all_rules();
        self.rules_kept.store(true, Ordering::Release);
        let engine = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(told) = changes.recv().await {
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                match told {
                    RulesWatch::Changed(owner) => engine.forget_owner_rules(&owner),
                    RulesWatch::Listening => {
                        engine.forget_all_rules();
                        engine.rules_kept.store(true, Ordering::Release);
                    }
                    RulesWatch::Lost => {
                        engine.rules_kept.store(false, Ordering::Release);
                        engine.forget_all_rules();
                    }
                }
            }
            if let Some(engine) = engine.upgrade() {
                engine.rules_kept.store(false, Ordering::Release);
            }
        });
    }

    /// Wait until the call is finished (it may be waiting for an approval),
    /// at most `wait`. `None` when it is still open then.
    pub async fn wait_finished(
        &self,
        thread_id: &str,
        call_id: &str,
        wait: Duration,
    ) -> Result<Option<CallOutcome>, StoreError> {
        let mut finished = self.finished.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match self.store.tool_call(thread_id, call_id).await? {
                Some(record) if record.status.is_finished() => {
                    return outcome_from_record(&record).map(Some);
                }
                Some(_) => {}
                // Gone with its thread (deleted meanwhile, perhaps by
                // another process): nothing will finish it.
                None => {
                    if let Some(at_ms) = self
                        .store
                        .thread_owner(thread_id)
                        .await?
                        .and_then(|t| t.deleted_at_ms)
                    {
                        return Err(StoreError::ThreadDeleted {
                            thread: thread_id.to_string(),
                            at_ms,
                        });
                    }
                }
            }
            // On a shared database another process may decide and run the
            // call, and this one hears nothing of it: look again now and then.
            let look_again = match self.config.shared_database {
                true => deadline.min(tokio::time::Instant::now() + SHARED_WAIT_POLL),
                false => deadline,
            };
            loop {
                match tokio::time::timeout_at(look_again, finished.recv()).await {
                    Err(_) if look_again < deadline => break,
                    Err(_) => return Ok(None),
                    Ok(Ok((t, c))) if t == thread_id && c == call_id => break,
                    Ok(Ok(_)) => continue,
                    // Missed some announcements: look at the store again.
                    Ok(Err(_)) => break,
                }
            }
        }
    }
}

/// How often a caller waiting for a call's outcome on a shared database
/// reads its record again (another process may have finished it).
const SHARED_WAIT_POLL: Duration = Duration::from_millis(250);

/// How often a process on a shared database says it is alive.
pub const BEAT_EVERY: Duration = Duration::from_secs(10);

/// How long a process on a shared database may go unseen before another
/// takes it for dead and finishes the calls it left running: six missed
/// beats (a database briefly away, a stalled machine). A process that was
/// only cut off and finishes such a call later finds its result recorded
/// and sets its own aside (`kept-results/set-aside/`).
pub const SILENT_AFTER: Duration = Duration::from_secs(60);

/// How long a cancelled or timed-out tool may take to stop by itself (and
/// report what it did) before its task is aborted.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// The result's half of a call: what [`Engine::finish_ops`] prepared.
struct Finishing {
    ops: Vec<WriteOp>,
    /// Events of `ops` before the result (a deferred write-ahead's).
    announced: Vec<Event>,
    event: Event,
    message_id: String,
    ui_schema: Option<Value>,
    /// The output's text projection.
    content: String,
}

/// Step 7's record of a call about to run.
enum WriteAhead {
    /// Committed before the tool started.
    Written,
    /// A read-only call's record, not yet committed: it goes in with the
    /// result, or on its own when the call runs long or reports progress.
    Deferred(Arc<PendingWriteAhead>),
}

impl WriteAhead {
    fn deferred(
        writer: Writer,
        unit: WriteUnit,
        events: Vec<Event>,
        observer: Option<mpsc::UnboundedSender<Event>>,
    ) -> Self {
        WriteAhead::Deferred(Arc::new(PendingWriteAhead {
            writer,
            unit,
            events,
            observer,
            written: tokio::sync::OnceCell::new(),
        }))
    }

    fn pending(&self) -> Option<Arc<PendingWriteAhead>> {
        match self {
            WriteAhead::Written => None,
            WriteAhead::Deferred(pending) => Some(pending.clone()),
        }
    }

    /// The operations and events of a record still uncommitted, for the
    /// result's transaction; `None` once it is committed. Moved, not
    /// copied, once the progress forwarder has let go of the record.
    fn into_unwritten(self) -> Option<(Vec<WriteOp>, Vec<Event>)> {
        match self {
            WriteAhead::Deferred(pending) if !pending.written.initialized() => {
                Some(match Arc::try_unwrap(pending) {
                    Ok(pending) => (pending.unit.ops, pending.events),
                    Err(shared) => (shared.unit.ops.clone(), shared.events.clone()),
                })
            }
            _ => None,
        }
    }
}

struct PendingWriteAhead {
    writer: Writer,
    unit: WriteUnit,
    events: Vec<Event>,
    observer: Option<mpsc::UnboundedSender<Event>>,
    written: tokio::sync::OnceCell<()>,
}

impl PendingWriteAhead {
    /// Commit the record now, once (concurrent callers wait for the one
    /// write; a failed write may be tried again).
    async fn ensure_written(&self) -> Result<(), StoreError> {
        self.written
            .get_or_try_init(|| async {
                self.writer.write(self.unit.clone()).await?;
                observe(self.observer.as_ref(), self.events.clone());
                Ok::<(), StoreError>(())
            })
            .await
            .map(|_| ())
    }
}

/// Wait for a tool's task until it finishes, times out, or is cancelled.
/// Whatever happens, the task is gone when this returns, so its progress
/// sender is dropped and no late event can follow the result.
async fn await_tool(
    mut handle: tokio::task::JoinHandle<Result<ToolSuccess, ToolError>>,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<ToolSuccess, ToolError> {
    let joined = |r: Result<Result<ToolSuccess, ToolError>, tokio::task::JoinError>| match r {
        Ok(result) => result,
        Err(join_error) => Err(ToolError::new(
            codes::EXECUTION_FAILED,
            format!("the tool stopped unexpectedly: {join_error}"),
            false,
        )),
    };
    let reason = tokio::select! {
        r = &mut handle => return joined(r),
        _ = tokio::time::sleep(timeout) => codes::TIMEOUT,
        _ = cancel.cancelled() => codes::CANCELLED,
    };
    cancel.cancel();
    // The tool sees the cancellation and may stop cleanly with its own report.
    let own_report = match tokio::time::timeout(STOP_GRACE, &mut handle).await {
        Ok(r) => Some(joined(r)),
        Err(_) => {
            handle.abort();
            let _ = handle.await;
            None
        }
    };
    if reason == codes::TIMEOUT {
        return Err(ToolError::new(
            codes::TIMEOUT,
            format!("the tool did not finish within {} ms", timeout.as_millis()),
            true,
        )
        .with_hint("retry with a smaller workload or a shorter operation"));
    }
    match own_report {
        Some(Err(e)) if e.code == codes::CANCELLED => Err(e),
        Some(Ok(done)) => Ok(done), // finished just as it was cancelled
        _ => Err(ToolError::new(
            codes::CANCELLED,
            "the call was cancelled by its caller (a person or the application) before it finished",
            false,
        )
        .with_hint("check what it changed, if it changes things, before anything else; call it again only if the user asks for it")),
    }
}

/// Removes the in-flight entry and wakes waiters when the call is over,
/// whichever way it ends.
struct InFlightGuard<'a> {
    engine: &'a Engine,
    key: CallKey,
    done: watch::Sender<bool>,
    cancel: CancellationToken,
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.engine
            .in_flight
            .lock()
            .expect("in-flight lock")
            .remove(&self.key);
        let _ = self.done.send(true);
    }
}

fn validate_arguments(tool: &RegisteredTool, arguments: &Value) -> Result<(), Rejection> {
    if tool.validator.is_valid(arguments) {
        return Ok(());
    }
    // Checked again with whole numbers as integers, as the tool gets them:
    // the validator takes `2.0` for `integer` but not for `["integer",
    // "null"]`, which JSON Schema means alike.
    let integral = crate::protocol::json::integral_numbers(arguments.clone());
    let errors: Vec<FieldError> = tool
        .validator
        .iter_errors(&integral)
        .flat_map(|e| field_errors(tool, &e))
        .collect();
    if errors.is_empty() {
        return Ok(());
    }
    let summary = errors
        .iter()
        .map(|e| {
            let at = if e.path.is_empty() {
                "/"
            } else {
                e.path.as_str()
            };
            format!("{at}: {}", e.message)
        })
        .collect::<Vec<_>>()
        .join("; ");
    let mut error = ToolError::new(
        codes::INVALID_ARGUMENTS,
        format!(
            "arguments for {} do not match its input schema: {summary}",
            tool.definition.name
        ),
        false,
    )
    .with_hint("fix the arguments at the listed paths to match input_schema and call again");
    error.input_schema = Some(tool.definition.input_schema.clone());
    error.errors = Some(errors);
    Err(Rejection::InvalidArguments {
        tool: tool.definition.name.clone(),
        error: Box::new(error),
    })
}

/// One schema failure as the model should read it: a property that is
/// missing or not allowed is pointed at by its own path (`/old_string`),
/// not the object holding it, and a property not allowed at the top is
/// matched to the nearest one the tool takes ("did you mean").
fn field_errors(tool: &RegisteredTool, e: &jsonschema::ValidationError<'_>) -> Vec<FieldError> {
    use jsonschema::error::ValidationErrorKind as Kind;
    let at = e.instance_path.to_string();
    let under = |name: &str| format!("{at}/{}", crate::protocol::pointer_token(name));
    // The properties the tool takes, at the top of its arguments.
    let known: Vec<&str> = match &tool.definition.input_schema["properties"] {
        Value::Object(properties) if at.is_empty() => {
            properties.keys().map(String::as_str).collect()
        }
        _ => Vec::new(),
    };
    match &e.kind {
        Kind::Required {
            property: Value::String(name),
        } => {
            // A key given that the tool does not take, spelt like the one
            // missing: "txt" for "text".
            let given: Vec<&str> = match e.instance.as_ref() {
                Value::Object(o) if !known.is_empty() => o
                    .keys()
                    .map(String::as_str)
                    .filter(|k| !known.contains(k))
                    .collect(),
                _ => Vec::new(),
            };
            let like = similar::get_close_matches(name.as_str(), &given, 1, 0.6)
                .first()
                .map(|k| format!(" ({k:?} is given: did you mean {name:?}?)"))
                .unwrap_or_default();
            vec![FieldError {
                path: under(name),
                message: format!("{e}{like}"),
            }]
        }
        Kind::AdditionalProperties { unexpected } => {
            // Only a property not given already is the one meant.
            let given = e.instance.as_object();
            let open: Vec<&str> = known
                .into_iter()
                .filter(|k| !given.is_some_and(|o| o.contains_key(*k)))
                .collect();
            // A required one missing is meant before any other ("cmd" is
            // "command", not "cwd").
            let required: Vec<&str> = match &tool.definition.input_schema["required"] {
                Value::Array(names) if at.is_empty() => names
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|k| open.contains(k))
                    .collect(),
                _ => Vec::new(),
            };
            unexpected
                .iter()
                .map(|name| {
                    let like = similar::get_close_matches(name.as_str(), &required, 1, 0.6)
                        .into_iter()
                        .chain(similar::get_close_matches(name.as_str(), &open, 1, 0.6))
                        .next()
                        .map(|k| format!("; did you mean {k:?}?"))
                        .unwrap_or_default();
                    FieldError {
                        path: under(name),
                        message: format!("{name:?} is not a property this object takes{like}"),
                    }
                })
                .collect()
        }
        _ => vec![FieldError {
            path: at,
            message: e.to_string(),
        }],
    }
}

/// Whether a kept result's write was refused (`refused`) because its call
/// was finished as `INTERRUPTED` meanwhile: by another process, which took
/// it for abandoned while this one could not reach the database (see
/// [`Engine::finish_orphans`]). Its real result is then set aside on disk,
/// not deleted.
async fn interrupted_elsewhere(
    store: &DynStore,
    thread_id: &str,
    call_id: &str,
    refused: &StoreError,
) -> bool {
    if !matches!(refused, StoreError::Conflict(_)) {
        return false;
    }
    let Ok(Some(record)) = store.tool_call(thread_id, call_id).await else {
        return false;
    };
    let interrupted = record
        .output
        .as_ref()
        .and_then(|o| o.pointer("/error/code"))
        .and_then(Value::as_str)
        == Some(codes::INTERRUPTED);
    if interrupted {
        tracing::error!(
            thread_id,
            tool_call_id = call_id,
            "a result kept while the database could not be reached was refused: another \
             process finished its call as INTERRUPTED meanwhile (it took the call for \
             abandoned). The real result is set aside in data_dir/kept-results/set-aside/"
        );
    }
    interrupted
}

/// An event to append to the log, stored in full.
pub(crate) fn new_event(event: &Event) -> NewEvent {
    NewEvent {
        event_type: event.type_name().to_string(),
        data: event.to_json().into(),
        created_at_ms: event.timestamp,
        announces: None,
    }
}

/// The JSON of a logged event as streamed: its `data`, or, for a result
/// event stored as a reference to its tool message, the same event rebuilt
/// from that message's output (the ui_schema compiled again, as `/history`
/// does, with the timestamp it was streamed with).
pub fn logged_event_data(event: &StoredEvent) -> Result<Arc<str>, StoreError> {
    let Some(reference) = &event.from_message else {
        return Ok(Arc::clone(&event.data));
    };
    let output = ToolAgentOutput::deserialize(&reference.output)
        .map_err(|e| StoreError::Corrupt(format!("event {}: {e}", event.seq)))?;
    let ui_schema = compile_ui(&output);
    let mut rebuilt = result_event(
        &output,
        output.text_projection(),
        &reference.message_id,
        ui_schema.as_ref(),
    );
    rebuilt.timestamp = event.created_at_ms;
    Ok(rebuilt.to_json().into())
}

/// Result events rebuilt for replays ([`logged_event_data`]), kept by
/// thread and seq so that a thread replayed again (a frontend reloading
/// it, clients reconnecting from the start) does not compile the same
/// ui_schemas again. A logged event never changes, so an entry never goes
/// stale. Bounded by the bytes of event text it holds; when the next entry
/// would pass the bound, it forgets everything and starts over (a result
/// larger than a sixteenth of the bound is not kept at all).
pub struct ReplayCache {
    max_bytes: usize,
    inner: Mutex<ReplayCacheInner>,
}

#[derive(Default)]
struct ReplayCacheInner {
    threads: HashMap<String, HashMap<i64, Arc<str>>>,
    bytes: usize,
}

impl ReplayCache {
    /// What [`Shared`](crate::http::Shared) keeps: up to 32 MiB of event
    /// text.
    pub const DEFAULT_BYTES: usize = 32 << 20;

    pub fn new(max_bytes: usize) -> ReplayCache {
        ReplayCache {
            max_bytes,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReplayCacheInner> {
        // A panic under the lock leaves a map that is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`logged_event_data`], rebuilt at most once per result event while
    /// it stays cached.
    pub fn event_data(&self, event: &StoredEvent) -> Result<Arc<str>, StoreError> {
        if event.from_message.is_none() {
            return Ok(Arc::clone(&event.data));
        }
        let cached = self
            .lock()
            .threads
            .get(&event.thread_id)
            .and_then(|events| events.get(&event.seq))
            .cloned();
        if let Some(data) = cached {
            return Ok(data);
        }
        let data = logged_event_data(event)?;
        self.hold(&event.thread_id, event.seq, &data);
        Ok(data)
    }

    /// Drop what is held of a thread (deleted: nothing of it is read
    /// again, nor kept in memory).
    pub fn forget(&self, thread_id: &str) {
        let mut inner = self.lock();
        if let Some(events) = inner.threads.remove(thread_id) {
            inner.bytes -= events.values().map(|data| data.len()).sum::<usize>();
        }
    }

    /// Keep a result event as it was streamed live, when its batch
    /// committed, so that even its first replay is not rebuilt (a replay
    /// rebuilds it to the same bytes). Other events are logged whole and
    /// not kept.
    pub fn keep_streamed(&self, event: &StoredEvent) {
        if event.event_type == "TOOL_CALL_RESULT" {
            self.hold(&event.thread_id, event.seq, &event.data);
        }
    }

    /// Hold `data` as event `seq` of `thread_id`, within the bound.
    fn hold(&self, thread_id: &str, seq: i64, data: &Arc<str>) {
        if data.len() > self.max_bytes / 16 {
            return;
        }
        let mut inner = self.lock();
        if inner.bytes + data.len() > self.max_bytes {
            *inner = ReplayCacheInner::default();
        }
        inner.bytes += data.len();
        let previous = match inner.threads.get_mut(thread_id) {
            Some(events) => events.insert(seq, Arc::clone(data)),
            None => {
                let events = HashMap::from([(seq, Arc::clone(data))]);
                inner.threads.insert(thread_id.to_string(), events);
                None
            }
        };
        if let Some(previous) = previous {
            inner.bytes -= previous.len();
        }
    }

    /// Entries and bytes held.
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.threads.values().map(HashMap::len).sum(), inner.bytes)
    }
}

fn observe(observer: Option<&mpsc::UnboundedSender<Event>>, events: Vec<Event>) {
    if let Some(observer) = observer {
        for event in events {
            let _ = observer.send(event);
        }
    }
}

/// A recorded call's announcement (TOOL_CALL_START, TOOL_CALL_ARGS with
/// its arguments, TOOL_CALL_END), under its tool's own name, for a stream
/// that joins while it runs; with the timestamp it was recorded with.
pub fn announcement_of(record: &ToolCallRecord) -> Vec<Event> {
    let args = JsonText::of(&record.args);
    announcement(
        &record.id,
        &record.tool_name,
        record.parent_message_id.clone(),
        &args,
        record.created_at_ms,
    )
}

/// TOOL_CALL_START, TOOL_CALL_ARGS (the arguments' JSON text) and
/// TOOL_CALL_END of call `id`.
fn announcement(
    id: &str,
    name: &str,
    parent: Option<String>,
    args: &JsonText,
    ms: i64,
) -> Vec<Event> {
    at(
        ms,
        vec![
            Event::new(EventBody::ToolCallStart {
                tool_call_id: id.to_owned(),
                tool_call_name: name.to_owned(),
                parent_message_id: parent,
            }),
            Event::new(EventBody::ToolCallArgs {
                tool_call_id: id.to_owned(),
                delta: args.as_str().to_owned(),
            }),
            Event::new(EventBody::ToolCallEnd {
                tool_call_id: id.to_owned(),
            }),
        ],
    )
}

/// `events`, each with the timestamp `ms`.
fn at(ms: i64, mut events: Vec<Event>) -> Vec<Event> {
    for event in &mut events {
        event.timestamp = ms;
    }
    events
}

/// What a result carries under `metadata`, live (TOOL_CALL_RESULT) and in
/// a snapshot's tool message alike: `status`, `toolName`, the structured
/// `error` of a failure and the `ui_schema`.
pub fn result_metadata(output: &ToolAgentOutput, ui_schema: Option<Value>) -> Map<String, Value> {
    let mut metadata = Map::new();
    metadata.insert("status".into(), json!(output.status));
    metadata.insert("toolName".into(), json!(output.tool_name));
    if let Some(error) = &output.error {
        metadata.insert("error".into(), json!(error));
    }
    if let Some(ui) = ui_schema {
        metadata.insert("ui_schema".into(), ui);
    }
    metadata
}

/// The TOOL_CALL_RESULT event, whose `content` is the output's text
/// projection; our additions ride under `metadata`.
pub fn result_event(
    output: &ToolAgentOutput,
    content: String,
    message_id: &str,
    ui_schema: Option<&Value>,
) -> Event {
    let metadata = result_metadata(output, ui_schema.cloned());
    Event::new(EventBody::ToolCallResult {
        message_id: message_id.to_string(),
        tool_call_id: output.tool_call_id.clone(),
        content,
        role: "tool".into(),
    })
    .with_metadata(metadata)
}

pub fn outcome_from_record(record: &ToolCallRecord) -> Result<CallOutcome, StoreError> {
    let output = record
        .output
        .as_ref()
        .ok_or_else(|| StoreError::Corrupt(format!("finished call {} has no output", record.id)))
        .and_then(|v| {
            ToolAgentOutput::deserialize(v).map_err(|e| StoreError::Corrupt(e.to_string()))
        })?;
    let ui_schema = compile_ui(&output);
    Ok(CallOutcome {
        tool_response: output.text_projection(),
        output,
        ui_schema,
        message_id: record.message_id.clone().unwrap_or_default(),
        replayed: true,
        finished_at_ms: record.finished_at_ms.unwrap_or(record.created_at_ms),
    })
}

/// What a run stream shows for a call that was already recorded: the same
/// four events, rebuilt from the record, under the message that carries the
/// call this time.
fn replay_events(
    record: &ToolCallRecord,
    outcome: &CallOutcome,
    call: &crate::protocol::calls::IncomingCall,
) -> Vec<Event> {
    let mut events = at(
        record.created_at_ms,
        vec![
            // Named as this post names it, under the parent it was
            // announced with.
            Event::new(EventBody::ToolCallStart {
                tool_call_id: record.id.clone(),
                tool_call_name: call.name.clone(),
                parent_message_id: record.parent_message_id.clone(),
            }),
            Event::new(EventBody::ToolCallArgs {
                tool_call_id: record.id.clone(),
                delta: record.args.to_string(),
            }),
            Event::new(EventBody::ToolCallEnd {
                tool_call_id: record.id.clone(),
            }),
        ],
    );
    events.push(recorded_result_event(outcome));
    events
}

/// The `TOOL_CALL_RESULT` of a recorded outcome, as it was recorded.
pub fn recorded_result_event(outcome: &CallOutcome) -> Event {
    let mut event = result_event(
        &outcome.output,
        outcome.tool_response.clone(),
        &outcome.message_id,
        outcome.ui_schema.as_ref(),
    );
    event.timestamp = outcome.finished_at_ms;
    event
}

/// Progress reports become `CUSTOM tool_call.progress` events, written in
/// order through the group-commit writer (best effort: a failed progress
/// write never fails the call).
async fn forward_progress(
    writer: Writer,
    (owner, thread_id, call_id): (String, String, String),
    mut rx: mpsc::UnboundedReceiver<crate::tools::Progress>,
    observer: Option<mpsc::UnboundedSender<Event>>,
    pending: Option<Arc<PendingWriteAhead>>,
    tool_done: CancellationToken,
) {
    loop {
        // What was reported before the tool was done is written first.
        let p = tokio::select! {
            biased;
            p = rx.recv() => p,
            _ = tool_done.cancelled() => rx.try_recv().ok(),
        };
        let Some(p) = p else { return };
        // Progress follows the call's announcement in the log.
        if let Some(pending) = &pending
            && let Err(e) = pending.ensure_written().await
        {
            // Progress follows the call's own record, which was not
            // written: expected when the id was recorded by another post of
            // the same call, which answers for it.
            if e.refuses_call() {
                tracing::debug!(error = %e, "progress event not recorded: the call was refused (its id is another call's, recorded or declared, or its run was rolled back)");
            } else {
                tracing::warn!(error = %e, "progress event not recorded: the call's own record could not be written");
            }
            continue;
        }
        let mut value = json!({"toolCallId": call_id, "progress": p.fraction, "detail": p.detail});
        postprocess::make_storable(&mut value);
        let event = Event::new(EventBody::Custom {
            name: "tool_call.progress".into(),
            value,
        });
        let unit = WriteUnit {
            thread_id: thread_id.clone(),
            owner: owner.clone(),
            ops: vec![WriteOp::AppendEvents(vec![new_event(&event)])],
        };
        match writer.write(unit).await {
            Ok(_) => observe(observer.as_ref(), vec![event]),
            // The database is out of reach: progress is not worth the
            // result's wait; the rest is dropped.
            Err(e) if e.is_unavailable() => {
                tracing::warn!(error = %e, "progress events not recorded: the database is unavailable");
                return;
            }
            Err(e) => tracing::warn!(error = %e, "progress event not recorded"),
        }
    }
}

/// The writer's commit hook: each committed result event is kept for
/// replays as it was streamed, and every committed event is published to
/// the thread's subscribers.
pub fn publish_hook(
    bus: Arc<EventBus>,
    replays: Arc<ReplayCache>,
) -> crate::store::writer::CommitHook {
    Arc::new(move |events: &[StoredEvent]| {
        for e in events {
            replays.keep_streamed(e);
            bus.publish(e);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::tool_output::ToolStatus;
    use crate::store::ResultReference;

    fn result_event_at(seq: i64, text: &str) -> StoredEvent {
        let output = ToolAgentOutput {
            tool_name: "echo".into(),
            tool_call_id: format!("call-{seq}"),
            tool_call_args: json!({"text": text}),
            status: ToolStatus::Success,
            error: None,
            ui_hints: Some(crate::protocol::ui_schema::hints::text(Some("echo"), text)),
            result: json!({"text": text}),
        };
        StoredEvent {
            thread_id: "t".into(),
            seq,
            event_type: "TOOL_CALL_RESULT".into(),
            data: Arc::from(""),
            created_at_ms: 1_700_000_000_000 + seq,
            from_message: Some(ResultReference {
                message_id: format!("m{seq}"),
                output: serde_json::to_value(&output).unwrap(),
            }),
        }
    }

    struct Counter;

    #[async_trait::async_trait]
    impl crate::tools::Tool for Counter {
        fn definition(&self) -> crate::tools::ToolDefinition {
            crate::tools::ToolDefinition {
                name: "counter".into(),
                description: "takes a count or none".into(),
                input_schema: json!({"type": "object", "properties": {
                    "n": {"type": ["integer", "null"]},
                    "m": {"type": "integer"},
                }}),
                output_schema: None,
                aliases: vec![],
                metadata: Default::default(),
                capability: Default::default(),
            }
        }
        async fn execute(
            &self,
            args: Value,
            _ctx: crate::tools::ToolContext,
        ) -> Result<crate::tools::ToolSuccess, ToolError> {
            Ok(crate::tools::ToolSuccess::complete(args))
        }
    }

    #[test]
    fn a_whole_number_with_a_fraction_passes_any_integer_type() {
        let registry = crate::tools::registry::Registry::new();
        registry.register(Arc::new(Counter)).unwrap();
        let tool = registry.resolve("counter").unwrap();
        for ok in [
            json!({"n": 2}),
            json!({"n": 2.0}),
            json!({"n": null, "m": 3.0}),
        ] {
            assert!(validate_arguments(&tool, &ok).is_ok(), "{ok}");
        }
        let Err(Rejection::InvalidArguments { error, .. }) =
            validate_arguments(&tool, &json!({"n": 2.5, "m": 1}))
        else {
            panic!("2.5 is no integer");
        };
        let paths: Vec<&str> = error
            .errors
            .iter()
            .flatten()
            .map(|e| e.path.as_str())
            .collect();
        assert_eq!(paths, ["/n"]);
    }

    #[test]
    fn a_replayed_result_is_rebuilt_once_and_the_cache_stays_bounded() {
        let event = result_event_at(4, "hi");
        let rebuilt = logged_event_data(&event).unwrap();
        assert!(rebuilt.contains("\"ui_schema\""), "{rebuilt}");
        let cache = ReplayCache::new(16 * 1024);
        let first = cache.event_data(&event).unwrap();
        assert_eq!(first, rebuilt, "the same bytes as a rebuild");
        assert_eq!(cache.held(), (1, rebuilt.len()));
        let again = cache.event_data(&event).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "served from the cache");
        // Events stored in full are served as they are, and not held.
        let plain = StoredEvent {
            from_message: None,
            data: Arc::from("{\"type\":\"TOOL_CALL_END\"}"),
            ..result_event_at(5, "x")
        };
        assert!(Arc::ptr_eq(&cache.event_data(&plain).unwrap(), &plain.data));
        assert_eq!(cache.held().0, 1);
        // Past the bound it starts over: never more than the bound held.
        for seq in 10..200 {
            cache.event_data(&result_event_at(seq, "text")).unwrap();
            assert!(cache.held().1 <= 16 * 1024);
        }
        assert!(cache.held().0 < 190, "{:?}", cache.held());
        // A result larger than a sixteenth of the bound is not kept.
        let big = result_event_at(500, &"x".repeat(2000));
        let data = cache.event_data(&big).unwrap();
        assert_eq!(data, logged_event_data(&big).unwrap());
        let held = cache.held();
        cache.event_data(&big).unwrap();
        assert_eq!(cache.held(), held);
        assert!(!Arc::ptr_eq(&data, &cache.event_data(&big).unwrap()));
    }

    /// A result event kept as streamed is what its first replay serves:
    /// nothing is rebuilt. Other events are not kept.
    #[test]
    fn a_streamed_result_is_replayed_without_a_rebuild() {
        let cache = ReplayCache::new(16 * 1024);
        let logged = result_event_at(7, "hi");
        let streamed = StoredEvent {
            from_message: None,
            data: logged_event_data(&logged).unwrap(),
            ..logged.clone()
        };
        cache.keep_streamed(&streamed);
        let replayed = cache.event_data(&logged).unwrap();
        assert!(Arc::ptr_eq(&replayed, &streamed.data), "served as streamed");
        let end = StoredEvent {
            event_type: "TOOL_CALL_END".into(),
            from_message: None,
            data: Arc::from("{\"type\":\"TOOL_CALL_END\"}"),
            ..result_event_at(8, "x")
        };
        cache.keep_streamed(&end);
        assert_eq!(cache.held(), (1, streamed.data.len()));
    }
}
