//! A process limit the kernel enforces for every user, root included: each
//! command starts in a pids cgroup of its own whose `pids.max` is
//! `sandbox.max_processes`.
//!
//! `RLIMIT_NPROC`, which every command also gets, is not enforced for uid 0,
//! and for another uid it counts every process and thread of that user, the
//! service's included. A cgroup counts the command's own tasks (processes
//! and threads), whoever runs them, and a fork past the limit fails with
//! `EAGAIN`.
//!
//! Used where the service may create cgroups in the cgroup v1 `pids`
//! hierarchy it runs in (as root, or with that hierarchy delegated to it).
//! The parent creates `<its pids cgroup>/toolgate-cmd-<its pid>-<id>` and
//! opens its `cgroup.procs`; the child writes `0` (itself) there before
//! anything else it does, so everything it starts is counted. The directory
//! is removed once the command's processes are gone, and a start-up removes
//! the empty ones of services that are gone. On cgroup v2 the controller is
//! not used yet (a cgroup with processes cannot delegate controllers to
//! children without moving the service itself), and `/readyz` says so when
//! it matters (running as root).

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Prefix of the per-command cgroups, beneath the service's own.
const PREFIX: &str = "toolgate-cmd-";

/// How long the removal waits for a command's last processes to be reaped
/// (orphans of a command without a PID namespace go to the host's init).
const REMOVAL_ATTEMPTS: u32 = 50;
const REMOVAL_PAUSE: Duration = Duration::from_millis(20);

