use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use similar::TextDiff;

use super::change::{Change, line_ending_of, numbered, text_of, too_large_after, with_current};
use super::write::{diff_hints, file_change_metadata, reversible_capability};
use super::{
    MAX_EDIT_BYTES, WorkspacePath, blocking, cancelled, codes, confine, open_history,
    open_workspace, parse_args,
};
use crate::tools::{DryRunResult, Tool, ToolContext, ToolDefinition, ToolError, ToolSuccess};
use crate::workspace::{Workspace, Workspaces};

/// `edit_file`: replace an exact string in a file.
pub struct EditFile {
    workspaces: Arc<Workspaces>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

/// Lines of context shown around an edit.
const SNIPPET_CONTEXT: usize = 3;

impl EditFile {
    pub fn new(workspaces: Arc<Workspaces>) -> Self {
        EditFile { workspaces }
    }
}

/// What an edit did, for the result.
#[derive(Debug)]
struct Edit {
    replacements: usize,
    /// 1-based line of the first replacement in the new text.
    first_line: usize,
    new_lines: usize,
}

/// Compute the edited text, or the error that tells the model how to fix
/// its call.
fn apply_edit(path: &WorkspacePath, text: &str, args: &Args) -> Result<(String, Edit), ToolError> {
    if args.old_string.is_empty() {
        return Err(ToolError::new(
            codes::INVALID_ARGUMENTS,
            "old_string must not be empty",
            false,
        )
        .with_hint("To create a file or replace all of it, use write_file."));
    }
    if args.old_string == args.new_string {
        return Err(ToolError::new(
            codes::NO_CHANGE,
            "old_string and new_string are identical; the edit would change nothing",
            false,
        )
        .with_hint("Put the text the file should have in new_string; if it has it already, there is nothing to do."));
    }
    let (mut old, mut new) = (args.old_string.clone(), args.new_string.clone());
    // Models write "\n"; a CRLF file has "\r\n". Match in the file's own
    // line endings, and keep them in what is inserted.
    if line_ending_of(text) == "\r\n" {
        let crlf = |s: &str| s.replace("\r\n", "\n").replace('\n', "\r\n");
        if !text.contains(old.as_str()) && text.contains(crlf(&old).as_str()) {
            old = crlf(&old);
        }
        new = crlf(&new);
    }
    // The first 20 places (for the lines an ambiguous match names), and how
    // many there are.
    let mut places = text.match_indices(old.as_str()).map(|(i, _)| i);
    let starts: Vec<usize> = places.by_ref().take(20).collect();
    let count = starts.len() + places.count();
    let line_at = |offset: usize| text[..offset].matches('\n').count() + 1;
    match count {
        0 => return Err(not_found(path, text, &args.old_string)),
        1 => {}
        n if !args.replace_all => {
            let lines: Vec<String> = starts.iter().map(|s| line_at(*s).to_string()).collect();
            return Err(ToolError::new(
                codes::AMBIGUOUS_MATCH,
                format!(
                    "old_string occurs {n} times in '{}' (at lines {}{}); it must identify one place",
                    path.display(),
                    lines.join(", "),
                    if n > 20 { ", …" } else { "" }
                ),
                false,
            )
            .with_hint(
                "Include more surrounding lines in old_string so it matches exactly once, \
                 or set replace_all to true to replace every occurrence.",
            ));
        }
        _ => {}
    }
    // Refused before the text is built: replacing every occurrence of a
    // short string with a long one multiplies the file.
    let after = (text.len() - count * old.len()) as u64 + (count as u64) * (new.len() as u64);
    if after > MAX_EDIT_BYTES {
        return Err(too_large_after(path, after));
    }
    let first_line = line_at(starts[0]);
    let edited = if args.replace_all {
        text.replace(old.as_str(), &new)
    } else {
        text.replacen(old.as_str(), &new, 1)
    };
    Ok((
        edited,
        Edit {
            replacements: count,
            first_line,
            new_lines: new.matches('\n').count() + 1,
        },
    ))
}

/// `STRING_NOT_FOUND`, with the closest text in the file and its lines.
fn not_found(path: &WorkspacePath, text: &str, needle: &str) -> ToolError {
    let error = ToolError::new(
        codes::STRING_NOT_FOUND,
        format!("old_string was not found in '{}'", path.display()),
        false,
    );
    // The commonest miss: text copied from read_file with its line numbers.
    if let Some(bare) = without_line_numbers(needle) {
        let found = match text.matches(bare.as_str()).count() {
            0 => String::new(),
            1 => " Without them, old_string is found once in the file.".to_string(),
            n => format!(" Without them, old_string is found {n} times in the file."),
        };
        return error.with_hint(format!(
            "old_string starts each line with a line number and a tab, as read_file shows \
             lines; they are not part of the file. Send the text after each tab only.{found}"
        ));
    }
    let lines: Vec<&str> = text.lines().collect();
    match closest_window(&lines, needle) {
        Some(found) => {
            let window = lines[found.start..found.end]
                .iter()
                .map(|l| l.trim_end_matches('\r'))
                .collect::<Vec<_>>()
                .join("\n");
            let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
            let why = if needle.contains("\r\n") && !text.contains("\r\n") {
                "old_string has CRLF (\\r\\n) line endings and the file LF (\\n): send it with \\n"
            } else if squash(&window) == squash(needle) {
                "it differs only in whitespace or indentation"
            } else {
                "check for small differences"
            };
            let range = if found.end - found.start == 1 {
                format!("line {}", found.start + 1)
            } else {
                format!("lines {}-{}", found.start + 1, found.end)
            };
            // Quoted as the file has it, without line numbers: what is
            // copied from here is what old_string must be.
            error.with_hint(format!(
                "The closest text ({}% similar, {why}) is at {range}; the file reads there, \
                 exactly, between the markers:\n---\n{window}\n---\nold_string must match the \
                 file exactly, including whitespace and indentation.",
                (found.score * 100.0).round() as u32
            ))
        }
        None => error.with_hint("Read the file with read_file and copy the exact text to replace."),
    }
}

/// `needle` without the line numbers read_file puts before each line (up
/// to 12 digits, right-aligned, then a tab), when every line has one.
fn without_line_numbers(needle: &str) -> Option<String> {
    let mut bare = Vec::new();
    for line in needle.split('\n') {
        let rest = line.trim_start_matches(' ');
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let text = rest[digits..].strip_prefix('\t');
        match text {
            Some(text) if (1..=12).contains(&digits) => bare.push(text),
            // A needle ending in a newline leaves an empty last line.
            None if line.is_empty() && !bare.is_empty() => bare.push(""),
            _ => return None,
        }
    }
    Some(bare.join("\n"))
}

struct Window {
    start: usize,
    end: usize,
    score: f32,
}

/// The run of lines (as many as the needle has, up to 50) most similar to
/// the needle. Character-bigram overlap ranks every window cheaply; the best
/// few are re-scored with a character diff.
fn closest_window(lines: &[&str], needle: &str) -> Option<Window> {
    let needle_lines: Vec<&str> = needle.trim_matches('\n').lines().take(50).collect();
    if lines.is_empty() || needle_lines.is_empty() {
        return None;
    }
    let k = needle_lines.len().min(lines.len());
    let needle_text = needle_lines.join("\n");
    let needle_grams = bigrams(&needle_text);
    let needle_total: usize = needle_grams.values().sum();
    // Bound the work on huge files: sample windows.
    let budget = 20_000_000usize;
    let cost = (lines.len() * needle_text.len().max(1)).max(1);
    let stride = cost.div_ceil(budget).max(1);
    let mut ranked: Vec<(usize, f32)> = (0..=lines.len() - k)
        .step_by(stride)
        .map(|start| {
            let window = lines[start..start + k].join("\n");
            let grams = bigrams(&window);
            let total: usize = grams.values().sum();
            let shared: usize = needle_grams
                .iter()
                .map(|(g, n)| (*n).min(*grams.get(g).unwrap_or(&0)))
                .sum();
            let dice = if needle_total + total == 0 {
                0.0
            } else {
                2.0 * shared as f32 / (needle_total + total) as f32
            };
            (start, dice)
        })
        .collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    ranked
        .into_iter()
        .take(8)
        .map(|(start, _)| {
            let window = lines[start..start + k].join("\n");
            let score = TextDiff::configure()
                .timeout(Duration::from_millis(50))
                .diff_chars(window.as_str(), needle_text.as_str())
                .ratio();
            Window {
                start,
                end: start + k,
                score,
            }
        })
        .max_by(|a, b| a.score.total_cmp(&b.score).then(b.start.cmp(&a.start)))
        .filter(|w| w.score > 0.3)
}

fn bigrams(s: &str) -> HashMap<(char, char), usize> {
    let chars: Vec<char> = s.chars().collect();
    let mut grams = HashMap::new();
    for pair in chars.windows(2) {
        *grams.entry((pair[0], pair[1])).or_insert(0) += 1;
    }
    grams
}

async fn plan_then<T: Send + 'static>(
    tool: &EditFile,
    args: Value,
    ctx: ToolContext,
    finish: impl FnOnce(Change, Edit, &Workspace, &ToolContext) -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    let args: Args = parse_args(args)?;
    let workspaces = tool.workspaces.clone();
    blocking(move || {
        let ws = open_workspace(&workspaces, &ctx)?;
        let path = WorkspacePath::parse_file(&args.path, &ws.path, "edit_file")?;
        with_current(&ws, &path, &ctx, |current| {
            let Some(before) = current.before.as_deref() else {
                return Err(missing(&ws, &path, &ctx));
            };
            let text = text_of(before, &path)?;
            let (edited, edit) = apply_edit(&path, text, &args)?;
            finish(current.change(edited.into_bytes())?, edit, &ws, &ctx)
        })
    })
    .await
}

