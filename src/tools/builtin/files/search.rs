//! `glob` and `grep` over the confined walk ([`super::walk`]).

use std::io;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use globset::{GlobBuilder, GlobMatcher};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use serde::Deserialize;
use serde_json::{Value, json};

use super::confine::{
    WorkspacePath, hard_linked, open_regular, open_regular_entry, opened_where_judged,
    refuse_hard_linked, security_violation,
};
use super::walk::{self, Kind};
use super::{blocking, codes, hard_links_note, open_workspace, parse_args, rules_note};
use crate::protocol::ui_schema::hints;
use crate::tools::{
    PermissionClass, Tool, ToolCapability, ToolContext, ToolDefinition, ToolError, ToolMetadata,
    ToolSuccess,
};
use crate::workspace::Workspaces;

/// Most paths `glob` returns.
pub const GLOB_CAP: usize = 1_000;
/// Most directory entries one `glob` or `grep` walk visits.
pub const WALK_CAP: usize = 100_000;
/// `grep`'s default `head_limit`.
pub const GREP_DEFAULT_LIMIT: usize = 250;
pub const GREP_MAX_LIMIT: usize = 5_000;
pub const GREP_MAX_CONTEXT: usize = 20;
/// Characters of entries one call returns at most, in all (as `read_file`
/// shows at most: one result, streamed as one event with its ui_schema,
/// stays far below what an AG-UI client reads in one frame).
pub const GREP_MAX_CHARS: usize = super::read::MAX_SHOWN_CHARS;
/// Matched lines longer than this are cut in `content` mode.
pub const GREP_MAX_LINE: usize = 500;
/// The searcher's heap limit: a line longer than this (with the context
/// lines held before it) is not searched, and neither is the rest of its
/// file (reported in `not_searched`).
pub const GREP_HEAP_LIMIT: usize = super::MAX_LINE_BYTES;
/// Files named in `not_searched` at most (all are counted).
pub const GREP_MAX_NOT_SEARCHED: usize = 20;

fn metadata(read_only_hint: &str, audit: &str) -> ToolMetadata {
    ToolMetadata {
        concurrency_safe: true,
        read_only: true,
        destructive: false,
        permission_class: PermissionClass::File,
        audit_operation: audit.into(),
        search_hint: Some(read_only_hint.into()),
        ..ToolMetadata::default()
    }
}

fn read_capability() -> ToolCapability {
    ToolCapability {
        affected_resources: vec!["file".into()],
        ..ToolCapability::default()
    }
}

/// `pattern` without leading `./` (and the slashes after one).
fn below_here(pattern: &str) -> &str {
    let mut pattern = pattern;
    while let Some(rest) = pattern.strip_prefix("./") {
        pattern = rest.trim_start_matches('/');
    }
    pattern
}

/// A glob pattern is matched below the search directory, so it cannot
/// reach outside; one that tries (absolute, `..`) is refused all the same
/// rather than silently matching nothing. A leading `./` (the search
/// directory itself, as paths take it) is dropped: no path a walk yields
/// starts with it, so `./src/*.rs` would otherwise match nothing.
fn check_pattern(pattern: &str, what: &str) -> Result<GlobMatcher, ToolError> {
    let pattern = below_here(pattern);
    if pattern.is_empty() {
        return Err(ToolError::new(
            codes::INVALID_ARGUMENTS,
            format!("{what} must not be empty"),
            false,
        ));
    }
    if pattern.starts_with('/')
        || pattern
            .split(['/', '{', '}', ','])
            .any(|segment| segment == "..")
    {
        return Err(security_violation(
            pattern,
            "glob patterns are relative to the search directory and cannot contain '..' or start with '/'",
        ));
    }
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| {
            ToolError::new(
                codes::INVALID_PATTERN,
                format!("invalid {what}: {e}"),
                false,
            )
            .with_hint("Fix the glob pattern (`*` within a directory, `**` across directories, `{a,b}` for alternatives) and call again.")
        })
}

