//! Keeping every file operation inside the workspace.
//!
//! Two layers, so that neither alone has to be perfect:
//!
//! 1. [`WorkspacePath::parse`] refuses, before anything is opened, what is
//!    never a workspace path: a `..` component, an absolute path outside the
//!    workspace, a NUL byte. An absolute path *inside* the workspace is
//!    accepted and made relative (models copy paths out of `pwd` output).
//! 2. Every open goes through the workspace's `cap_std::fs::Dir`, which
//!    resolves paths with openat2 `RESOLVE_BENEATH`: a symbolic link (or a
//!    `/proc` magic link) that leads out fails in the kernel, with no
//!    check-then-use window. cap-std reports that as a `PermissionDenied`
//!    without an OS error code ("a path led outside of the filesystem");
//!    [`io_error`] turns it into `SECURITY_VIOLATION`.
//!
//! Renames replace a final symbolic link instead of following it, so a write
//! must first find out what a link at the target names: [`resolve_target`]
//! follows final links by hand, through the `Dir`, and refuses one that
//! leaves.
//!
//! Inside the workspace, the permission rules judged where a path led
//! before the tool ran; [`opened_where_judged`] checks, on the open file,
//! that it is still there (a link changed in between would have the tool
//! read a file no rule looked at).

use std::io;
use std::path::{Component, Path, PathBuf};

use cap_std::fs::{Dir, File, Metadata, MetadataExt, OpenOptions, OpenOptionsExt};

use super::codes;
use crate::sandbox::TMP_DIR_NAME;
use crate::tools::ToolError;

/// A path inside a workspace: relative, normalised (no `.`, no `..`), with
/// the empty path standing for the workspace root (also the default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct WorkspacePath {
    rel: PathBuf,
}

impl WorkspacePath {
    pub fn root() -> Self {
        WorkspacePath {
            rel: PathBuf::new(),
        }
    }

    /// Parse a path as given by a model. `workspace` is the workspace's
    /// absolute path, used only to make an absolute path inside it relative.
    pub fn parse(raw: &str, workspace: &Path) -> Result<Self, ToolError> {
        if raw.contains('\0') {
            return Err(ToolError::new(
                codes::INVALID_ARGUMENTS,
                "the path contains a NUL byte",
                false,
            ));
        }
        let given = Path::new(raw);
        let relative = if given.has_root() {
            match given.strip_prefix(workspace) {
                Ok(rest) => rest,
                Err(_) => {
                    return Err(security_violation(
                        raw,
                        "absolute paths outside the workspace are not allowed",
                    ));
                }
            }
        } else {
            given
        };
        let mut rel = PathBuf::new();
        for component in relative.components() {
            match component {
                Component::Normal(part) if part == TMP_DIR_NAME => {
                    return Err(commands_private(raw));
                }
                Component::Normal(part) => rel.push(part),
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(security_violation(
                        raw,
                        "'..' is not allowed in workspace paths",
                    ));
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(security_violation(
                        raw,
                        "absolute paths outside the workspace are not allowed",
                    ));
                }
            }
        }
        Ok(WorkspacePath { rel })
    }

    /// [`parse`](Self::parse) for a tool that writes a file: a path that
    /// ends in `/` (or `/.`) names a directory, as the kernel reads it, so
    /// it is refused rather than written as the file without the `/`.
    pub fn parse_file(raw: &str, workspace: &Path, tool: &str) -> Result<Self, ToolError> {
        let path = Self::parse(raw, workspace)?;
        if names_a_directory(raw) {
            return Err(ToolError::new(
                codes::INVALID_ARGUMENTS,
                format!("'{raw}' ends in '/', so it names a directory; {tool} works on files"),
                false,
            )
            .with_hint("name the file without the trailing '/'"));
        }
        Ok(path)
    }

    /// From a path already known to be relative and normalised (built from
    /// directory entries or a resolved link).
    pub(super) fn from_normalised(rel: PathBuf) -> Self {
        debug_assert!(rel.components().all(|c| matches!(c, Component::Normal(_))));
        WorkspacePath { rel }
    }

    pub fn is_root(&self) -> bool {
        self.rel.as_os_str().is_empty()
    }

    /// The path to hand to the `Dir` (`.` for the root).
    pub fn as_path(&self) -> &Path {
        if self.is_root() {
            Path::new(".")
        } else {
            &self.rel
        }
    }

    /// The relative path, empty for the root.
    pub fn rel(&self) -> &Path {
        &self.rel
    }

    pub fn join(&self, name: &std::ffi::OsStr) -> WorkspacePath {
        WorkspacePath {
            rel: self.rel.join(name),
        }
    }

    pub fn parent(&self) -> Option<WorkspacePath> {
        if self.is_root() {
            return None;
        }
        Some(WorkspacePath {
            rel: self.rel.parent().map(Path::to_path_buf).unwrap_or_default(),
        })
    }

    pub fn file_name(&self) -> Option<&std::ffi::OsStr> {
        self.rel.file_name()
    }

    /// `/`-separated, `.` for the root: how paths appear in results.
    pub fn display(&self) -> String {
        if self.is_root() {
            ".".to_string()
        } else {
            self.rel.to_string_lossy().into_owned()
        }
    }
}

pub(super) fn security_violation(path: &str, why: &str) -> ToolError {
    // What to do instead, by what led out.
    let hint = if why.contains("symbolic link") {
        "The path leads out of the workspace through a symbolic link: what the link points \
         to cannot be read or written by these tools. Work with files inside the workspace."
    } else if why.contains("'..'") {
        match lexically_inside(path) {
            Some(inside) => {
                return security_error(
                    path,
                    why,
                    format!("Use '{inside}', the same path without '..'."),
                );
            }
            None => "Use a path relative to the workspace root, without '..'.",
        }
    } else if why.contains("absolute") {
        "Use a path relative to the workspace root; an absolute path is taken only when it \
         lies inside the workspace. '~' is not expanded."
    } else {
        "Use a path relative to the workspace root, without '..'."
    };
    security_error(path, why, hint.to_string())
}

fn security_error(path: &str, why: &str, hint: String) -> ToolError {
    ToolError::new(
        codes::SECURITY_VIOLATION,
        format!("'{path}' is outside the workspace: {why}"),
        false,
    )
    .with_hint(hint)
}

