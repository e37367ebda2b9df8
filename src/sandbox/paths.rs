//! Which parts of the file system outside the workspace a command may see.
//!
//! Landlock can only grant, never carve out: a rule on `/etc` opens every
//! file beneath it. So a hidden path beneath a granted tree splits that
//! tree: the tree's directories stay listable, and each of its entries is
//! granted on its own, except the hidden ones (recursively, along the way
//! to each hidden path). The split is computed once, when the sandbox is
//! built; entries created later in a split directory are not readable.

use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

/// The read-only system paths of the sandbox, and what never to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemPaths {
    /// Readable and executable trees: programs and their libraries.
    pub exec: Vec<PathBuf>,
    /// Readable trees: configuration and kernel information.
    pub read: Vec<PathBuf>,
    /// Character devices a command may read and write (`/dev/null`, …).
    pub devices: Vec<PathBuf>,
    /// Never readable, even beneath a granted tree: secrets of the host
    /// and of the service (its data directory, its configuration).
    pub hidden: Vec<PathBuf>,
}

impl Default for SystemPaths {
    fn default() -> Self {
        let paths = |list: &[&str]| list.iter().map(PathBuf::from).collect::<Vec<_>>();
        SystemPaths {
            exec: paths(&[
                "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
            ]),
            // /proc: per-process files that matter (environ, mem, fd, maps…)
            // of processes outside the command are refused by Landlock's
            // ptrace scoping; /sys only for CPU counts and cgroup limits.
            read: paths(&["/etc", "/proc", "/sys/devices/system/cpu", "/sys/fs/cgroup"]),
            devices: paths(&[
                "/dev/null",
                "/dev/zero",
                "/dev/full",
                "/dev/random",
                "/dev/urandom",
            ]),
            hidden: paths(&[
                "/etc/shadow",
                "/etc/shadow-",
                "/etc/gshadow",
                "/etc/gshadow-",
                "/etc/sudoers",
                "/etc/sudoers.d",
                "/etc/ssh",
                "/etc/ssl/private",
                "/etc/pki/tls/private",
                "/etc/letsencrypt",
                "/etc/security/opasswd",
                "/etc/krb5.keytab",
                "/etc/credstore",
                "/etc/credstore.encrypted",
                "/etc/wireguard",
                "/etc/NetworkManager/system-connections",
            ]),
        }
    }
}

impl SystemPaths {
    /// Never let a command read `path` (a file or a whole directory), even
    /// when it lies beneath a granted tree. Relative paths are taken from
    /// the current directory.
    pub fn hide(mut self, path: impl AsRef<Path>) -> Self {
        self.hidden.push(path.as_ref().to_path_buf());
        self
    }

    /// Also let commands read and execute beneath `path` (a tool chain
    /// installed outside the usual places).
    pub fn allow_exec(mut self, path: impl AsRef<Path>) -> Self {
        self.exec.push(path.as_ref().to_path_buf());
        self
    }
}

/// What a rule grants beneath its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Read files, list directories, execute.
    Exec,
    /// Read files, list directories.
    Read,
    /// List directories only (a tree split around a hidden path).
    List,
    /// Read and write (devices).
    ReadWrite,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rule {
    pub path: PathBuf,
    pub grant: Grant,
}

/// Absolute and free of `.`/`..`; resolved through symlinks when it exists.
fn normalize(path: &Path) -> PathBuf {
    if let Ok(real) = path.canonicalize() {
        return real;
    }
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(path)
    };
    let mut out = PathBuf::from("/");
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// The Landlock rules for `paths`, with every hidden path left out.
pub(crate) fn rules(paths: &SystemPaths) -> Vec<Rule> {
    let hidden: Vec<PathBuf> = paths.hidden.iter().map(|p| normalize(p)).collect();
    let mut out = Vec::new();
    let mut granted: Vec<(PathBuf, Grant)> = Vec::new();
    let groups = [
        (&paths.exec, Grant::Exec),
        (&paths.read, Grant::Read),
        (&paths.devices, Grant::ReadWrite),
    ];
    for (list, grant) in groups {
        for path in list {
            let Ok(real) = path.canonicalize() else {
                continue; // absent on this host
            };
            // `/bin` is `/usr/bin` on merged-/usr systems: one rule is enough.
            if granted
                .iter()
                .any(|(p, g)| *g == grant && real.starts_with(p))
            {
                continue;
            }
            granted.push((real.clone(), grant));
            let mut visited = HashSet::new();
            grant_tree(&real, grant, &hidden, &mut visited, &mut out);
        }
    }
    out
}

fn grant_tree(
    path: &Path,
    grant: Grant,
    hidden: &[PathBuf],
    visited: &mut HashSet<PathBuf>,
    out: &mut Vec<Rule>,
) {
    if hidden.iter().any(|h| path.starts_with(h)) {
        return;
    }
    let splits = hidden.iter().any(|h| h.starts_with(path) && h != path);
    if !splits || !path.is_dir() {
        out.push(Rule {
            path: path.to_path_buf(),
            grant,
        });
        return;
    }
    if !visited.insert(path.to_path_buf()) {
        return; // a symlink loop back into a tree being split
    }
    out.push(Rule {
        path: path.to_path_buf(),
        grant: Grant::List,
    });
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    for entry in entries.flatten() {
        // Symlinks are followed: the rule lands on what they point to, and
        // a link to a hidden path is as hidden as the path itself.
        let Ok(real) = entry.path().canonicalize() else {
            continue;
        };
        grant_tree(&real, grant, hidden, visited, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hidden_path_splits_the_tree_that_holds_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("etc/ssl/private")).unwrap();
        std::fs::create_dir_all(root.join("etc/ssl/certs")).unwrap();
        std::fs::write(root.join("etc/passwd"), "p").unwrap();
        std::fs::write(root.join("etc/shadow"), "s").unwrap();
        std::os::unix::fs::symlink(root.join("etc/shadow"), root.join("etc/alias")).unwrap();
        std::os::unix::fs::symlink(root.join("etc"), root.join("etc/loop")).unwrap();
        let paths = SystemPaths {
            exec: vec![],
            read: vec![root.join("etc")],
            devices: vec![],
            hidden: vec![root.join("etc/shadow"), root.join("etc/ssl/private")],
        };
        let mut got: Vec<(String, Grant)> = rules(&paths)
            .into_iter()
            .map(|r| {
                let rel = r.path.strip_prefix(&root).unwrap().display().to_string();
                (rel, r.grant)
            })
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            got,
            vec![
                ("etc".to_string(), Grant::List),
                ("etc/passwd".to_string(), Grant::Read),
                ("etc/ssl".to_string(), Grant::List),
                ("etc/ssl/certs".to_string(), Grant::Read),
            ]
        );
    }

    #[test]
    fn a_hidden_tree_root_is_not_granted_at_all() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let paths = SystemPaths {
            exec: vec![root.clone()],
            read: vec![],
            devices: vec![],
            hidden: vec![tmp.path().to_path_buf()],
        };
        assert!(rules(&paths).is_empty());
    }

    #[test]
    fn absent_paths_are_skipped_and_nested_ones_merged() {
        let paths = SystemPaths {
            exec: vec!["/usr".into(), "/usr/bin".into(), "/no/such/dir".into()],
            read: vec![],
            devices: vec![],
            hidden: vec!["relative/../not-there".into()],
        };
        let got = rules(&paths);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].path, Path::new("/usr").canonicalize().unwrap());
    }
}
