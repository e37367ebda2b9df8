//! The Tool interface, tool definitions and their metadata. Tools know
//! nothing of HTTP, SSE or storage: they take JSON arguments and a
//! [`ToolContext`], and return a result or a structured [`ToolError`].

pub mod builtin;
pub mod listing;
pub mod registry;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

pub use crate::protocol::tool_output::{ToolError, UndoInfo};
pub use registry::{Registry, RegistryError};

/// The bound of a built-in tool's integer argument with no smaller one:
/// the largest integer every JSON reader holds exactly (2^53 - 1). A
/// larger number is refused by the schema, naming its field, before the
/// call is recorded, not read as a float the tool cannot take.
pub const MAX_EXACT_INTEGER: u64 = 9_007_199_254_740_991;

/// How the permission engine judges a tool (seed 003 `PermissionClass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum PermissionClass {
    Bash,
    File,
    Webfetch,
    Readonly,
    #[default]
    Generic,
}

/// What a tool is (seed 003 `Metadata`). Unknown → conservative defaults:
/// not concurrency-safe, not read-only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolMetadata {
    pub concurrency_safe: bool,
    pub read_only: bool,
    pub destructive: bool,
    pub permission_class: PermissionClass,
    /// `read`, `write`, `edit`, `execute`, `delete`, `invoke`, or a custom word.
    pub audit_operation: String,
    pub requires_checkpoint: bool,
    pub requires_reverse_thinking: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_hint: Option<String>,
}

impl Default for ToolMetadata {
    fn default() -> Self {
        ToolMetadata {
            concurrency_safe: false,
            read_only: false,
            destructive: false,
            permission_class: PermissionClass::Generic,
            audit_operation: "invoke".into(),
            requires_checkpoint: false,
            requires_reverse_thinking: false,
            search_hint: None,
        }
    }
}

/// What safety measures a tool offers (seed 000 `ToolCapability`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, Default)]
pub struct ToolCapability {
    pub dry_run: bool,
    pub reversible: bool,
    /// `tool`, `manual`, or absent (irreversible).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo_tool_name: Option<String>,
    /// 0 disables the confidence gate; otherwise the minimum `_confidence`.
    pub min_confidence: u8,
    #[serde(default)]
    pub affected_resources: Vec<String>,
}

impl ToolCapability {
    /// 2: dry-run; 1: reversible; 0: neither.
    pub fn safety_level(&self) -> u8 {
        if self.dry_run {
            2
        } else if self.reversible {
            1
        } else {
            0
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolDefinition {
    /// `[A-Za-z0-9_.-]{1,64}`
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments (an object schema).
    #[schema(value_type = Object)]
    pub input_schema: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<Value>,
    #[serde(default)]
    pub aliases: Vec<String>,
    pub metadata: ToolMetadata,
    pub capability: ToolCapability,
}

/// One progress report of a long-running tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Progress {
    /// 0.0 – 1.0
    pub fraction: f64,
    pub detail: String,
}

/// Where a tool reports progress; reports are best-effort and never block.
#[derive(Debug, Clone, Default)]
pub struct ProgressSink(Option<mpsc::UnboundedSender<Progress>>);

impl ProgressSink {
    pub fn new(tx: mpsc::UnboundedSender<Progress>) -> Self {
        ProgressSink(Some(tx))
    }

    pub fn report(&self, fraction: f64, detail: impl Into<String>) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(Progress {
                fraction: fraction.clamp(0.0, 1.0),
                detail: detail.into(),
            });
        }
    }
}

/// What a running tool may know about its call.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub owner: String,
    pub thread_id: String,
    pub call_id: String,
    /// The sub-workspace the call names (`[A-Za-z0-9_.-]{1,64}`, validated
    /// by the pipeline); `None` is the owner's main workspace.
    pub workspace: Option<String>,
    /// Cancelled when the call is cancelled or times out.
    pub cancel: CancellationToken,
    pub progress: ProgressSink,
    /// The permission rules on paths this call's own path did not meet: a
    /// walk over a directory (`glob`, `grep`) leaves out what they name.
    /// `None`: no such rules (or a tool that is not a file tool).
    pub path_rules: Option<std::sync::Arc<crate::permissions::PathRules>>,
    /// For a file tool's call the permission rules judged: where its `path`
    /// led then. A file it opens must be there (else a link changed in
    /// between, and the rules judged another file). `None`: not judged.
    pub judged_path: Option<JudgedPath>,
    /// For an approved call: what the person was shown of the file it
    /// changes. `None`: nothing to hold it to.
    pub shown: Option<Shown>,
}