/// `path` with its `..` taken out by the text alone (`src/../a` → `a`),
/// when that stays inside the workspace and names something: a path the
/// model can send instead. (Links are judged when it is used.)
fn lexically_inside(path: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            part => parts.push(part),
        }
    }
    (!parts.is_empty() && !path.starts_with('/')).then(|| parts.join("/"))
}

/// cap-std's "a path led outside of the filesystem" (no OS code), or the
/// kernel's EXDEV from openat2 `RESOLVE_BENEATH`.
pub fn is_escape(err: &io::Error) -> bool {
    (err.kind() == io::ErrorKind::PermissionDenied && err.raw_os_error().is_none())
        || err.raw_os_error() == Some(libc::EXDEV)
}

/// A file whose mode does not let its owner do `what` (`0o400` read,
/// `0o200` write): `PERMISSION_DENIED`, as the file system says it to a
/// command. The workspace's files are the service user's, and a service
/// running as root would otherwise read and replace a file its mode
/// closes (`chmod 444`, `chmod 000`), which the commands in the same
/// workspace cannot.
pub fn check_own_mode(mode: u32, what: u32, path: &WorkspacePath) -> Result<(), ToolError> {
    if mode & what != 0 {
        return Ok(());
    }
    let (doing, change) = if what == 0o200 {
        ("written", "u+w")
    } else {
        ("read", "u+r")
    };
    Err(ToolError::new(
        codes::PERMISSION_DENIED,
        format!(
            "'{}' may not be {doing}: its mode is {:04o} (not a permission rule)",
            path.display(),
            mode & 0o7777
        ),
        false,
    )
    .with_hint(set_on_purpose(change)))
}

/// The hint of a mode the file tools keep to: `chmod` the change to it.
fn set_on_purpose(chmod: &str) -> String {
    format!(
        "the mode was set on purpose, perhaps: ask the user, or change it with bash (chmod {chmod}) if that is what the user wants"
    )
}

/// The directories on the way to `path`, as commands in the workspace
/// meet them: each from the workspace root to `dir` must let its owner
/// enter it (`0o100`), and `dir` itself also allow `need` (`0o400` to list
/// it, `0o200` to add, replace or remove what is in it). The workspace's
/// directories are the service user's, and a service running as root
/// would otherwise pass a directory its mode closes (`chmod 000`, `chmod
/// 555`). One that cannot be looked at is left to the caller's own
/// opening, which says why.
pub fn check_dir_modes(
    root: &Dir,
    dir: &WorkspacePath,
    need: u32,
    path: &WorkspacePath,
) -> Result<(), ToolError> {
    let mut on_the_way = vec![dir.clone()];
    let mut next = dir.parent();
    while let Some(ancestor) = next {
        next = ancestor.parent();
        on_the_way.push(ancestor);
    }
    on_the_way.reverse();
    let last = on_the_way.len() - 1;
    for (i, d) in on_the_way.iter().enumerate() {
        let meta = if d.is_root() {
            root.dir_metadata()
        } else {
            root.metadata(d.as_path())
        };
        let Ok(meta) = meta else {
            return Ok(());
        };
        if !meta.is_dir() {
            return Ok(());
        }
        let mode = cap_std::fs::PermissionsExt::mode(&meta.permissions());
        let wanted = if i == last { need | 0o100 } else { 0o100 };
        if mode & wanted == wanted {
            continue;
        }
        let what = if mode & 0o100 == 0 {
            "enter it"
        } else if wanted & 0o400 != 0 && mode & 0o400 == 0 {
            "list it"
        } else {
            "change what is in it"
        };
        return Err(ToolError::new(
            codes::PERMISSION_DENIED,
            format!(
                "'{}' cannot be reached: the directory '{}' has mode {:04o}, which does not let \
                 its owner {what} (not a permission rule)",
                path.display(),
                d.display(),
                mode & 0o7777
            ),
            false,
        )
        .with_hint(set_on_purpose("u+rwx")));
    }
    Ok(())
}

/// Map an I/O error on `path` to a tool error. Messages name the workspace
/// path only: never a host path, never a link's target.
pub fn io_error(err: io::Error, path: &WorkspacePath) -> ToolError {
    let shown = path.display();
    if is_escape(&err) {
        return security_violation(
            &shown,
            "it leads out of the workspace (through a symbolic link or an absolute path)",
        );
    }
    match err.kind() {
        io::ErrorKind::NotFound => ToolError::new(
            codes::FILE_NOT_FOUND,
            format!("'{shown}' does not exist"),
            false,
        )
        .with_hint("Use glob to find files by name, or read_file on a directory to list it."),
        io::ErrorKind::IsADirectory => directory_not_file(path),
        io::ErrorKind::NotADirectory => ToolError::new(
            codes::NOT_A_DIRECTORY,
            format!("a component of '{shown}' is a file, not a directory"),
            false,
        ),
        // The file system's refusal, not the rules': said so, since both
        // share the code.
        io::ErrorKind::PermissionDenied => ToolError::new(
            codes::PERMISSION_DENIED,
            format!("the file system refuses access to '{shown}' (its mode, owner or attributes; not a permission rule)"),
            false,
        )
        .with_hint("look at it with bash (ls -l, lsattr); change its mode with chmod if that is what the user wants, or ask the user"),
        _ if err.raw_os_error() == Some(libc::ELOOP) => ToolError::new(
            codes::IO_ERROR,
            format!("'{shown}': too many levels of symbolic links"),
            false,
        ),
        // No room (a full disk, a quota): the same call can work once
        // there is, as the edit history's own failure says.
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded => ToolError::new(
            codes::IO_ERROR,
            format!("'{shown}': {}", io::Error::from(err.kind())),
            true,
        )
        .with_hint("The disk has no room: retry once space is freed."),
        kind => ToolError::new(
            codes::IO_ERROR,
            format!("'{shown}': {}", io::Error::from(kind)),
            matches!(
                kind,
                io::ErrorKind::Interrupted | io::ErrorKind::TimedOut | io::ErrorKind::ResourceBusy
            ),
        ),
    }
}

