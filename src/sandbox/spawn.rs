//! Starting a confined command without copying the service.
//!
//! `std::process::Command` with a `pre_exec` hook has to `fork`: the child
//! starts as a copy of the whole service, page tables included, and tears
//! that copy down again at `exec`. Under load that was the larger part of a
//! `bash` call's CPU time (see BENCHMARKS.md). This module starts the child
//! the way `posix_spawn` does: `clone` with `CLONE_VM | CLONE_VFORK`, so the
//! child runs in the service's memory on a stack of its own, the calling
//! thread is suspended until the child has called `execve` (or given up),
//! and nothing is copied.
//!
//! Sharing the memory puts the child under the rules a `pre_exec` hook
//! already followed, and more: only raw system calls on data prepared in the
//! parent (argument and environment arrays, descriptors, the
//! [`Confinement`]); no allocation, no locks, no unwinding. Signals are
//! blocked in the calling thread across `clone`, so no handler of the
//! service can run in the child; the child sets every signal back to its
//! default (its handler table is its own: no `CLONE_SIGHAND`) and only
//! then unblocks them. A failure before `execve` is reported through
//! the shared memory as an errno, and the child exits.
//!
//! The parent waits for the child through a pidfd, so neither a thread nor
//! `SIGCHLD` handling is tied up while a command runs.
//!
//! When the confinement asks for them, the same `clone` also gives the
//! child new user, PID and mount namespaces (`CLONE_NEWUSER |
//! CLONE_NEWPID | CLONE_NEWNS`): it is then its PID namespace's init, and
//! sets the namespaces up first thing ([`Namespaces::enter`]).

use std::ffi::{CString, c_char, c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use super::child::{Confinement, Namespaces};

/// The child's stack, above one guard page. The child runs a few small
/// frames (signal reset, descriptor set-up, [`Confinement::apply`]).
const STACK_BYTES: usize = 256 << 10;

/// Signal numbers the kernel knows (`_NSIG`), and the size of its signal
/// set, as `rt_sigaction` takes them.
const KERNEL_SIGNALS: c_int = 64;
const SIGSET_BYTES: usize = 8;

/// What to run: everything the child needs, as C data prepared here.
pub(crate) struct Program {
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
}

impl Program {
    /// `argv[0]` is looked up in the `PATH` of `env` when it holds no `/`
    /// (as `execvp` would, but here, where allocating is allowed).
    pub fn new<'a>(
        argv: &[String],
        env: impl IntoIterator<Item = (&'a String, &'a String)>,
        cwd: &Path,
    ) -> io::Result<Program> {
        let c = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
        };
        let mut search = None;
        let mut envp = Vec::new();
        for (key, value) in env {
            if key == "PATH" {
                search = Some(value.clone());
            }
            envp.push(c(format!("{key}={value}").as_bytes())?);
        }
        let first = argv
            .first()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let path = if first.contains('/') {
            PathBuf::from(first)
        } else {
            find_program(first, search.as_deref().unwrap_or(super::PATH), cwd)?
        };
        Ok(Program {
            path: c(path.as_os_str().as_bytes())?,
            argv: argv
                .iter()
                .map(|a| c(a.as_bytes()))
                .collect::<io::Result<_>>()?,
            envp,
            cwd: c(cwd.as_os_str().as_bytes())?,
        })
    }
}

