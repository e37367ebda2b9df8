use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::change::numbered;
use super::confine::{
    WorkspacePath, io_error, not_found_aware, open_regular, opened_where_judged, real_dir,
    refuse_hard_linked,
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
/// Characters of lines shown per call, in all: a call stops before the line
/// that would pass it (`partial`, with `next_offset`), so that its result,
/// streamed as one event with its `ui_schema`, stays far below what an
/// AG-UI client takes in one frame (the stock client's parser: 10 MB).
pub const MAX_SHOWN_CHARS: usize = 256_000;
/// At most this much of one line is held in memory; the rest of a longer
/// line is read past (its characters counted for the cut marker), never
/// kept, so a file of one huge line costs no more than this.
pub const MAX_LINE_BYTES: usize = super::MAX_LINE_BYTES;
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
    if let Some(parent) = path.parent() {
        super::confine::check_dir_modes(&ws.dir, &parent, 0, path)?;
    }
    let (file, meta) = open_regular(&ws.dir, path)?;
    opened_where_judged(&ws.dir, &file, path, ctx.judged_path.as_ref())?;
    refuse_hard_linked(&meta, path, ctx.path_rules.as_deref(), "read")?;
    super::confine::check_own_mode(
        cap_std::fs::PermissionsExt::mode(&meta.permissions()),
        0o400,
        path,
    )?;
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
    let mut shown_chars = 0usize;
    let mut budget_spent = false;
    let mut cut_lines = 0usize;
    let mut total = 0usize;
    let mut line = Vec::with_capacity(8 * 1024);
    loop {
        line.clear();
        let Some(rest) = read_line_bounded(&mut reader, &mut line, ctx).map_err(|e| match e {
            LineError::Io(e) => io_error(e, path),
            LineError::Cancelled(e) => e,
        })?
        else {
            break;
        };
        total += 1;
        if total.is_multiple_of(65_536) {
            cancelled(ctx)?;
        }
        let text = line_text(&line, rest.is_some())
            .ok_or_else(|| binary(path, &format!("line {total} is not valid UTF-8")))?;
        if total >= offset && shown.len() < limit && !budget_spent {
            let text = if rest.is_some() {
                text
            } else {
                text.trim_end_matches('\n').trim_end_matches('\r')
            };
            // A character split by the cut counts once, with the rest.
            let split = usize::from(rest.is_some() && text.len() < line.len());
            let chars = text.chars().count() + rest.map_or(0, |r| r.chars + split);
            let shows = chars.min(MAX_LINE_CHARS);
            if !shown.is_empty() && shown_chars + shows > MAX_SHOWN_CHARS {
                budget_spent = true;
            } else if chars > MAX_LINE_CHARS {
                shown_chars += shows;
                cut_lines += 1;
                let kept: String = text.chars().take(MAX_LINE_CHARS).collect();
                shown.push(format!(
                    "{kept}… [line cut: {} more characters]",
                    chars - MAX_LINE_CHARS
                ));
            } else {
                shown_chars += shows;
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
        let why = match budget_spent {
            true => format!(" (at most {MAX_SHOWN_CHARS} characters per call)"),
            false => String::new(),
        };
        notes.push(format!(
            "Showing lines {offset}-{end} of {total}{why}. To read more, call read_file with offset {}.",
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
        undoes: None,
    })
}

/// What was read past of a line longer than [`MAX_LINE_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rest {
    /// Its characters past the cut (UTF-8 lead bytes; the line end not
    /// counted, nor a character the cut split, whose lead byte was kept).
    chars: usize,
}

enum LineError {
    Io(std::io::Error),
    Cancelled(ToolError),
}

/// Read one line into `line` (empty on entry), keeping at most
/// [`MAX_LINE_BYTES`] of it: `None` at the end of the file; `Some(None)`
/// for a line kept whole (with its `\n`, if any); `Some(Some(rest))` for a
/// longer one, whose first [`MAX_LINE_BYTES`] are kept and the rest read
/// past up to the next newline without being held.
fn read_line_bounded(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    ctx: &ToolContext,
) -> Result<Option<Option<Rest>>, LineError> {
    let mut read_any = false;
    let mut rest: Option<Rest> = None;
    // The last byte read past (not the `\n`), so that a `\r` before the
    // `\n` is not counted.
    let mut last_skipped = 0u8;
    let mut chunks = 0usize;
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(LineError::Io(e)),
        };
        if buf.is_empty() {
            break;
        }
        read_any = true;
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..=i], true),
            None => (buf, false),
        };
        let keep = MAX_LINE_BYTES.saturating_sub(line.len()).min(chunk.len());
        line.extend_from_slice(&chunk[..keep]);
        let skipped = &chunk[keep..];
        if !skipped.is_empty() {
            let rest = rest.get_or_insert(Rest { chars: 0 });
            rest.chars += skipped
                .iter()
                .filter(|b| **b != b'\n' && (**b & 0xC0) != 0x80)
                .count();
            // Once a line is cut everything after is read past, so this
            // is the byte before the line's `\n`, when that comes.
            if let Some(b) = skipped.iter().rev().find(|b| **b != b'\n') {
                last_skipped = *b;
            }
            if done && last_skipped == b'\r' {
                rest.chars -= 1;
            }
        }
        let used = chunk.len();
        reader.consume(used);
        if done {
            break;
        }
        chunks += 1;
        if chunks.is_multiple_of(1024) {
            cancelled(ctx).map_err(LineError::Cancelled)?;
        }
    }
    if !read_any {
        return Ok(None);
    }
    Ok(Some(rest))
}