/// The directory of this process's cgroup in the v1 `pids` hierarchy, when
/// this process can create cgroups there; the start-up also removes the
/// empty per-command cgroups that an earlier service left behind.
pub(crate) fn probe() -> Option<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let cgroups = fs::read_to_string("/proc/self/cgroup").ok()?;
    let dir = v1_pids_dir(&mountinfo, &cgroups)?;
    // Can a cgroup be made and removed here?
    let trial = dir.join(format!(
        "{PREFIX}{}-probe-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    fs::create_dir(&trial).ok()?;
    let usable = trial.join("pids.max").exists() && trial.join("cgroup.procs").exists();
    let _ = fs::remove_dir(&trial);
    if !usable {
        return None;
    }
    sweep(&dir);
    Some(dir)
}

/// Where this process's v1 `pids` cgroup is mounted: the mount point of the
/// `pids` hierarchy joined with this process's path in it, relative to the
/// mount's root (inside a container the two are usually both `/`).
fn v1_pids_dir(mountinfo: &str, cgroups: &str) -> Option<PathBuf> {
    let (mount_root, mount_point) = mountinfo.lines().find_map(|line| {
        // <id> <parent> <dev> <root> <mount point> <options> [<tags>…] - <type> <source> <super options>
        let (before, after) = line.split_once(" - ")?;
        let mut after = after.split(' ');
        let fs_type = after.next()?;
        let super_options = after.nth(1)?;
        if fs_type != "cgroup" || !super_options.split(',').any(|o| o == "pids") {
            return None;
        }
        let mut fields = before.split(' ');
        let root = fields.nth(3)?;
        let point = fields.next()?;
        Some((unescape(root), unescape(point)))
    })?;
    let own = cgroups.lines().find_map(|line| {
        // <hierarchy id>:<controllers>:<path>
        let mut parts = line.splitn(3, ':');
        let _id = parts.next()?;
        let controllers = parts.next()?;
        let path = parts.next()?;
        controllers
            .split(',')
            .any(|c| c == "pids")
            .then(|| path.to_string())
    })?;
    let relative = Path::new(&own).strip_prefix(&mount_root).ok()?;
    Some(Path::new(&mount_point).join(relative))
}

/// mountinfo writes space, tab, newline and backslash as octal escapes.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest
            .get(at + 1..at + 4)
            .and_then(|digits| u8::from_str_radix(digits, 8).ok());
        match code {
            Some(byte) => {
                out.push(byte as char);
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Remove the per-command cgroups in `dir` made by services that are gone
/// and that no process is in any more (those still in use refuse with
/// `EBUSY` and stay). A live service's cgroups are left alone: one just
/// made is empty until its command writes itself in.
fn sweep(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(maker) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(maker, 0) } != 0
            && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone && fs::remove_dir(entry.path()).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::info!(
            removed,
            "removed the empty process-limit cgroups of earlier commands"
        );
    }
}

/// One command's cgroup: created with its limit before the command starts,
/// removed after it.
pub(crate) struct CommandCgroup {
    dir: PathBuf,
    /// `cgroup.procs`, open for the child to write itself into.
    procs: OwnedFd,
    removed: bool,
}

impl CommandCgroup {
    /// A new cgroup beneath `parent` allowing `max_processes` tasks.
    pub(crate) fn create(parent: &Path, max_processes: u64) -> io::Result<CommandCgroup> {
        let dir = parent.join(format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        fs::create_dir(&dir)?;
        let opened = fs::write(dir.join("pids.max"), max_processes.to_string()).and_then(|()| {
            fs::OpenOptions::new()
                .write(true)
                .open(dir.join("cgroup.procs"))
        });
        match opened {
            Ok(file) => Ok(CommandCgroup {
                dir,
                procs: file.into(),
                removed: false,
            }),
            Err(e) => {
                let _ = fs::remove_dir(&dir);
                Err(e)
            }
        }
    }

    /// The descriptor the child writes `0` to (see [`super::child`]).
    pub(crate) fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// End every process of the command, including one that keeps forking
    /// into new process groups to outrun a sweep: `pids.max` drops to 0, so
    /// no member can fork again, then each member is killed until none is
    /// left (a member cannot leave its cgroup).
    pub(crate) fn kill_members(&self) {
        let _ = fs::write(self.dir.join("pids.max"), "0");
        for _ in 0..REMOVAL_ATTEMPTS {
            let Ok(procs) = fs::read_to_string(self.dir.join("cgroup.procs")) else {
                return;
            };
            let members: Vec<i32> = procs
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            if members.is_empty() {
                return;
            }
            for pid in members {
                // SAFETY: signalling one process by pid.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Remove the cgroup once its last task is gone (on the calling
    /// thread, which may wait a little: see [`remove_when_empty`]).
    pub(crate) fn remove(mut self) {
        self.removed = true;
        remove_when_empty(&self.dir);
    }
}

impl Drop for CommandCgroup {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        // A command that never started (its cgroup is empty), or a run
        // dropped while its processes were being killed: those are waited
        // for on a thread of their own.
        if let Err(e) = fs::remove_dir(&self.dir)
            && e.raw_os_error() == Some(libc::EBUSY)
        {
            let dir = std::mem::take(&mut self.dir);
            std::thread::spawn(move || remove_when_empty(&dir));
        }
    }
}

/// Remove `dir`, waiting a little for processes that are being reaped
/// (orphans of a command without a PID namespace go to the host's init);
/// left for the next start's sweep otherwise.
fn remove_when_empty(dir: &Path) {
    for attempt in 1..=REMOVAL_ATTEMPTS {
        match fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt < REMOVAL_ATTEMPTS => {
                std::thread::sleep(REMOVAL_PAUSE)
            }
            Err(e) => {
                tracing::warn!(error = %e, cgroup = %dir.display(), "a command's process-limit cgroup could not be removed; the next start removes it once it is empty");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pids_hierarchy_and_this_process_s_place_in_it_are_found() {
        let mountinfo = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 /outer /sys/fs/cgroup/my\\040pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        let cgroups = "8:pids:/outer/svc\n4:memory:/m\n0::/\n";
        assert_eq!(
            v1_pids_dir(mountinfo, cgroups).unwrap(),
            Path::new("/sys/fs/cgroup/my pids/svc")
        );
        // cgroup v2 only: the controller is not used.
        let v2 = "41 31 0:38 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(v1_pids_dir(v2, "0::/system.slice/toolgate.service\n"), None);
        // A path outside the mounted subtree cannot be reached.
        assert_eq!(v1_pids_dir(mountinfo, "8:pids:/elsewhere\n"), None);
        assert_eq!(unescape("a\\134b\\011c\\"), "a\\b\tc\\");
    }
}