/// The first executable regular file named `name` in the directories of
/// `search` (relative ones taken from `cwd`).
fn find_program(name: &str, search: &str, cwd: &Path) -> io::Result<PathBuf> {
    for dir in search.split(':') {
        let dir = if dir.is_empty() {
            Path::new(".")
        } else {
            Path::new(dir)
        };
        let candidate = cwd.join(dir).join(name);
        let Ok(bytes) = CString::new(candidate.as_os_str().as_bytes()) else {
            continue;
        };
        // SAFETY: access(2) on a NUL-terminated path.
        let executable = unsafe { libc::access(bytes.as_ptr(), libc::X_OK) } == 0;
        if executable && candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(io::Error::from_raw_os_error(libc::ENOENT))
}

/// A started command: its pid, its output pipes, and a way to wait for it.
/// Dropped before it was waited for, it is killed and reaped.
pub(crate) struct Child {
    pid: libc::pid_t,
    exited: AsyncFd<OwnedFd>,
    status: Option<ExitStatus>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
}

impl Child {
    pub fn id(&self) -> libc::pid_t {
        self.pid
    }

    /// Waits for the command's main process to end, and reaps it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        loop {
            let mut ready = self.exited.readable().await?;
            match reap(self.pid, libc::WNOHANG)? {
                Some(status) => {
                    self.status = Some(status);
                    return Ok(status);
                }
                None => ready.clear_ready(),
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let pid = self.pid;
        // SAFETY: the pid is our unreaped child, so it is not reused.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        // SIGKILL cannot be caught, but a process in an uninterruptible
        // wait dies only when that ends: not on this thread.
        if !matches!(reap(pid, libc::WNOHANG), Ok(Some(_)) | Err(_)) {
            std::thread::spawn(move || reap(pid, 0));
        }
    }
}

/// `waitpid` on one child; `None` while it runs (with `WNOHANG`).
fn reap(pid: libc::pid_t, flags: c_int) -> io::Result<Option<ExitStatus>> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid on our own child, writing into a local.
        let rc = unsafe { libc::waitpid(pid, &mut status, flags) };
        match rc {
            0 => return Ok(None),
            rc if rc == pid => return Ok(Some(ExitStatus::from_raw(status))),
            _ => {
                let err = io::Error::last_os_error();
                if err.raw_os_error() != Some(libc::EINTR) {
                    return Err(err);
                }
            }
        }
    }
}

/// What the child reads: pointers into the parent's prepared data, which
/// stays put while the parent is suspended in `clone`.
struct ChildArgs<'a> {
    path: *const c_char,
    argv: *const *const c_char,
    envp: *const *const c_char,
    cwd: *const c_char,
    /// Descriptors to become the child's stdin, stdout and stderr.
    stdio: [RawFd; 3],
    confinement: &'a Confinement,
    /// Set by the child when it fails before `execve`.
    errno: AtomicI32,
}