/// Whether a path as given ends in `/` or `/.`: it names a directory
/// (`a.txt/` is not the file `a.txt`, to the kernel).
pub fn names_a_directory(raw: &str) -> bool {
    raw.ends_with('/') || raw.ends_with("/.")
}

/// A path given with a trailing `/` that leads to a file.
pub fn file_named_as_directory(raw: &str, path: &WorkspacePath) -> ToolError {
    ToolError::new(
        codes::NOT_A_DIRECTORY,
        format!(
            "'{raw}' ends in '/', so it names a directory, but '{}' is a file",
            path.display()
        ),
        false,
    )
    .with_hint("name the file without the trailing '/'")
}

pub fn directory_not_file(path: &WorkspacePath) -> ToolError {
    ToolError::new(
        codes::DIRECTORY_NOT_FILE,
        format!("'{}' is a directory, not a file", path.display()),
        false,
    )
    .with_hint("read_file on a directory lists it; glob finds files inside it.")
}

/// Where an open file or directory really is, by `/proc/self/fd`.
fn real_location(fd: &impl std::os::fd::AsRawFd) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()
}

/// Where the directory `handle`, opened for `path`, really is in the
/// workspace, when that is not `path` (it was reached through a link):
/// read off the open handle, or, where `/proc` cannot tell, resolved by
/// path.
pub fn real_dir(dir: &Dir, handle: &Dir, path: &WorkspacePath) -> Option<WorkspacePath> {
    let real = match (real_location(dir), real_location(handle)) {
        (Some(root), Some(real)) => {
            WorkspacePath::from_normalised(real.strip_prefix(&root).ok()?.to_path_buf())
        }
        _ => resolve_beneath(dir, path)?,
    };
    (real != *path).then_some(real)
}

/// The refusal of a path beneath [`TMP_DIR_NAME`], named so or reached
/// through a link: the private directories of the commands running in the
/// workspace, each one's `TMPDIR` and `HOME`. What a file tool wrote there
/// would be a running command's start-up file (`home/.gitconfig`,
/// `home/.lesskey`) or temporary file, read as its own.
fn commands_private(path: &str) -> ToolError {
    ToolError::new(
        codes::PERMISSION_DENIED,
        format!(
            "'{path}' is beneath '{TMP_DIR_NAME}', where the commands running in this workspace \
             keep their private TMPDIR and HOME: the file tools neither read nor write there"
        ),
        false,
    )
    .with_hint(
        "Work with files elsewhere in the workspace; a command's temporary files are its own.",
    )
}

/// [`commands_private`] for a path the permission rules judged to lead
/// beneath [`TMP_DIR_NAME`] through a link (its own name was refused when
/// it was parsed).
fn refuse_commands_private(
    path: &WorkspacePath,
    judged: Option<&crate::tools::JudgedPath>,
) -> Result<(), ToolError> {
    let Some(leads_to) = judged.and_then(|j| j.leads_to.as_deref()) else {
        return Ok(());
    };
    if Path::new(leads_to)
        .components()
        .any(|c| c.as_os_str() == TMP_DIR_NAME)
    {
        return Err(commands_private(&path.display()));
    }
    Ok(())
}

/// Refuse `opened` (a file, or a directory to list or walk), opened for
/// `path`, unless it is where the permission rules judged `path` to lead
/// (`judged`; no judgement, nothing to check). Asked of the open handle,
/// so no link changed afterwards can fool it (see [`moved_since_judged`]
/// for how, with or without `/proc`).
pub fn opened_where_judged(
    dir: &Dir,
    opened: &impl std::os::fd::AsRawFd,
    path: &WorkspacePath,
    judged: Option<&crate::tools::JudgedPath>,
) -> Result<(), ToolError> {
    refuse_commands_private(path, judged)?;
    match moved_since_judged(dir, opened, &[], path, judged) {
        None => Ok(()),
        Some((then, now)) => Err(moved(
            path,
            &then,
            &format!("what was opened is '{now}'"),
            "read",
        )),
    }
}

/// Is what `fd` (followed by the names `below` it, for a directory)
/// really is somewhere other than where the rules judged `path` to lead?
/// Then (where it led, where it is now). `None` when there was no
/// judgement. Read off the handle by `/proc/self/fd`; where `/proc` cannot
/// tell, by [`elsewhere_than`], which compares the handle's file with the
/// one the judged path names (and fails closed on a link along it).
fn moved_since_judged(
    dir: &Dir,
    fd: &impl std::os::fd::AsRawFd,
    below: &[&std::ffi::OsStr],
    path: &WorkspacePath,
    judged: Option<&crate::tools::JudgedPath>,
) -> Option<(String, String)> {
    let judged = judged?;
    let then = judged.leads_to.clone().unwrap_or_else(|| path.display());
    let (Some(root), Some(mut real)) = (real_location(dir), real_location(fd)) else {
        return elsewhere_than(dir, fd, below.len(), &then).then(|| {
            let now = "somewhere else (a link along the way changed)".to_string();
            (then.clone(), now)
        });
    };
    real.extend(below);
    let now = match real.strip_prefix(&root) {
        Ok(rel) => WorkspacePath::from_normalised(rel.to_path_buf()).display(),
        Err(_) => "a place outside the workspace".to_string(),
    };
    (now != then).then_some((then, now))
}

/// Whether `fd` is another file than the one the workspace path `then`
/// names with its last `below` names taken off, asked without `/proc`:
/// the path is walked from `dir` one name at a time, none followed if it
/// is a link (a judged path is where links led, so a link on it now means
/// one changed), and the two (device, inode) pairs compared. Anything that
/// cannot be walked or compared counts as elsewhere.
fn elsewhere_than(dir: &Dir, fd: &impl std::os::fd::AsRawFd, below: usize, then: &str) -> bool {
    use std::os::fd::AsRawFd;
    let names: Vec<&std::ffi::OsStr> = Path::new(then)
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect();
    let Some(kept) = names.len().checked_sub(below) else {
        return true;
    };
    let names = &names[..kept];
    let Ok(mut current) = dir.try_clone() else {
        return true;
    };
    let (last, parents) = match names.split_last() {
        Some((last, parents)) => (Some(*last), parents),
        None => (None, names),
    };
    for name in parents {
        match open_dir_nofollow(&current, name) {
            Ok(next) => current = next,
            Err(_) => return true,
        }
    }
    let named = identity(current.as_raw_fd(), last);
    match (identity(fd.as_raw_fd(), None), named) {
        (Some(opened), Some(named)) => opened != named,
        _ => true,
    }
}

