use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::change::{Change, diff_of, with_current};
use super::{WorkspacePath, blocking, cancelled, open_history, open_workspace, parse_args};
use crate::config::LineEndings;
use crate::protocol::ui_schema::hints;
use crate::tools::{
    DryRunResult, PermissionClass, Tool, ToolCapability, ToolContext, ToolDefinition, ToolError,
    ToolMetadata, ToolSuccess,
};
use crate::workspace::Workspaces;

/// `write_file`: create or replace a file with the given text.
pub struct WriteFile {
    workspaces: Arc<Workspaces>,
    line_endings: LineEndings,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    content: String,
}

impl WriteFile {
    pub fn new(workspaces: Arc<Workspaces>, line_endings: LineEndings) -> Self {
        WriteFile {
            workspaces,
            line_endings,
        }
    }

    fn eol(&self) -> &'static str {
        match self.line_endings {
            LineEndings::Lf => "\n",
            LineEndings::Crlf => "\r\n",
        }
    }
}

/// The configured line endings throughout, and a final one unless empty.
pub fn normalise(content: &str, eol: &str) -> String {
    let lf = content.replace("\r\n", "\n");
    let mut out = if eol == "\n" {
        lf
    } else {
        lf.replace('\n', eol)
    };
    if !out.is_empty() && !out.ends_with('\n') {
        out.push_str(eol);
    }
    out
}

/// Shared by `execute` and `dry_run`: compute the change, then `finish` it.
async fn plan_then<T: Send + 'static>(
    tool: &WriteFile,
    args: Value,
    ctx: ToolContext,
    finish: impl FnOnce(Change, &crate::workspace::Workspace, &ToolContext) -> Result<T, ToolError>
    + Send
    + 'static,
) -> Result<T, ToolError> {
    let args: Args = parse_args(args)?;
    let workspaces = tool.workspaces.clone();
    let eol = tool.eol();
    blocking(move || {
        let ws = open_workspace(&workspaces, &ctx)?;
        let path = WorkspacePath::parse_file(&args.path, &ws.path, "write_file")?;
        // `~/x` would make a directory named `~`: the model meant its home.
        if let Ok(rest) = path.rel().strip_prefix("~")
            && !ws.dir.exists("~")
        {
            return Err(ToolError::new(
                crate::protocol::tool_output::codes::INVALID_ARGUMENTS,
                format!(
                    "'{}' would make a directory named '~': '~' is not expanded",
                    path.display()
                ),
                false,
            )
            .with_hint(format!(
                "Paths are relative to the workspace root: use '{}'. To make a directory named \
                 '~', create it with bash first.",
                rest.display()
            )));
        }
        let content = normalise(&args.content, eol);
        with_current(&ws, &path, &ctx, |current| {
            finish(current.change(content.into_bytes())?, &ws, &ctx)
        })
    })
    .await
}