/// Starts `program` confined by `confinement`, with stdin from /dev/null
/// and stdout and stderr piped.
pub(crate) fn spawn(program: &Program, confinement: &Confinement) -> io::Result<Child> {
    let (stdout_read, stdout_write) = pipe_pair()?;
    let (stderr_read, stderr_write) = pipe_pair()?;
    // SAFETY: open(2) on a static NUL-terminated path.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if null < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just opened, owned by nothing else.
    let null = unsafe { OwnedFd::from_raw_fd(null) };
    // A service started with 0, 1 or 2 closed gets them back from the calls
    // above; the child's dup2 onto 0, 1, 2 must neither be a no-op (which
    // keeps close-on-exec) nor overwrite a source it still needs.
    let (null, stdout_write, stderr_write) = (
        above_stdio(null)?,
        above_stdio(stdout_write)?,
        above_stdio(stderr_write)?,
    );

    let pointers = |strings: &[CString]| -> Vec<*const c_char> {
        strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let argv = pointers(&program.argv);
    let envp = pointers(&program.envp);
    let args = ChildArgs {
        path: program.path.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: program.cwd.as_ptr(),
        stdio: [
            null.as_raw_fd(),
            stdout_write.as_raw_fd(),
            stderr_write.as_raw_fd(),
        ],
        confinement,
        errno: AtomicI32::new(0),
    };
    let stack = Stack::new()?;
    let (pid, clone_error) = {
        let _blocked = BlockedSignals::new();
        // SAFETY: `child_main` only reads `args` and makes raw system calls
        // (see the module comment); with CLONE_VFORK this call returns only
        // once the child has exec'd or exited, so `args`, the arrays it
        // points into and the stack outlive the child's use of them.
        let pid = unsafe {
            libc::clone(
                child_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD | namespace_flags(confinement),
                &args as *const ChildArgs<'_> as *mut c_void,
            )
        };
        (pid, io::Error::last_os_error())
    };
    if pid < 0 {
        return Err(clone_error);
    }
    let failed = args.errno.load(Ordering::Acquire);
    if failed != 0 {
        let _ = reap(pid, 0);
        return Err(io::Error::from_raw_os_error(failed));
    }
    drop((null, stdout_write, stderr_write));

    let exited = pidfd_open(pid).and_then(|fd| {
        // SAFETY: an OwnedFd keeps its descriptor open and the same until
        // the AsyncFd drops it.
        unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(io::Error::from)
    });
    let exited = match exited {
        Ok(exited) => exited,
        Err(e) => {
            // SAFETY: our unreaped child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            let _ = reap(pid, 0);
            return Err(e);
        }
    };
    let mut child = Child {
        pid,
        exited,
        status: None,
        stdout: None,
        stderr: None,
    };
    child.stdout = Some(pipe::Receiver::from_owned_fd(stdout_read)?);
    child.stderr = Some(pipe::Receiver::from_owned_fd(stderr_read)?);
    Ok(child)
}

/// The namespaces a command starts in: new user, PID and mount namespaces
/// when its confinement asks for them (see [`Namespaces`]).
fn namespace_flags(confinement: &Confinement) -> c_int {
    match &confinement.namespaces {
        Some(namespaces) if namespaces.new_network => NAMESPACE_FLAGS | libc::CLONE_NEWNET,
        Some(_) => NAMESPACE_FLAGS,
        None => 0,
    }
}

const NAMESPACE_FLAGS: c_int = libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS;

/// Whether this kernel, as this process, lets a command start in namespaces
/// of its own: a child is started the way [`spawn`] starts one, enters them
/// as a command would ([`Namespaces::enter`]: maps, a new `/proc`), and
/// exits. False where user namespaces are disabled or forbidden (a
/// container's seccomp profile, `kernel.unprivileged_userns_clone = 0`) or
/// where `/proc` may not be mounted (a container that masks parts of it).
///
/// `read_only`: with every mount made read-only too; `network`: with a
/// network namespace of its own too.
pub(crate) fn probe_namespaces(read_only: bool, network: bool) -> bool {
    let Ok(mut namespaces) = Namespaces::for_this_process(0) else {
        return false;
    };
    namespaces.read_only_mounts = read_only;
    namespaces.new_network = network;
    let Ok(stack) = Stack::new() else {
        return false;
    };
    let probe = Probe {
        namespaces: &namespaces,
        errno: AtomicI32::new(0),
    };
    let pid = {
        let _blocked = BlockedSignals::new();
        // SAFETY: `probe_main` only reads `probe` and makes raw system
        // calls; with CLONE_VFORK this returns once the child has exited,
        // so everything it uses outlives it.
        unsafe {
            libc::clone(
                probe_main,
                stack.top(),
                libc::CLONE_VM
                    | libc::CLONE_VFORK
                    | libc::SIGCHLD
                    | NAMESPACE_FLAGS
                    | if network { libc::CLONE_NEWNET } else { 0 },
                &probe as *const Probe<'_> as *mut c_void,
            )
        }
    };
    if pid < 0 {
        return false;
    }
    let exited = reap(pid, 0);
    let errno = probe.errno.load(Ordering::Acquire);
    if errno != 0 {
        tracing::debug!(errno, "commands cannot have namespaces of their own here");
    }
    errno == 0 && matches!(exited, Ok(Some(status)) if status.success())
}

struct Probe<'a> {
    namespaces: &'a Namespaces,
    errno: AtomicI32,
}

