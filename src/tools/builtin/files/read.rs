use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::change::numbered;
use super::confine::{
    WorkspacePath, io_error, not_found_aware, open_regular, opened_where_judged, real_dir,
};
use super::{blocking, cancelled, codes, language_of, open_workspace, parse_args, rules_note};
use crate::protocol::ui_schema::hints::{self, Source};
use crate::tools::{
    PermissionClass, Tool, ToolCapability, ToolContext, ToolDefinition, ToolError, ToolMetadata,
    ToolSuccess,
};
use crate::workspace::{Workspace, Workspaces};

/// Lines shown by default, and at most, per call.
pub const MAX_LINES: usize = 2_000;
/// Longer lines are cut.
pub const MAX_LINE_CHARS: usize = 2_000;
/// A NUL byte in this much of the start makes a file binary.
const BINARY_PROBE: usize = 8 * 1024;
/// Directory entries listed at most.
pub const MAX_DIR_ENTRIES: usize = 1_000;

/// `read_file`: numbered lines of a text file, or a directory's entries.
pub struct ReadFile {
    workspaces: Arc<Workspaces>,
}

impl ReadFile {
    pub fn new(workspaces: Arc<Workspaces>) -> Self {
        ReadFile { workspaces }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
}

fn binary(path: &WorkspacePath, why: &str) -> ToolError {
    ToolError::new(
        codes::BINARY_FILE,
        format!(
            "'{}' is a binary file ({why}); read_file shows text only",
            path.display()
        ),
        false,
    )
    .with_hint("Use bash (e.g. `file`, `xxd | head`) to inspect binary files.")
}

fn read_text(
    ws: &Workspace,
    path: &WorkspacePath,
    offset: usize,
    limit: usize,
    ctx: &ToolContext,
) -> Result<ToolSuccess, ToolError> {
    let (file, _) = open_regular(&ws.dir, path)?;
    opened_where_judged(&ws.dir, &file, path, ctx.judged_path.as_ref())?;
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut probe = Vec::with_capacity(BINARY_PROBE);
    (&mut reader)
        .take(BINARY_PROBE as u64)
        .read_to_end(&mut probe)
        .map_err(|e| io_error(e, path))?;
    if probe.contains(&0) {
        return Err(binary(path, "it contains NUL bytes"));
    }
    let mut reader = std::io::Cursor::new(probe).chain(reader);
    let language = language_of(path);
    let mut shown: Vec<String> = vec![];
    let mut cut_lines = 0usize;
    let mut total = 0usize;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| io_error(e, path))?;
        if n == 0 {
            break;
        }
        total += 1;
        if total % 65_536 == 0 {
            cancelled(ctx)?;
        }
        let text = std::str::from_utf8(&line)
            .map_err(|_| binary(path, &format!("line {total} is not valid UTF-8")))?;
        if total >= offset && shown.len() < limit {
            let text = text.trim_end_matches('\n').trim_end_matches('\r');
            let chars = text.chars().count();
            if chars > MAX_LINE_CHARS {
                cut_lines += 1;
                let kept: String = text.chars().take(MAX_LINE_CHARS).collect();
                shown.push(format!(
                    "{kept}… [line cut: {} more characters]",
                    chars - MAX_LINE_CHARS
                ));
            } else {
                shown.push(text.to_string());
            }
        }
    }
    if total == 0 {
        return Ok(ToolSuccess::complete(json!({
            "path": path.display(),
            "type": "file",
            "language": language,
            "total_lines": 0,
            "empty": true,
            "content": "",
            "note": "The file is empty.",
        })));
    }
    if offset > total {
        return Err(ToolError::new(
            codes::OFFSET_OUT_OF_RANGE,
            format!(
                "offset {offset} is past the end of '{}', which has {total} line{}",
                path.display(),
                if total == 1 { "" } else { "s" }
            ),
            false,
        )
        .with_hint(format!("Use an offset between 1 and {total}.")));
    }
    let end = offset + shown.len() - 1;
    let mut result = json!({
        "path": path.display(),
        "type": "file",
        "language": language,
        "total_lines": total,
        "start_line": offset,
        "end_line": end,
        "content": numbered(offset, shown.iter().map(String::as_str)),
    });
    let more = end < total;
    let mut notes = vec![];
    if more {
        result["next_offset"] = json!(end + 1);
        notes.push(format!(
            "Showing lines {offset}-{end} of {total}. To read more, call read_file with offset {}.",
            end + 1
        ));
    }
    if cut_lines > 0 {
        result["lines_cut"] = json!(cut_lines);
        notes.push(format!(
            "{cut_lines} line{} longer than {MAX_LINE_CHARS} characters {} cut; use grep or bash to see {}.",
            if cut_lines == 1 { "" } else { "s" },
            if cut_lines == 1 { "was" } else { "were" },
            if cut_lines == 1 { "it" } else { "them" },
        ));
    }
    if !notes.is_empty() {
        result["note"] = json!(notes.join(" "));
    }
    Ok(ToolSuccess {
        result,
        partial: more || cut_lines > 0,
        undo: None,
    })
}

