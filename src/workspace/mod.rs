//! Per-owner workspaces: the only part of the file system tools may touch.
//!
//! Each owner has a directory under the workspace root, created on first
//! use; a call may name a sub-workspace (one plain path component), which
//! is a directory inside the owner's workspace. Tools get a `cap_std` `Dir`
//! for it, so every path they open is resolved beneath it by the kernel
//! (openat2 `RESOLVE_BENEATH`): `..`, absolute paths and symlinks that leave
//! it fail without a check-then-use race.
//!
//! Edit history (for `undo_edit` and undo of writes) lives under a separate
//! root outside every workspace, so nothing a command in the workspace does
//! can forge it.

use std::io;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use cap_std::ambient_authority;
use cap_std::fs::Dir;

use crate::protocol::calls::valid_workspace_name;

#[derive(Debug)]
pub struct Workspaces {
    root: PathBuf,
    history_root: PathBuf,
}

/// An opened workspace.
pub struct Workspace {
    /// Absolute path (for spawning commands with a cwd and for Landlock):
    /// where the opened directory really is, inside its owner's workspace.
    pub path: PathBuf,
    /// The capability every file tool opens paths through.
    pub dir: Dir,
    /// The opened directory's (device, inode): a command's sandbox checks
    /// that the directory it confines the command to is this one, not
    /// whatever `path` names by the time it starts.
    pub identity: (u64, u64),
}

impl Workspaces {
    /// `root` holds the owners' workspaces, `history_root` their edit
    /// histories; both are created if missing.
    pub fn new(root: &Path, history_root: &Path) -> io::Result<Workspaces> {
        crate::private_dir(root)?;
        crate::private_dir(history_root)?;
        Ok(Workspaces {
            root: root.canonicalize()?,
            history_root: history_root.canonicalize()?,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory name of an owner: `u_<sub>` for plain subjects,
    /// `e_<base64url(sub)>` otherwise, so two owners never share one.
    pub fn owner_dir_name(owner: &str) -> String {
        let plain = !owner.is_empty()
            && owner.len() <= 64
            && owner
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
        if plain {
            format!("u_{owner}")
        } else {
            format!(
                "e_{}",
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(owner)
            )
        }
    }

    fn relative(owner: &str, sub: Option<&str>) -> io::Result<PathBuf> {
        let mut rel = PathBuf::from(Self::owner_dir_name(owner));
        if let Some(sub) = sub {
            rel.push(checked_name(sub)?);
        }
        Ok(rel)
    }

    /// Absolute path of a workspace (it may not exist yet).
    pub fn path(&self, owner: &str, sub: Option<&str>) -> io::Result<PathBuf> {
        Ok(self.root.join(Self::relative(owner, sub)?))
    }

    /// Open (creating on first use) the workspace of `owner`, or its
    /// sub-workspace `sub`.
    ///
    /// A sub-workspace is resolved beneath its owner's workspace, not
    /// beneath the root of all of them: a symlink an owner made there (a
    /// command can make one) that leads to another owner's workspace, or to
    /// the root, is refused like any path that leaves the workspace.
    pub fn open(&self, owner: &str, sub: Option<&str>) -> io::Result<Workspace> {
        self.open_or_create(owner, sub, true)
    }

    /// Open the workspace of `owner`, or its sub-workspace `sub`, only if
    /// it exists: nothing is created (`NotFound` otherwise). For readers
    /// (`GET /v1/workspace`, the permission rules), which must not leave
    /// directories behind.
    pub fn open_existing(&self, owner: &str, sub: Option<&str>) -> io::Result<Workspace> {
        self.open_or_create(owner, sub, false)
    }

    fn open_or_create(
        &self,
        owner: &str,
        sub: Option<&str>,
        create: bool,
    ) -> io::Result<Workspace> {
        let owner_name = Self::owner_dir_name(owner);
        let root = Dir::open_ambient_dir(&self.root, ambient_authority())?;
        if create {
            root.create_dir_all(&owner_name)?;
        }
        let owner_dir = root.open_dir(&owner_name)?;
        let owner_path = self.root.join(&owner_name);
        let Some(sub) = sub else {
            let identity = identity(&owner_dir)?;
            return Ok(Workspace {
                path: owner_path,
                dir: owner_dir,
                identity,
            });
        };
        let sub = checked_name(sub)?;
        if create
            && let Err(e) = owner_dir.create_dir(sub)
            && e.kind() != io::ErrorKind::AlreadyExists
        {
            return Err(e);
        }
        let dir = owner_dir.open_dir(sub).map_err(|e| {
            if !create && e.kind() == io::ErrorKind::NotFound {
                e
            } else {
                outside(sub, e)
            }
        })?;
        // Where it really is (a symlink to another directory of the same
        // owner is followed), checked to be inside the owner's workspace.
        let path = real_path(&dir)?;
        let Ok(within) = path.strip_prefix(&owner_path) else {
            return Err(outside(sub, io::ErrorKind::PermissionDenied.into()));
        };
        // Running commands' own directories (their `TMPDIR` and `HOME`),
        // by name or through a link: no call works there.
        if within
            .components()
            .any(|c| c.as_os_str() == crate::sandbox::TMP_DIR_NAME)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "sub-workspace {sub:?} is inside {}, where running commands keep their own temporary files and HOME: no call works there",
                    crate::sandbox::TMP_DIR_NAME
                ),
            ));
        }
        let identity = identity(&dir)?;
        Ok(Workspace {
            path,
            dir,
            identity,
        })
    }

    /// The edit-history directory of a workspace, outside every workspace.
    pub fn history(&self, owner: &str, sub: Option<&str>) -> io::Result<Dir> {
        let mut rel = PathBuf::from(Self::owner_dir_name(owner));
        rel.push(match sub {
            Some(s) => format!("w_{}", checked_name(s)?),
            None => "main".to_string(),
        });
        let root = Dir::open_ambient_dir(&self.history_root, ambient_authority())?;
        root.create_dir_all(&rel)?;
        root.open_dir(&rel)
    }
}

