//! `apply_diff`: apply a unified diff to one file, all hunks or none.
//!
//! The parser is deliberately lenient where models are sloppy and strict
//! where it matters: header counts (`@@ -a,b +c,d @@`) are read but the
//! hunk body decides (models often miscount), a blank line inside a hunk is
//! an empty context line, and a hunk may be found a few lines away from
//! where its header says (like `patch`'s offset). But every context and
//! removed line must be in the file, in order, after the previous hunk;
//! otherwise nothing is written.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::change::{Change, numbered, text_of, with_current};
use super::write::{diff_hints, file_change_metadata, reversible_capability};
use super::{WorkspacePath, blocking, cancelled, codes, open_history, open_workspace, parse_args};
use crate::tools::{DryRunResult, Tool, ToolContext, ToolDefinition, ToolError, ToolSuccess};
use crate::workspace::{Workspace, Workspaces};

/// `apply_diff`: apply a unified diff to a file.
pub struct ApplyDiff {
    workspaces: Arc<Workspaces>,
}

impl ApplyDiff {
    pub fn new(workspaces: Arc<Workspaces>) -> Self {
        ApplyDiff { workspaces }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    path: String,
    diff: String,
}

#[derive(Debug, Clone, PartialEq)]
enum Line {
    Context(String),
    Remove(String),
    Add(String),
}

#[derive(Debug, Clone, PartialEq)]
struct Hunk {
    header: String,
    old_start: usize,
    lines: Vec<Line>,
    /// "\ No newline at end of file" after an old-side line.
    old_no_eol: bool,
    /// … after a new-side line.
    new_no_eol: bool,
}

impl Hunk {
    fn old_side(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Context(s) | Line::Remove(s) => Some(s.as_str()),
                Line::Add(_) => None,
            })
            .collect()
    }

    fn new_side(&self) -> Vec<&str> {
        self.lines
            .iter()
            .filter_map(|l| match l {
                Line::Context(s) | Line::Add(s) => Some(s.as_str()),
                Line::Remove(_) => None,
            })
            .collect()
    }
}

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::new(codes::INVALID_DIFF, message, false).with_hint(
        "Give a unified diff of one file: optional '--- a/path' / '+++ b/path' lines, then \
         hunks that start with '@@ -start,count +start,count @@' and whose lines start with \
         ' ' (context), '-' (removed) or '+' (added).",
    )
}

/// `@@ -a[,b] +c[,d] @@ …` → (a, b, d).
fn parse_header(line: &str) -> Option<(usize, usize, usize)> {
    let rest = line.strip_prefix("@@ -")?;
    let (ranges, _) = rest.split_once(" @@")?;
    let (old, new) = ranges.split_once(" +")?;
    let range = |r: &str| -> Option<(usize, usize)> {
        match r.split_once(',') {
            Some((start, count)) => Some((start.parse().ok()?, count.parse().ok()?)),
            None => Some((r.parse().ok()?, 1)),
        }
    };
    let (old_start, old_count) = range(old)?;
    let (_, new_count) = range(new)?;
    Some((old_start, old_count, new_count))
}

