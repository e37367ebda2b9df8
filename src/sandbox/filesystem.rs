//! Landlock: the ruleset of one command, built in the parent. The child
//! only calls `landlock_restrict_self` on its file descriptor.

use std::os::fd::OwnedFd;
use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
};

use super::paths::{Grant, Rule};

/// The Landlock ABI the kernel offers, or `None` when it has no Landlock
/// (not built in, or not enabled at boot).
pub(crate) fn probe_abi() -> Option<i32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer and size 0, this only asks the
    // kernel for its ABI version; nothing is read or written.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    (abi > 0).then_some(abi as i32)
}

/// What the workspace allows: everything but creating device nodes and
/// device ioctls.
fn workspace_access(abi: ABI) -> BitFlags<AccessFs> {
    AccessFs::from_all(abi) & !(AccessFs::MakeChar | AccessFs::MakeBlock | AccessFs::IoctlDev)
}

fn grant_access(grant: Grant, abi: ABI) -> BitFlags<AccessFs> {
    let handled = AccessFs::from_all(abi);
    let access = match grant {
        Grant::Exec => AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir,
        Grant::Read => AccessFs::ReadFile | AccessFs::ReadDir,
        Grant::List => AccessFs::ReadDir.into(),
        Grant::ReadWrite => AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate,
    };
    access & handled
}

/// The Landlock rights a command's own `/proc` gets in a PID namespace of
/// its own: those of a rule granting the whole of `/proc` (the default
/// read-only paths have one), nothing when `/proc` is not granted, or only
/// split around hidden paths (the new mount would need the same split,
/// which can only be computed after it exists).
pub(crate) fn proc_access(abi: i32, system: &[Rule]) -> u64 {
    system
        .iter()
        .find(|rule| rule.path == Path::new("/proc") && rule.grant != Grant::List)
        .map_or(0, |rule| grant_access(rule.grant, ABI::from(abi)).bits())
}

/// Builds the ruleset of one command and returns its file descriptor
/// (close-on-exec, as the kernel creates it).
///
/// `abi` is what the kernel reported; the access rights asked for are
/// exactly those it knows, and any incompatibility is an error rather than
/// a silently weaker sandbox.
pub(crate) fn ruleset(
    abi: i32,
    system: &[Rule],
    workspace: &Path,
    workspace_identity: Option<(u64, u64)>,
    deny_tcp: bool,
) -> Result<OwnedFd, String> {
    // The crate discourages building an ABI from a number because a fixed,
    // tested ABI gives reproducible rules; here the number comes from the
    // kernel itself, which is what we report in the status, and the
    // requirement is hard so nothing is dropped behind our back.
    let abi = ABI::from(abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(|e| e.to_string())?;
    let net = AccessNet::from_all(abi);
    if deny_tcp && !net.is_empty() {
        // Handled with no rule: every TCP bind and connect is refused. The
        // seccomp filter refuses the sockets themselves; this also covers
        // what seccomp cannot see.
        ruleset = ruleset.handle_access(net).map_err(|e| e.to_string())?;
    }
    let scopes = Scope::from_all(abi);
    if !scopes.is_empty() {
        // No signals to processes outside the command (the service), no
        // abstract UNIX sockets created outside it.
        ruleset = ruleset.scope(scopes).map_err(|e| e.to_string())?;
    }
    let mut created = ruleset.create().map_err(|e| e.to_string())?;
    for rule in system {
        let Ok(metadata) = std::fs::metadata(&rule.path) else {
            continue; // gone since the sandbox was built
        };
        let Ok(fd) = PathFd::new(&rule.path) else {
            continue;
        };
        let mut access = grant_access(rule.grant, abi);
        if !metadata.is_dir() {
            access &= AccessFs::from_file(abi);
        }
        if access.is_empty() {
            continue;
        }
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| format!("{}: {e}", rule.path.display()))?;
    }
    let fd = PathFd::new(workspace).map_err(|e| format!("{}: {e}", workspace.display()))?;
    if let Some(expected) = workspace_identity {
        // The rule is on this descriptor: it must be the directory the
        // caller opened, whatever the path names now.
        let found = fd_identity(&fd).map_err(|e| format!("{}: {e}", workspace.display()))?;
        if found != expected {
            return Err(format!(
                "{} is no longer the workspace directory that was opened",
                workspace.display()
            ));
        }
    }
    created = created
        .add_rule(PathBeneath::new(fd, workspace_access(abi)))
        .map_err(|e| format!("{}: {e}", workspace.display()))?;
    Option::<OwnedFd>::from(created).ok_or_else(|| "Landlock ruleset has no descriptor".into())
}

/// A descriptor's (device, inode).
pub(crate) fn fd_identity(fd: &impl std::os::fd::AsFd) -> std::io::Result<(u64, u64)> {
    use std::os::fd::AsRawFd;
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor and a buffer of the right type; fstat
    // fills it on success.
    let rc = unsafe { libc::fstat(fd.as_fd().as_raw_fd(), stat.as_mut_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so the buffer is initialised.
    let stat = unsafe { stat.assume_init() };
    Ok((stat.st_dev, stat.st_ino))
}