/// `sub` if it is a valid sub-workspace name (one plain path component).
fn checked_name(sub: &str) -> io::Result<&str> {
    if valid_workspace_name(sub) {
        Ok(sub)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "invalid sub-workspace name",
        ))
    }
}

/// A directory's (device, inode).
pub fn identity(dir: &Dir) -> io::Result<(u64, u64)> {
    use cap_std::fs::MetadataExt;
    let meta = dir.dir_metadata()?;
    Ok((meta.dev(), meta.ino()))
}

/// The path an opened directory has now, from the kernel.
fn real_path(dir: &Dir) -> io::Result<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
}

fn outside(sub: &str, e: io::Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("sub-workspace {sub:?} is not a directory inside the owner's workspace ({e})"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_get_distinct_directories_created_on_first_use() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(&tmp.path().join("ws"), &tmp.path().join("hist")).unwrap();
        assert_eq!(Workspaces::owner_dir_name("alice"), "u_alice");
        assert_ne!(
            Workspaces::owner_dir_name("a/b"),
            Workspaces::owner_dir_name("a_b")
        );
        assert!(Workspaces::owner_dir_name("../etc").starts_with("e_"));
        let a = ws.open("alice", None).unwrap();
        a.dir.write("f.txt", "x").unwrap();
        assert!(a.path.join("f.txt").exists());
        let sub = ws.open("alice", Some("proj")).unwrap();
        assert_eq!(sub.path, a.path.join("proj"));
        assert!(ws.open("alice", Some("..")).is_err());
        assert!(ws.history("alice", None).is_ok());
    }

    #[test]
    fn opening_an_existing_workspace_creates_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = Workspaces::new(&tmp.path().join("ws"), &tmp.path().join("hist")).unwrap();
        let missing = |r: io::Result<Workspace>| r.err().map(|e| e.kind());
        assert_eq!(
            missing(ws.open_existing("alice", None)),
            Some(io::ErrorKind::NotFound)
        );
        assert_eq!(
            missing(ws.open_existing("alice", Some("proj"))),
            Some(io::ErrorKind::NotFound)
        );
        assert!(!tmp.path().join("ws/u_alice").exists());
        let main = ws.open("alice", None).unwrap();
        assert_eq!(
            missing(ws.open_existing("alice", Some("proj"))),
            Some(io::ErrorKind::NotFound)
        );
        assert!(!main.path.join("proj").exists());
        assert_eq!(ws.open_existing("alice", None).unwrap().path, main.path);
        std::fs::create_dir(main.path.join("proj")).unwrap();
        let sub = ws.open_existing("alice", Some("proj")).unwrap();
        assert_eq!(sub.path, main.path.join("proj"));
        // A link that leads out is still no sub-workspace.
        std::os::unix::fs::symlink(tmp.path(), main.path.join("out")).unwrap();
        assert_eq!(
            missing(ws.open_existing("alice", Some("out"))),
            Some(io::ErrorKind::InvalidInput)
        );
    }
}