fn missing(ws: &Workspace, path: &WorkspacePath, ctx: &ToolContext) -> ToolError {
    let err = confine::not_found_aware(
        std::io::Error::from(std::io::ErrorKind::NotFound),
        &ws.dir,
        path,
        ctx.path_rules.as_deref(),
    );
    if err
        .hint
        .as_deref()
        .is_some_and(|h| h.starts_with("Did you mean"))
    {
        err
    } else {
        err.with_hint("To create a new file use write_file; to find a file use glob.")
    }
}

#[async_trait]
impl Tool for EditFile {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "edit_file".into(),
            description: "Replace an exact string in an existing file of the workspace. \
                old_string must match the file exactly (whitespace and indentation included) \
                and occur exactly once, unless replace_all is true. Read the file first and copy \
                old_string from it, with enough surrounding lines to be unique. Returns the \
                changed lines with their numbers and a unified diff; undo with undo_edit."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1,
                             "description": "File path relative to the workspace root. No '..'."},
                    "old_string": {"type": "string", "minLength": 1,
                                   "description": "The exact text to replace (without read_file's line-number prefixes)."},
                    "new_string": {"type": "string",
                                   "description": "The text to put in its place; must differ from old_string."},
                    "replace_all": {"type": "boolean", "default": false,
                                    "description": "Replace every occurrence instead of requiring exactly one."}
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false
            }),
            output_schema: None,
            aliases: vec![],
            metadata: file_change_metadata("edit", "replace text in a file"),
            capability: reversible_capability(),
        }
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        let history_source = self.workspaces.clone();
        plan_then(self, args, ctx, move |change, edit, ws, ctx| {
            let diff = change.diff();
            let text = String::from_utf8_lossy(&change.after);
            let lines: Vec<&str> = text.lines().collect();
            let from = edit.first_line.saturating_sub(SNIPPET_CONTEXT).max(1);
            let to = (edit.first_line + edit.new_lines - 1 + SNIPPET_CONTEXT).min(lines.len());
            let snippet = if from <= to {
                numbered(from, lines[from - 1..to].iter().copied())
            } else {
                String::new()
            };
            let mut result = json!({
                "path": change.current.requested.display(),
                "replacements": edit.replacements,
                "first_changed_line": edit.first_line,
                "lines_added": diff.added,
                "lines_removed": diff.removed,
                "snippet": snippet,
                "diff": diff.text,
            });
            if diff.truncated {
                result["diff_truncated"] = json!(true);
            }
            // A call cancelled or timed out while this ran must not change the file.
            cancelled(ctx)?;
            let history = open_history(&history_source, ctx)?;
            let undo = change.commit(ws, &history, "edit_file", ctx)?;
            Ok(super::change::committed(result, undo))
        })
        .await
    }

    async fn dry_run(&self, args: Value, ctx: ToolContext) -> Result<DryRunResult, ToolError> {
        plan_then(self, args, ctx, |change, _, _, _| Ok(change.dry_run())).await
    }

    fn ui_hints(&self, _args: &Value, result: &Value) -> Option<Value> {
        diff_hints(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(old: &str, new: &str, all: bool) -> Args {
        Args {
            path: "f".into(),
            old_string: old.into(),
            new_string: new.into(),
            replace_all: all,
        }
    }

    fn path() -> WorkspacePath {
        WorkspacePath::parse("f.rs", std::path::Path::new("/w")).unwrap()
    }

    #[test]
    fn a_unique_string_is_replaced() {
        let (out, edit) = apply_edit(&path(), "a\nb\nc\n", &args("b", "B", false)).unwrap();
        assert_eq!(out, "a\nB\nc\n");
        assert_eq!((edit.replacements, edit.first_line), (1, 2));
    }

    #[test]
    fn ambiguity_names_the_lines() {
        let err = apply_edit(&path(), "x\ny\nx\n", &args("x", "z", false)).unwrap_err();
        assert_eq!(err.code, codes::AMBIGUOUS_MATCH);
        assert!(err.message.contains("2 times") && err.message.contains("lines 1, 3"));
        let (out, edit) = apply_edit(&path(), "x\ny\nx\n", &args("x", "z", true)).unwrap();
        assert_eq!((out.as_str(), edit.replacements), ("z\ny\nz\n", 2));
    }

    #[test]
    fn crlf_files_match_lf_old_strings() {
        let (out, _) =
            apply_edit(&path(), "a\r\nb\r\nc\r\n", &args("a\nb", "x\ny", false)).unwrap();
        assert_eq!(out, "x\r\ny\r\nc\r\n");
        let (out, _) = apply_edit(&path(), "a\r\nb\r\n", &args("b", "b\nc", false)).unwrap();
        assert_eq!(out, "a\r\nb\r\nc\r\n");
    }

    #[test]
    fn not_found_points_at_the_closest_lines() {
        let text = "fn main() {\n    let total = compute(1, 2);\n    println!(\"{total}\");\n}\n";
        let err = apply_edit(
            &path(),
            text,
            &args("let total = compute(1, 3);", "x", false),
        )
        .unwrap_err();
        assert_eq!(err.code, codes::STRING_NOT_FOUND);
        let hint = err.hint.unwrap();
        assert!(hint.contains("at line 2"), "{hint}");
        assert!(
            hint.contains("\n---\n    let total = compute(1, 2);\n---\n"),
            "{hint}"
        );
    }

    /// Text copied from read_file with its line numbers is named as such,
    /// not answered with the same text as the closest (a model copying
    /// that would send the same call again).
    #[test]
    fn line_numbers_copied_from_read_file_are_named() {
        let text = "fn main() {\n    println!(\"hi\");\n}\n";
        for needle in [
            "     1\tfn main() {\n     2\t    println!(\"hi\");",
            "     2\t    println!(\"hi\");\n",
        ] {
            let err = apply_edit(&path(), text, &args(needle, "x", false)).unwrap_err();
            assert_eq!(err.code, codes::STRING_NOT_FOUND);
            let hint = err.hint.unwrap();
            assert!(hint.contains("line number and a tab"), "{hint}");
            assert!(hint.contains("found once"), "{hint}");
        }
        let err = apply_edit(&path(), text, &args("     9\tnot there", "x", false)).unwrap_err();
        let hint = err.hint.unwrap();
        assert!(hint.contains("line number and a tab"), "{hint}");
        assert!(!hint.contains("found"), "{hint}");
        assert_eq!(without_line_numbers("12 apples\tand"), None);
        assert_eq!(without_line_numbers("\tindented"), None);
        assert_eq!(
            without_line_numbers("  10\ta\n  11\t\tb").as_deref(),
            Some("a\n\tb")
        );
    }

    #[test]
    fn whitespace_only_differences_are_named() {
        let text = "if x {\n        go();\n}\n";
        let err = apply_edit(&path(), text, &args("if x {\n    go();\n}", "y", false)).unwrap_err();
        assert!(err.hint.unwrap().contains("only in whitespace"));
    }

    #[test]
    fn empty_and_identical_strings_are_refused() {
        assert_eq!(
            apply_edit(&path(), "a", &args("", "b", false))
                .unwrap_err()
                .code,
            codes::INVALID_ARGUMENTS
        );
        assert_eq!(
            apply_edit(&path(), "a", &args("a", "a", false))
                .unwrap_err()
                .code,
            codes::NO_CHANGE
        );
    }
}