fn parse(diff: &str) -> Result<(Vec<Hunk>, bool), ToolError> {
    let lines: Vec<&str> = diff
        .strip_suffix('\n')
        .unwrap_or(diff)
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let mut hunks: Vec<Hunk> = vec![];
    let mut file_headers = 0;
    let mut from_dev_null = false;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.starts_with("--- ") && lines.get(i + 1).is_some_and(|l| l.starts_with("+++ ")) {
            file_headers += 1;
            if file_headers > 1 || !hunks.is_empty() {
                return Err(invalid(
                    "the diff changes more than one file; apply_diff changes one file per call",
                ));
            }
            from_dev_null = line[4..].trim() == "/dev/null";
            if lines[i + 1][4..].trim() == "/dev/null" {
                return Err(invalid(
                    "the diff deletes the file; apply_diff only changes file content (use bash to delete files)",
                ));
            }
            i += 2;
            continue;
        }
        if !line.starts_with("@@") {
            if hunks.is_empty() {
                // Preamble: `diff --git`, `index`, prose.
                i += 1;
                continue;
            }
            return Err(invalid(format!(
                "line {} of the diff (\"{}\") is not part of a hunk",
                i + 1,
                shorten(line)
            )));
        }
        let (old_start, old_count, new_count) = parse_header(line).ok_or_else(|| {
            invalid(format!(
                "line {} of the diff is not a valid hunk header: \"{}\"",
                i + 1,
                shorten(line)
            ))
        })?;
        let mut hunk = Hunk {
            header: line.to_string(),
            old_start,
            lines: vec![],
            old_no_eol: false,
            new_no_eol: false,
        };
        i += 1;
        while i < lines.len() {
            let body = lines[i];
            if body.starts_with("@@")
                || (body.starts_with("--- ")
                    && lines.get(i + 1).is_some_and(|l| l.starts_with("+++ ")))
            {
                break;
            }
            match body.chars().next() {
                Some(' ') => hunk.lines.push(Line::Context(body[1..].to_string())),
                None => hunk.lines.push(Line::Context(String::new())),
                Some('-') => hunk.lines.push(Line::Remove(body[1..].to_string())),
                Some('+') => hunk.lines.push(Line::Add(body[1..].to_string())),
                Some('\\') => match hunk.lines.last() {
                    Some(Line::Remove(_)) => hunk.old_no_eol = true,
                    Some(Line::Add(_)) => hunk.new_no_eol = true,
                    Some(Line::Context(_)) => {
                        hunk.old_no_eol = true;
                        hunk.new_no_eol = true;
                    }
                    None => {}
                },
                Some(_) => {
                    return Err(invalid(format!(
                        "line {} of the diff (\"{}\", in hunk {}) starts with neither ' ', '-' nor '+'",
                        i + 1,
                        shorten(body),
                        hunks.len() + 1
                    )));
                }
            }
            i += 1;
        }
        // Blank lines after a hunk's counted lines separate hunks (or end
        // the text); they are not empty context lines.
        while matches!(hunk.lines.last(), Some(Line::Context(s)) if s.is_empty())
            && (i >= lines.len()
                || (hunk.old_side().len() > old_count && hunk.new_side().len() > new_count))
        {
            hunk.lines.pop();
        }
        if !hunk
            .lines
            .iter()
            .any(|l| matches!(l, Line::Add(_) | Line::Remove(_)))
        {
            return Err(invalid(format!(
                "hunk {} ({}) changes nothing",
                hunks.len() + 1,
                hunk.header
            )));
        }
        hunks.push(hunk);
    }
    if hunks.is_empty() {
        return Err(invalid(
            "the diff has no hunks ('@@ -start,count +start,count @@')",
        ));
    }
    Ok((hunks, from_dev_null))
}

fn shorten(s: &str) -> String {
    crate::protocol::clip(s, 80)
}

/// Apply all hunks to `text`; the first that does not fit fails the whole.
fn apply(path: &WorkspacePath, text: &str, hunks: &[Hunk]) -> Result<(String, usize), ToolError> {
    let eol_cr = super::change::line_ending_of(text) == "\r\n";
    let final_newline = text.is_empty() || text.ends_with('\n');
    let old: Vec<&str> = if text.is_empty() {
        vec![]
    } else {
        text.strip_suffix('\n')
            .unwrap_or(text)
            .split('\n')
            .collect()
    };
    let mut out: Vec<String> = Vec::with_capacity(old.len());
    let mut cursor = 0usize;
    let mut offset: isize = 0;
    let mut new_final_newline = final_newline;
    let mut fuzzy = 0usize;
    for (n, hunk) in hunks.iter().enumerate() {
        let expected = hunk.old_side();
        let pos = if expected.is_empty() {
            // Pure insertion: `-a,0` inserts after line a.
            let at = (hunk.old_start as isize + offset).max(0) as usize;
            if at < cursor || at > old.len() {
                return Err(does_not_apply(path, n, hunks.len(), hunk, &old, at, None));
            }
            at
        } else {
            let hint = (hunk.old_start as isize - 1 + offset).max(0) as usize;
            match find(
                &old,
                &expected,
                cursor,
                hint,
                |a| a.trim_end_matches('\r'),
                |b| b,
            )
            .or_else(|| {
                let found = find(&old, &expected, cursor, hint, str::trim_end, str::trim_end);
                if found.is_some() {
                    fuzzy += 1;
                }
                found
            }) {
                Some(pos) => pos,
                None => {
                    return Err(does_not_apply(
                        path,
                        n,
                        hunks.len(),
                        hunk,
                        &old,
                        hint.max(cursor),
                        Some(&expected),
                    ));
                }
            }
        };
        out.extend(old[cursor..pos].iter().map(|s| s.to_string()));
        // Context lines keep the file's bytes; added lines get its endings.
        let mut old_i = pos;
        for line in &hunk.lines {
            match line {
                Line::Context(_) => {
                    out.push(old[old_i].to_string());
                    old_i += 1;
                }
                Line::Remove(_) => old_i += 1,
                Line::Add(s) => out.push(if eol_cr { format!("{s}\r") } else { s.clone() }),
            }
        }
        cursor = old_i;
        offset = pos as isize - (hunk.old_start as isize - 1).max(0);
        if expected.is_empty() {
            offset = pos as isize - hunk.old_start as isize;
        }
        if cursor == old.len() {
            new_final_newline = if hunk.new_no_eol {
                false
            } else if hunk.old_no_eol {
                true
            } else {
                final_newline
            };
        }
    }
    out.extend(old[cursor..].iter().map(|s| s.to_string()));
    if eol_cr
        && let Some(last) = out.last_mut()
        && !new_final_newline
    {
        // No final "\r\n": the last line keeps no "\r" either.
        if last.ends_with('\r') {
            last.pop();
        }
    }
    let mut new = out.join("\n");
    if new_final_newline && !out.is_empty() {
        new.push('\n');
    }
    Ok((new, fuzzy))
}

