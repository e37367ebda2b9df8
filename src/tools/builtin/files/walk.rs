//! A directory walk for `glob` and `grep` that never leaves the workspace.
//!
//! It reads directories through `cap_std` handles only (each subdirectory is
//! opened relative to its parent's handle, beneath it), never follows a
//! symbolic link (links are reported as links, their targets are not
//! visited), and applies `.gitignore` and `.ignore` files found inside the
//! workspace with the `ignore` crate's matcher. The `ignore` crate's own
//! walker is not used: it walks by ambient paths with `std::fs` and reads
//! ignore files from directories above its root, which here would be
//! outside the workspace.
//!
//! Rules: `.git` directories are skipped; other hidden files are visited;
//! `.ignore` overrides `.gitignore` of the same directory and deeper files
//! override shallower ones (as in ripgrep); ignore files apply whether or
//! not the workspace is a git repository.
//!
//! Permission rules: an entry a deny or ask path rule of the call names
//! (`ToolContext::path_rules`) is left out, a directory with everything
//! under it, and counted in [`Summary::skipped_by_rules`]. When the walk
//! starts below a symbolic link, entries are matched both by the path they
//! are reached by and by where they really are.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, Metadata};
use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::confine::{WorkspacePath, io_error, open_regular_entry, real_dir};
use super::{cancelled, codes};
use crate::tools::{ToolContext, ToolError};

/// Deeper directories are not entered.
const MAX_DEPTH: usize = 64;
/// Ignore files larger than this are not read.
const MAX_IGNORE_FILE: u64 = 1024 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

pub struct Entry<'a> {
    /// The directory holding the entry: open the entry through it.
    pub parent: &'a Dir,
    pub name: &'a OsStr,
    pub path: WorkspacePath,
    pub kind: Kind,
    /// The entry's own metadata (a link's, not its target's).
    pub meta: Option<Metadata>,
}

#[derive(Debug, Default)]
pub struct Summary {
    pub visited: usize,
    /// The walk stopped at `max_entries`.
    pub truncated: bool,
    /// Directories that could not be read (skipped).
    pub unreadable: usize,
    /// Entries the permission rules leave out (a directory counts once,
    /// its contents not at all).
    pub skipped_by_rules: usize,
}

struct Level {
    dir: PathBuf,
    /// `.ignore` first: it takes precedence over `.gitignore`.
    matchers: Vec<Gitignore>,
}

struct Walker<'c, F> {
    ctx: &'c ToolContext,
    max_entries: usize,
    want_meta: bool,
    visit: F,
    summary: Summary,
    levels: Vec<Level>,
    /// `start`, and where it really is when that differs (it is, or lies
    /// below, a symbolic link): entries are matched by both paths.
    start: WorkspacePath,
    real_start: Option<WorkspacePath>,
}

