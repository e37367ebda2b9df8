//! Seccomp: the BPF programs a command runs under, compiled once in the
//! parent. The child installs them with one `seccomp(2)` call each.
//!
//! Denied syscalls fail with an errno; nothing is killed, so a program that
//! probes (for a socket, for io_uring) falls back or reports a clear error.
//! The one exception is seccompiler's architecture check: a syscall made
//! through another ABI (i386 `int 0x80` on x86-64) would bypass rules keyed
//! by x86-64 numbers, so it kills the process.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch, sock_filter,
};

/// The programs, applied in order; the strictest verdict wins.
#[derive(Debug)]
pub(crate) struct Filters {
    pub programs: Vec<BpfProgram>,
    /// Human-readable list of what is denied, for the status.
    pub denied: Vec<String>,
}

/// Whether the kernel accepts seccomp filters at all.
pub(crate) fn probe() -> bool {
    // SAFETY: PR_GET_SECCOMP only reads the calling thread's mode.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    mode >= 0 && TargetArch::try_from(std::env::consts::ARCH).is_ok()
}

fn errno(code: i32) -> SeccompAction {
    SeccompAction::Errno(code as u32)
}

fn arg(index: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompRule, String> {
    let condition = SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value)
        .map_err(|e| e.to_string())?;
    SeccompRule::new(vec![condition]).map_err(|e| e.to_string())
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
    arch: TargetArch,
) -> Result<BpfProgram, String> {
    let filter =
        SeccompFilter::new(rules, SeccompAction::Allow, action, arch).map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}