/// The directory `name` of `parent`, opened through `parent` and not
/// followed if it is a link (a directory swapped for a link is not
/// entered).
pub fn open_dir_nofollow(parent: &Dir, name: &std::ffi::OsStr) -> io::Result<Dir> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW);
    parent
        .open_with(name, &options)
        .map(|f| Dir::from_std_file(f.into_std()))
}

/// The (device, inode) of the descriptor `fd`, or of its entry `name`
/// (not followed if it is a link: a link's own identity matches no file).
fn identity(fd: std::os::fd::RawFd, name: Option<&std::ffi::OsStr>) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let name = match name {
        Some(name) => std::ffi::CString::new(name.as_bytes()).ok()?,
        None => std::ffi::CString::default(),
    };
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstatat on a live descriptor, a NUL-terminated name (empty
    // with AT_EMPTY_PATH: the descriptor itself) and a buffer of its type.
    let rc = unsafe {
        libc::fstatat(
            fd,
            name.as_ptr(),
            stat.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH,
        )
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: fstatat succeeded, so the buffer is initialised.
    let stat = unsafe { stat.assume_init() };
    Some((stat.st_dev, stat.st_ino))
}

/// The refusal of a file tool whose `path` leads elsewhere than when the
/// rules judged it.
fn moved(path: &WorkspacePath, then: &str, now: &str, done: &str) -> ToolError {
    ToolError::new(
        codes::PERMISSION_DENIED,
        format!(
            "'{}' led to '{then}' when the permission rules judged the call, but {now} (a symbolic link changed in between); nothing was {done}",
            path.display()
        ),
        false,
    )
    .with_hint("Call it again with a new tool call id, so it is judged where the path leads now.")
}

/// For a write to `target` (what `requested` names, a final link
/// followed), whose directories `missing` (shallowest first) do not exist
/// yet: the directory to write in, opened, and the file's name in it.
/// The deepest existing directory is opened first and must be where the
/// permission rules judged the path to lead (`judged`; no judgement,
/// nothing to check), else nothing is created or written: a link changed
/// since would have the write land somewhere no rule looked at. The
/// missing directories are then made through that open directory, each
/// entered without following a link, and the write goes through the last
/// one, not by path: no later swap moves it.
pub fn open_parent_where_judged(
    dir: &Dir,
    target: &WorkspacePath,
    requested: &WorkspacePath,
    judged: Option<&crate::tools::JudgedPath>,
    missing: &[WorkspacePath],
) -> Result<WriteTarget, ToolError> {
    refuse_commands_private(requested, judged)?;
    let name = target
        .file_name()
        .ok_or_else(|| directory_not_file(requested))?
        .to_os_string();
    let to_make: Vec<&std::ffi::OsStr> = missing.iter().filter_map(|d| d.file_name()).collect();
    let existing = missing
        .first()
        .map_or_else(|| target.parent(), WorkspacePath::parent)
        .unwrap_or_else(WorkspacePath::root);
    let parent = if existing.is_root() {
        dir.try_clone()
    } else {
        dir.open_dir(existing.as_path())
    }
    .map_err(|e| io_error(e, requested))?;
    let mut below = to_make.clone();
    below.push(&name);
    if let Some((then, now)) = moved_since_judged(dir, &parent, &below, requested, judged) {
        return Err(moved(
            requested,
            &then,
            &format!("a write now lands on '{now}'"),
            "written",
        ));
    }
    let mut target = WriteTarget {
        dir: parent,
        name,
        made: Vec::new(),
    };
    let mut made = existing;
    for part in to_make {
        made = made.join(part);
        let entered = target.enter(part, &made);
        if entered.is_err() {
            target.remove_made();
        }
        entered?;
    }
    Ok(target)
}

/// Where a write goes: the directory, opened, and the file's name in it;
/// and the directories [`open_parent_where_judged`] made on the way, each
/// with its parent opened, so that a write that fails afterwards removes
/// exactly those, through the same handles, not whatever their paths name
/// by then.
#[derive(Debug)]
pub struct WriteTarget {
    pub dir: Dir,
    pub name: std::ffi::OsString,
    made: Vec<(Dir, std::ffi::OsString)>,
}

impl WriteTarget {
    /// Make (unless it exists) and open the directory `part` of the current
    /// one, without following a link; `path` names it in errors.
    fn enter(&mut self, part: &std::ffi::OsStr, path: &WorkspacePath) -> Result<(), ToolError> {
        let created = match self.dir.create_dir(part) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            Err(e) => return Err(io_error(e, path)),
        };
        let child = match open_dir_nofollow(&self.dir, part) {
            Ok(child) => child,
            Err(e) => {
                if created {
                    let _ = self.dir.remove_dir(part);
                }
                return Err(io_error(e, path));
            }
        };
        let parent = std::mem::replace(&mut self.dir, child);
        if created {
            self.made.push((parent, part.to_os_string()));
        }
        Ok(())
    }

    /// Remove, deepest first, the directories this write made (each only
    /// while empty).
    pub fn remove_made(&mut self) {
        for (parent, name) in self.made.drain(..).rev() {
            let _ = parent.remove_dir(&name);
        }
    }
}

/// Open an existing regular file for reading. FIFOs and devices are refused
/// (opening a FIFO would block); the open is non-blocking and the type is
/// checked again on the open handle, so a swap after the first check gains
/// nothing.
pub fn open_regular(dir: &Dir, path: &WorkspacePath) -> Result<(File, Metadata), ToolError> {
    let meta = dir
        .metadata(path.as_path())
        .map_err(|e| io_error(e, path))?;
    if meta.is_dir() {
        return Err(directory_not_file(path));
    }
    if !meta.is_file() {
        return Err(not_regular(path));
    }
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    let file = dir
        .open_with(path.as_path(), &options)
        .map_err(|e| io_error(e, path))?;
    let meta = file.metadata().map_err(|e| io_error(e, path))?;
    if !meta.is_file() {
        return Err(not_regular(path));
    }
    Ok((file, meta))
}

