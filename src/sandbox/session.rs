//! Killing a command whole.
//!
//! Each command leads its own session (and process group). SIGKILL to the
//! group reaches everything that stayed in it; a process may still move to
//! another group of the same session (`setpgid`, e.g. coreutils `timeout`),
//! but it cannot leave the session (seccomp denies `setsid`), so a sweep of
//! /proc for the session id finds the rest. The session id cannot be
//! reused while any process still belongs to the session.

use std::time::Duration;

/// The fields of `/proc/<pid>/stat` after the command name, from the
/// state (field 3) on; `None` for zombies (already dead, waiting for their
/// parent) and vanished processes.
fn stat_fields(pid: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything: the
    // fields after it start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<String> = rest.split_whitespace().map(String::from).collect();
    match fields.first().map(String::as_str) {
        None | Some("Z") | Some("X") => None,
        Some(_) => Some(fields),
    }
}

/// The session of a live process.
fn session_of(pid: &str) -> Option<i32> {
    stat_fields(pid)?.get(3)?.parse().ok()
}

/// When a live process started, in clock ticks since boot (field 22):
/// with the pid, what tells a process from a later one given the same pid.
fn start_of(pid: i32) -> Option<u64> {
    stat_fields(&pid.to_string())?.get(19)?.parse().ok()
}

/// This boot's id: start times and pids only mean something within one.
fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|id| id.trim().to_string())
        .unwrap_or_default()
}

/// SIGKILL to every process of session `sid`; returns how many were found
/// by the sweep (beyond the process group).
pub(crate) fn kill_session(sid: i32) -> usize {
    if sid <= 1 {
        return 0;
    }
    // SAFETY: kill(2) with a negative pid signals a process group.
    unsafe {
        libc::kill(-sid, libc::SIGKILL);
    }
    let mut found_total = 0;
    // A process forking while being swept may leave a child the first
    // pass missed; a few passes settle it (SIGKILLed processes cannot fork).
    for pass in 0..8 {
        let found = members_of(sid);
        for pid in &found {
            // SAFETY: signalling one process by pid.
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        found_total += found.len();
        if found.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5 * (pass + 1)));
    }
    found_total
}

/// The live processes of session `sid`, found in /proc.
fn members_of(sid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut members = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name
            .to_str()
            .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(pid) = name.parse::<i32>() else {
            continue;
        };
        // getsid(2) answers for any process in one system call; only a
        // member of the session is read further (to pass over zombies).
        // SAFETY: getsid only looks the pid up.
        if unsafe { libc::getsid(pid) } == sid && session_of(name) == Some(sid) {
            members.push(pid);
        }
    }
    members
}

/// Remove a dead command's temporary directory, `tmp` beneath `workspace`
/// (opened as a capability: a link the command put in its place cannot
/// lead the removal out), and the temporary directories' parent if that
/// leaves it empty. Only a path of the form `.toolgate-tmp/<id>` is taken.
fn remove_temporary(workspace: &std::path::Path, tmp: &std::path::Path) {
    let mut parts = tmp.components();
    let shaped = matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(std::path::Component::Normal(parent)), Some(std::path::Component::Normal(_)), None)
            if parent == super::TMP_DIR_NAME
    );
    if !shaped {
        return;
    }
    let Ok(dir) = cap_std::fs::Dir::open_ambient_dir(workspace, cap_std::ambient_authority())
    else {
        return;
    };
    let _ = dir.remove_dir_all(tmp);
    let _ = dir.remove_dir(super::TMP_DIR_NAME);
}

/// Kills the session when dropped while armed: a `run` future dropped
/// mid-command (its caller gave up) leaves nothing behind.
pub(crate) struct SessionGuard {
    pub sid: i32,
    pub armed: bool,
    /// Where the session is recorded, to forget it once killed.
    pub records: Option<std::sync::Arc<SessionRecords>>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if self.armed {
            kill_session(self.sid);
        }
        if let Some(records) = &self.records {
            records.forget(self.sid);
        }
    }
}

/// The sessions of running commands, one small file each in a directory
/// of the data directory, so a process that starts after this one died
/// without ending them (`kill -9`, a crash, the machine's OOM killer) can.
///
/// A command's main process dies with the service (`PR_SET_PDEATHSIG`), but
/// what it started in the background does not: it stays in the session,
/// which nobody is left to kill. A file names the service process (pid and
/// start time), the session (its id and its leader's start time) and the
/// boot; [`SessionRecords::end_orphans`] ends the sessions of records whose
/// service process is gone, unless the session id now belongs to another
/// process (its leader alive with another start time) or the machine has
/// rebooted since (nothing survived that).
#[derive(Debug)]
pub(crate) struct SessionRecords {
    dir: std::path::PathBuf,
    service: (i32, u64),
    boot: String,
}

impl SessionRecords {
    pub fn open(dir: &std::path::Path) -> std::io::Result<SessionRecords> {
        std::fs::create_dir_all(dir)?;
        let pid = std::process::id() as i32;
        Ok(SessionRecords {
            dir: dir.to_path_buf(),
            service: (pid, start_of(pid).unwrap_or(0)),
            boot: boot_id(),
        })
    }

