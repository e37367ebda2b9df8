//! The one way the file tools change a file: load what is there, compute the
//! new bytes, then preview (dry run) or commit (history entry, then an
//! atomic replace).

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::time::Duration;

use cap_std::fs::{Dir, OpenOptions, Permissions, PermissionsExt};
use serde_json::json;
use similar::{ChangeTag, TextDiff};

use super::confine::{
    WorkspacePath, WriteTarget, check_dir_modes, directory_not_file, io_error,
    open_parent_where_judged, open_regular, opened_where_judged, refuse_hard_linked,
    resolve_target,
};
use super::history::{EditHistory, Header, with_file_lock};
use super::{MAX_EDIT_BYTES, codes};
use crate::tools::{DryRunResult, ToolContext, ToolError, UndoInfo};
use crate::workspace::Workspace;

/// Diffs returned in results are cut at this many bytes.
pub const MAX_DIFF_BYTES: usize = 64 * 1024;

/// What is at a change's target now.
pub struct Current {
    /// The path as the caller named it.
    pub requested: WorkspacePath,
    /// The file the change lands on (a final symbolic link resolved).
    pub target: WorkspacePath,
    /// `None`: the file does not exist.
    pub before: Option<Vec<u8>>,
    pub mode: Option<u32>,
    /// Directories that must be created for the file, shallowest first.
    pub missing_dirs: Vec<WorkspacePath>,
}