/// The position in `[from, len - needle.len()]` nearest to `hint` (the
/// one before it on a tie) where `needle` matches, a file's line and a
/// hunk's compared by their keys (`hay_key`, `needle_key`). The places
/// where every line's hash matches are found in one pass over the file
/// (a prefix function over the hunk's hashes), and only those are
/// compared line by line: comparing the hunk in full at every position
/// cost minutes for a hunk of 20,000 lines that matches nowhere in a file
/// of 200,000 equal lines.
fn find(
    hay: &[&str],
    needle: &[&str],
    from: usize,
    hint: usize,
    hay_key: impl Fn(&str) -> &str,
    needle_key: impl Fn(&str) -> &str,
) -> Option<usize> {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let last = hay.len().checked_sub(needle.len())?;
    if from > last {
        return None;
    }
    if needle.is_empty() {
        return Some(hint.clamp(from, last));
    }
    let hash = |line: &str| {
        let mut h = DefaultHasher::new();
        line.hash(&mut h);
        h.finish()
    };
    let pattern: Vec<u64> = needle.iter().map(|l| hash(needle_key(l))).collect();
    // How far each prefix of the pattern also ends it.
    let mut border = vec![0usize; pattern.len()];
    let mut k = 0;
    for i in 1..pattern.len() {
        while k > 0 && pattern[i] != pattern[k] {
            k = border[k - 1];
        }
        if pattern[i] == pattern[k] {
            k += 1;
        }
        border[i] = k;
    }
    let mut starts = Vec::new();
    let mut k = 0;
    for (i, line) in hay.iter().enumerate().skip(from) {
        let h = hash(hay_key(line));
        while k > 0 && h != pattern[k] {
            k = border[k - 1];
        }
        if h == pattern[k] {
            k += 1;
        }
        if k == pattern.len() {
            starts.push(i + 1 - k);
            k = border[k - 1];
        }
    }
    let hint = hint.clamp(from, last);
    starts.sort_by_key(|&pos| (pos.abs_diff(hint), pos > hint));
    starts.into_iter().find(|&pos| {
        needle
            .iter()
            .enumerate()
            .all(|(i, n)| hay_key(hay[pos + i]) == needle_key(n))
    })
}

fn does_not_apply(
    path: &WorkspacePath,
    n: usize,
    total: usize,
    hunk: &Hunk,
    old: &[&str],
    at: usize,
    expected: Option<&[&str]>,
) -> ToolError {
    let line = hunk.old_start.max(1);
    let mut message = format!(
        "hunk {} of {total} ({}) does not apply to '{}'",
        n + 1,
        hunk.header,
        path.display()
    );
    let mut hint = String::new();
    match expected {
        Some(expected) => {
            // The first expected line that is not where it should be.
            let mismatch = (0..expected.len())
                .find(|i| old.get(at + i).map(|l| l.trim_end_matches('\r')) != Some(expected[*i]))
                .unwrap_or(0);
            message.push_str(&format!(
                ": expected its context at line {line}, but line {} of the file is not \"{}\"",
                at + mismatch + 1,
                shorten(expected[mismatch])
            ));
            let from = at.saturating_sub(2).min(old.len());
            let to = (at + expected.len() + 2).min(old.len());
            if from < to {
                hint = format!(
                    "The file has there:\n{}\n",
                    numbered(from + 1, old[from..to].iter().copied())
                );
            } else {
                hint = format!("The file has only {} lines.\n", old.len());
            }
        }
        None => message.push_str(&format!(
            ": it inserts after line {} but the file has {} lines",
            hunk.old_start,
            old.len()
        )),
    }
    hint.push_str(
        "Nothing was changed. Read the file again and make the hunk's context and '-' lines \
         match it exactly, or use edit_file.",
    );
    ToolError::new(codes::DIFF_DOES_NOT_APPLY, message, false).with_hint(hint)
}

