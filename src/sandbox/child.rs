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
    pub max_memory_bytes: u64,
}

pub(crate) struct Confinement {
    pub limits: Limits,
    /// The Landlock ruleset to enforce, `None` to run without Landlock.
    pub landlock_fd: Option<RawFd>,
    pub filters: Option<Arc<Filters>>,
    /// The service's pid, to notice it died before PR_SET_PDEATHSIG was set.
    pub parent_pid: libc::pid_t,
    /// Set when the child starts in new user, PID and mount namespaces
    /// (see spawn.rs): what it does there before anything else.
    pub namespaces: Option<Arc<Namespaces>>,
    /// The `cgroup.procs` of the command's own pids cgroup (see pids.rs),
    /// which the child writes itself into first of all.
    pub cgroup_procs: Option<RawFd>,
    /// The workspace: in namespaces of its own, the one place the command's
    /// mounts leave writable.
    pub workspace: Option<Writable>,
}

/// The workspace as the parent opened and checked it (an `O_PATH`
/// descriptor, which names it in the parent's mount namespace) and its path
/// (which the child looks up again in its own, and compares).
pub(crate) struct Writable {
    pub fd: RawFd,
    pub path: std::ffi::CString,
}

/// What a child started in new user, PID and mount namespaces does first:
/// maps its own ids, so that it keeps the service's uid and gid; mounts a
/// `/proc` of its PID namespace over the service's; makes every mount it
/// sees read-only but a mount of the workspace of its own (Landlock governs
/// what a file holds, not its mode, owner, times or extended attributes:
/// without this a command could `chmod` the service's signing key, which
/// belongs to its uid, readable for everyone); and lets its Landlock
/// ruleset read that new `/proc` (the ruleset's `/proc` rule, made in the
/// parent, is on the service's mount, which the new one hides).
pub(crate) struct Namespaces {
    /// "<uid> <uid> 1\n", and the same of the gid: the only mappings an
    /// unprivileged process may write for itself.
    pub uid_map: std::ffi::CString,
    pub gid_map: std::ffi::CString,
    /// The Landlock access rights the new `/proc` is granted (read files
    /// and directories, as far as the ruleset handles them).
    pub proc_access: u64,
    /// A pidfd of the service: in its own PID namespace the child's
    /// `getppid()` is 0, so this is how it notices the service died before
    /// PR_SET_PDEATHSIG was set.
    pub parent_pidfd: std::os::fd::OwnedFd,
    /// Every mount read-only but the workspace's (see [`read_only_but`]),
    /// where the kernel has `mount_setattr` (Linux 5.12+).
    pub read_only_mounts: bool,
    /// A network namespace of its own too (`network = deny`): no interface
    /// but a loopback that is down, and a `/proc/net` that shows none of
    /// the host's sockets and connections.
    pub new_network: bool,
}

/// Writes all of `text` to the file at `path` (one `write`, as /proc's
/// id-map files require).
unsafe fn write_file(path: &std::ffi::CStr, text: &[u8]) -> io::Result<()> {
    // SAFETY: open/write/close on a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, text.as_ptr().cast(), text.len());
        let failed = io::Error::last_os_error();
        libc::close(fd);
        if written != text.len() as isize {
            return Err(failed);
        }
    }
    Ok(())
}

impl Namespaces {
    /// The set-up for a child of this process, whose `/proc` gets
    /// `proc_access` (Landlock rights; 0 without Landlock).
    pub(crate) fn for_this_process(proc_access: u64) -> io::Result<Namespaces> {
        use std::os::fd::FromRawFd;
        // SAFETY: geteuid, getegid and getpid cannot fail; pidfd_open
        // returns a new descriptor or -1.
        let (uid, gid, pidfd) = unsafe {
            (
                libc::geteuid(),
                libc::getegid(),
                libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0 as libc::c_uint),
            )
        };
        if pidfd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just created, owned here only.
        let parent_pidfd = unsafe { std::os::fd::OwnedFd::from_raw_fd(pidfd as RawFd) };
        let map = |id: u32| {
            std::ffi::CString::new(format!("{id} {id} 1\n"))
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
        };
        Ok(Namespaces {
            uid_map: map(uid)?,
            gid_map: map(gid)?,
            proc_access,
            parent_pidfd,
            read_only_mounts: false,
            new_network: false,
        })
    }

    /// Everything the child does in its new namespaces before the rest of
    /// the confinement; it still holds every capability of its user
    /// namespace here (dropped later by [`Confinement::apply`]).
    ///
    /// # Safety
    /// Raw system calls only; call in the child before `execve`.
    pub(crate) unsafe fn enter(
        &self,
        landlock_fd: Option<RawFd>,
        workspace: Option<&Writable>,
    ) -> io::Result<()> {
        // SAFETY: raw system calls on data the parent prepared.
        unsafe {
            // gid_map may only be written by an unprivileged process once
            // setgroups(2) is off for the namespace.
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", self.uid_map.as_bytes())?;
            write_file(c"/proc/self/gid_map", self.gid_map.as_bytes())?;
            // Nothing mounted here propagates anywhere else.
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) as libc::c_long)?;
            check(libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ) as libc::c_long)?;
            if self.read_only_mounts {
                read_only_but(workspace)?;
            }
            // No rule when /proc is not granted whole: it stays unreadable.
            if let Some(ruleset) = landlock_fd.filter(|_| self.proc_access != 0) {
                let proc = libc::open(
                    c"/proc".as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                );
                if proc < 0 {
                    return Err(io::Error::last_os_error());
                }
                #[repr(C, packed)]
                struct PathBeneathAttr {
                    allowed_access: u64,
                    parent_fd: i32,
                }
                const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;
                let rule = PathBeneathAttr {
                    allowed_access: self.proc_access,
                    parent_fd: proc,
                };
                let added = libc::syscall(
                    libc::SYS_landlock_add_rule,
                    ruleset,
                    LANDLOCK_RULE_PATH_BENEATH,
                    &rule as *const PathBeneathAttr,
                    0 as libc::c_uint,
                );
                let failed = io::Error::last_os_error();
                libc::close(proc);
                if added != 0 {
                    return Err(failed);
                }
            }
        }
        Ok(())
    }

    /// Whether the service is still alive (its pidfd not yet readable).
    fn parent_alive(&self) -> bool {
        let mut poll = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&self.parent_pidfd),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one descriptor, not waiting.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready == 0
    }
}

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const OPEN_TREE_CLONE: libc::c_uint = 0x1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;