/// Walk the directory `start` (depth first, names sorted), calling `visit`
/// for every entry not ignored; directories are entered after their visit.
pub fn walk<F>(
    root: &Dir,
    start: &WorkspacePath,
    ctx: &ToolContext,
    max_entries: usize,
    want_meta: bool,
    visit: F,
) -> Result<Summary, ToolError>
where
    F: FnMut(&Entry<'_>) -> ControlFlow<()>,
{
    super::confine::check_dir_modes(root, start, 0o400, start)?;
    let handle = open_dir(root, start)?;
    super::confine::opened_where_judged(root, &handle, start, ctx.judged_path.as_ref())?;
    let real_start = ctx
        .path_rules
        .as_ref()
        .and_then(|_| real_dir(root, &handle, start));
    let mut walker = Walker {
        ctx,
        max_entries,
        want_meta,
        visit,
        summary: Summary::default(),
        levels: vec![],
        start: start.clone(),
        real_start,
    };
    // Ignore files of the directories above `start`, up to the workspace root.
    let mut ancestors = vec![];
    let mut next = start.parent();
    while let Some(dir) = next {
        next = dir.parent();
        ancestors.push(dir);
    }
    for ancestor in ancestors.into_iter().rev() {
        if let Ok(dir) = root.open_dir(ancestor.as_path()) {
            walker.levels.push(load_ignores(&dir, ancestor.rel()));
        }
    }
    let _ = walker.walk_dir(&handle, start, 0)?;
    Ok(walker.summary)
}

/// Open a directory of the workspace (`NOT_A_DIRECTORY` for a file).
pub fn open_dir(root: &Dir, path: &WorkspacePath) -> Result<Dir, ToolError> {
    if path.is_root() {
        return root.try_clone().map_err(|e| io_error(e, path));
    }
    let meta = root
        .metadata(path.as_path())
        .map_err(|e| io_error(e, path))?;
    if !meta.is_dir() {
        return Err(ToolError::new(
            codes::NOT_A_DIRECTORY,
            format!("'{}' is a file, not a directory", path.display()),
            false,
        ));
    }
    root.open_dir(path.as_path()).map_err(|e| io_error(e, path))
}

/// The `.ignore` and `.gitignore` of the directory `dir` (`rel` in the
/// workspace). Each is opened as a walk opens files to search
/// ([`open_regular_entry`]: not followed, never blocking), so a FIFO or a
/// device swapped in under the name is skipped instead of holding the
/// call in `open()`.
fn load_ignores(dir: &Dir, rel: &Path) -> Level {
    let mut matchers = vec![];
    for name in [".ignore", ".gitignore"] {
        let Some((file, meta)) = open_regular_entry(dir, OsStr::new(name)) else {
            continue;
        };
        if meta.len() > MAX_IGNORE_FILE {
            continue;
        }
        let mut text = String::new();
        if file
            .take(MAX_IGNORE_FILE)
            .read_to_string(&mut text)
            .is_err()
        {
            continue;
        }
        let mut builder = GitignoreBuilder::new(".");
        for line in text.lines() {
            // A malformed pattern is skipped, as git does.
            let _ = builder.add_line(None, line);
        }
        if let Ok(matcher) = builder.build() {
            matchers.push(matcher);
        }
    }
    Level {
        dir: rel.to_path_buf(),
        matchers,
    }
}

impl<F> Walker<'_, F>
where
    F: FnMut(&Entry<'_>) -> ControlFlow<()>,
{
    fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        for level in self.levels.iter().rev() {
            let rel = path.strip_prefix(&level.dir).unwrap_or(path);
            for matcher in &level.matchers {
                match matcher.matched(rel, is_dir) {
                    Match::Ignore(_) => return true,
                    Match::Whitelist(_) => return false,
                    Match::None => {}
                }
            }
        }
        false
    }

    /// Do the call's path rules leave this entry out?
    fn left_out_by_rules(&self, path: &WorkspacePath) -> bool {
        let Some(rules) = &self.ctx.path_rules else {
            return false;
        };
        let real = self.real_start.as_ref().map(|real| {
            let below = path
                .rel()
                .strip_prefix(self.start.rel())
                .unwrap_or(path.rel());
            WorkspacePath::from_normalised(real.rel().join(below)).display()
        });
        rules.leave_out(&path.display(), real.as_deref())
    }

    fn walk_dir(
        &mut self,
        handle: &Dir,
        rel: &WorkspacePath,
        depth: usize,
    ) -> Result<ControlFlow<()>, ToolError> {
        self.levels.push(load_ignores(handle, rel.rel()));
        let flow = self.walk_entries(handle, rel, depth);
        self.levels.pop();
        flow
    }

    fn walk_entries(
        &mut self,
        handle: &Dir,
        rel: &WorkspacePath,
        depth: usize,
    ) -> Result<ControlFlow<()>, ToolError> {
        let Ok(read) = handle.entries() else {
            self.summary.unreadable += 1;
            return Ok(ControlFlow::Continue(()));
        };
        let mut entries: Vec<(OsString, cap_std::fs::DirEntry)> = read
            .filter_map(Result::ok)
            .map(|e| (e.file_name(), e))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, entry) in entries {
            cancelled(self.ctx)?;
            if self.summary.visited >= self.max_entries {
                self.summary.truncated = true;
                return Ok(ControlFlow::Break(()));
            }
            self.summary.visited += 1;
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            let kind = if file_type.is_symlink() {
                Kind::Symlink
            } else if file_type.is_dir() {
                Kind::Dir
            } else if file_type.is_file() {
                Kind::File
            } else {
                Kind::Other
            };
            // git's own, and the running commands' private directories.
            if kind == Kind::Dir && (name == ".git" || name == crate::sandbox::TMP_DIR_NAME) {
                continue;
            }
            let path = rel.join(&name);
            if self.ignored(path.rel(), kind == Kind::Dir) {
                continue;
            }
            if self.left_out_by_rules(&path) {
                self.summary.skipped_by_rules += 1;
                continue;
            }
            let meta = if self.want_meta {
                entry.metadata().ok()
            } else {
                None
            };
            let visit = Entry {
                parent: handle,
                name: &name,
                path: path.clone(),
                kind,
                meta,
            };
            if (self.visit)(&visit).is_break() {
                return Ok(ControlFlow::Break(()));
            }
            if kind == Kind::Dir && depth < MAX_DEPTH {
                // A directory swapped for a link meanwhile is not entered.
                let Ok(sub) = super::confine::open_dir_nofollow(handle, &name) else {
                    self.summary.unreadable += 1;
                    continue;
                };
                // One its owner may not list or enter is not walked, as a
                // command could not.
                if sub.dir_metadata().is_ok_and(|meta| {
                    cap_std::fs::PermissionsExt::mode(&meta.permissions()) & 0o500 != 0o500
                }) {
                    self.summary.unreadable += 1;
                    continue;
                }
                if self.walk_dir(&sub, &path, depth + 1)?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "{path:?}");
    }

    fn ctx() -> ToolContext {
        super::super::test_context()
    }

    /// What a walk of `ws` visits, or `None` if it does not finish within
    /// five seconds.
    fn walked(ws: &Path, start: &str) -> Option<Vec<String>> {
        let (ws, start) = (ws.to_path_buf(), start.to_string());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let dir = Dir::open_ambient_dir(&ws, cap_std::ambient_authority()).unwrap();
            let mut seen = vec![];
            let start = WorkspacePath::parse(&start, &ws).unwrap();
            walk(&dir, &start, &ctx(), 1_000, false, |entry| {
                seen.push(entry.path.display());
                ControlFlow::Continue(())
            })
            .unwrap();
            let _ = tx.send(seen);
        });
        rx.recv_timeout(Duration::from_secs(5)).ok()
    }

    /// A FIFO named `.gitignore` or `.ignore`, or a link to one, is no
    /// ignore file: the walk neither blocks on it nor applies it.
    #[test]
    fn fifo_ignore_files_are_skipped_without_blocking() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path();
        std::fs::create_dir_all(ws.join("a/b")).unwrap();
        mkfifo(&ws.join(".gitignore"));
        mkfifo(&ws.join("a/pipe"));
        std::os::unix::fs::symlink("pipe", ws.join("a/.gitignore")).unwrap();
        std::os::unix::fs::symlink("../pipe", ws.join("a/b/.ignore")).unwrap();
        std::fs::write(ws.join("a/b/x.txt"), "x").unwrap();
        let seen = walked(ws, ".").expect("the walk must not block on a FIFO");
        assert!(seen.contains(&"a/b/x.txt".to_string()), "{seen:?}");
        // A walk starting below reads the ignore files of the directories
        // above it too.
        let seen = walked(ws, "a/b").expect("the walk must not block on a FIFO");
        assert_eq!(seen, ["a/b/.ignore", "a/b/x.txt"]);
    }

    /// A command swapping a FIFO and a regular file under `.gitignore` as
    /// fast as it can: reading the ignore files never blocks, however the
    /// swaps fall between looking at the name and opening it.
    #[test]
    fn an_ignore_file_swapped_for_a_fifo_never_blocks() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().to_path_buf();
        std::fs::write(ws.join(".gitignore"), "ignored\n").unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (ws, stop) = (ws.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    mkfifo(&ws.join("fifo"));
                    std::fs::rename(ws.join("fifo"), ws.join(".gitignore")).unwrap();
                    std::fs::write(ws.join("regular"), "ignored\n").unwrap();
                    std::fs::rename(ws.join("regular"), ws.join(".gitignore")).unwrap();
                }
            })
        };
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let (ws, stop) = (ws.clone(), stop.clone());
            std::thread::spawn(move || {
                let dir = Dir::open_ambient_dir(&ws, cap_std::ambient_authority()).unwrap();
                let mut rounds = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _ = load_ignores(&dir, Path::new(""));
                    rounds += 1;
                }
                let _ = tx.send(rounds);
            });
        }
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        let rounds = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("reading .gitignore blocked on a FIFO swapped in");
        assert!(rounds > 0);
    }
}