/// The text of a line `read_line_bounded` read; `None` if it is not UTF-8.
/// A line that was cut (`cut`) may end inside a character: that
/// character's first bytes are left out of the text (the character is
/// counted with what was read past).
fn line_text(line: &[u8], cut: bool) -> Option<&str> {
    match std::str::from_utf8(line) {
        Ok(text) => Some(text),
        Err(e) if cut && e.error_len().is_none() => {
            std::str::from_utf8(&line[..e.valid_up_to()]).ok()
        }
        Err(_) => None,
    }
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
        undoes: None,
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
                    "offset": {"type": "integer", "minimum": 1, "maximum": crate::tools::MAX_EXACT_INTEGER,
                               "description": "1-based line number to start at (default 1)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LINES,
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
                .map_err(|e| not_found_aware(e, &ws.dir, &path, ctx.path_rules.as_deref()))?;
            if meta.is_dir() {
                super::confine::check_dir_modes(&ws.dir, &path, 0o400, &path)?;
                list_dir(&ws, &path, &ctx)
            } else if super::confine::names_a_directory(&args.path) {
                Err(super::confine::file_named_as_directory(&args.path, &path))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ToolContext {
        super::super::test_context()
    }

    /// A line longer than the cap is held only up to it; its characters
    /// past it are counted (a character split by the cut and a final
    /// `\r\n` handled), and the next line is read whole.
    #[test]
    fn a_long_line_is_held_only_up_to_the_cap() {
        let mut text = b"a".to_vec();
        for _ in 0..MAX_LINE_BYTES {
            text.extend_from_slice("é".as_bytes());
        }
        text.extend_from_slice(b"\r\nnext\n");
        let mut reader = BufReader::with_capacity(4096, text.as_slice());
        let mut line = Vec::new();
        let rest = read_line_bounded(&mut reader, &mut line, &ctx())
            .ok()
            .unwrap()
            .unwrap()
            .expect("cut");
        assert_eq!(line.len(), MAX_LINE_BYTES);
        assert!(line.capacity() <= 2 * MAX_LINE_BYTES, "{}", line.capacity());
        let text = line_text(&line, true).unwrap();
        // "a" and (MAX - 1) / 2 whole "é"; the split one counts with the rest.
        assert_eq!(text.chars().count(), 1 + (MAX_LINE_BYTES - 1) / 2);
        assert_eq!(
            text.chars().count() + rest.chars + 1,
            1 + MAX_LINE_BYTES,
            "every character once, the line end not at all"
        );
        line.clear();
        let next = read_line_bounded(&mut reader, &mut line, &ctx())
            .ok()
            .unwrap();
        assert_eq!(next, Some(None));
        assert_eq!(line, b"next\n");
        line.clear();
        assert_eq!(
            read_line_bounded(&mut reader, &mut line, &ctx())
                .ok()
                .unwrap(),
            None
        );
    }
}