    /// The records `service` (pid, start time) keeps in `dir`, as the
    /// watchdog sees them: records of that service count as orphaned.
    fn of_service(dir: &std::path::Path, service: (i32, u64)) -> SessionRecords {
        SessionRecords {
            dir: dir.to_path_buf(),
            service,
            boot: boot_id(),
        }
    }

    fn file(&self, sid: i32) -> std::path::PathBuf {
        self.dir.join(format!("{}-{sid}", self.service.0))
    }

    /// Record the session `sid` of a command just started, with its
    /// temporary directory (`tmp`, relative to `workspace`), which an
    /// orphaned session's ending removes too.
    pub fn record(
        &self,
        sid: i32,
        workspace: &std::path::Path,
        tmp: &std::path::Path,
    ) -> std::io::Result<()> {
        let (pid, started) = self.service;
        let leader = start_of(sid).unwrap_or(0);
        std::fs::write(
            self.file(sid),
            format!(
                "{pid} {started} {sid} {leader} {}\n{}\n{}\n",
                self.boot,
                workspace.display(),
                tmp.display()
            ),
        )
    }

    /// Forget the session `sid`, killed by this process.
    pub fn forget(&self, sid: i32) {
        let _ = std::fs::remove_file(self.file(sid));
    }

    /// End the sessions that service processes now gone left running, and
    /// forget their records; returns how many processes were killed.
    pub fn end_orphans(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut killed = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let mut lines = text.lines();
            let fields: Vec<&str> = lines.next().unwrap_or("").split_whitespace().collect();
            let tmp = lines.next().zip(lines.next());
            let parsed = match fields.as_slice() {
                [pid, started, sid, leader, boot] => pid
                    .parse::<i32>()
                    .ok()
                    .zip(started.parse::<u64>().ok())
                    .zip(sid.parse::<i32>().ok().zip(leader.parse::<u64>().ok()))
                    .map(|(service, session)| (service, session, *boot)),
                _ => None,
            };
            let Some(((pid, started), (sid, leader), boot)) = parsed else {
                let _ = std::fs::remove_file(&path);
                continue;
            };
            if boot != self.boot || sid <= 1 {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let service_alive = (pid, started) != self.service && start_of(pid) == Some(started);
            if service_alive {
                continue; // another live process's command
            }
            // The leader's pid now names another process: the session
            // emptied and its id was given out again.
            let reused = start_of(sid).is_some_and(|now| now != leader);
            if !reused {
                killed += members_of(sid).len();
                kill_session(sid);
            }
            if let Some((workspace, tmp)) = tmp {
                remove_temporary(workspace.as_ref(), tmp.as_ref());
            }
            let _ = std::fs::remove_file(&path);
        }
        killed
    }
}

/// A second process that ends the recorded sessions as soon as the service
/// process dies, however it dies: it waits for the end of a pipe only the
/// service holds (the kernel closes it when the service exits, SIGKILL
/// included), then ends that service's orphaned sessions
/// ([`SessionRecords::end_orphans`]) and exits. It leads a process group
/// of its own, so a terminal's Ctrl-C, which the service handles, does not
/// end it first. Without it (or if it is killed too), the next start on
/// the data directory ends them.
pub struct SessionWatchdog {
    /// Holds the pipe's writing end; dropping it lets the watchdog finish.
    _child: std::process::Child,
}