/// What the person approving a file tool's call was shown of the file it
/// changes (its preview's `before_sha256`, or `creates`): the approved call
/// changes the file only if it is still so, checked under the file's lock
/// as the change is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    /// The file did not exist.
    Absent,
    /// The file's content had this SHA-256 (lower-case hex).
    Content(String),
}

impl Shown {
    /// What a preview (`DryRunResult` as JSON) shows of its file; `None`
    /// for a preview that says neither (another tool's, or an older one).
    pub fn of_preview(preview: &Value) -> Option<Shown> {
        let impact = preview.get("estimated_impact")?;
        if impact.get("creates") == Some(&Value::Bool(true)) {
            return Some(Shown::Absent);
        }
        impact
            .get("before_sha256")
            .and_then(Value::as_str)
            .map(|hash| Shown::Content(hash.to_string()))
    }

    /// Whether `content` (`None`: absent) is what was shown.
    pub fn holds_for(&self, content: Option<&[u8]>) -> bool {
        match (self, content) {
            (Shown::Absent, None) => true,
            (Shown::Content(hash), Some(bytes)) => *hash == sha256_hex(bytes),
            _ => false,
        }
    }
}

/// The SHA-256 of `bytes`, lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Where a file tool's `path` led when the permission rules judged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JudgedPath {
    /// Workspace-relative, through symbolic links; `None`: the path as
    /// named (no link on it).
    pub leads_to: Option<String>,
}

/// A tool's successful (or partially successful) outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSuccess {
    pub result: Value,
    /// The tool ran but the result is incomplete (truncated, partly applied).
    pub partial: bool,
    pub undo: Option<UndoInfo>,
    /// The id of a call of the same thread whose change this call took
    /// back (`undo_edit`): recorded undone by this call, with its result.
    pub undoes: Option<String>,
}

impl ToolSuccess {
    pub fn complete(result: Value) -> Self {
        ToolSuccess {
            result,
            partial: false,
            undo: None,
            undoes: None,
        }
    }
}

/// What a dry run reports (seed 000 `DryRunResult`): what would change,
/// changing nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DryRunResult {
    /// Human-readable: what would be affected (a path, a table, a URL).
    pub would_affect: String,
    /// The detailed preview, e.g. a unified diff.
    pub preview: String,
    /// Tool-specific impact figures (bytes, lines, rows…).
    #[schema(value_type = Object)]
    pub estimated_impact: Value,
}

#[async_trait]
pub trait Tool: Send + Sync + 'static {
    fn definition(&self) -> ToolDefinition;

    /// Run with arguments already validated against the input schema.
    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<ToolSuccess, ToolError>;

    /// Preview the effects without causing any. Only tools whose capability
    /// declares `dry_run` override this.
    async fn dry_run(&self, _args: Value, _ctx: ToolContext) -> Result<DryRunResult, ToolError> {
        Err(ToolError::new(
            "DRY_RUN_UNSUPPORTED",
            format!("{} cannot preview its effects", self.definition().name),
            false,
        ))
    }

    /// The longest a call may legitimately run, for tools that take their
    /// own timeout argument (bash). The pipeline's limit is then the larger
    /// of this and its configured tool timeout.
    fn max_duration(&self) -> Option<std::time::Duration> {
        None
    }

    /// Whether this call may cause damage that cannot be undone, where
    /// that depends on its arguments (`undo_edit` with `force`, which
    /// discards what changed since): `None` says what the metadata's
    /// `destructive` says. The permission rules judge the call by this.
    fn destructive_call(&self, _args: &Value) -> Option<bool> {
        None
    }

    /// The ui_hints for a successful result; `None` when the action has no
    /// stable template. Called by the post-processor, never by the caller.
    fn ui_hints(&self, _args: &Value, _result: &Value) -> Option<Value> {
        None
    }
}
