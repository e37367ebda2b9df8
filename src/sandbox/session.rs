//! Killing a command whole.
//!
//! Each command leads its own session (and process group). SIGKILL to the
//! group reaches everything that stayed in it; a process may still move to
//! another group of the same session (`setpgid`, e.g. coreutils `timeout`),
//! but it cannot leave the session (seccomp denies `setsid`), so a sweep of
//! /proc for the session id finds the rest. The session id cannot be
//! reused while any process still belongs to the session.

use std::time::Duration;

/// The session of a process, from `/proc/<pid>/stat`; `None` for zombies
/// (already dead, waiting for their parent) and vanished processes.
fn session_of(pid: &str) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything: the
    // fields after it start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    let _ppid = fields.next()?;
    let _pgrp = fields.next()?;
    fields.next()?.parse().ok()
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
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return found_total;
        };
        let mut found = 0;
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
            if unsafe { libc::getsid(pid) } != sid || session_of(name) != Some(sid) {
                continue;
            }
            // SAFETY: signalling one process by pid.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            found += 1;
        }
        found_total += found;
        if found == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5 * (pass + 1)));
    }
    found_total
}

/// Kills the session when dropped while armed: a `run` future dropped
/// mid-command (its caller gave up) leaves nothing behind.
pub(crate) struct SessionGuard {
    pub sid: i32,
    pub armed: bool,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if self.armed {
            kill_session(self.sid);
        }
    }
}