/// Makes every mount of this (new, private) mount namespace read-only, then
/// mounts a writable copy of the workspace's mount over the workspace
/// itself, so that the workspace is the one place where a file can be
/// made, changed, or have its mode, times or attributes changed. The
/// workspace's path is looked up again here (the parent's descriptor names
/// a mount of the parent's namespace) and must lead to the directory the
/// parent opened; the copy is taken before anything is made read-only, and
/// put in place through the descriptor, not the path.
///
/// # Safety
/// Raw system calls only; call in a child, in its own mount namespace.
unsafe fn read_only_but(workspace: Option<&Writable>) -> io::Result<()> {
    // SAFETY: raw system calls on descriptors and plain data of this child.
    unsafe {
        let mut here = None;
        let mut tree = None;
        if let Some(workspace) = workspace {
            let fd = libc::open(
                workspace.path.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            );
            check(fd as libc::c_long)?;
            here = Some(fd);
            if identity(fd)? != identity(workspace.fd)? {
                return Err(io::Error::from_raw_os_error(libc::ESTALE));
            }
            let cloned = libc::syscall(
                libc::SYS_open_tree,
                fd,
                c"".as_ptr(),
                OPEN_TREE_CLONE
                    | libc::O_CLOEXEC as libc::c_uint
                    | libc::AT_EMPTY_PATH as libc::c_uint,
            );
            check(cloned)?;
            tree = Some(cloned as RawFd);
        }
        let read_only = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        check(libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c"/".as_ptr(),
            AT_RECURSIVE,
            &read_only as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        ))?;
        if let (Some(tree), Some(here)) = (tree, here) {
            check(libc::syscall(
                libc::SYS_move_mount,
                tree,
                c"".as_ptr(),
                here,
                c"".as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
            ))?;
        }
        // The descriptors are close-on-exec; this child execs or exits next.
    }
    Ok(())
}

/// The (device, inode) of a descriptor of this process.
///
/// # Safety
/// `fd` must be open.
unsafe fn identity(fd: RawFd) -> io::Result<(u64, u64)> {
    // SAFETY: the caller keeps `fd` open for the call.
    super::filesystem::fd_identity(&unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
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
    /// needs: the cgroup, then the namespaces (mounting `/proc` needs the capabilities
    /// of the new user namespace), the session, limits while privileged, then
    /// no_new_privs (required by both Landlock and seccomp without
    /// CAP_SYS_ADMIN), capabilities, Landlock, and seccomp last (it denies
    /// setsid, which the first step uses).
    pub(crate) fn apply(&self) -> io::Result<()> {
        // SAFETY: raw system calls on plain data; see the module comment.
        unsafe {
            // Into the process-limit cgroup before anything can fork: `0`
            // is the writing process. The descriptor, opened by the parent,
            // needs no permission the namespaces could take away.
            if let Some(fd) = self.cgroup_procs {
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                if written != 1 {
                    return Err(io::Error::last_os_error());
                }
            }
            if let Some(namespaces) = &self.namespaces {
                namespaces.enter(self.landlock_fd, self.workspace.as_ref())?;
            }
            // A new session is a new process group (killable as one) with
            // no controlling terminal (nothing can prompt on /dev/tty).
            check(libc::setsid() as libc::c_long)?;
            // If the service dies, its command dies with it rather than
            // run on unsupervised. (This reaches the main process only;
            // its own children are orphaned, unless the command has a PID
            // namespace of its own: the main process is its init, and the
            // kernel ends the rest with it.)
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) as libc::c_long)?;
            let parent_alive = match &self.namespaces {
                Some(namespaces) => namespaces.parent_alive(),
                None => libc::getppid() == self.parent_pid,
            };
            if !parent_alive {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }

            set_limit(libc::RLIMIT_CPU, self.limits.cpu_secs)?;
            set_limit(libc::RLIMIT_FSIZE, self.limits.file_size_bytes)?;
            set_limit(libc::RLIMIT_NPROC, self.limits.max_processes)?;
            set_limit(libc::RLIMIT_NOFILE, self.limits.max_open_files)?;
            set_limit(libc::RLIMIT_DATA, self.limits.max_memory_bytes)?;
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