/// Compiles the filters: always the base one, plus the network one when
/// `deny_network`.
pub(crate) fn build(deny_network: bool) -> Result<Filters, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| e.to_string())?;
    let mut programs = Vec::new();
    let mut denied = Vec::new();

    // Base: a command stays in the session the sandbox gave it, so the
    // whole of it can be found and killed (setpgid stays allowed: it cannot
    // leave the session, and coreutils `timeout` needs it). io_uring runs
    // socket and file operations without passing through these filters.
    // Kernel keyrings are shared with the service. Performance events and
    // BPF programs reach deep into the kernel (and can watch other
    // processes); no command a tool runs needs them.
    let base: BTreeMap<i64, Vec<SeccompRule>> = [
        libc::SYS_setsid,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_perf_event_open,
        libc::SYS_bpf,
    ]
    .into_iter()
    .map(|nr| (nr, vec![]))
    .collect();
    programs.push(compile(base, errno(libc::EPERM), arch)?);
    denied.extend(
        [
            "setsid",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "keyctl",
            "add_key",
            "request_key",
            "perf_event_open",
            "bpf",
        ]
        .map(String::from),
    );

    // No namespaces of its own making: in a user namespace it creates, a
    // command would hold every capability again (CAP_SYS_ADMIN,
    // CAP_NET_ADMIN…), which opens much of the kernel to it, within the
    // sandbox's other limits, but still. `unshare` and `setns` are refused
    // outright, `clone` with any namespace flag; `clone3`, whose flags seccomp
    // cannot read, answers ENOSYS, so the C library falls back to `clone`.
    let namespace_flags = [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWCGROUP,
    ];
    let mut namespaces = BTreeMap::new();
    namespaces.insert(libc::SYS_unshare, vec![]);
    namespaces.insert(libc::SYS_setns, vec![]);
    namespaces.insert(
        libc::SYS_clone,
        namespace_flags
            .into_iter()
            .map(|flag| arg(0, SeccompCmpOp::MaskedEq(flag as u64), flag as u64))
            .collect::<Result<_, _>>()?,
    );
    programs.push(compile(namespaces, errno(libc::EPERM), arch)?);
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, vec![]);
    programs.push(compile(clone3, errno(libc::ENOSYS), arch)?);
    denied.extend(
        [
            "unshare",
            "setns",
            "clone with a namespace flag",
            "clone3 (ENOSYS: the C library falls back to clone)",
        ]
        .map(String::from),
    );

    // No set-user-ID or set-group-ID files (systemd's RestrictSUIDSGID): a
    // command runs as the service's user, so such a file in its workspace
    // would let anyone on the host who can reach it act as that user (as
    // root when the service runs as root). Refused where a mode is given:
    // chmod, fchmod, fchmodat(2), and open, openat, creat, mknod(at) that
    // create a file; openat2, whose mode seccomp cannot read, answers
    // ENOSYS (callers fall back to openat).
    let special = [libc::S_ISUID, libc::S_ISGID];
    let mode_has = |index: u8| -> Result<Vec<SeccompRule>, String> {
        special
            .iter()
            .map(|&bit| arg(index, SeccompCmpOp::MaskedEq(bit as u64), bit as u64))
            .collect()
    };
    let creating_with = |flags: u8, mode: u8| -> Result<Vec<SeccompRule>, String> {
        special
            .iter()
            .map(|&bit| {
                let conditions = vec![
                    SeccompCondition::new(
                        flags,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(libc::O_CREAT as u64),
                        libc::O_CREAT as u64,
                    ),
                    SeccompCondition::new(
                        mode,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(bit as u64),
                        bit as u64,
                    ),
                ]
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| e.to_string())?;
                SeccompRule::new(conditions).map_err(|e| e.to_string())
            })
            .collect()
    };
    let mut suid = BTreeMap::new();
    suid.insert(libc::SYS_fchmod, mode_has(1)?);
    suid.insert(libc::SYS_fchmodat, mode_has(2)?);
    suid.insert(libc::SYS_fchmodat2, mode_has(2)?);
    suid.insert(libc::SYS_openat, creating_with(2, 3)?);
    suid.insert(libc::SYS_mknodat, mode_has(2)?);
    #[cfg(target_arch = "x86_64")]
    {
        suid.insert(libc::SYS_chmod, mode_has(1)?);
        suid.insert(libc::SYS_open, creating_with(1, 2)?);
        suid.insert(libc::SYS_creat, mode_has(1)?);
        suid.insert(libc::SYS_mknod, mode_has(1)?);
    }
    programs.push(compile(suid, errno(libc::EPERM), arch)?);
    let mut openat2 = BTreeMap::new();
    openat2.insert(libc::SYS_openat2, vec![]);
    programs.push(compile(openat2, errno(libc::ENOSYS), arch)?);
    denied.extend(
        [
            "set-user-ID and set-group-ID modes (chmod, open, mknod and their kin)",
            "openat2 (ENOSYS: callers fall back to openat)",
        ]
        .map(String::from),
    );

    if deny_network {
        // No socket of any family: IP, netlink, packet, and UNIX too,
        // because on kernels before Landlock ABI 9 nothing else stops a
        // connect() to a pathname socket such as the database's. Socket
        // pairs (anonymous, connected, reaching nothing outside) stay
        // allowed for local IPC, stream or seqpacket only: a datagram pair
        // could still sendto() a named socket.
        let mut rules = BTreeMap::new();
        rules.insert(libc::SYS_socket, vec![]);
        rules.insert(
            libc::SYS_socketpair,
            vec![
                arg(0, SeccompCmpOp::Ne, libc::AF_UNIX as u64)?,
                arg(1, SeccompCmpOp::MaskedEq(0xf), libc::SOCK_DGRAM as u64)?,
                arg(1, SeccompCmpOp::MaskedEq(0xf), libc::SOCK_RAW as u64)?,
            ],
        );
        programs.push(compile(rules, errno(libc::EACCES), arch)?);
        denied.push("socket (every address family)".into());
        denied.push("socketpair (except AF_UNIX stream/seqpacket)".into());
    }

    if arch == TargetArch::x86_64 {
        programs.push(x32_guard());
        denied.push("x32 system calls".into());
    }
    Ok(Filters { programs, denied })
}

/// x32 system calls carry the x86-64 architecture tag with bit 30 set in
/// the number, so rules keyed by x86-64 numbers do not see them. Refuse
/// them all (most kernels do not offer x32 anyway).
fn x32_guard() -> BpfProgram {
    const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        ins(LD_W_ABS, 0, 0, 4), // seccomp_data.arch
        ins(JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        ins(LD_W_ABS, 0, 0, 0), // seccomp_data.nr
        ins(JGE_K, 0, 1, X32_SYSCALL_BIT),
        ins(RET_K, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        ins(RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_compile_for_this_architecture() {
        let base = build(false).unwrap();
        let strict = build(true).unwrap();
        assert!(strict.programs.len() == base.programs.len() + 1);
        assert!(strict.denied.iter().any(|d| d.starts_with("socket ")));
        for program in &strict.programs {
            assert!(!program.is_empty() && program.len() < 4096);
        }
    }
}