/// Open the entry `name` of the directory `parent` for reading if it is a
/// regular file, as a walk meets entries: not followed if it is a link
/// (`O_NOFOLLOW`), never blocking on a FIFO or a device (`O_NONBLOCK`,
/// `O_NOCTTY`), and checked to be a regular file on the open handle, so
/// whatever is swapped in under the name meanwhile gains nothing. `None`
/// for anything else, or what cannot be opened.
pub fn open_regular_entry(parent: &Dir, name: &std::ffi::OsStr) -> Option<(File, Metadata)> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY);
    let file = parent.open_with(name, &options).ok()?;
    let meta = file.metadata().ok()?;
    meta.is_file().then_some((file, meta))
}

/// Whether the file tools must leave alone a file whose metadata (read
/// off the open handle) is `meta`: a regular file with other names (hard
/// links), while the call has deny or ask path rules (`rules`). Those
/// rules judge a file by its names, and nothing tells which of a hard
/// link's names is the file's "real" one: `notes.txt` may be `.env`.
pub fn hard_linked(meta: &Metadata, rules: Option<&crate::permissions::PathRules>) -> bool {
    rules.is_some_and(|rules| !rules.is_empty()) && meta.is_file() && meta.nlink() > 1
}

/// Refuse (`HARD_LINKED_FILE`) a file [`hard_linked`] says to leave alone;
/// `done` says what was not done ("read", "changed").
pub fn refuse_hard_linked(
    meta: &Metadata,
    path: &WorkspacePath,
    rules: Option<&crate::permissions::PathRules>,
    done: &str,
) -> Result<(), ToolError> {
    if !hard_linked(meta, rules) {
        return Ok(());
    }
    Err(ToolError::new(
        codes::HARD_LINKED_FILE,
        format!(
            "'{}' has other names (it is one file with {} hard links), so the permission rules, which judge files by name, cannot tell what file it is; it was not {done}",
            path.display(),
            meta.nlink()
        ),
        false,
    )
    .with_hint(
        "The file tools leave files with several names alone while deny or ask rules on paths are in force. Ask the user about this file.",
    ))
}

fn not_regular(path: &WorkspacePath) -> ToolError {
    ToolError::new(
        codes::NOT_A_REGULAR_FILE,
        format!(
            "'{}' is not a regular file (a FIFO, socket or device)",
            path.display()
        ),
        false,
    )
    .with_hint(
        "These tools read and write regular files only; use bash to look at it (ls -l, file).",
    )
}

/// The file a write to `path` lands on. A final symbolic link is followed,
/// through the `Dir`, as long as it stays inside; one that leads out (or
/// is absolute) is a `SECURITY_VIOLATION`. A path that does not exist yet
/// resolves to itself.
pub fn resolve_target(dir: &Dir, path: &WorkspacePath) -> Result<WorkspacePath, ToolError> {
    let mut current = path.clone();
    for _ in 0..40 {
        let meta = match dir.symlink_metadata(current.as_path()) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(current),
            Err(e) => return Err(io_error(e, path)),
        };
        if !meta.file_type().is_symlink() {
            return Ok(current);
        }
        // Where the link would lead, checked by the kernel: an escape fails
        // here whatever the link's shape.
        match dir.metadata(current.as_path()) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(e, path)),
        }
        let target = dir
            .read_link_contents(current.as_path())
            .map_err(|e| io_error(e, path))?;
        if target.has_root() {
            return Err(security_violation(
                &path.display(),
                "it is a symbolic link to an absolute path",
            ));
        }
        // The link's directory, with its own links resolved (beneath the
        // Dir), so that `..` in the target means what the kernel means.
        let parent = current.parent().unwrap_or_else(WorkspacePath::root);
        let base = if parent.is_root() {
            PathBuf::new()
        } else {
            relative_parts(
                dir.canonicalize(parent.as_path())
                    .map_err(|e| io_error(e, path))?,
            )
        };
        let mut resolved = base;
        for component in target.components() {
            match component {
                Component::Normal(part) => resolved.push(part),
                Component::CurDir => {}
                Component::ParentDir => {
                    // `..` after a link steps up from where the link leads,
                    // as the kernel does (`p/../x` with `p` → `docs/sub` is
                    // `docs/x`), not from the link's own place.
                    if !resolved.as_os_str().is_empty() {
                        match dir.canonicalize(&resolved) {
                            Ok(real) => resolved = relative_parts(real),
                            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                            Err(e) => return Err(io_error(e, path)),
                        }
                    }
                    if !resolved.pop() {
                        return Err(security_violation(
                            &path.display(),
                            "it is a symbolic link that leads out of the workspace",
                        ));
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(security_violation(
                        &path.display(),
                        "it is a symbolic link to an absolute path",
                    ));
                }
            }
        }
        if resolved.as_os_str().is_empty() {
            return Err(directory_not_file(path));
        }
        current = WorkspacePath::from_normalised(resolved);
    }
    Err(ToolError::new(
        codes::IO_ERROR,
        format!("'{}': too many levels of symbolic links", path.display()),
        false,
    ))
}

/// A path the `Dir` canonicalized (`/a/b` beneath it) as the relative,
/// normalised path it names (`a/b`).
fn relative_parts(real: PathBuf) -> PathBuf {
    real.components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect()
}