#[async_trait]
impl Tool for WriteFile {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "write_file".into(),
            description: format!(
                "Create a file, or replace its whole content, in the workspace. Parent directories \
                 are created. Line endings are normalised to {} and a final newline is added. \
                 Replacing is atomic and can be undone with undo_edit. To change part of an \
                 existing file prefer edit_file or apply_diff; read the file first if it exists.",
                match self.line_endings {
                    LineEndings::Lf => "LF",
                    LineEndings::Crlf => "CRLF",
                }
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1,
                             "description": "File path relative to the workspace root, e.g. 'src/main.rs'. No '..'."},
                    "content": {"type": "string",
                                "description": "The complete new content of the file."}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
            output_schema: None,
            aliases: vec![],
            metadata: file_change_metadata("write", "create or overwrite a file"),
            capability: reversible_capability(),
        }
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        let history_source = self.workspaces.clone();
        let line_endings = match self.line_endings {
            LineEndings::Lf => "lf",
            LineEndings::Crlf => "crlf",
        };
        plan_then(self, args, ctx, move |change, ws, ctx| {
            let diff = change.diff();
            let lines = change.after.iter().filter(|b| **b == b'\n').count();
            let mut result = json!({
                "path": change.current.requested.display(),
                "bytes_written": change.after.len(),
                "lines": lines,
                "created": change.created(),
                "overwritten": !change.created(),
                "line_endings": line_endings,
                "lines_added": diff.added,
                "lines_removed": diff.removed,
                "diff": diff.text,
            });
            if change.current.target != change.current.requested {
                result["resolved_path"] = json!(change.current.target.display());
            }
            if diff.truncated {
                result["diff_truncated"] = json!(true);
            }
            // A new file's diff is the content the model just sent, every
            // line again: the model is told the counts, and the UI shows
            // the diff (made again from the arguments, see `ui_hints`).
            if change.created()
                && let Some(fields) = result.as_object_mut()
            {
                fields.remove("diff");
                fields.remove("diff_truncated");
            }
            if change.unchanged() {
                result["bytes_written"] = json!(0);
                result["unchanged"] = json!(true);
                return Ok(ToolSuccess::complete(result));
            }
            // A call cancelled or timed out while this ran must not change the file.
            cancelled(ctx)?;
            let history = open_history(&history_source, ctx)?;
            let undo = change.commit(ws, &history, "write_file", ctx)?;
            Ok(super::change::committed(result, undo))
        })
        .await
    }

    async fn dry_run(&self, args: Value, ctx: ToolContext) -> Result<DryRunResult, ToolError> {
        plan_then(self, args, ctx, |change, _, _| Ok(change.dry_run())).await
    }

    fn ui_hints(&self, args: &Value, result: &Value) -> Option<Value> {
        if result["created"] == true && result.get("diff").is_none() {
            let content = normalise(args["content"].as_str()?, self.eol());
            let shown = result
                .get("resolved_path")
                .or_else(|| result.get("path"))?
                .as_str()?;
            let made = diff_of(shown, None, content.as_bytes());
            let mut shown_result = result.clone();
            shown_result["diff"] = json!(made.text);
            return diff_hints(&shown_result);
        }
        diff_hints(result)
    }
}

/// The metadata of a tool that changes one file of the workspace: not
/// read-only, yet not destructive, since every change (an overwrite too)
/// is kept in the edit history and undone by `undo_edit`.
pub fn file_change_metadata(audit_operation: &str, search_hint: &str) -> ToolMetadata {
    ToolMetadata {
        concurrency_safe: false,
        read_only: false,
        destructive: false,
        permission_class: PermissionClass::File,
        audit_operation: audit_operation.into(),
        search_hint: Some(search_hint.into()),
        ..ToolMetadata::default()
    }
}

pub fn reversible_capability() -> ToolCapability {
    ToolCapability {
        dry_run: true,
        reversible: true,
        undo_method: Some("tool".into()),
        undo_tool_name: Some("undo_edit".into()),
        min_confidence: 0,
        affected_resources: vec!["file".into()],
    }
}

/// `hints::diff` from a change result (`path`, `diff`, `lines_added`,
/// `lines_removed`, `created`).
pub fn diff_hints(result: &Value) -> Option<Value> {
    let path = result.get("path")?.as_str()?;
    let diff = result.get("diff")?.as_str()?;
    let added = result["lines_added"].as_u64().unwrap_or(0);
    let removed = result["lines_removed"].as_u64().unwrap_or(0);
    let verb = if result["created"].as_bool() == Some(true) {
        "created"
    } else if result["unchanged"].as_bool() == Some(true) {
        "unchanged"
    } else {
        "changed"
    };
    Some(hints::diff(
        path,
        diff,
        &format!("1 file {verb}, +{added} -{removed}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation_sets_line_endings_and_a_final_newline() {
        assert_eq!(normalise("a\r\nb", "\n"), "a\nb\n");
        assert_eq!(normalise("a\nb\r\n", "\r\n"), "a\r\nb\r\n");
        assert_eq!(normalise("a", "\r\n"), "a\r\n");
        assert_eq!(normalise("", "\n"), "");
    }
}