impl SessionWatchdog {
    /// Start `exe` (a toolgate binary) as `exe watch-sessions --dir DIR
    /// --service PID:START` for this process's records in `dir`.
    pub fn spawn(exe: &std::path::Path, dir: &std::path::Path) -> std::io::Result<SessionWatchdog> {
        use std::os::unix::process::CommandExt;
        let pid = std::process::id() as i32;
        let started = start_of(pid).unwrap_or(0);
        let child = std::process::Command::new(exe)
            .arg("watch-sessions")
            .arg("--dir")
            .arg(dir)
            .arg("--service")
            .arg(format!("{pid}:{started}"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .process_group(0)
            .spawn()?;
        Ok(SessionWatchdog { _child: child })
    }
}

/// The watchdog's work (`toolgate watch-sessions`): wait until standard
/// input ends, then end the sessions that `service` ("PID:START") left
/// recorded in `dir`; returns how many processes were killed.
pub fn watch_sessions(dir: &std::path::Path, service: &str) -> std::io::Result<usize> {
    let bad = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("--service wants PID:START, got {service:?}"),
        )
    };
    let (pid, started) = service.split_once(':').ok_or_else(bad)?;
    let service = (
        pid.parse::<i32>().map_err(|_| bad())?,
        started.parse::<u64>().map_err(|_| bad())?,
    );
    // Whatever arrives is ignored: only the end of the pipe matters.
    std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink())?;
    Ok(SessionRecords::of_service(dir, service).end_orphans())
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};

    use super::*;

    /// A process leading a session of its own, as a command does.
    fn session_leader() -> Child {
        let mut cmd = Command::new("sleep");
        cmd.arg("60");
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        cmd.spawn().unwrap()
    }

    fn alive(child: &mut Child) -> bool {
        child.try_wait().unwrap().is_none()
    }

    fn write_record(dir: &std::path::Path, service: (i32, u64), sid: i32, leader: u64, boot: &str) {
        std::fs::write(
            dir.join(format!("{}-{sid}", service.0)),
            format!("{} {} {sid} {leader} {boot}\n", service.0, service.1),
        )
        .unwrap();
    }

    #[test]
    fn only_the_sessions_of_a_dead_service_are_ended() {
        let dir = tempfile::tempdir().unwrap();
        let records = SessionRecords::open(dir.path()).unwrap();
        let mut child = session_leader();
        let sid = child.id() as i32;
        let leader = start_of(sid).unwrap();
        // A service process that no longer exists (its start time is not
        // that of whatever has its pid now).
        let dead = (std::process::id() as i32, 1);
        // A live service: this test's parent.
        let parent = std::os::unix::process::parent_id() as i32;
        let live = (parent, start_of(parent).unwrap());

        // Recorded by a live service: left alone, record kept.
        write_record(dir.path(), live, sid, leader, &records.boot);
        // Another boot: nothing of it survived; the record goes.
        write_record(dir.path(), (dead.0 + 1, 1), sid, leader, "another-boot");
        // The session id given out again (the leader started at another
        // time): left alone, the record goes.
        write_record(dir.path(), (dead.0 + 2, 1), sid, leader + 1, &records.boot);
        assert_eq!(records.end_orphans(), 0);
        assert!(alive(&mut child));
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "only the live service's record stays");

        // Recorded by a service that is gone: its session is ended, and its
        // temporary directory removed (only one of the form it makes).
        let workspace = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(workspace.path().join(".toolgate-tmp/abc/deep")).unwrap();
        std::fs::create_dir_all(workspace.path().join("keep")).unwrap();
        write_record(dir.path(), dead, sid, leader, &records.boot);
        let file = dir.path().join(format!("{}-{sid}", dead.0));
        let line = std::fs::read_to_string(&file).unwrap();
        let with_tmp = |tmp: &str| format!("{line}{}\n{tmp}\n", workspace.path().display());
        std::fs::write(&file, with_tmp(".toolgate-tmp/abc")).unwrap();
        let odd = (dead.0 + 3, 1);
        write_record(dir.path(), odd, sid, leader, &records.boot);
        std::fs::write(
            dir.path().join(format!("{}-{sid}", odd.0)),
            with_tmp("keep"),
        )
        .unwrap();
        assert_eq!(records.end_orphans(), 1);
        child.wait().unwrap();
        assert!(!file.exists());
        assert!(!workspace.path().join(".toolgate-tmp").exists());
        assert!(workspace.path().join("keep").exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// This process's records in `dir`, holding one session leader's.
    fn recorded_leader(dir: &std::path::Path) -> (SessionRecords, Child, i32) {
        let records = SessionRecords::open(dir).unwrap();
        let child = session_leader();
        let sid = child.id() as i32;
        records
            .record(sid, dir, std::path::Path::new(".toolgate-tmp/x"))
            .unwrap();
        (records, child, sid)
    }

    #[test]
    fn a_recorded_session_is_forgotten_when_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let (records, mut child, sid) = recorded_leader(dir.path());
        let text = std::fs::read_to_string(records.file(sid)).unwrap();
        let fields: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(fields[0], std::process::id().to_string());
        assert_eq!(fields[2], sid.to_string());
        assert_eq!(fields[3], start_of(sid).unwrap().to_string());
        drop(SessionGuard {
            sid,
            armed: true,
            records: Some(std::sync::Arc::new(records)),
        });
        child.wait().unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_watchdog_refuses_a_malformed_service() {
        let dir = tempfile::tempdir().unwrap();
        for service in ["", "12", "12:x", "x:12", "12:-1"] {
            let err = watch_sessions(dir.path(), service).unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{service}");
            assert!(err.to_string().contains("PID:START"), "{err}");
        }
    }

    /// The watchdog's view: records of the service it watches are
    /// orphaned, even while that process is still alive (it is exiting).
    #[test]
    fn the_watchdog_ends_the_sessions_of_the_service_it_watched() {
        let dir = tempfile::tempdir().unwrap();
        let (records, mut child, _) = recorded_leader(dir.path());
        // The watchdog of another service, alive, leaves them alone.
        let mut other = session_leader();
        let other_pid = other.id() as i32;
        let other_service = (other_pid, start_of(other_pid).unwrap());
        assert_eq!(
            SessionRecords::of_service(dir.path(), other_service).end_orphans(),
            0
        );
        assert!(alive(&mut child));
        kill_session(other_pid);
        other.wait().unwrap();
        let watchdog = SessionRecords::of_service(dir.path(), records.service);
        assert_eq!(watchdog.end_orphans(), 1);
        child.wait().unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