impl Current {
    fn load(
        dir: &Dir,
        requested: WorkspacePath,
        target: WorkspacePath,
        ctx: &ToolContext,
    ) -> Result<Current, ToolError> {
        let (before, mode) = match dir.symlink_metadata(target.as_path()) {
            Ok(meta) if meta.is_dir() => return Err(directory_not_file(&requested)),
            Ok(_) => {
                // The file is replaced in its directory, which must let
                // its owner do so.
                check_dir_modes(dir, &target.parent().unwrap_or_default(), 0o200, &requested)?;
                let (file, meta) = open_regular(dir, &target)?;
                // What a diff would show is read from where the rules
                // judged the path to lead, or not at all.
                opened_where_judged(dir, &file, &requested, ctx.judged_path.as_ref())?;
                // Nor from a file the rules cannot tell (other names).
                refuse_hard_linked(&meta, &requested, ctx.path_rules.as_deref(), "changed")?;
                // Nor from one its owner may not read: a diff, a preview or
                // a hint quoting it would read it.
                super::confine::check_own_mode(meta.permissions().mode(), 0o400, &requested)?;
                if meta.len() > MAX_EDIT_BYTES {
                    return Err(too_large(&requested, meta.len()));
                }
                let mut bytes = Vec::with_capacity(meta.len() as usize);
                file.take(MAX_EDIT_BYTES + 1)
                    .read_to_end(&mut bytes)
                    .map_err(|e| io_error(e, &requested))?;
                if bytes.len() as u64 > MAX_EDIT_BYTES {
                    return Err(too_large(&requested, bytes.len() as u64));
                }
                (Some(bytes), Some(meta.permissions().mode()))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => (None, None),
            Err(e) => return Err(io_error(e, &requested)),
        };
        let missing_dirs = if before.is_none() {
            let missing = missing_dirs(dir, &target)?;
            // The file, or the first of its missing directories, is made
            // in the deepest directory on the way that exists.
            let made_in = missing
                .first()
                .unwrap_or(&target)
                .parent()
                .unwrap_or_default();
            check_dir_modes(dir, &made_in, 0o200, &requested)?;
            missing
        } else {
            vec![]
        };
        Ok(Current {
            requested,
            target,
            before,
            mode,
            missing_dirs,
        })
    }

    /// The change to `after`; `FILE_TOO_LARGE` when `after` is over
    /// [`MAX_EDIT_BYTES`] (an edit replacing many occurrences, a diff
    /// adding to a large file).
    pub fn change(self, after: Vec<u8>) -> Result<Change, ToolError> {
        if let (Some(_), Some(mode)) = (&self.before, self.mode) {
            super::confine::check_own_mode(mode, 0o200, &self.requested)?;
        }
        if after.len() as u64 > MAX_EDIT_BYTES {
            return Err(too_large_after(&self.requested, after.len() as u64));
        }
        Ok(Change {
            current: self,
            after,
        })
    }
}

fn too_large(path: &WorkspacePath, len: u64) -> ToolError {
    ToolError::new(
        codes::FILE_TOO_LARGE,
        format!(
            "'{}' has {len} bytes; the file tools change files of at most {MAX_EDIT_BYTES} bytes",
            path.display()
        ),
        false,
    )
    .with_hint("Use bash for files this large.")
}

/// `FILE_TOO_LARGE` for a change that would make `path` `len` bytes.
pub fn too_large_after(path: &WorkspacePath, len: u64) -> ToolError {
    ToolError::new(
        codes::FILE_TOO_LARGE,
        format!(
            "the change would make '{}' {len} bytes; the file tools write files of at most \
             {MAX_EDIT_BYTES} bytes, and nothing was changed",
            path.display()
        ),
        false,
    )
    .with_hint("Change fewer places at once, or use bash for files this large.")
}

/// The ancestors of `target` that do not exist, shallowest first; an
/// ancestor that is a file is `NOT_A_DIRECTORY`.
fn missing_dirs(dir: &Dir, target: &WorkspacePath) -> Result<Vec<WorkspacePath>, ToolError> {
    let mut ancestors = vec![];
    let mut next = target.parent();
    while let Some(parent) = next {
        if parent.is_root() {
            break;
        }
        next = parent.parent();
        ancestors.push(parent);
    }
    ancestors.reverse();
    for (i, ancestor) in ancestors.iter().enumerate() {
        match dir.metadata(ancestor.as_path()) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(ToolError::new(
                    codes::NOT_A_DIRECTORY,
                    format!(
                        "'{}' is a file, so '{}' cannot be created inside it",
                        ancestor.display(),
                        target.display()
                    ),
                    false,
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(ancestors[i..].to_vec()),
            Err(e) => return Err(io_error(e, ancestor)),
        }
    }
    Ok(vec![])
}

/// Run `f` on what is at `requested` now, holding the file's lock. The
/// file is loaded only from where the permission rules judged the path to
/// lead (`ToolContext::judged_path`), and not at all if it has other names
/// (hard links) while the call has deny or ask path rules
/// (`ToolContext::path_rules`): `HARD_LINKED_FILE`.
pub fn with_current<T>(
    ws: &Workspace,
    requested: &WorkspacePath,
    ctx: &ToolContext,
    f: impl FnOnce(Current) -> Result<T, ToolError>,
) -> Result<T, ToolError> {
    if requested.is_root() {
        return Err(directory_not_file(requested));
    }
    let target = resolve_target(&ws.dir, requested)?;
    let key = format!("{}\0{}", ws.path.display(), target.display());
    with_file_lock(&key, || {
        let current = Current::load(&ws.dir, requested.clone(), target, ctx)?;
        // An approved call: the file must be as its approval showed it.
        if let Some(shown) = &ctx.shown
            && !shown.holds_for(current.before.as_deref())
        {
            return Err(not_as_shown(requested));
        }
        f(current)
    })
}

/// `APPROVAL_STALE`: the file changed (or appeared, or went) since the
/// approved call's preview was made, so the call would not do what the
/// person approved; nothing is changed.
fn not_as_shown(path: &WorkspacePath) -> ToolError {
    ToolError::new(
        crate::protocol::tool_output::codes::APPROVAL_STALE,
        format!(
            "'{}' changed since the preview this call was approved with was made, so it would \
             not do what was approved; nothing was changed",
            path.display()
        ),
        true,
    )
    .with_hint(
        "read the file again if needed, then call it again with a new tool call id, so its \
         approval shows what it would do now",
    )
}

/// A computed change, not yet applied.
pub struct Change {
    pub current: Current,
    pub after: Vec<u8>,
}

/// A unified diff with its line counts.
pub struct Diff {
    pub text: String,
    pub truncated: bool,
    pub added: usize,
    pub removed: usize,
}

/// The unified diff from `before` (`None`: absent) to `after`, labelled
/// `a/<path>` / `b/<path>` (`/dev/null` for an absent file).
pub fn diff(path: &WorkspacePath, before: Option<&[u8]>, after: &[u8]) -> Diff {
    diff_of(&path.display(), before, after)
}

/// [`diff`] of the file shown as `shown`.
pub fn diff_of(shown: &str, before: Option<&[u8]>, after: &[u8]) -> Diff {
    let (Ok(old), Ok(new)) = (
        std::str::from_utf8(before.unwrap_or_default()),
        std::str::from_utf8(after),
    ) else {
        return Diff {
            text: format!("Binary files a/{shown} and b/{shown} differ\n"),
            truncated: false,
            added: 0,
            removed: 0,
        };
    };
    let text_diff = TextDiff::configure()
        .timeout(Duration::from_secs(2))
        .diff_lines(old, new);
    let (mut added, mut removed) = (0, 0);
    for change in text_diff.iter_all_changes() {
        match change.tag() {
            ChangeTag::Insert => added += 1,
            ChangeTag::Delete => removed += 1,
            ChangeTag::Equal => {}
        }
    }
    let from = if before.is_some() {
        format!("a/{shown}")
    } else {
        "/dev/null".to_string()
    };
    let mut text = text_diff
        .unified_diff()
        .context_radius(3)
        .header(&from, &format!("b/{shown}"))
        .to_string();
    let truncated = text.len() > MAX_DIFF_BYTES;
    if truncated {
        let mut cut = MAX_DIFF_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("\n… (diff truncated)\n");
    }
    Diff {
        text,
        truncated,
        added,
        removed,
    }
}

impl Change {
    pub fn created(&self) -> bool {
        self.current.before.is_none()
    }

    pub fn unchanged(&self) -> bool {
        self.current.before.as_deref() == Some(self.after.as_slice())
    }

    pub fn diff(&self) -> Diff {
        diff(
            &self.current.target,
            self.current.before.as_deref(),
            &self.after,
        )
    }

    pub fn dry_run(&self) -> DryRunResult {
        let diff = self.diff();
        let mut impact = json!({
            "bytes": self.after.len(),
            "lines_added": diff.added,
            "lines_removed": diff.removed,
            "creates": self.created(),
            "creates_directories": self.current.missing_dirs.iter()
                .map(WorkspacePath::display).collect::<Vec<_>>(),
        });
        // A file about to be created has no size before (`creates`); events
        // carry no nulls.
        if let Some(before) = &self.current.before {
            impact["bytes_before"] = json!(before.len());
            // What an approval of the call holds the file to.
            impact["before_sha256"] = json!(crate::tools::sha256_hex(before));
        }
        DryRunResult {
            would_affect: self.current.target.display(),
            preview: diff.text,
            estimated_impact: impact,
        }
    }

    /// Record the previous state in the history, then replace the file.
    /// On failure nothing stays: the entry and any created directory are
    /// removed again.
    /// The write lands where the permission rules judged the path to lead
    /// (`ToolContext::judged_path`) or nowhere; the entry names the call
    /// (`ctx`) that made the change.
    pub fn commit(
        &self,
        ws: &Workspace,
        history: &EditHistory,
        tool: &str,
        ctx: &ToolContext,
    ) -> Result<UndoInfo, ToolError> {
        let judged = ctx.judged_path.as_ref();
        let current = &self.current;
        let mut header = Header::new(&current.target, tool, current.before.is_some(), &self.after);
        header.mode = current.mode;
        header.call = Some((ctx.thread_id.clone(), ctx.call_id.clone()));
        header.created_dirs = current
            .missing_dirs
            .iter()
            .map(WorkspacePath::display)
            .collect();
        let seq = history
            .push(
                &current.target,
                &header,
                current.before.as_deref().unwrap_or_default(),
            )
            .map_err(history_error)?;
        let written = open_parent_where_judged(
            &ws.dir,
            &current.target,
            &current.requested,
            judged,
            &current.missing_dirs,
        )
        .and_then(|mut target| {
            target
                .write(&self.after, current.mode)
                .map_err(|e| io_error(e, &current.requested))
        });
        if let Err(e) = written {
            let _ = history.remove(&current.target, seq);
            return Err(e);
        }
        Ok(undo_info(&current.target, seq, tool, self.created()))
    }
}

/// A change's success: its `result` with the history entry that undoes it
/// (`undo_entry`, what `undo_edit`'s `entry` takes), and its undo.
pub fn committed(mut result: serde_json::Value, undo: UndoInfo) -> crate::tools::ToolSuccess {
    result["undo_entry"] = undo.input["entry"].clone();
    crate::tools::ToolSuccess {
        result,
        partial: false,
        undo: Some(undo),
        undoes: None,
    }
}

pub fn history_error(e: io::Error) -> ToolError {
    ToolError::new(
        codes::IO_ERROR,
        format!(
            "cannot record the edit history, so nothing was changed: {}",
            io::Error::from(e.kind())
        ),
        true,
    )
}

fn undo_info(target: &WorkspacePath, seq: u64, tool: &str, created: bool) -> UndoInfo {
    let shown = target.display();
    UndoInfo {
        tool_name: "undo_edit".into(),
        input: json!({"path": shown, "entry": seq}),
        description: if created {
            format!("Remove '{shown}', which this {tool} created")
        } else {
            format!("Restore '{shown}' to its content before this {tool}")
        },
        irreversible: false,
        manual_guide: None,
    }
}

/// Remove, deepest first, those of `dirs` that are empty.
pub fn remove_empty_dirs(dir: &Dir, dirs: &[WorkspacePath]) {
    for d in dirs.iter().rev() {
        let _ = dir.remove_dir(d.as_path());
    }
}

impl WriteTarget {
    /// [`atomic_write`] the file; if that fails, the directories made for
    /// it go again, through the handles they were made with.
    pub fn write(&mut self, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
        let written = atomic_write(&self.dir, &self.name, bytes, mode);
        if written.is_err() {
            self.remove_made();
        }
        written
    }
}

/// Replace the file `name` of the directory `parent` (see
/// [`open_parent_where_judged`]) with `bytes`: write a temporary file in
/// that directory, flush it, rename it over the target. Readers see the
/// old or the new content, never a mix; a crash leaves at most a stray
/// temporary.
pub fn atomic_write(
    parent: &Dir,
    name: &std::ffi::OsStr,
    bytes: &[u8],
    mode: Option<u32>,
) -> io::Result<()> {
    let tmp = OsString::from(format!(".toolgate-{:016x}.tmp", rand::random::<u64>()));
    let mut file = parent.open_with(&tmp, OpenOptions::new().write(true).create_new(true))?;
    let written = file
        .write_all(bytes)
        .and_then(|()| match mode {
            // Never set-user-ID or set-group-ID: a file of the service's
            // user that anyone could run as that user.
            Some(mode) => file.set_permissions(Permissions::from_mode(mode & 0o1777)),
            None => Ok(()),
        })
        .and_then(|()| file.sync_data());
    drop(file);
    if let Err(e) = written.and_then(|()| parent.rename(&tmp, parent, name)) {
        let _ = parent.remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

/// The text of a file for an edit: refused if binary (a NUL byte) or not
/// UTF-8.
pub fn text_of<'a>(bytes: &'a [u8], path: &WorkspacePath) -> Result<&'a str, ToolError> {
    if bytes.contains(&0) {
        return Err(ToolError::new(
            codes::BINARY_FILE,
            format!(
                "'{}' is a binary file (it contains NUL bytes)",
                path.display()
            ),
            false,
        ));
    }
    std::str::from_utf8(bytes).map_err(|e| {
        ToolError::new(
            codes::BINARY_FILE,
            format!(
                "'{}' is not valid UTF-8 text (first invalid byte at offset {}); only text files can be edited",
                path.display(),
                e.valid_up_to()
            ),
            false,
        )
        .with_hint("Use write_file to replace the whole file, or bash for binary data.")
    })
}

/// `cat -n` style: right-aligned number, tab, line.
pub fn numbered<'a>(first: usize, lines: impl IntoIterator<Item = &'a str>) -> String {
    let lines: Vec<&str> = lines.into_iter().collect();
    let width = (first + lines.len()).to_string().len().max(6);
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&format!(
            "{:>width$}\t{}",
            first + i,
            line.trim_end_matches('\r')
        ));
    }
    out
}