/// `glob`: find files by name pattern.
pub struct Glob {
    workspaces: Arc<Workspaces>,
}

impl Glob {
    pub fn new(workspaces: Arc<Workspaces>) -> Self {
        Glob { workspaces }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GlobArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

#[async_trait]
impl Tool for Glob {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "glob".into(),
            description: format!(
                "Find files in the workspace by glob pattern, e.g. '**/*.rs' or 'src/**/mod.{{rs,py}}'. \
                 '*' does not cross '/', '**' does: '*.rs' matches only directly in the search \
                 directory. Files ignored by .gitignore/.ignore, .git directories and files the \
                 permission rules do not let you read (counted in skipped_by_rules) are skipped; \
                 symbolic links are listed but not followed. Returns paths relative to the \
                 workspace root, most recently modified first, at most {GLOB_CAP}."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "minLength": 1,
                                "description": "Glob pattern, relative to `path`."},
                    "path": {"type": "string",
                             "description": "Directory to search, relative to the workspace root (default: the root)."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
            output_schema: None,
            aliases: vec![],
            metadata: metadata("find files by name", "read"),
            capability: read_capability(),
        }
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        let args: GlobArgs = parse_args(args)?;
        let matcher = check_pattern(&args.pattern, "pattern")?;
        let workspaces = self.workspaces.clone();
        blocking(move || {
            let ws = open_workspace(&workspaces, &ctx)?;
            let start = WorkspacePath::parse(args.path.as_deref().unwrap_or("."), &ws.path)?;
            let mut found: Vec<(SystemTime, String)> = vec![];
            let summary = walk::walk(&ws.dir, &start, &ctx, WALK_CAP, true, |entry| {
                if matches!(entry.kind, Kind::File | Kind::Symlink) {
                    let below = entry.path.rel().strip_prefix(start.rel()).unwrap_or(entry.path.rel());
                    if matcher.is_match(below) {
                        let modified = entry
                            .meta
                            .as_ref()
                            .and_then(|m| m.modified().ok())
                            .map(|t| t.into_std())
                            .unwrap_or(SystemTime::UNIX_EPOCH);
                        found.push((modified, entry.path.display()));
                    }
                }
                ControlFlow::Continue(())
            })?;
            found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
            let count = found.len();
            let capped = count > GLOB_CAP;
            found.truncate(GLOB_CAP);
            let files: Vec<String> = found.into_iter().map(|(_, p)| p).collect();
            let mut result = json!({
                "pattern": args.pattern,
                "path": start.display(),
                "files": files,
                "count": count,
                "truncated": capped || summary.truncated,
                "skipped_by_rules": summary.skipped_by_rules,
            });
            if let Some(note) = rules_note(summary.skipped_by_rules) {
                result["rules_note"] = json!(note);
            }
            if capped {
                result["note"] = json!(format!(
                    "{count} files matched; the {GLOB_CAP} most recently modified are listed. Narrow the pattern or path."
                ));
            }
            if summary.truncated {
                result["walk_truncated"] = json!(format!(
                    "the search stopped after {WALK_CAP} entries; narrow the path"
                ));
            }
            Ok(ToolSuccess {
                result,
                partial: capped || summary.truncated,
                undo: None,
                undoes: None,
            })
        })
        .await
    }

    fn ui_hints(&self, _args: &Value, result: &Value) -> Option<Value> {
        let files = result.get("files")?.as_array()?;
        let items: Vec<Value> = files.iter().map(|f| json!({"label": f})).collect();
        let pattern = result["pattern"].as_str().unwrap_or_default();
        Some(hints::list(
            Some(&format!("Files matching {pattern}")),
            &items,
            "No files matched",
        ))
    }
}

/// `grep`: search file contents with a regular expression.
pub struct Grep {
    workspaces: Arc<Workspaces>,
}

impl Grep {
    pub fn new(workspaces: Arc<Workspaces>) -> Self {
        Grep { workspaces }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
enum Mode {
    #[default]
    FilesWithMatches,
    Content,
    Count,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrepArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    output_mode: Mode,
    #[serde(default)]
    context: Option<usize>,
    #[serde(default)]
    head_limit: Option<usize>,
    #[serde(default)]
    case_insensitive: bool,
}

/// What a search collects, across files.
struct Output {
    mode: Mode,
    limit: usize,
    entries: Vec<String>,
    truncated: bool,
    /// Characters of `entries`; past [`GREP_MAX_CHARS`] the output stops.
    chars: usize,
    chars_spent: bool,
    files_searched: usize,
    files_matched: usize,
    total_matches: u64,
    context: bool,
    /// Files not searched, or not to their end (path, why), at most
    /// [`GREP_MAX_NOT_SEARCHED`]; `not_searched_count` counts them all.
    not_searched: Vec<Value>,
    not_searched_count: usize,
}

impl Output {
    /// Add an entry; false when the limit is reached.
    fn push(&mut self, entry: String) -> bool {
        if self.entries.len() >= self.limit {
            self.truncated = true;
            return false;
        }
        let chars = entry.chars().count();
        if self.chars + chars > GREP_MAX_CHARS {
            self.truncated = true;
            self.chars_spent = true;
            return false;
        }
        self.chars += chars;
        self.entries.push(entry);
        true
    }

    fn not_searched(&mut self, path: &str, why: String) {
        self.not_searched_count += 1;
        if self.not_searched.len() < GREP_MAX_NOT_SEARCHED {
            self.not_searched.push(json!({"path": path, "reason": why}));
        }
    }
}

/// Why a search of a file stopped with `err`, in words for the result.
fn why_not_searched(err: &io::Error, matches: u64) -> String {
    let so_far = if matches > 0 {
        format!("; the {matches} match(es) before it are reported")
    } else {
        String::new()
    };
    // grep-searcher's heap limit: "configured allocation limit (…) exceeded".
    if err.to_string().contains("allocation limit") {
        format!(
            "it has a line longer than {GREP_HEAP_LIMIT} bytes (with the context lines before it); the file was searched only up to that line{so_far}"
        )
    } else {
        format!(
            "it could not be read ({}){so_far}",
            io::Error::from(err.kind())
        )
    }
}

struct FileSink<'a> {
    out: &'a mut Output,
    path: &'a str,
    matches: u64,
    /// Where the search stopped at binary data (a NUL byte), if it did.
    binary_at: Option<u64>,
}

fn line_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end_matches(['\n', '\r']);
    let count = text.chars().count();
    if count > GREP_MAX_LINE {
        let kept: String = text.chars().take(GREP_MAX_LINE).collect();
        format!("{kept}… [{} more characters]", count - GREP_MAX_LINE)
    } else {
        text.to_string()
    }
}

impl Sink for FileSink<'_> {
    type Error = io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, io::Error> {
        let first = mat.line_number().unwrap_or(0);
        let lines: Vec<&[u8]> = mat.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            self.matches += 1;
            self.out.total_matches += 1;
            match self.out.mode {
                Mode::FilesWithMatches => return Ok(false),
                Mode::Count => {}
                Mode::Content => {
                    let entry = format!("{}:{}:{}", self.path, first + i as u64, line_text(line));
                    if !self.out.push(entry) {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, io::Error> {
        if self.out.mode == Mode::Content {
            let number = ctx.line_number().unwrap_or(0);
            let entry = format!("{}-{}-{}", self.path, number, line_text(ctx.bytes()));
            return Ok(self.out.push(entry));
        }
        Ok(true)
    }

    fn context_break(&mut self, _: &Searcher) -> Result<bool, io::Error> {
        Ok(self.out.mode != Mode::Content || self.out.push("--".into()))
    }

    fn binary_data(&mut self, _: &Searcher, offset: u64) -> Result<bool, io::Error> {
        self.binary_at = Some(offset);
        Ok(false)
    }
}

/// Search one open file; false when the output is full. A walk skips a
/// binary file quietly (as the description says); one the call names
/// (`named`) is said to be binary in `not_searched`, so that no match
/// is not taken for an answer.
fn search_file(
    searcher: &mut Searcher,
    matcher: &RegexMatcher,
    file: std::fs::File,
    path: &str,
    out: &mut Output,
    named: bool,
) -> bool {
    out.files_searched += 1;
    if out.context && out.mode == Mode::Content && !out.entries.is_empty() {
        // Separate this file's lines from the previous file's; undone
        // below if the file has no match.
        out.entries.push("--".into());
    }
    let before = out.entries.len();
    let mut sink = FileSink {
        out,
        path,
        matches: 0,
        binary_at: None,
    };
    // A file that cannot be read (or has a line longer than the heap
    // limit) is searched up to there, and said to be.
    let searched = searcher.search_file(matcher, &file, &mut sink);
    let (matches, binary_at) = (sink.matches, sink.binary_at);
    if let Err(e) = searched {
        out.not_searched(path, why_not_searched(&e, matches));
    } else if let (Some(offset), true) = (binary_at, named) {
        let searched = if matches == 0 {
            "it was not searched as text"
        } else {
            "it was searched as text only up to there"
        };
        out.not_searched(
            path,
            format!("it is binary (a NUL byte at offset {offset}); {searched}"),
        );
    }
    if matches == 0 && out.context && out.mode == Mode::Content && before > 0 {
        out.entries.pop();
    }
    if matches > 0 {
        out.files_matched += 1;
        let entry = match out.mode {
            Mode::FilesWithMatches => Some(path.to_string()),
            Mode::Count => Some(format!("{path}:{matches}")),
            Mode::Content => None,
        };
        if let Some(entry) = entry
            && !out.push(entry)
        {
            return false;
        }
    }
    !out.truncated
}

#[async_trait]
impl Tool for Grep {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "grep".into(),
            description: format!(
                "Search file contents in the workspace with a regular expression (Rust regex \
                 syntax, as ripgrep). output_mode: 'files_with_matches' (default: paths of \
                 matching files), 'content' (matching lines as 'path:line:text', context lines \
                 as 'path-line-text', '--' between groups) or 'count' ('path:count'). Files \
                 ignored by .gitignore/.ignore, .git directories, binary files and files the \
                 permission rules do not let you read (counted in skipped_by_rules) are skipped, \
                 and, while such rules are in force, files with other names (hard links; \
                 counted in skipped_hard_links); symbolic links are not followed. A file with a line longer than \
                 {GREP_HEAP_LIMIT} bytes is searched only up to that line and named in \
                 not_searched. Files are searched in path order; at most head_limit entries \
                 (default {GREP_DEFAULT_LIMIT}) are returned."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "minLength": 1,
                                "description": "Regular expression to search for, e.g. 'fn\\s+main' or 'TODO'."},
                    "path": {"type": "string",
                             "description": "File or directory to search, relative to the workspace root (default: the root)."},
                    "glob": {"type": "string",
                             "description": "Only search files matching this glob, e.g. '*.rs' (matched against the file name) or 'src/**/*.ts' (against the path below `path`)."},
                    "output_mode": {"type": "string", "enum": ["files_with_matches", "content", "count"],
                                    "default": "files_with_matches",
                                    "description": "What to return."},
                    "context": {"type": "integer", "minimum": 0, "maximum": GREP_MAX_CONTEXT,
                                "description": "Lines of context before and after each match (content mode)."},
                    "head_limit": {"type": "integer", "minimum": 1, "maximum": GREP_MAX_LIMIT,
                                   "description": format!("Most entries to return (default {GREP_DEFAULT_LIMIT}).")},
                    "case_insensitive": {"type": "boolean", "default": false,
                                         "description": "Match regardless of case."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
            output_schema: None,
            aliases: vec![],
            metadata: metadata("search file contents", "read"),
            capability: read_capability(),
        }
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        let args: GrepArgs = parse_args(args)?;
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(args.case_insensitive)
            .line_terminator(Some(b'\n'))
            .build(&args.pattern)
            .map_err(|e| {
                ToolError::new(
                    codes::INVALID_PATTERN,
                    format!("invalid regular expression: {e}"),
                    false,
                )
                .with_hint("The pattern uses Rust regex syntax; escape literal characters such as '(' or '{' with '\\'.")
            })?;
        let file_filter = args
            .glob
            .as_deref()
            .map(|g| check_pattern(g, "glob").map(|m| (m, below_here(g).contains('/'))))
            .transpose()?;
        let context = args.context.unwrap_or(0).min(GREP_MAX_CONTEXT);
        let limit = args
            .head_limit
            .unwrap_or(GREP_DEFAULT_LIMIT)
            .clamp(1, GREP_MAX_LIMIT);
        let workspaces = self.workspaces.clone();
        blocking(move || {
            let ws = open_workspace(&workspaces, &ctx)?;
            let start = WorkspacePath::parse(args.path.as_deref().unwrap_or("."), &ws.path)?;
            let mut builder = SearcherBuilder::new();
            builder
                .line_number(true)
                .heap_limit(Some(GREP_HEAP_LIMIT))
                .binary_detection(BinaryDetection::quit(0));
            if args.output_mode == Mode::Content {
                builder.before_context(context).after_context(context);
            }
            let mut searcher = builder.build();
            let mut out = Output {
                mode: args.output_mode,
                limit,
                entries: vec![],
                truncated: false,
                chars: 0,
                chars_spent: false,
                files_searched: 0,
                files_matched: 0,
                total_matches: 0,
                context: context > 0,
                not_searched: vec![],
                not_searched_count: 0,
            };
            let meta = ws
                .dir
                .metadata(start.as_path())
                .map_err(|e| {
                    super::confine::not_found_aware(e, &ws.dir, &start, ctx.path_rules.as_deref())
                })?;
            let mut walk_truncated = false;
            let mut skipped_by_rules = 0;
            let mut skipped_hard_links = 0usize;
            if meta.is_dir() {
                let summary = walk::walk(&ws.dir, &start, &ctx, WALK_CAP, false, |entry| {
                    if entry.kind != Kind::File {
                        return ControlFlow::Continue(());
                    }
                    if let Some((glob, by_path)) = &file_filter {
                        let subject = if *by_path {
                            entry.path.rel().strip_prefix(start.rel()).unwrap_or(entry.path.rel())
                        } else {
                            std::path::Path::new(entry.name)
                        };
                        if !glob.is_match(subject) {
                            return ControlFlow::Continue(());
                        }
                    }
                    let Some((file, meta)) = open_regular_entry(entry.parent, entry.name) else {
                        return ControlFlow::Continue(());
                    };
                    if hard_linked(&meta, ctx.path_rules.as_deref()) {
                        skipped_hard_links += 1;
                        return ControlFlow::Continue(());
                    }
                    // One its owner may not read is not read (as a command
                    // in the workspace could not), and said so.
                    if cap_std::fs::PermissionsExt::mode(&meta.permissions()) & 0o400 == 0 {
                        out.not_searched(
                            &entry.path.display(),
                            "its mode does not let its owner read it".into(),
                        );
                        return ControlFlow::Continue(());
                    }
                    if search_file(&mut searcher, &matcher, file.into_std(), &entry.path.display(), &mut out, false) {
                        ControlFlow::Continue(())
                    } else {
                        ControlFlow::Break(())
                    }
                })?;
                walk_truncated = summary.truncated;
                skipped_by_rules = summary.skipped_by_rules;
            } else {
                if let Some(parent) = start.parent() {
                    super::confine::check_dir_modes(&ws.dir, &parent, 0, &start)?;
                }
                let (file, meta) = open_regular(&ws.dir, &start)?;
                opened_where_judged(&ws.dir, &file, &start, ctx.judged_path.as_ref())?;
                refuse_hard_linked(&meta, &start, ctx.path_rules.as_deref(), "searched")?;
                super::confine::check_own_mode(
                    cap_std::fs::PermissionsExt::mode(&meta.permissions()),
                    0o400,
                    &start,
                )?;
                search_file(&mut searcher, &matcher, file.into_std(), &start.display(), &mut out, true);
            }
            let truncated = out.truncated || walk_truncated;
            let partial = truncated || out.not_searched_count > 0;
            let mut result = json!({
                "pattern": args.pattern,
                "path": start.display(),
                "output_mode": match out.mode {
                    Mode::FilesWithMatches => "files_with_matches",
                    Mode::Content => "content",
                    Mode::Count => "count",
                },
                "entries": out.entries,
                "num_entries": out.entries.len(),
                "files_searched": out.files_searched,
                "files_matched": out.files_matched,
                "truncated": truncated,
                "skipped_by_rules": skipped_by_rules,
                "skipped_hard_links": skipped_hard_links,
            });
            if let Some(note) = rules_note(skipped_by_rules) {
                result["rules_note"] = json!(note);
            }
            if let Some(note) = hard_links_note(skipped_hard_links) {
                result["hard_links_note"] = json!(note);
            }
            if out.mode == Mode::Count {
                result["total_matches"] = json!(out.total_matches);
            }
            if out.not_searched_count > 0 {
                let count = out.not_searched_count;
                result["not_searched"] = json!(out.not_searched);
                result["not_searched_note"] = json!(format!(
                    "{count} file{} could not be searched to the end (see not_searched{}); matches in {} may be missing. Use bash (e.g. `grep -o` with a bounded pattern, `cut`, or `grep -a` for a binary file) to look into {}.",
                    if count == 1 { "" } else { "s" },
                    if count > GREP_MAX_NOT_SEARCHED {
                        format!(", which names the first {GREP_MAX_NOT_SEARCHED}")
                    } else {
                        String::new()
                    },
                    if count == 1 { "it" } else { "them" },
                    if count == 1 { "it" } else { "them" },
                ));
            }
            if out.chars_spent {
                result["note"] = json!(format!(
                    "Output stopped at {GREP_MAX_CHARS} characters, the most one call returns; counts cover the files searched so far. Narrow the pattern, path or glob, or use less context."
                ));
            } else if out.truncated {
                result["note"] = json!(format!(
                    "Output stopped at head_limit ({limit}) entries; counts cover the files searched so far. Narrow the pattern, path or glob, or raise head_limit."
                ));
            }
            if walk_truncated {
                result["walk_truncated"] = json!(format!(
                    "the search stopped after {WALK_CAP} entries; narrow the path"
                ));
            }
            Ok(ToolSuccess {
                result,
                partial,
                undo: None,
                undoes: None,
            })
        })
        .await
    }

    fn ui_hints(&self, _args: &Value, result: &Value) -> Option<Value> {
        let entries = result.get("entries")?.as_array()?;
        let items: Vec<Value> = entries.iter().map(|e| json!({"label": e})).collect();
        let pattern = result["pattern"].as_str().unwrap_or_default();
        Some(hints::list(
            Some(&format!("grep {pattern}")),
            &items,
            "No matches",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_that_try_to_leave_are_refused() {
        for bad in ["../**", "/etc/*", "a/../../b", "{src,..}/x", "**/.."] {
            assert_eq!(
                check_pattern(bad, "pattern").unwrap_err().code,
                codes::SECURITY_VIOLATION,
                "{bad}"
            );
        }
        assert!(check_pattern("**/*.rs", "pattern").is_ok());
        assert!(check_pattern("..foo", "pattern").is_ok());
        // A leading `./` is the search directory itself.
        let matcher = check_pattern("./src/*.rs", "pattern").unwrap();
        assert!(matcher.is_match("src/a.rs"));
        assert!(
            check_pattern(".//./src/*.rs", "pattern")
                .unwrap()
                .is_match("src/a.rs")
        );
        assert_eq!(below_here("./*.rs"), "*.rs");
        assert_eq!(below_here(".hidden/*"), ".hidden/*");
        assert_eq!(
            check_pattern("a[", "pattern").unwrap_err().code,
            codes::INVALID_PATTERN
        );
    }
}