/// Where `path` really is inside the workspace: every symbolic link in
/// it resolved (beneath the `Dir`, as the kernel resolves it), a final
/// link whose target does not exist yet included (a write would create
/// that target). A path that does not exist yet is its longest existing
/// parent, resolved, and the rest as named. `None` when that cannot be
/// told without leaving the workspace (the open would fail anyway).
pub fn resolve_beneath(dir: &Dir, path: &WorkspacePath) -> Option<WorkspacePath> {
    match dir.canonicalize(path.as_path()) {
        Ok(real) => return Some(WorkspacePath::from_normalised(relative_parts(real))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(_) => return None,
    }
    let mut existing = resolve_target(dir, path).ok()?;
    let mut missing = Vec::new();
    loop {
        match dir.canonicalize(existing.as_path()) {
            Ok(real) => {
                let mut rel = relative_parts(real);
                rel.extend(missing.iter().rev());
                return Some(WorkspacePath::from_normalised(rel));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                missing.push(existing.file_name()?.to_os_string());
                existing = existing.parent()?;
            }
            Err(_) => return None,
        }
    }
}

/// Names in the parent directory close to the missing file's name, for a
/// `FILE_NOT_FOUND` hint; none the call's path rules leave out of a walk
/// (a hint must not name what a listing hides).
pub fn similar_names(
    dir: &Dir,
    path: &WorkspacePath,
    rules: Option<&crate::permissions::PathRules>,
) -> Vec<String> {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return vec![];
    };
    let parent = path.parent().unwrap_or_else(WorkspacePath::root);
    let Ok(entries) = dir.read_dir(parent.as_path()) else {
        return vec![];
    };
    let names: Vec<String> = entries
        .filter_map(Result::ok)
        .take(10_000)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            rules
                .is_none_or(|r| !r.leave_out(&parent.join(std::ffi::OsStr::new(n)).display(), None))
        })
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    similar::get_close_matches(name.as_str(), &refs, 3, 0.6)
        .into_iter()
        .map(|n| parent.join(std::ffi::OsStr::new(n)).display())
        .collect()
}