async fn plan_then<T: Send + 'static>(
    tool: &ApplyDiff,
    args: Value,
    ctx: ToolContext,
    finish: impl FnOnce(Change, usize, usize, &Workspace, &ToolContext) -> Result<T, ToolError>
    + Send
    + 'static,
) -> Result<T, ToolError> {
    let args: Args = parse_args(args)?;
    let (hunks, from_dev_null) = parse(&args.diff)?;
    let workspaces = tool.workspaces.clone();
    blocking(move || {
        let ws = open_workspace(&workspaces, &ctx)?;
        let path = WorkspacePath::parse_file(&args.path, &ws.path, "apply_diff")?;
        with_current(&ws, &path, &ctx, |current| {
            let text = match current.before.as_deref() {
                Some(bytes) => text_of(bytes, &path)?,
                // A diff against an absent file creates it from pure insertions.
                None if from_dev_null || hunks.iter().all(|h| h.old_side().is_empty()) => "",
                None => {
                    return Err(super::confine::io_error(
                        std::io::Error::from(std::io::ErrorKind::NotFound),
                        &path,
                    ));
                }
            };
            if current.before.is_some() && from_dev_null && !text.is_empty() {
                return Err(invalid(format!(
                    "the diff creates '{}' (from /dev/null), but the file exists",
                    path.display()
                )));
            }
            let (new, fuzzy) = apply(&path, text, &hunks)?;
            if new.as_bytes() == current.before.as_deref().unwrap_or_default()
                && current.before.is_some()
            {
                return Err(ToolError::new(
                    codes::NO_CHANGE,
                    "applying the diff leaves the file unchanged",
                    false,
                )
                .with_hint("The file has these changes already, or the diff's + and - lines are the same: check the file with read_file."));
            }
            finish(
                current.change(new.into_bytes())?,
                hunks.len(),
                fuzzy,
                &ws,
                &ctx,
            )
        })
    })
    .await
}