fn list_dir(
    ws: &Workspace,
    path: &WorkspacePath,
    ctx: &ToolContext,
) -> Result<ToolSuccess, ToolError> {
    let handle = super::walk::open_dir(&ws.dir, path)?;
    opened_where_judged(&ws.dir, &handle, path, ctx.judged_path.as_ref())?;
    let read = handle.entries().map_err(|e| io_error(e, path))?;
    // Where the directory really is, when it is reached through a link:
    // the path rules judge its entries by both names, as walks do.
    let real_dir = ctx
        .path_rules
        .as_ref()
        .and_then(|_| real_dir(&ws.dir, &handle, path));
    let mut skipped_by_rules = 0usize;
    let mut entries: Vec<(String, &'static str, u64)> = vec![];
    for entry in read {
        cancelled(ctx)?;
        let Ok(entry) = entry else { continue };
        if let Some(rules) = &ctx.path_rules {
            let named = path.join(&entry.file_name()).display();
            let real = real_dir
                .as_ref()
                .map(|real| real.join(&entry.file_name()).display());
            if rules.leave_out(&named, real.as_deref()) {
                skipped_by_rules += 1;
                continue;
            }
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(meta) = entry.metadata() else { continue };
        let kind = if meta.file_type().is_symlink() {
            "symlink"
        } else if meta.is_dir() {
            "dir"
        } else if meta.is_file() {
            "file"
        } else {
            "other"
        };
        entries.push((name, kind, meta.len()));
    }
    entries.sort();
    let total = entries.len();
    let truncated = total > MAX_DIR_ENTRIES;
    entries.truncate(MAX_DIR_ENTRIES);
    let listed: Vec<Value> = entries
        .into_iter()
        .map(|(name, kind, size)| json!({"name": name, "type": kind, "size": size}))
        .collect();
    let mut result = json!({
        "path": path.display(),
        "type": "directory",
        "entries": listed,
        "total_entries": total,
        "skipped_by_rules": skipped_by_rules,
    });
    if let Some(note) = rules_note(skipped_by_rules) {
        result["rules_note"] = json!(note);
    }
    if truncated {
        result["note"] = json!(format!(
            "{total} entries; the first {MAX_DIR_ENTRIES} by name are listed. Use glob to narrow down."
        ));
    }
    if total == 0 && skipped_by_rules == 0 {
        result["note"] = json!("The directory is empty.");
    }
    Ok(ToolSuccess {
        result,
        partial: truncated,
        undo: None,
    })
}

#[async_trait]
impl Tool for ReadFile {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "read_file".into(),
            description: format!(
                "Read a text file of the workspace. Lines come numbered like `cat -n` (number, \
                 tab, line), at most {MAX_LINES} per call starting at `offset`; lines longer than \
                 {MAX_LINE_CHARS} characters are cut. When more lines remain the result gives \
                 `next_offset`. On a directory, lists its entries (name, type, size), leaving out \
                 those the permission rules do not let you read (counted in skipped_by_rules). Binary \
                 files are refused. The line numbers are not part of the file: leave them out \
                 of edit_file's old_string."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1,
                             "description": "File or directory path relative to the workspace root, e.g. 'src/main.rs' or '.'."},
                    "offset": {"type": "integer", "minimum": 1,
                               "description": "1-based line number to start at (default 1)."},
                    "limit": {"type": "integer", "minimum": 1,
                              "description": format!("Most lines to return (default and maximum {MAX_LINES}).")}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
            output_schema: None,
            aliases: vec![],
            metadata: ToolMetadata {
                concurrency_safe: true,
                read_only: true,
                destructive: false,
                permission_class: PermissionClass::File,
                audit_operation: "read".into(),
                search_hint: Some("read a file or list a directory".into()),
                ..ToolMetadata::default()
            },
            capability: ToolCapability {
                affected_resources: vec!["file".into()],
                ..ToolCapability::default()
            },
        }
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        let args: Args = parse_args(args)?;
        let offset = args.offset.unwrap_or(1).max(1);
        let limit = args.limit.unwrap_or(MAX_LINES).clamp(1, MAX_LINES);
        let workspaces = self.workspaces.clone();
        blocking(move || {
            let ws = open_workspace(&workspaces, &ctx)?;
            let path = WorkspacePath::parse(&args.path, &ws.path)?;
            let meta = ws
                .dir
                .metadata(path.as_path())
                .map_err(|e| not_found_aware(e, &ws.dir, &path))?;
            if meta.is_dir() {
                list_dir(&ws, &path, &ctx)
            } else {
                read_text(&ws, &path, offset, limit, &ctx)
            }
        })
        .await
    }

    fn ui_hints(&self, _args: &Value, result: &Value) -> Option<Value> {
        let path = result.get("path")?.as_str()?;
        match result.get("type")?.as_str()? {
            "directory" => {
                let items: Vec<Value> = result["entries"]
                    .as_array()?
                    .iter()
                    .map(|e| {
                        let name = e["name"].as_str().unwrap_or_default();
                        let detail = match e["type"].as_str().unwrap_or_default() {
                            "file" => format!("file, {} bytes", e["size"]),
                            other => other.to_string(),
                        };
                        let label = if e["type"] == "dir" {
                            format!("{name}/")
                        } else {
                            name.to_string()
                        };
                        json!({"label": label, "detail": detail})
                    })
                    .collect();
                Some(hints::list(Some(path), &items, "Empty directory"))
            }
            "file" => {
                // The numbered text, read from the result when the ui_schema
                // is compiled and shown without its numbers (the block
                // numbers it): a large file is stored once. No view for a
                // result without it.
                if !result["content"].is_string() {
                    return None;
                }
                Some(hints::code_block(
                    Some(path),
                    Source::NumberedResult("/content"),
                    result["language"].as_str(),
                    result["start_line"].as_u64(),
                    result["end_line"].as_u64(),
                ))
            }
            _ => None,
        }
    }
}