/// The "\r\n" or "\n" a text mostly uses.
pub fn line_ending_of(text: &str) -> &'static str {
    let crlf = text.matches("\r\n").count();
    let lf = text.matches('\n').count() - crlf;
    if crlf > lf { "\r\n" } else { "\n" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_is_right_aligned_with_a_tab() {
        assert_eq!(numbered(1, ["a", "b"]), "     1\ta\n     2\tb");
        assert_eq!(numbered(999_999, ["x", "y"]), " 999999\tx\n1000000\ty");
    }

    #[test]
    fn diffs_label_created_files_from_dev_null() {
        let p = WorkspacePath::parse("a.txt", std::path::Path::new("/w")).unwrap();
        let d = diff(&p, None, b"x\n");
        assert!(
            d.text.starts_with("--- /dev/null\n+++ b/a.txt\n"),
            "{}",
            d.text
        );
        assert_eq!((d.added, d.removed), (1, 0));
        let d = diff(&p, Some(b"x\ny\n"), b"x\nz\n");
        assert!(d.text.contains("-y\n+z\n"));
    }

    #[test]
    fn line_endings_are_detected() {
        assert_eq!(line_ending_of("a\r\nb\r\n"), "\r\n");
        assert_eq!(line_ending_of("a\nb\n"), "\n");
        assert_eq!(line_ending_of(""), "\n");
    }
}