#[async_trait]
impl Tool for ApplyDiff {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "apply_diff".into(),
            description: "Apply a unified diff (as produced by `diff -u` or `git diff`) to one \
                file of the workspace. Every hunk must apply — context and '-' lines must match \
                the file — or nothing changes. Hunks may sit a few lines away from their header's \
                line number. A diff from /dev/null creates the file. Undo with undo_edit."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1,
                             "description": "File path relative to the workspace root. The diff's own ---/+++ names are ignored."},
                    "diff": {"type": "string", "minLength": 1,
                             "description": "Unified diff of this one file: hunks starting with '@@ -l,s +l,s @@'."}
                },
                "required": ["path", "diff"],
                "additionalProperties": false
            }),
            output_schema: None,
            aliases: vec![],
            metadata: file_change_metadata("edit", "patch a file with a unified diff"),
            capability: reversible_capability(),
        }
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        let history_source = self.workspaces.clone();
        plan_then(self, args, ctx, move |change, hunks, fuzzy, ws, ctx| {
            let diff = change.diff();
            let mut result = json!({
                "path": change.current.requested.display(),
                "hunks_applied": hunks,
                "created": change.created(),
                "lines_added": diff.added,
                "lines_removed": diff.removed,
                "diff": diff.text,
            });
            if fuzzy > 0 {
                result["whitespace_fuzz_hunks"] = json!(fuzzy);
            }
            if diff.truncated {
                result["diff_truncated"] = json!(true);
            }
            // A call cancelled or timed out while this ran must not change the file.
            cancelled(ctx)?;
            let history = open_history(&history_source, ctx)?;
            let undo = change.commit(ws, &history, "apply_diff", ctx)?;
            Ok(super::change::committed(result, undo))
        })
        .await
    }

    async fn dry_run(&self, args: Value, ctx: ToolContext) -> Result<DryRunResult, ToolError> {
        plan_then(self, args, ctx, |change, _, _, _, _| Ok(change.dry_run())).await
    }

    fn ui_hints(&self, _args: &Value, result: &Value) -> Option<Value> {
        diff_hints(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path() -> WorkspacePath {
        WorkspacePath::parse("f.txt", std::path::Path::new("/w")).unwrap()
    }

    fn patch(text: &str, diff: &str) -> Result<String, ToolError> {
        let (hunks, _) = parse(diff)?;
        apply(&path(), text, &hunks).map(|(s, _)| s)
    }

    /// A hunk is placed in time that grows with the file and the hunk,
    /// not with their product (a hunk of 5,000 equal context lines and a
    /// line the file lacks, against 200,000 such lines, took a billion
    /// comparisons); one that does match goes where its header says,
    /// nearest first, the earlier of two as near.
    #[test]
    fn a_hunk_is_placed_in_time_proportional_to_the_file() {
        let file = "x\n".repeat(200_000);
        let diff = format!(
            "--- a/f\n+++ b/f\n@@ -1,5001 +1,5000 @@\n{}-y\n",
            " x\n".repeat(5_000)
        );
        let refused = patch(&file, &diff).unwrap_err();
        assert_eq!(refused.code, codes::DIFF_DOES_NOT_APPLY);
        let diff = format!(
            "--- a/f\n+++ b/f\n@@ -100001,5001 +100001,5001 @@\n{}-x\n+y\n",
            " x\n".repeat(5_000)
        );
        let changed = patch(&file, &diff).unwrap();
        let lines: Vec<&str> = changed.lines().collect();
        assert_eq!(lines.len(), 200_000);
        assert_eq!(lines.iter().position(|l| *l == "y"), Some(105_000));
        // The same hunk, asked for between two places equally near.
        let hay = ["a", "b", "a", "b", "a"];
        assert_eq!(find(&hay, &["a"], 0, 1, |l| l, |l| l), Some(0));
        assert_eq!(find(&hay, &["b", "a"], 0, 2, |l| l, |l| l), Some(1));
        assert_eq!(find(&hay, &["c"], 0, 2, |l| l, |l| l), None);
    }

    #[test]
    fn headers_are_parsed() {
        assert_eq!(parse_header("@@ -3,4 +3,5 @@ fn x()"), Some((3, 4, 5)));
        assert_eq!(parse_header("@@ -1 +1 @@"), Some((1, 1, 1)));
        assert_eq!(parse_header("@@ -a +1 @@"), None);
    }

    #[test]
    fn hunks_apply_in_order_with_offsets() {
        let text = "a\nb\nc\nd\ne\nf\ng\n";
        let diff =
            "--- a/f.txt\n+++ b/f.txt\n@@ -2,2 +2,2 @@\n b\n-c\n+C\n@@ -6,1 +6,2 @@\n f\n+F\n";
        assert_eq!(patch(text, diff).unwrap(), "a\nb\nC\nd\ne\nf\nF\ng\n");
        // Header off by two lines: still found.
        let diff = "@@ -4,2 +4,2 @@\n b\n-c\n+C\n";
        assert_eq!(patch(text, diff).unwrap(), "a\nb\nC\nd\ne\nf\ng\n");
    }

    #[test]
    fn a_mismatched_hunk_names_itself_and_the_line() {
        let text = "a\nb\nc\n";
        let diff = "@@ -1,2 +1,2 @@\n a\n-b\n+B\n@@ -3,1 +3,1 @@\n-x\n+y\n";
        let err = patch(text, diff).unwrap_err();
        assert_eq!(err.code, codes::DIFF_DOES_NOT_APPLY);
        assert!(err.message.contains("hunk 2 of 2"), "{}", err.message);
        assert!(err.message.contains("line 3"), "{}", err.message);
    }

    #[test]
    fn missing_final_newlines_are_honoured() {
        let diff = "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n";
        assert_eq!(patch("a\nb", diff).unwrap(), "a\nc\n");
        let diff = "@@ -1,2 +1,2 @@\n a\n-b\n+c\n\\ No newline at end of file\n";
        assert_eq!(patch("a\nb\n", diff).unwrap(), "a\nc");
    }

    #[test]
    fn crlf_files_keep_their_endings() {
        let diff = "@@ -1,2 +1,3 @@\n a\n+x\n b\n";
        assert_eq!(patch("a\r\nb\r\n", diff).unwrap(), "a\r\nx\r\nb\r\n");
    }

    #[test]
    fn new_files_come_from_pure_insertions() {
        let diff = "--- /dev/null\n+++ b/f.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n";
        assert_eq!(patch("", diff).unwrap(), "one\ntwo\n");
    }

    #[test]
    fn malformed_diffs_are_invalid() {
        for diff in [
            "no hunks here",
            "@@ -1 +1 @@\n a\n",
            "@@ -1 +1 @@\n-a\n+b\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n",
            "@@ -1 +1 @@\n-a\n*b\n",
            "--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n",
        ] {
            assert_eq!(parse(diff).unwrap_err().code, codes::INVALID_DIFF, "{diff}");
        }
    }

    #[test]
    fn blank_context_lines_without_a_space_are_accepted() {
        let text = "a\n\nb\n";
        let diff = "@@ -1,3 +1,3 @@\n a\n\n-b\n+B\n";
        assert_eq!(patch(text, diff).unwrap(), "a\n\nB\n");
    }
}
