//! The workspace file tools: `read_file`, `write_file`, `edit_file`,
//! `apply_diff`, `undo_edit`, `glob`, `grep`.
//!
//! Each opens the caller's workspace per call
//! (`Workspaces::open(owner, sub)`) and touches files only through its
//! `cap_std::fs::Dir` (see [`confine`]): never `std::fs` on a joined path.
//! The work is blocking I/O, run on tokio's blocking pool; a call whose
//! token is cancelled (or timed out) before its commit changes nothing.
//!
//! Changes (`write_file`, `edit_file`, `apply_diff`) share one path
//! ([`change`]): compute the new content, then either preview it (dry run:
//! a unified diff, nothing touched) or record the old content in the
//! per-file history and replace the file atomically (temporary file in the
//! same directory, then rename). `undo_edit` pops that history.
//!
//! Decisions, for users of the tools:
//! - Paths are relative to the workspace root. `..` is refused outright
//!   (even `a/../b`). An absolute path is accepted only if it lies inside
//!   the workspace (it is made relative); any other is `SECURITY_VIOLATION`.
//!   Symbolic links are followed only while they stay inside; a write to a
//!   link writes its target (inside), never replaces the link.
//! - `read_file`: at most 2,000 lines per call, lines cut at 2,000
//!   characters; at most [`MAX_LINE_BYTES`] of a line are held, the rest
//!   of a longer one is read past; directories list at most 1,000 entries,
//!   sorted by name.
//! - Changes load files of at most [`MAX_EDIT_BYTES`]; `write_file`
//!   normalises to the configured line endings and adds a final newline
//!   (an empty file stays empty); `edit_file` and `apply_diff` keep a file's
//!   own line endings. Rewriting identical content records nothing.
//! - History: up to 20 entries per file, on disk under
//!   `Workspaces::history(owner, sub)`. A change's `UndoInfo` input is
//!   `{"path", "entry"}`: it undoes that change only while it is the newest,
//!   and, like a plain `undo_edit {path}`, refuses (`UNDO_CONFLICT`) when the
//!   file was changed by other means since, unless `force`.
//! - `glob`: files (and links, not followed) whose path below `path`
//!   matches; newest modification first, then by path; at most 1,000.
//! - `glob`/`grep` walks: `.gitignore` and `.ignore` apply (repository or
//!   not), `.git` is skipped, other hidden files are searched, at most
//!   100,000 entries are visited. `grep` searches in path order, skips
//!   binary files, returns at most `head_limit` entries (default 250).
//!   What the call's deny and ask path rules name
//!   (`ToolContext::path_rules`) is left out and counted in
//!   `skipped_by_rules`.
//! - Hard links: the path rules judge names (and where symbolic links
//!   lead), but a regular file with several names (`st_nlink > 1`) could
//!   be a file they deny under another name. When the call has deny or ask
//!   path rules (`ToolContext::path_rules`), such a file is neither read
//!   nor changed: `read_file`, a `grep` of that one file and the changing
//!   tools refuse it (`HARD_LINKED_FILE`), a `grep` walk leaves it out
//!   (`skipped_hard_links`); `glob` and directory listings still name it.
//!   Without such rules, hard-linked files are like any other.

#![allow(clippy::result_large_err)]

mod change;
mod confine;
mod edit;
mod history;
mod patch;
mod read;
mod search;
mod undo;
mod walk;
mod write;

/// A context for unit tests of the tools' helpers: no rules, no owner's
/// workspace beyond what the test passes.
#[cfg(test)]
fn test_context() -> crate::tools::ToolContext {
    crate::tools::ToolContext {
        owner: "o".into(),
        thread_id: "t".into(),
        call_id: "c".into(),
        workspace: None,
        cancel: Default::default(),
        progress: Default::default(),
        path_rules: None,
        judged_path: None,
        shown: None,
    }
}

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

pub use confine::WorkspacePath;
pub use edit::EditFile;
pub use patch::ApplyDiff;
pub use read::ReadFile;
pub use search::{Glob, Grep};
pub use undo::UndoEdit;
pub use write::WriteFile;

use crate::config::WorkspaceSettings;
use crate::tools::{Tool, ToolContext, ToolError};
use crate::workspace::{Workspace, Workspaces};