extern "C" fn probe_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Probe` the parent keeps alive while suspended.
    let probe = unsafe { &*(arg as *const Probe<'_>) };
    // SAFETY: raw system calls in a child that exits right after.
    let entered = unsafe { probe.namespaces.enter(None, None) };
    let errno = match entered {
        Ok(()) => 0,
        Err(e) => e.raw_os_error().unwrap_or(libc::EINVAL),
    };
    probe.errno.store(errno, Ordering::Release);
    // SAFETY: ends the child without running anything of the service's.
    unsafe { libc::_exit(if errno == 0 { 0 } else { 1 }) }
}

/// A pipe, both ends close-on-exec (the child's `dup2` onto 1 and 2 clears
/// it on the copies it keeps).
fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here only.
    unsafe { Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}

/// `fd`, or a close-on-exec copy of it numbered 3 or above if it is one of
/// the standard descriptors.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl duplicating a descriptor we own.
    let copy = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just created, owned here only.
    Ok(unsafe { OwnedFd::from_raw_fd(copy) })
}

fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open(2) returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0 as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just created, owned here only.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// An anonymous mapping for the child's stack, its lowest page
/// inaccessible so that an overflow faults instead of writing over the
/// service's memory.
struct Stack {
    base: *mut c_void,
    len: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = STACK_BYTES + page;
        // SAFETY: a fresh private anonymous mapping, then one page of it
        // made inaccessible.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let stack = Stack { base, len };
            if libc::mprotect(base, page, libc::PROT_NONE) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(stack)
        }
    }

    /// The highest address, where a downward-growing stack starts (16-byte
    /// aligned: the mapping is page-aligned and so is its length).
    fn top(&self) -> *mut c_void {
        // SAFETY: one past the end of the mapping.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used by anyone.
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

/// Every signal blocked in the calling thread until dropped.
struct BlockedSignals {
    before: libc::sigset_t,
}

impl BlockedSignals {
    fn new() -> BlockedSignals {
        // SAFETY: sigset_t is plain data, filled by the calls below.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut before: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
            BlockedSignals { before }
        }
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in `new`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.before, std::ptr::null_mut());
        }
    }
}

/// The child, between `clone` and `execve`.
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `ChildArgs` the parent keeps alive while it is
    // suspended in `clone`.
    let args = unsafe { &*(arg as *const ChildArgs<'_>) };
    // SAFETY: raw system calls only; see the module comment.
    let errno = unsafe { run_child(args) };
    args.errno.store(errno.max(1), Ordering::Release);
    // SAFETY: ends the child without running anything of the service's.
    unsafe { libc::_exit(127) }
}

/// Everything the child does; returns the errno of what failed (only
/// returns on failure).
unsafe fn run_child(args: &ChildArgs<'_>) -> c_int {
    let errno = || {
        io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    // SAFETY (whole body): raw system calls on the child's own stack and
    // on data the parent prepared.
    unsafe {
        // Handlers of the service must not run here: each handled signal
        // goes back to its default. Ignored ones too: across exec they
        // would stay ignored, and the service ignores signals for itself
        // (SIGPIPE, in the Rust runtime). The raw system call, because the
        // C library refuses to touch the signals it reserves. The kernel's
        // sigaction begins with the handler; all zeroes is SIG_DFL with no
        // flags and an empty mask.
        for signal in 1..=KERNEL_SIGNALS {
            if signal == libc::SIGKILL || signal == libc::SIGSTOP {
                continue;
            }
            let mut current = [0u64; 4];
            let read = libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                std::ptr::null::<u64>(),
                current.as_mut_ptr(),
                SIGSET_BYTES,
            );
            if read == 0 && current[0] as libc::sighandler_t != libc::SIG_DFL {
                let default = [0u64; 4];
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    signal,
                    default.as_ptr(),
                    std::ptr::null_mut::<u64>(),
                    SIGSET_BYTES,
                );
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
            return libc::EINVAL;
        }

        for (target, &fd) in args.stdio.iter().enumerate() {
            if libc::dup2(fd, target as c_int) < 0 {
                return errno();
            }
        }
        if libc::chdir(args.cwd) != 0 {
            return errno();
        }
        if let Err(e) = args.confinement.apply() {
            return e.raw_os_error().unwrap_or(libc::EINVAL);
        }
        // In namespaces of its own, the workspace is now a mount of its own
        // (the only writable one), over the directory the first chdir
        // entered: the same path again reaches the new mount.
        if args.confinement.workspace.is_some() && libc::chdir(args.cwd) != 0 {
            return errno();
        }
        libc::execve(args.path, args.argv, args.envp);
        errno()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_name_is_found_in_the_commands_path() {
        let env = [("PATH".to_string(), "/nowhere:/bin:/usr/bin".to_string())];
        let program = Program::new(
            &["sh".to_string(), "-c".to_string(), "true".to_string()],
            env.iter().map(|(k, v)| (k, v)),
            Path::new("/"),
        )
        .unwrap();
        assert!(
            program.path.as_bytes().ends_with(b"/sh"),
            "{:?}",
            program.path
        );
        let missing = Program::new(
            &["no-such-program-here".to_string()],
            env.iter().map(|(k, v)| (k, v)),
            Path::new("/"),
        );
        assert_eq!(
            missing.err().and_then(|e| e.raw_os_error()),
            Some(libc::ENOENT)
        );
    }

    /// Set in the copy of the test binary that runs with its standard
    /// descriptors closed: where it writes what it saw.
    const CLOSED_STDIO_REPORT: &str = "TOOLGATE_TEST_CLOSED_STDIO_REPORT";

    /// A service whose descriptors 0–2 are closed gets them back as the
    /// command's pipes and /dev/null; the command must still read an empty
    /// stdin and write to its own stdout and stderr. The test binary runs
    /// itself (this test alone) as a child that closes 0–2 and starts the
    /// command, and reports through a file.
    #[test]
    fn a_service_without_standard_descriptors_still_wires_the_commands_stdio() {
        if let Some(report) = std::env::var_os(CLOSED_STDIO_REPORT) {
            let seen = run_with_stdio_closed();
            let written = std::fs::write(report, seen);
            std::process::exit(if written.is_ok() { 0 } else { 3 });
        }
        let dir = tempfile::tempdir().unwrap();
        let report = dir.path().join("report");
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sandbox::spawn::tests::a_service_without_standard_descriptors_still_wires_the_commands_stdio",
                "--test-threads=1",
            ])
            .env(CLOSED_STDIO_REPORT, &report)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "the child test run failed: {status}");
        let seen = std::fs::read_to_string(&report).unwrap();
        assert_eq!(
            seen,
            "first descriptor opened: 0\nstatus: 0\nstdout: in=0 out\nstderr: err"
        );
    }

    /// The child's side: closes 0–2 (after the runtime has its own
    /// descriptors), then starts a command and collects what it wrote.
    fn run_with_stdio_closed() -> String {
        use tokio::io::AsyncReadExt;

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for fd in 0..=2 {
            // SAFETY: closing this process's standard descriptors; nothing
            // in this child process uses them any more.
            unsafe { libc::close(fd) };
        }
        // Which descriptor the next open gets: 0 proves the case is real.
        // SAFETY: open(2) and close(2) of a descriptor owned here only.
        let probe = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
        unsafe { libc::close(probe) };
        let program = Program::new(
            &[
                "/bin/sh".to_string(),
                "-c".to_string(),
                "n=$(wc -c); printf 'in=%s out' \"$n\"; printf err >&2".to_string(),
            ],
            std::iter::empty(),
            Path::new("/"),
        )
        .unwrap();
        let confinement = Confinement {
            limits: super::super::child::Limits {
                cpu_secs: 10,
                file_size_bytes: 1 << 20,
                max_processes: 1 << 16,
                max_open_files: 256,
                max_memory_bytes: 1 << 30,
            },
            landlock_fd: None,
            filters: None,
            // SAFETY: getpid(2) cannot fail.
            parent_pid: unsafe { libc::getpid() },
            namespaces: None,
            workspace: None,
            cgroup_procs: None,
        };
        let outcome = runtime.block_on(async {
            let mut child = spawn(&program, &confinement)?;
            let (mut out, mut err) = (String::new(), String::new());
            let mut stdout = child.stdout.take().expect("piped");
            let mut stderr = child.stderr.take().expect("piped");
            let (read_out, read_err) = tokio::join!(
                stdout.read_to_string(&mut out),
                stderr.read_to_string(&mut err)
            );
            read_out?;
            read_err?;
            let status = child.wait().await?;
            io::Result::Ok(format!(
                "status: {}\nstdout: {out}\nstderr: {err}",
                status.code().unwrap_or(-1)
            ))
        });
        let outcome = outcome.unwrap_or_else(|e| format!("error: {e}"));
        format!("first descriptor opened: {probe}\n{outcome}")
    }
}
