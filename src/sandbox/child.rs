//! What the child does to itself before `execve`.
//!
//! This runs between `clone` and `exec` in the memory of a multi-threaded
//! process (see spawn.rs): only async-signal-safe work is allowed — no
//! allocation, no locks, no std I/O. Everything here is a raw system call
//! on data prepared in the parent (the Landlock ruleset descriptor, the
//! compiled BPF programs, plain numbers for the limits).

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use super::syscalls::Filters;

#[cfg(target_env = "gnu")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
type Resource = libc::c_int;

/// Resource limits of a command (soft = hard).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub cpu_secs: u64,
    pub file_size_bytes: u64,
    pub max_processes: u64,
    pub max_open_files: u64,
}

pub(crate) struct Confinement {
    pub limits: Limits,
    /// The Landlock ruleset to enforce, `None` to run without Landlock.
    pub landlock_fd: Option<RawFd>,
    pub filters: Option<Arc<Filters>>,
    /// The service's pid, to notice it died before PR_SET_PDEATHSIG was set.
    pub parent_pid: libc::pid_t,
}

fn check(rc: libc::c_long) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Sets soft and hard limit, never above the hard limit already in force
/// (raising it needs privileges an unprivileged service lacks).
fn set_limit(resource: Resource, value: u64) -> io::Result<()> {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read or write the struct passed.
    unsafe {
        check(libc::getrlimit(resource, &mut current) as libc::c_long)?;
        let value = (value as libc::rlim_t).min(current.rlim_max);
        let limit = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        check(libc::setrlimit(resource, &limit) as libc::c_long)
    }
}

/// Empties the bounding, ambient, inheritable, permitted and effective
/// capability sets. Matters when the service runs as root: without this a
/// root command keeps CAP_SYS_MODULE, CAP_SYS_RESOURCE (raise its own
/// limits), CAP_DAC_OVERRIDE… and regains the full set at every exec.
fn drop_capabilities() -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    // SAFETY: prctl and capset with valid arguments; the structs live on
    // this stack frame for the duration of the call.
    unsafe {
        for cap in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) < 0 {
                break; // past the last capability this kernel knows
            }
            // EPERM without CAP_SETPCAP: an unprivileged service has
            // nothing to drop, and exec grants it nothing either.
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let header = Header {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        check(libc::syscall(libc::SYS_capset, &header, data.as_ptr()))
    }
}

impl Confinement {
    /// Applies everything, in an order where each step still has what it
    /// needs: the session first, limits while privileged, then
    /// no_new_privs (required by both Landlock and seccomp without
    /// CAP_SYS_ADMIN), capabilities, Landlock, and seccomp last (it denies
    /// setsid, which the first step uses).
    pub(crate) fn apply(&self) -> io::Result<()> {
        // SAFETY: raw system calls on plain data; see the module comment.
        unsafe {
            // A new session is a new process group (killable as one) with
            // no controlling terminal (nothing can prompt on /dev/tty).
            check(libc::setsid() as libc::c_long)?;
            // If the service dies, its command dies with it rather than
            // run on unsupervised. (This reaches the main process only;
            // its own children are orphaned.)
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) as libc::c_long)?;
            if libc::getppid() != self.parent_pid {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }

            set_limit(libc::RLIMIT_CPU, self.limits.cpu_secs)?;
            set_limit(libc::RLIMIT_FSIZE, self.limits.file_size_bytes)?;
            set_limit(libc::RLIMIT_NPROC, self.limits.max_processes)?;
            set_limit(libc::RLIMIT_NOFILE, self.limits.max_open_files)?;
            set_limit(libc::RLIMIT_CORE, 0)?;

            // No descriptor of the service survives exec, whether or not
            // whoever opened it asked for close-on-exec (Linux 5.11+;
            // older kernels rely on the flag alone).
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                CLOSE_RANGE_CLOEXEC,
            );

            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long)?;
            drop_capabilities()?;

            if let Some(fd) = self.landlock_fd {
                check(libc::syscall(
                    libc::SYS_landlock_restrict_self,
                    fd,
                    0 as libc::c_uint,
                ))?;
            }

            if let Some(filters) = &self.filters {
                for program in &filters.programs {
                    #[repr(C)]
                    struct SockFprog {
                        len: libc::c_ushort,
                        filter: *const seccompiler::sock_filter,
                    }
                    let prog = SockFprog {
                        len: program.len() as libc::c_ushort,
                        filter: program.as_ptr(),
                    };
                    check(libc::syscall(
                        libc::SYS_seccomp,
                        libc::SECCOMP_SET_MODE_FILTER,
                        0 as libc::c_uint,
                        &prog as *const SockFprog,
                    ))?;
                }
            }
        }
        Ok(())
    }
}