/// `io_error`, with close names in the hint when the file is missing.
pub fn not_found_aware(
    err: io::Error,
    dir: &Dir,
    path: &WorkspacePath,
    rules: Option<&crate::permissions::PathRules>,
) -> ToolError {
    let missing = err.kind() == io::ErrorKind::NotFound;
    let mut tool_error = io_error(err, path);
    // The path itself is there, a symbolic link to nothing: said so, not
    // "did you mean" the same name (its target is not named: it may be a
    // host path).
    if missing
        && !path.is_root()
        && dir
            .symlink_metadata(path.as_path())
            .is_ok_and(|meta| meta.file_type().is_symlink())
    {
        return ToolError::new(
            codes::FILE_NOT_FOUND,
            format!(
                "'{}' is a symbolic link to something that does not exist",
                path.display()
            ),
            false,
        )
        .with_hint("look at the link with bash (ls -l); read or write the file it should lead to by its own path");
    }
    // `~/x`: a directory named `~`, which the workspace seldom has; the
    // model meant its home, and the file tools' root is the workspace.
    if missing
        && let Ok(rest) = path.rel().strip_prefix("~")
        && !dir.exists("~")
    {
        let rest = rest.to_string_lossy();
        let instead = if rest.is_empty() { "." } else { rest.as_ref() };
        return tool_error.with_hint(format!(
            "'~' is not expanded: the path names a directory called '~'. Paths are relative \
             to the workspace root: use '{instead}'."
        ));
    }
    if missing {
        let close = similar_names(dir, path, rules);
        if !close.is_empty() {
            tool_error = tool_error.with_hint(format!(
                "Did you mean {}? Otherwise use glob to find files by name.",
                close
                    .iter()
                    .map(|c| format!("'{c}'"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ));
        }
    }
    tool_error
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_full_disk_is_a_retryable_io_error() {
        let path = super::WorkspacePath::from_normalised("a.txt".into());
        for (errno, retryable) in [
            (libc::ENOSPC, true),
            (libc::EDQUOT, true),
            (libc::EBUSY, true),
            (libc::EIO, false),
        ] {
            let e = super::io_error(std::io::Error::from_raw_os_error(errno), &path);
            assert_eq!(e.code, super::codes::IO_ERROR, "{errno}");
            assert_eq!(e.retryable, retryable, "{errno}");
        }
    }

    use super::*;

    fn ws() -> PathBuf {
        PathBuf::from("/srv/ws/u_alice")
    }

    #[test]
    fn relative_paths_are_normalised() {
        let p = WorkspacePath::parse("./a//b/./c.txt", &ws()).unwrap();
        assert_eq!(p.display(), "a/b/c.txt");
        assert!(WorkspacePath::parse("", &ws()).unwrap().is_root());
        assert!(WorkspacePath::parse(".", &ws()).unwrap().is_root());
    }

    #[test]
    fn parent_components_and_outside_absolute_paths_are_violations() {
        for bad in [
            "..",
            "../x",
            "a/../../x",
            "a/../b",
            "/etc/passwd",
            "/srv/ws/u_bob/x",
            "/srv/ws/u_alice2/x",
            "/srv/ws/u_alice/../u_bob/x",
            "/proc/self/environ",
        ] {
            let err = WorkspacePath::parse(bad, &ws()).unwrap_err();
            assert_eq!(err.code, codes::SECURITY_VIOLATION, "{bad}");
        }
    }

    /// Each refusal says what to send instead: the path without its `..`
    /// where that stays inside, a relative path for an absolute one.
    #[test]
    fn a_violation_says_what_to_send_instead() {
        let hint = |bad: &str| WorkspacePath::parse(bad, &ws()).unwrap_err().hint.unwrap();
        assert_eq!(
            hint("src/../README.md"),
            "Use 'README.md', the same path without '..'."
        );
        assert_eq!(hint("a/./b/../c"), "Use 'a/c', the same path without '..'.");
        assert!(hint("../x").contains("without '..'"), "{}", hint("../x"));
        assert!(hint("a/../..").contains("without '..'"));
        assert!(hint("/etc/passwd").contains("'~' is not expanded"));
        let link = io_error(
            io::Error::from_raw_os_error(libc::EXDEV),
            &WorkspacePath::parse("evil", &ws()).unwrap(),
        );
        assert!(link.hint.unwrap().contains("symbolic link"));
    }

    #[test]
    fn absolute_paths_inside_the_workspace_become_relative() {
        let p = WorkspacePath::parse("/srv/ws/u_alice/src/main.rs", &ws()).unwrap();
        assert_eq!(p.display(), "src/main.rs");
        assert!(
            WorkspacePath::parse("/srv/ws/u_alice", &ws())
                .unwrap()
                .is_root()
        );
    }

    #[test]
    fn nul_bytes_are_invalid_arguments() {
        let err = WorkspacePath::parse("a\0b", &ws()).unwrap_err();
        assert_eq!(err.code, codes::INVALID_ARGUMENTS);
    }

    fn judged(leads_to: Option<&str>) -> crate::tools::JudgedPath {
        crate::tools::JudgedPath {
            leads_to: leads_to.map(str::to_string),
        }
    }

    /// A file opened through a link that changed after the rules judged
    /// it is refused, on the open file; one where the rules left it is not.
    #[test]
    fn a_file_opened_elsewhere_than_judged_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        // The workspace reached through a link, as a sub-workspace may be.
        let real_ws = tmp.path().join("real");
        std::fs::create_dir_all(real_ws.join("sub")).unwrap();
        std::os::unix::fs::symlink(&real_ws, tmp.path().join("ws")).unwrap();
        let ws = tmp.path().join("ws");
        std::fs::write(ws.join("ok.txt"), "fine").unwrap();
        std::fs::write(ws.join("sub/a.txt"), "fine").unwrap();
        std::fs::write(ws.join(".env"), "SECRET").unwrap();
        std::os::unix::fs::symlink("ok.txt", ws.join("x")).unwrap();
        let dir = Dir::open_ambient_dir(&ws, cap_std::ambient_authority()).unwrap();
        let check = |raw: &str, j: Option<crate::tools::JudgedPath>| {
            let path = WorkspacePath::parse(raw, &ws).unwrap();
            let (file, _) = open_regular(&dir, &path).unwrap();
            opened_where_judged(&dir, &file, &path, j.as_ref())
        };
        // Where the rules left them.
        check("ok.txt", Some(judged(None))).unwrap();
        check("sub/a.txt", Some(judged(None))).unwrap();
        check("x", Some(judged(Some("ok.txt")))).unwrap();
        check("x", None).unwrap();
        // The link now leads to `.env`; the rules judged `ok.txt`.
        std::fs::remove_file(ws.join("x")).unwrap();
        std::os::unix::fs::symlink(".env", ws.join("x")).unwrap();
        let err = check("x", Some(judged(Some("ok.txt")))).unwrap_err();
        assert_eq!(err.code, codes::PERMISSION_DENIED);
        assert!(
            err.message.contains("'ok.txt'") && err.message.contains("'.env'"),
            "{}",
            err.message
        );
        // Judged as named (no link then): a link there now is refused too.
        let err = check("x", Some(judged(None))).unwrap_err();
        assert_eq!(err.code, codes::PERMISSION_DENIED);
        // Not judged (no rules looked): nothing to compare with.
        check("x", None).unwrap();
    }

    /// A write that fails after making its directories removes the ones it
    /// made, through the handles it made them with: not what their paths
    /// name after a link changed, and not a directory that was already
    /// there.
    #[test]
    fn a_failed_write_removes_the_directories_it_made_and_no_others() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        for d in ["docs/a", "secrets"] {
            std::fs::create_dir_all(ws.join(d)).unwrap();
        }
        std::os::unix::fs::symlink("docs", ws.join("d")).unwrap();
        let dir = Dir::open_ambient_dir(&ws, cap_std::ambient_authority()).unwrap();
        let parse = |p: &str| WorkspacePath::parse(p, &ws).unwrap();
        let path = parse("d/a/b/c/new.txt");
        let missing = [parse("d/a"), parse("d/a/b"), parse("d/a/b/c")];
        let mut target = open_parent_where_judged(
            &dir,
            &path,
            &path,
            Some(&judged(Some("docs/a/b/c/new.txt"))),
            &missing,
        )
        .unwrap();
        assert!(ws.join("docs/a/b/c").is_dir());
        // The link changes, and the same names exist where it leads now.
        std::fs::remove_file(ws.join("d")).unwrap();
        std::os::unix::fs::symlink("secrets", ws.join("d")).unwrap();
        std::fs::create_dir_all(ws.join("secrets/a/b/c")).unwrap();
        target.remove_made();
        assert!(!ws.join("docs/a/b").exists(), "what the write made goes");
        assert!(ws.join("docs/a").is_dir(), "what was there stays");
        assert!(ws.join("secrets/a/b/c").is_dir(), "nothing goes elsewhere");
    }

    /// Where `/proc` cannot say where a handle is, the file it holds is
    /// compared with the one the judged path names, walked without
    /// following a link: a swapped link is still caught.
    #[test]
    fn without_proc_the_handle_is_compared_with_the_judged_file() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        for d in ["docs", "secrets"] {
            std::fs::create_dir_all(ws.join(d)).unwrap();
            std::fs::write(ws.join(d).join("ok.txt"), d).unwrap();
        }
        std::fs::write(ws.join("top.txt"), "top").unwrap();
        std::os::unix::fs::symlink("docs", ws.join("d")).unwrap();
        let dir = Dir::open_ambient_dir(&ws, cap_std::ambient_authority()).unwrap();
        let through_link = dir.open("d/ok.txt").unwrap();
        assert!(!elsewhere_than(&dir, &through_link, 0, "docs/ok.txt"));
        assert!(elsewhere_than(&dir, &through_link, 0, "secrets/ok.txt"));
        // The link changes between the judgement and the open.
        std::fs::remove_file(ws.join("d")).unwrap();
        std::os::unix::fs::symlink("secrets", ws.join("d")).unwrap();
        let swapped = dir.open("d/ok.txt").unwrap();
        assert!(elsewhere_than(&dir, &swapped, 0, "docs/ok.txt"));
        // A judged path never holds a link: one there now fails closed.
        assert!(elsewhere_than(&dir, &swapped, 0, "d/ok.txt"));
        assert!(elsewhere_than(&dir, &swapped, 0, "docs/missing.txt"));
        // A directory handle, with the names a write adds below it.
        let docs = dir.open_dir("docs").unwrap();
        assert!(!elsewhere_than(&dir, &docs, 2, "docs/new/x.txt"));
        assert!(elsewhere_than(&dir, &docs, 2, "secrets/new/x.txt"));
        assert!(elsewhere_than(&dir, &docs, 3, "docs/x.txt"));
        assert!(!elsewhere_than(&dir, &dir, 1, "top.txt"));
        let top = dir.open("top.txt").unwrap();
        assert!(!elsewhere_than(&dir, &top, 0, "top.txt"));
    }

    /// A write lands where the rules judged its path to lead, or nowhere.
    #[test]
    fn a_write_whose_directory_moved_since_the_judgement_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        for d in ["docs", "secrets"] {
            std::fs::create_dir_all(ws.join(d)).unwrap();
        }
        std::os::unix::fs::symlink("docs", ws.join("d")).unwrap();
        let dir = Dir::open_ambient_dir(&ws, cap_std::ambient_authority()).unwrap();
        let open = |raw: &str, j: Option<crate::tools::JudgedPath>| {
            let path = WorkspacePath::parse(raw, &ws).unwrap();
            open_parent_where_judged(&dir, &path, &path, j.as_ref(), &[])
                .map(|target| target.name.to_string_lossy().into_owned())
        };
        assert_eq!(
            open("d/new.txt", Some(judged(Some("docs/new.txt")))).unwrap(),
            "new.txt"
        );
        assert_eq!(open("top.txt", Some(judged(None))).unwrap(), "top.txt");
        assert_eq!(open("docs/a.txt", Some(judged(None))).unwrap(), "a.txt");
        // `d` now leads to `secrets`; the rules judged `docs/new.txt`.
        std::fs::remove_file(ws.join("d")).unwrap();
        std::os::unix::fs::symlink("secrets", ws.join("d")).unwrap();
        let err = open("d/new.txt", Some(judged(Some("docs/new.txt")))).unwrap_err();
        assert_eq!(err.code, codes::PERMISSION_DENIED);
        assert!(
            err.message.contains("'secrets/new.txt'")
                && err.message.contains("nothing was written"),
            "{}",
            err.message
        );
        // Not judged: nothing to compare with.
        assert_eq!(open("d/new.txt", None).unwrap(), "new.txt");
        // Directories a write needs are made only where the rules judged
        // (`d` leads to `secrets` now): nothing is made there.
        let deep = WorkspacePath::parse("d/a/b/new.txt", &ws).unwrap();
        let missing = ["d/a", "d/a/b"].map(|p| WorkspacePath::parse(p, &ws).unwrap());
        let err = open_parent_where_judged(
            &dir,
            &deep,
            &deep,
            Some(&judged(Some("docs/a/b/new.txt"))),
            &missing,
        )
        .unwrap_err();
        assert!(
            err.message.contains("'secrets/a/b/new.txt'"),
            "{}",
            err.message
        );
        assert!(!ws.join("secrets/a").exists() && !ws.join("docs/a").exists());
        let target = open_parent_where_judged(
            &dir,
            &deep,
            &deep,
            Some(&judged(Some("secrets/a/b/new.txt"))),
            &missing,
        )
        .unwrap();
        super::super::change::atomic_write(&target.dir, &target.name, b"x", None).unwrap();
        assert!(ws.join("secrets/a/b/new.txt").is_file());
        // A directory to list or walk, opened through the link, likewise.
        let d = WorkspacePath::parse("d", &ws).unwrap();
        let handle = dir.open_dir("d").unwrap();
        let err = opened_where_judged(&dir, &handle, &d, Some(&judged(Some("docs")))).unwrap_err();
        assert_eq!(err.code, codes::PERMISSION_DENIED);
        opened_where_judged(&dir, &handle, &d, Some(&judged(Some("secrets")))).unwrap();
        // A write through the directory handle lands in it, whatever the
        // link says afterwards.
        let path = WorkspacePath::parse("d/late.txt", &ws).unwrap();
        let target = open_parent_where_judged(
            &dir,
            &path,
            &path,
            Some(&judged(Some("secrets/late.txt"))),
            &[],
        )
        .unwrap();
        std::fs::remove_file(ws.join("d")).unwrap();
        std::os::unix::fs::symlink("docs", ws.join("d")).unwrap();
        super::super::change::atomic_write(&target.dir, &target.name, b"x", None).unwrap();
        assert!(ws.join("secrets/late.txt").exists());
        assert!(!ws.join("docs/late.txt").exists());
    }

    #[test]
    fn links_are_resolved_beneath_the_workspace() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("secrets/deep")).unwrap();
        std::fs::create_dir_all(ws.join("docs")).unwrap();
        std::fs::write(ws.join(".env"), "x").unwrap();
        std::fs::write(ws.join("secrets/key"), "x").unwrap();
        let link =
            |target: &str, at: &str| std::os::unix::fs::symlink(target, ws.join(at)).unwrap();
        link(".env", "link_env");
        link("../secrets", "docs/s");
        link("docs/s", "chain");
        link("missing.txt", "dangling");
        link("/etc", "abs");
        link("..", "up");
        link(".", "here");
        let dir = Dir::open_ambient_dir(&ws, cap_std::ambient_authority()).unwrap();
        let resolve = |raw: &str| {
            resolve_beneath(&dir, &WorkspacePath::parse(raw, &ws).unwrap()).map(|p| p.display())
        };
        for (raw, real) in [
            ("link_env", ".env"),
            (".env", ".env"),
            ("docs/s/key", "secrets/key"),
            ("chain/key", "secrets/key"),
            ("chain", "secrets"),
            // Not there yet: its existing parent resolved, the rest as named.
            ("docs/s/new.txt", "secrets/new.txt"),
            ("chain/deep/a/b.txt", "secrets/deep/a/b.txt"),
            ("dangling", "missing.txt"),
            ("nothing/here.txt", "nothing/here.txt"),
            ("here", "."),
            ("here/.env", ".env"),
            (".", "."),
        ] {
            assert_eq!(resolve(raw).as_deref(), Some(real), "{raw}");
        }
        for raw in ["abs", "abs/passwd", "up", "up/ws/.env"] {
            assert_eq!(resolve(raw), None, "{raw}");
        }
    }

    #[test]
    fn cap_std_escapes_are_recognised() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("ws")).unwrap();
        std::os::unix::fs::symlink("/etc", tmp.path().join("ws/link")).unwrap();
        std::os::unix::fs::symlink("..", tmp.path().join("ws/up")).unwrap();
        let dir =
            Dir::open_ambient_dir(tmp.path().join("ws"), cap_std::ambient_authority()).unwrap();
        for path in ["link/passwd", "up/x", "/etc/passwd"] {
            let err = dir.open(path).unwrap_err();
            assert!(is_escape(&err), "{path}: {err:?}");
        }
        let missing = dir.open("missing").unwrap_err();
        assert!(!is_escape(&missing));
    }
}