/// Error codes of the file tools.
pub mod codes {
    pub use crate::protocol::tool_output::codes::{CANCELLED, EXECUTION_FAILED, INVALID_ARGUMENTS};
    /// `..`, an absolute path outside the workspace, or a link leading out.
    pub const SECURITY_VIOLATION: &str = "SECURITY_VIOLATION";
    pub const FILE_NOT_FOUND: &str = "FILE_NOT_FOUND";
    /// A directory where a file is expected.
    pub const DIRECTORY_NOT_FILE: &str = "DIRECTORY_NOT_FILE";
    /// A file where a directory is expected.
    pub const NOT_A_DIRECTORY: &str = "NOT_A_DIRECTORY";
    /// A FIFO, socket or device.
    pub const NOT_A_REGULAR_FILE: &str = "NOT_A_REGULAR_FILE";
    /// NUL bytes or invalid UTF-8.
    pub const BINARY_FILE: &str = "BINARY_FILE";
    pub const FILE_TOO_LARGE: &str = "FILE_TOO_LARGE";
    pub const OFFSET_OUT_OF_RANGE: &str = "OFFSET_OUT_OF_RANGE";
    pub const PERMISSION_DENIED: &str = "PERMISSION_DENIED";
    pub const IO_ERROR: &str = "IO_ERROR";
    pub const STRING_NOT_FOUND: &str = "STRING_NOT_FOUND";
    pub const AMBIGUOUS_MATCH: &str = "AMBIGUOUS_MATCH";
    /// The change would leave the file as it is.
    pub const NO_CHANGE: &str = "NO_CHANGE";
    pub const INVALID_DIFF: &str = "INVALID_DIFF";
    pub const DIFF_DOES_NOT_APPLY: &str = "DIFF_DOES_NOT_APPLY";
    pub const NOTHING_TO_UNDO: &str = "NOTHING_TO_UNDO";
    /// The change was undone already (by an earlier undo).
    pub const ALREADY_UNDONE: &str = "ALREADY_UNDONE";
    /// The file changed since the change being undone, or newer changes
    /// would have to be undone first.
    pub const UNDO_CONFLICT: &str = "UNDO_CONFLICT";
    pub const INVALID_PATTERN: &str = "INVALID_PATTERN";
    /// A file with other names (hard links) while the call's permission
    /// rules deny or ask about some paths: they judge names, and cannot
    /// tell which file this is.
    pub const HARD_LINKED_FILE: &str = "HARD_LINKED_FILE";
}

/// What a model is told about entries the permission rules left out of a
/// walk or a directory listing, so it does not take their absence for absence.
pub(super) fn rules_note(skipped: usize) -> Option<String> {
    (skipped > 0).then(|| {
        format!(
            "{skipped} {} left out because the permission rules deny reading {} or require approval for it; {} not searched and not listed.",
            if skipped == 1 { "file or directory was" } else { "files or directories were" },
            if skipped == 1 { "it" } else { "them" },
            if skipped == 1 { "it was" } else { "they were" },
        )
    })
}

/// What a model is told about files a walk left out because they have
/// other names (hard links) and the call's path rules judge names.
pub(super) fn hard_links_note(skipped: usize) -> Option<String> {
    (skipped > 0).then(|| {
        format!(
            "{skipped} {} other names (hard links) {} left out: the permission rules deny reading some paths or require approval for it, and judge files by name, so they cannot tell what such a file is; {} not searched.",
            if skipped == 1 { "file with" } else { "files with" },
            if skipped == 1 { "was" } else { "were" },
            if skipped == 1 { "it was" } else { "they were" },
        )
    })
}

/// Files larger than this are not loaded for a change (write, edit, diff,
/// undo); `read_file` streams and has no such limit.
pub const MAX_EDIT_BYTES: u64 = 10 * 1024 * 1024;

/// The most of one line `read_file` and `grep` hold in memory. `read_file`
/// keeps this much of a longer line (it shows far less) and reads past the
/// rest; `grep` searches with this heap limit, and leaves the rest of a
/// file with a longer line unsearched, saying so in its result.
pub const MAX_LINE_BYTES: usize = 512 * 1024;

/// All seven file tools over one set of workspaces.
pub fn file_tools(workspaces: Arc<Workspaces>, settings: &WorkspaceSettings) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(ReadFile::new(workspaces.clone())),
        Arc::new(WriteFile::new(workspaces.clone(), settings.line_endings)),
        Arc::new(EditFile::new(workspaces.clone())),
        Arc::new(ApplyDiff::new(workspaces.clone())),
        Arc::new(UndoEdit::new(workspaces.clone())),
        Arc::new(Glob::new(workspaces.clone())),
        Arc::new(Grep::new(workspaces)),
    ]
}

fn parse_args<T: DeserializeOwned>(args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args)
        .map_err(|e| ToolError::new(codes::INVALID_ARGUMENTS, e.to_string(), false))
}

/// Run file work on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        ToolError::new(
            codes::EXECUTION_FAILED,
            format!("the file operation failed: {e}"),
            false,
        )
    })?
}

/// For the permission rules: where a file tool's `path` argument (as a
/// model gives it) really leads inside the opened workspace through
/// symbolic links, workspace-relative, when that is not the path it names
/// (see [`confine::resolve_beneath`]). `None` when it leads nowhere else,
/// or nowhere the tools would open.
pub fn resolved_path(workspace: &Workspace, raw: &str) -> Option<String> {
    let named = WorkspacePath::parse(raw, &workspace.path).ok()?;
    let real = confine::resolve_beneath(&workspace.dir, &named)?;
    (real != named).then(|| real.display())
}

fn open_workspace(workspaces: &Workspaces, ctx: &ToolContext) -> Result<Workspace, ToolError> {
    workspaces
        .open(&ctx.owner, ctx.workspace.as_deref())
        .map_err(|e| workspace_error(e, "workspace"))
}

fn open_history(
    workspaces: &Workspaces,
    ctx: &ToolContext,
) -> Result<history::EditHistory, ToolError> {
    workspaces
        .history(&ctx.owner, ctx.workspace.as_deref())
        .map(history::EditHistory::new)
        .map_err(|e| workspace_error(e, "edit history"))
}

fn workspace_error(e: std::io::Error, what: &str) -> ToolError {
    if e.kind() == std::io::ErrorKind::InvalidInput {
        ToolError::new(codes::INVALID_ARGUMENTS, e.to_string(), false)
    } else {
        ToolError::new(
            codes::IO_ERROR,
            format!("cannot open the {what}: {}", std::io::Error::from(e.kind())),
            true,
        )
    }
}

fn cancelled(ctx: &ToolContext) -> Result<(), ToolError> {
    if ctx.cancel.is_cancelled() {
        Err(ToolError::new(
            codes::CANCELLED,
            "the call was cancelled",
            false,
        ))
    } else {
        Ok(())
    }
}

/// The language of a file, by extension or well-known name.
pub fn language_of(path: &WorkspacePath) -> Option<&'static str> {
    let name = path.file_name()?.to_str()?;
    let by_name = match name {
        "Dockerfile" | "Containerfile" => Some("dockerfile"),
        "Makefile" | "makefile" | "GNUmakefile" => Some("makefile"),
        "CMakeLists.txt" => Some("cmake"),
        "Cargo.lock" => Some("toml"),
        _ => None,
    };
    if by_name.is_some() {
        return by_name;
    }
    let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "rs" => "rust",
        "py" | "pyi" => "python",
        "js" | "mjs" | "cjs" => "javascript",
        "jsx" => "jsx",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "tsx",
        "go" => "go",
        "java" => "java",
        "kt" | "kts" => "kotlin",
        "scala" => "scala",
        "c" | "h" => "c",
        "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => "cpp",
        "cs" => "csharp",
        "rb" => "ruby",
        "php" => "php",
        "swift" => "swift",
        "lua" => "lua",
        "r" => "r",
        "dart" => "dart",
        "sh" | "bash" => "bash",
        "zsh" => "zsh",
        "fish" => "fish",
        "ps1" => "powershell",
        "sql" => "sql",
        "html" | "htm" => "html",
        "css" => "css",
        "scss" => "scss",
        "vue" => "vue",
        "svelte" => "svelte",
        "json" => "json",
        "yaml" | "yml" => "yaml",
        "toml" => "toml",
        "xml" | "svg" => "xml",
        "ini" | "cfg" => "ini",
        "md" | "markdown" => "markdown",
        "proto" => "protobuf",
        "graphql" | "gql" => "graphql",
        "tf" => "hcl",
        "txt" => "text",
        "csv" => "csv",
        "diff" | "patch" => "diff",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages_by_extension_and_name() {
        let p = |s: &str| WorkspacePath::parse(s, std::path::Path::new("/w")).unwrap();
        assert_eq!(language_of(&p("src/main.rs")), Some("rust"));
        assert_eq!(language_of(&p("a/B.TSX")), Some("tsx"));
        assert_eq!(language_of(&p("Dockerfile")), Some("dockerfile"));
        assert_eq!(language_of(&p("noext")), None);
        assert_eq!(language_of(&p(".")), None);
    }
}
