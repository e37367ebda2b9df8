//! The command sandbox and the `bash` tool, from the attacker's side: real
//! commands try to read secrets, write outside the workspace, reach the
//! network, outlive their timeout, or smuggle shell text through `cwd`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolgate::config::{FeatureMode, LandlockMode, NamespaceMode, NetworkPolicy, SandboxSettings};
use toolgate::protocol::ui_schema;
use toolgate::sandbox::{
    CommandOutput, CommandSpec, KernelSupport, Sandbox, SandboxError, SystemPaths,
};
use toolgate::tools::builtin::Bash;
use toolgate::tools::{PermissionClass, ProgressSink, Tool, ToolContext, ToolError, ToolSuccess};
use toolgate::workspace::Workspaces;

const DB_SECRET: &str = "postgres://toolgate:hunter2-db-secret@127.0.0.1:5432/toolgate";
const SIGNING_SECRET: &str = "signing-key-secret-7f3a";

/// The service's secrets are in the test process's environment, as they
/// would be in the server's. Every test calls this first, so the variables
/// are set before any test spawns anything.
fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: runs before any test thread reads the environment or
        // spawns a process (every test calls init() first; Once blocks the
        // others until this returns).
        unsafe {
            std::env::set_var("DATABASE_URL", DB_SECRET);
            std::env::set_var("TOOLGATE_AUTH__HS256_SECRET", SIGNING_SECRET);
            std::env::set_var("TOOLGATE_X", "toolgate-x-secret");
        }
    });
}

struct Harness {
    _tmp: tempfile::TempDir,
    /// Stands in for the service's data directory: holds the workspaces,
    /// and secrets no command may read.
    data_dir: PathBuf,
    workspaces: Arc<Workspaces>,
    sandbox: Arc<Sandbox>,
    settings: SandboxSettings,
}

fn settings() -> SandboxSettings {
    SandboxSettings {
        bash_default_timeout_ms: 10_000,
        bash_max_timeout_ms: 60_000,
        ..SandboxSettings::default()
    }
}

fn harness_with(settings: SandboxSettings, kernel: Option<KernelSupport>) -> Harness {
    init();
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().canonicalize().unwrap().join("data");
    std::fs::create_dir_all(&data_dir).unwrap();
    std::fs::write(data_dir.join("signing.key"), SIGNING_SECRET).unwrap();
    let workspaces = Arc::new(
        Workspaces::new(&data_dir.join("workspaces"), &data_dir.join("edit-history")).unwrap(),
    );
    let paths = SystemPaths::default().hide(&data_dir);
    let sandbox = Arc::new(match kernel {
        Some(kernel) => Sandbox::with_kernel(&settings, paths, kernel),
        None => {
            let sandbox = Sandbox::with_paths(&settings, paths);
            assert!(
                sandbox.status().bash_enabled,
                "these tests need a kernel with Landlock and seccomp: {:?}",
                sandbox.status().warnings
            );
            sandbox
        }
    });
    Harness {
        _tmp: tmp,
        data_dir,
        workspaces,
        sandbox,
        settings,
    }
}

fn harness() -> Harness {
    harness_with(settings(), None)
}

fn ctx(owner: &str, sub: Option<&str>, cancel: CancellationToken) -> ToolContext {
    ToolContext {
        owner: owner.into(),
        thread_id: "thread".into(),
        call_id: format!("call_{}", uuid::Uuid::new_v4().simple()),
        workspace: sub.map(String::from),
        cancel,
        progress: ProgressSink::default(),
        path_rules: None,
        judged_path: None,
        shown: None,
    }
}

impl Harness {
    fn tool(&self) -> Bash {
        Bash {
            sandbox: self.sandbox.clone(),
            workspaces: self.workspaces.clone(),
            settings: self.settings.clone(),
        }
    }

    fn workspace(&self, owner: &str) -> PathBuf {
        self.workspaces.open(owner, None).unwrap().path
    }

    async fn call(&self, args: Value) -> Result<ToolSuccess, ToolError> {
        self.tool()
            .execute(args, ctx("alice", None, CancellationToken::new()))
            .await
    }

    /// Runs `command` as alice and expects it to have run.
    async fn run(&self, command: &str) -> Value {
        match self.call(json!({ "command": command })).await {
            Ok(success) => success.result,
            Err(e) => panic!("{command}: {e:?}"),
        }
    }

    /// Runs an argv directly through the sandbox, in alice's workspace.
    async fn sandbox_run(&self, argv: &[&str], timeout: Duration) -> CommandOutput {
        self.try_sandbox_run(argv, timeout).await.unwrap()
    }

    async fn try_sandbox_run(
        &self,
        argv: &[&str],
        timeout: Duration,
    ) -> Result<CommandOutput, SandboxError> {
        let ws = self.workspace("alice");
        self.sandbox
            .run(CommandSpec {
                argv: argv.iter().map(|s| s.to_string()).collect(),
                cwd: ws.clone(),
                workspace: ws,
                workspace_identity: None,
                env: BTreeMap::new(),
                timeout,
                cancel: CancellationToken::new(),
                output_cap: 10_000,
                progress: None,
            })
            .await
    }
}

fn stdout(result: &Value) -> &str {
    result["stdout"].as_str().unwrap()
}

fn stderr(result: &Value) -> &str {
    result["stderr"].as_str().unwrap()
}

/// Alive and not a zombie.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat[stat.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .next()
                .unwrap()
                .to_string();
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

async fn assert_dies(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(3);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} survived the command"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The live processes whose command line holds `marker`, as this process
/// (outside any namespace of the commands) sees them.
fn running(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) && alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// Waits (up to 3 s) until no process runs `marker`.
async fn assert_all_end(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left = running(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{left:?} ({marker}) survived the command"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pids(text: &str) -> Vec<i32> {
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

// ---------------------------------------------------------------- secrets

#[tokio::test]
async fn the_services_environment_never_reaches_a_command() {
    let h = harness();
    assert_eq!(std::env::var("DATABASE_URL").unwrap(), DB_SECRET);
    let result = h.run("env; echo ---; set").await;
    let all = format!("{}{}", stdout(&result), stderr(&result));
    assert!(all.contains("PATH=/usr/local/bin:/usr/bin:/bin"), "{all}");
    for leaked in ["DATABASE_URL", "TOOLGATE", "hunter2", SIGNING_SECRET] {
        assert!(!all.contains(leaked), "{leaked} leaked:\n{all}");
    }
    let ws = h.workspace("alice");
    let home = format!("HOME={}/", ws.join(".toolgate-tmp").display());
    assert!(all.contains(&home), "{all}");
}

#[tokio::test]
async fn the_services_process_memory_and_environment_are_out_of_reach() {
    // In namespaces of its own the command does not even see the service;
    // without them, Landlock refuses.
    for (namespaces, refusal) in [
        (NamespaceMode::Require, "No such file or directory"),
        (NamespaceMode::Off, "Permission denied"),
    ] {
        let h = harness_with(
            SandboxSettings {
                namespaces,
                ..settings()
            },
            None,
        );
        let me = std::process::id();
        let result = h
            .run(&format!(
                "cat /proc/{me}/environ; cat /proc/$PPID/environ; head -c 64 /proc/{me}/mem; ls /proc/{me}/fd"
            ))
            .await;
        let all = format!("{}{}", stdout(&result), stderr(&result));
        assert!(!all.contains("hunter2"), "{all}");
        assert!(stderr(&result).contains(refusal), "{namespaces:?}: {all}");
    }
}

/// Another owner's command line (a token passed as an argument, say) is
/// out of a command's sight: in a PID namespace of its own, with its own
/// `/proc`, a command sees its own processes and nothing else.
#[tokio::test]
async fn a_command_sees_only_its_own_processes() {
    const SECRET: &str = "alices-token-5be1c0";
    for namespaces in [NamespaceMode::Require, NamespaceMode::Off] {
        let h = harness_with(
            SandboxSettings {
                namespaces,
                ..settings()
            },
            None,
        );
        let tool = h.tool();
        let alice = tokio::spawn(async move {
            tool.execute(
                json!({"command": format!("sleep 4.5; echo {SECRET}")}),
                ctx("alice", None, CancellationToken::new()),
            )
            .await
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while running(SECRET).is_empty() {
            assert!(Instant::now() < deadline, "alice's command never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let peek = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; \
                    echo pids: $(ls /proc | grep -cE '^[0-9]+$'); echo me: $$";
        let bob = h
            .tool()
            .execute(
                json!({ "command": peek }),
                ctx("bob", None, CancellationToken::new()),
            )
            .await
            .unwrap()
            .result;
        let seen = stdout(&bob);
        assert!(
            seen.contains("for f in /proc"),
            "bob sees his own command: {bob}"
        );
        let count: usize = seen
            .rsplit("pids: ")
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{bob}"));
        if namespaces == NamespaceMode::Require {
            assert!(h.sandbox.status().namespaces.enforced);
            assert!(!seen.contains(SECRET), "alice's command line leaked: {bob}");
            assert!(
                seen.contains("me: 1\n"),
                "the command is its namespace's init: {bob}"
            );
            assert!(count <= 5, "only the command's own processes: {bob}");
        } else {
            // Without them, the same look finds it: the check above is real.
            assert!(seen.contains(SECRET), "{bob}");
            assert!(count > 5, "{bob}");
        }
        alice.abort();
        assert_all_end(SECRET).await;
    }
}

#[tokio::test]
async fn a_command_cannot_signal_the_service() {
    let h = harness();
    let me = std::process::id();
    let result = h.run(&format!("kill -0 {me} && echo SIGNALLED")).await;
    assert!(!stdout(&result).contains("SIGNALLED"), "{result}");
    assert_ne!(result["exit_code"], 0);
}

#[tokio::test]
async fn host_secrets_and_the_data_directory_are_unreadable() {
    let h = harness();
    let ws = h.workspace("alice");
    let secret = h.data_dir.join("signing.key");
    let result = h
        .run(&format!(
            "cat {}; cat ../../signing.key; cat /etc/shadow; ls {}",
            secret.display(),
            h.data_dir.display()
        ))
        .await;
    let all = format!("{}{}", stdout(&result), stderr(&result));
    assert!(!all.contains(SIGNING_SECRET), "{all}");
    assert!(!all.contains("root:"), "{all}");
    assert_eq!(all.matches("Permission denied").count(), 4, "{all}");
    assert!(ws.starts_with(&h.data_dir));

    // System paths stay usable.
    let result = h.run("head -1 /etc/passwd && ls /usr/bin | head -1").await;
    assert_eq!(result["exit_code"], 0, "{result}");
    assert!(stdout(&result).starts_with("root:"), "{result}");
}

#[tokio::test]
async fn another_owners_workspace_is_neither_readable_nor_writable() {
    let h = harness();
    let bob = h.workspace("bob");
    std::fs::write(bob.join("notes.txt"), "bob's private notes").unwrap();
    h.workspace("alice");
    let result = h
        .run("cat ../u_bob/notes.txt; ls ../u_bob; echo pwned > ../u_bob/notes.txt; echo x > ../u_bob/new; mkdir ../sibling; rm -f ../u_bob/notes.txt")
        .await;
    let all = format!("{}{}", stdout(&result), stderr(&result));
    assert!(!all.contains("private notes"), "{all}");
    assert_eq!(
        std::fs::read_to_string(bob.join("notes.txt")).unwrap(),
        "bob's private notes"
    );
    assert!(!bob.join("new").exists());
    assert!(!h.workspaces.root().join("sibling").exists());
}

// ---------------------------------------------------------------- writes

/// Removes what a failed confinement would have let a command create, so
/// a broken sandbox fails the tests without littering the host.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = if path.is_dir() {
                std::fs::remove_dir_all(path)
            } else {
                std::fs::remove_file(path)
            };
        }
    }
}

#[tokio::test]
async fn writes_outside_the_workspace_fail_and_leave_nothing() {
    let h = harness();
    let id = uuid::Uuid::new_v4().simple().to_string();
    let escape = PathBuf::from(format!("/tmp/escape_{id}"));
    let copied = PathBuf::from(format!("/tmp/escape_{id}_copy"));
    let _cleanup = Cleanup(vec![escape.clone(), copied.clone()]);
    let beside = h.data_dir.join("beside.txt");
    // A file of the service's, reached through a symlink planted in the
    // workspace.
    let victim = h.data_dir.join("victim.txt");
    std::fs::write(&victim, "intact\n").unwrap();
    let result = h
        .run(&format!(
            "echo x > {}; touch {}; echo y > ../escape; ln -s {} link && echo z >> link; cp /etc/hostname {}",
            escape.display(),
            beside.display(),
            victim.display(),
            copied.display()
        ))
        .await;
    assert!(!escape.exists());
    assert!(!copied.exists());
    assert!(!beside.exists());
    assert!(!h.workspaces.root().join("escape").exists());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "intact\n");
    // Landlock refuses (Permission denied) or, in namespaces of the
    // command's own, the mount outside the workspace is read-only.
    assert_eq!(refused_writes(stderr(&result)), 5, "{result}");
}

/// How many writes `stderr` reports refused: by Landlock, or by a
/// read-only mount.
fn refused_writes(stderr: &str) -> usize {
    stderr.matches("Permission denied").count() + stderr.matches("Read-only file system").count()
}

/// Landlock governs what a file holds, not its mode, times or extended
/// attributes: a command could otherwise make the service's signing key
/// (its own uid's file) readable for everyone, or lock the data directory.
/// In namespaces of its own, everything outside the workspace is a
/// read-only mount; inside the workspace all of it still works.
#[tokio::test]
async fn a_command_changes_no_mode_time_or_attribute_outside_the_workspace() {
    use std::os::unix::fs::PermissionsExt;
    let h = harness_with(
        SandboxSettings {
            namespaces: NamespaceMode::Require,
            ..settings()
        },
        None,
    );
    assert!(h.sandbox.status().namespaces.read_only_mounts);
    let ws = h.workspace("alice");
    let key = h.data_dir.join("signing.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&h.data_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let modes = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o7777;
    let mtime = |path: &Path| std::fs::metadata(path).unwrap().modified().unwrap();
    let key_mtime = mtime(&key);
    let result = h
        .run(&format!(
            "chmod 0644 {key}; chmod 0755 {data}; chmod 000 {data}/workspaces; touch -d 2001-01-01 {key}; \
             python3 -c 'import os; os.setxattr(\"{key}\", \"user.x\", b\"1\")'",
            key = key.display(),
            data = h.data_dir.display()
        ))
        .await;
    assert_eq!(modes(&key), 0o600, "{result}");
    assert_eq!(modes(&h.data_dir), 0o700, "{result}");
    assert_eq!(
        modes(&h.data_dir.join("workspaces")) & 0o700,
        0o700,
        "{result}"
    );
    assert_eq!(mtime(&key), key_mtime, "{result}");
    assert!(
        xattr_names(&key).is_empty(),
        "{result}: {:?}",
        xattr_names(&key)
    );
    assert_eq!(
        stderr(&result).matches("Read-only file system").count(),
        5,
        "{result}"
    );

    // The workspace: files made, modes and times changed, from the
    // workspace's root and from a directory beneath it.
    let result = h
        .run(
            "mkdir -p d && cd d && echo 'echo run' > s.sh && chmod +x s.sh && ./s.sh \
             && touch -d 2001-01-01 s.sh && cd .. && chmod 700 d && echo ok",
        )
        .await;
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(stdout(&result), "run\nok\n", "{result}");
    assert_eq!(modes(&ws.join("d")), 0o700);
    assert_eq!(modes(&ws.join("d/s.sh")) & 0o100, 0o100);
}

/// The extended attribute names of `path`.
fn xattr_names(path: &Path) -> Vec<u8> {
    let name = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut buffer = vec![0u8; 4096];
    // SAFETY: listxattr(2) writes at most buffer.len() bytes into it.
    let len = unsafe { libc::listxattr(name.as_ptr(), buffer.as_mut_ptr().cast(), buffer.len()) };
    assert!(len >= 0, "{}", std::io::Error::last_os_error());
    buffer.truncate(len as usize);
    buffer
}

#[tokio::test]
async fn writes_inside_the_workspace_work() {
    let h = harness();
    let result = h
        .run("mkdir -p a/b && echo hello > a/b/f.txt && ln -s a/b/f.txt l && cat l && mv a/b/f.txt a/g.txt && echo ok")
        .await;
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(stdout(&result), "hello\nok\n");
    let ws = h.workspace("alice");
    assert_eq!(
        std::fs::read_to_string(ws.join("a/g.txt")).unwrap(),
        "hello\n"
    );
}

#[tokio::test]
async fn each_command_has_a_private_temporary_directory_inside_the_workspace() {
    let h = harness();
    let ws = h.workspace("alice");
    let outside = PathBuf::from(format!("/tmp/escape_{}", uuid::Uuid::new_v4().simple()));
    let _cleanup = Cleanup(vec![outside.clone()]);
    let result = h
        .run(&format!(
            "echo $TMPDIR; echo data > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; mktemp; echo x > {}",
            outside.display()
        ))
        .await;
    let out = stdout(&result);
    let tmpdir = PathBuf::from(out.lines().next().unwrap());
    assert!(tmpdir.starts_with(ws.join(".toolgate-tmp")), "{out}");
    assert!(out.contains("data\n"), "{out}");
    assert_eq!(refused_writes(stderr(&result)), 1, "{result}");
    assert!(!outside.exists());
    // Removed afterwards, and the next command gets another one.
    assert!(!tmpdir.exists());
    assert!(!ws.join(".toolgate-tmp").exists());
    let again = h.run("echo $TMPDIR").await;
    assert_ne!(stdout(&again).trim(), tmpdir.to_str().unwrap());
}

/// `HOME` is an empty directory made for each command, not the workspace:
/// a start-up file the workspace holds (a `.gitconfig` a branch tracks, a
/// Python `usercustomize.py` a file tool wrote) is not read as the
/// program's own, and nothing a command leaves in `HOME` reaches the next.
#[tokio::test]
async fn a_commands_home_is_its_own_and_reads_no_start_up_file_of_the_workspace() {
    let h = harness();
    let ws = h.workspace("alice");
    // What a checkout of a branch tracking `.gitconfig` at the workspace's
    // root leaves there: an external diff program, run at every `git diff`.
    std::fs::write(
        ws.join(".gitconfig"),
        "[diff]\n\texternal = touch pwned-by-git\n[user]\n\tname = from-the-tree\n",
    )
    .unwrap();
    let site = ws.join(".local/lib/python3.11/site-packages");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::write(site.join("usercustomize.py"), "print('pwned-by-python')\n").unwrap();
    let line = "git init -q r && cd r && echo one > a && git add a \
                && git -c user.name=a -c user.email=a@b commit -qm one && echo two > a \
                && git diff > /dev/null; echo \"name=$(git config --global --get user.name)\"; \
                /usr/bin/python3 -c 'print(\"python ran\")'; echo \"home=$HOME\"; ls -A \"$HOME\"; \
                echo left > \"$HOME/marker\"";
    let result = h.run(line).await;
    let out = stdout(&result);
    assert!(out.contains("python ran"), "{result}");
    assert!(!out.contains("pwned-by-python"), "{result}");
    assert!(out.contains("name=\n"), "{result}");
    assert!(!ws.join("r/pwned-by-git").exists(), "{result}");
    let home = out
        .lines()
        .find_map(|l| l.strip_prefix("home="))
        .map(PathBuf::from)
        .unwrap();
    assert!(home.starts_with(ws.join(".toolgate-tmp")), "{out}");
    // `ls -A` of the fresh home printed nothing before the marker.
    assert!(
        out.trim_end()
            .ends_with(&format!("home={}", home.display())),
        "{out}"
    );
    assert!(!home.exists());

    // The same files, read as the start-up files they are made to be,
    // do run: what the assertions above see absent would be there.
    let control = h
        .run(
            "cd r && GIT_CONFIG_GLOBAL=../.gitconfig git diff > /dev/null; \
              HOME=$PWD/.. /usr/bin/python3 -c 'print(\"python ran\")'",
        )
        .await;
    assert!(stdout(&control).contains("pwned-by-python"), "{control}");
    assert!(ws.join("r/pwned-by-git").exists(), "{control}");

    let again = h.run("ls -A \"$HOME\"; echo \"home=$HOME\"").await;
    let out = stdout(&again);
    assert!(out.starts_with("home="), "{again}");
    assert_ne!(out.trim(), format!("home={}", home.display()));
}

/// `.toolgate-tmp` is toolgate's name: a link or a file a command put in
/// its place is removed (the link itself, never what it leads to), so one
/// command cannot stop every later one of the workspace.
#[tokio::test]
async fn a_link_or_file_in_place_of_the_temporary_directories_is_removed() {
    let h = harness();
    let ws = h.workspace("alice");
    let outside = PathBuf::from(format!("/tmp/tmp_target_{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("kept"), "kept").unwrap();
    let _cleanup = Cleanup(vec![outside.clone()]);
    let planted = h
        .run(&format!(
            "rm -rf \"$TMPDIR\"; mv .toolgate-tmp .old-tmp; ln -s {} .toolgate-tmp; echo planted",
            outside.display()
        ))
        .await;
    assert_eq!(stdout(&planted), "planted\n", "{planted}");
    assert!(ws.join(".toolgate-tmp").is_symlink());
    let after = h
        .run("echo $TMPDIR; echo ok > \"$TMPDIR/f\"; cat \"$TMPDIR/f\"")
        .await;
    let out = stdout(&after);
    assert!(out.ends_with("ok\n"), "{after}");
    assert!(
        out.starts_with(ws.join(".toolgate-tmp").to_str().unwrap()),
        "{out}"
    );
    // What the link led to is untouched, and nothing is left behind.
    let entries: Vec<_> = std::fs::read_dir(&outside).unwrap().collect();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        std::fs::read_to_string(outside.join("kept")).unwrap(),
        "kept"
    );
    assert!(!ws.join(".toolgate-tmp").exists());
    // A plain file by that name, as a file tool could write it.
    std::fs::write(ws.join(".toolgate-tmp"), "x").unwrap();
    let again = h.run("echo again").await;
    assert_eq!(stdout(&again), "again\n", "{again}");
    assert!(!ws.join(".toolgate-tmp").exists());
    // The directory closed by a command (with a file in it, so it stays).
    let closed = h
        .run("touch \"$TMPDIR/../keep\" && chmod 500 \"$TMPDIR/..\" && echo closed")
        .await;
    assert_eq!(stdout(&closed), "closed\n", "{closed}");
    let opened = h.run("echo \"$TMPDIR\"").await;
    assert!(
        stdout(&opened).starts_with(ws.join(".toolgate-tmp").to_str().unwrap()),
        "{opened}"
    );
    // Opened again (toolgate's user, unlike root, could not create in it).
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ws.join(".toolgate-tmp"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o700, 0o700, "{mode:o}");
}

// ---------------------------------------------------------------- network

/// A listener standing in for the database, outside the workspace.
async fn run_with_network(policy: NetworkPolicy) -> (Value, Option<Value>) {
    let h = harness_with(
        SandboxSettings {
            network: policy,
            ..settings()
        },
        None,
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let tcp = h
        .run(&format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"
        ))
        .await;
    // A pathname UNIX socket outside the workspace (like Postgres's
    // /var/run/postgresql/.s.PGSQL.5432).
    let socket = h.data_dir.join("db.sock");
    let _unix = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let unix = if Path::new("/usr/bin/python3").exists() {
        Some(
            h.run(&format!(
                "/usr/bin/python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect(\"{}\"); print(\"CONNECTED\")'",
                socket.display()
            ))
            .await,
        )
    } else {
        None
    };
    drop(listener);
    (tcp, unix)
}

#[tokio::test]
async fn network_deny_refuses_tcp_and_unix_sockets() {
    let (tcp, unix) = run_with_network(NetworkPolicy::Deny).await;
    assert_ne!(tcp["exit_code"], 0, "{tcp}");
    assert!(!stdout(&tcp).contains("CONNECTED"));
    assert!(stderr(&tcp).contains("Permission denied"), "{tcp}");
    if let Some(unix) = unix {
        assert_ne!(unix["exit_code"], 0, "{unix}");
        assert!(!stdout(&unix).contains("CONNECTED"), "{unix}");
    }
}

/// With network = deny and namespaces, a command has a network namespace
/// of its own: `/proc/net` lists none of the host's sockets (the test's
/// own listener among them). With network = allow it shares the host's.
#[tokio::test]
async fn a_command_sees_none_of_the_hosts_network_under_network_deny() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = format!(":{:04X}", listener.local_addr().unwrap().port());
    for (network, isolated) in [(NetworkPolicy::Deny, true), (NetworkPolicy::Allow, false)] {
        let h = harness_with(
            SandboxSettings {
                namespaces: NamespaceMode::Require,
                network,
                ..settings()
            },
            None,
        );
        assert_eq!(h.sandbox.status().namespaces.network, isolated);
        let result = h.run("cat /proc/net/tcp").await;
        let out = stdout(&result);
        assert_eq!(out.contains(&port), !isolated, "{network:?}: {result}");
        if isolated {
            assert_eq!(
                out.lines().filter(|l| l.contains(": ")).count(),
                0,
                "{result}"
            );
        }
    }
    drop(listener);
}

#[tokio::test]
async fn network_deny_also_refuses_the_local_database_port() {
    let h = harness();
    let result = h
        .run("exec 3<>/dev/tcp/127.0.0.1/5432 && echo CONNECTED")
        .await;
    assert!(!stdout(&result).contains("CONNECTED"), "{result}");
    assert_ne!(result["exit_code"], 0);
}

#[tokio::test]
async fn network_allow_lets_commands_connect() {
    let (tcp, _) = run_with_network(NetworkPolicy::Allow).await;
    assert_eq!(tcp["exit_code"], 0, "{tcp}");
    assert_eq!(stdout(&tcp), "CONNECTED\n");
}

#[tokio::test]
async fn socket_pairs_for_local_ipc_still_work_under_network_deny() {
    let h = harness();
    if !Path::new("/usr/bin/python3").exists() {
        return;
    }
    let result = h
        .run("/usr/bin/python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"hi\"); print(b.recv(2).decode())'")
        .await;
    assert_eq!(stdout(&result), "hi\n", "{result}");
}

// ---------------------------------------------------------------- processes

#[tokio::test]
async fn a_timeout_kills_background_grandchildren_too() {
    let h = harness();
    let started = Instant::now();
    let out = h
        .call(json!({"command": "sleep 30.101 & echo $!; sleep 30", "timeout_ms": 1000}))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(out.partial, "timed out after printing: partial");
    let result = out.result;
    assert_eq!(result["timed_out"], true);
    assert_eq!(result["exit_code"], Value::Null);
    assert_eq!(result["error"]["code"], "TIMEOUT");
    assert!(
        result["error"]["hint"]
            .as_str()
            .unwrap()
            .contains("raise timeout_ms"),
        "{result}"
    );
    assert_eq!(pids(stdout(&result)).len(), 1, "started: {result}");
    assert_all_end("sleep 30.101").await;
}

#[tokio::test]
async fn processes_that_change_group_are_killed_too() {
    let h = harness();
    let started = Instant::now();
    // Job control puts the background job in a process group of its own,
    // out of reach of a kill of the command's group.
    let out = h
        .call(json!({
            "command": "set -m; sleep 30.102 & echo $!; ps -o pgid= -p $!; echo $$; sleep 30",
            "timeout_ms": 1500
        }))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    let numbers = pids(stdout(&out.result));
    assert_eq!(numbers.len(), 3, "{}", out.result);
    let (job, job_group, shell) = (numbers[0], numbers[1], numbers[2]);
    assert_eq!(job, job_group, "the job leads its own group");
    assert_ne!(job_group, shell);
    assert_all_end("sleep 30.102").await;
}

#[tokio::test]
async fn background_jobs_die_when_the_command_ends() {
    let h = harness();
    let started = Instant::now();
    // The pipes stay open in the background job: without killing it the
    // call would wait for it.
    let result = h.run("sleep 30.103 & echo $!").await;
    assert!(started.elapsed() < Duration::from_secs(5), "{result}");
    assert_eq!(result["exit_code"], 0);
    assert_eq!(pids(stdout(&result)).len(), 1, "started: {result}");
    assert_all_end("sleep 30.103").await;
}

#[tokio::test]
async fn leaving_the_session_is_refused() {
    let h = harness();
    let result = h.run("setsid sleep 30 & sleep 0.3; echo done").await;
    assert!(stderr(&result).contains("not permitted"), "{result}");
}

/// A set-user-ID (or set-group-ID) file in a workspace would let anyone
/// who reaches it run it as the service's user: no command makes one, by
/// chmod or by creating the file with that mode; plain modes still work.
#[tokio::test]
async fn no_command_makes_a_set_user_id_file() {
    let h = harness();
    let attempts = [
        "cp /bin/true s1 && chmod u+s s1",
        "cp /bin/true s2 && chmod 2755 s2",
        "install -m 4755 /bin/true s3",
        "python3 -c 'import os; os.close(os.open(\"s4\", os.O_CREAT | os.O_WRONLY, 0o4755))'",
        "python3 -c 'import os; fd = os.open(\"s5\", os.O_CREAT | os.O_WRONLY, 0o755); os.fchmod(fd, 0o6755)'",
    ];
    for attempt in attempts {
        let result = h.run(&format!("{attempt}; echo exit=$?")).await;
        assert!(!stdout(&result).contains("exit=0"), "{attempt}: {result}");
    }
    let ws = h.workspace("alice");
    for name in ["s1", "s2", "s3", "s4", "s5"] {
        if let Ok(meta) = std::fs::metadata(ws.join(name)) {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode();
            assert_eq!(mode & 0o6000, 0, "{name}: {mode:o}");
        }
    }
    let result = h
        .run("cp /bin/true plain && chmod 755 plain && chmod g+w plain && ./plain && echo ran")
        .await;
    assert_eq!(stdout(&result).trim(), "ran", "{result}");
}

#[tokio::test]
async fn a_silent_timeout_is_a_timeout_error() {
    let h = harness();
    let err = h
        .call(json!({"command": "sleep 5", "timeout_ms": 300}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "TIMEOUT");
    assert!(err.hint.unwrap().contains("timeout_ms"));
}

/// A command that runs for a while reports progress every two seconds
/// (how long it has run, of its timeout, and what it has printed), so a
/// frontend shows it alive; a quick one reports none.
#[tokio::test]
async fn a_long_command_reports_progress_while_it_runs() {
    let h = harness();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut context = ctx("alice", None, CancellationToken::new());
    context.progress = ProgressSink::new(tx);
    let out = h
        .tool()
        .execute(
            json!({"command": "echo begun; sleep 4.5; echo done", "timeout_ms": 10_000}),
            context,
        )
        .await
        .unwrap();
    assert_eq!(out.result["exit_code"], 0);
    let mut reports = vec![];
    while let Ok(p) = rx.try_recv() {
        reports.push(p);
    }
    assert!((1..=2).contains(&reports.len()), "{reports:?}");
    // (Ticks come every 2 s; a loaded host may run them late.)
    let first = &reports[0];
    assert!(first.detail.starts_with("running for "), "{reports:?}");
    assert!(
        first
            .detail
            .ends_with(" s of at most 10 s; 6 bytes of output so far"),
        "{reports:?}"
    );
    assert!((0.19..0.45).contains(&first.fraction), "{reports:?}");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut context = ctx("alice", None, CancellationToken::new());
    context.progress = ProgressSink::new(tx);
    h.tool()
        .execute(json!({"command": "true"}), context)
        .await
        .unwrap();
    assert!(rx.try_recv().is_err(), "a quick command reports nothing");
}

#[tokio::test]
async fn cancellation_kills_the_command() {
    let h = harness();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let ws = h.workspace("alice");
    let pidfile = ws.join("pid");
    let started = Instant::now();
    let err = h
        .tool()
        .execute(
            json!({"command": "sleep 30.104 & echo $! > pid; echo started; echo warned >&2; sleep 30"}),
            ctx("alice", None, cancel),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code, "CANCELLED");
    // Who stopped it, and that it may have done part of its work; what it
    // printed until then is the evidence of how far it got.
    assert!(err.message.contains("by its caller"), "{}", err.message);
    assert!(err.message.contains("part of its work"), "{}", err.message);
    assert!(
        err.message.contains("\nstdout until then:\nstarted\n")
            && err.message.contains("\nstderr until then:\nwarned\n"),
        "{}",
        err.message
    );
    assert!(err.hint.is_some());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(pidfile.exists(), "the background job started");
    assert_all_end("sleep 30.104").await;
}

#[tokio::test]
async fn a_dropped_run_leaves_nothing_running() {
    // Pids as the commands print them are this process's only outside
    // namespaces of their own; reaping is the same either way.
    let h = harness_with(
        SandboxSettings {
            namespaces: NamespaceMode::Off,
            ..settings()
        },
        None,
    );
    let ws = h.workspace("alice");
    let run = h.call(
        json!({"command": "grep -E '^[0-9]+:pids:' /proc/self/cgroup > cgroup; \
        echo $$ > main; sleep 30 & echo $! > pid; sleep 30"}),
    );
    let _ = tokio::time::timeout(Duration::from_millis(500), run).await;
    let read_pid = |name: &str| -> i32 {
        std::fs::read_to_string(ws.join(name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    assert_dies(read_pid("pid")).await;
    // The command's main process is this process's child: it is reaped,
    // not left behind as a zombie.
    let main = read_pid("main");
    let deadline = Instant::now() + Duration::from_secs(3);
    while std::path::Path::new(&format!("/proc/{main}")).exists() {
        assert!(Instant::now() < deadline, "process {main} was not reaped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Its process-limit cgroup goes once its processes have.
    if h.sandbox.status().rlimits.max_processes_cgroup {
        let cgroup = pids_cgroup_dir(&std::fs::read_to_string(ws.join("cgroup")).unwrap());
        while cgroup.exists() {
            assert!(
                Instant::now() < deadline,
                "{} is left behind",
                cgroup.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Without namespaces, a process that forks into a new group and exits,
/// again and again, has a new pid at every sweep of the session; its pids
/// cgroup (as root) still ends it: forks stop, then every member is killed.
#[tokio::test]
async fn a_process_hopping_from_pid_to_pid_is_ended_too() {
    let h = harness_with(
        SandboxSettings {
            namespaces: NamespaceMode::Off,
            ..settings()
        },
        None,
    );
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        assert!(
            h.sandbox.status().rlimits.max_processes_cgroup,
            "as root the pids cgroup is in use: {:?}",
            h.sandbox.status()
        );
    }
    let ws = h.workspace("alice");
    std::fs::write(
        ws.join("hop-7f3.c"),
        "#include <stdio.h>\n\
         #include <time.h>\n\
         #include <unistd.h>\n\
         int main(void) {\n\
         \x20   time_t last = 0;\n\
         \x20   for (;;) {\n\
         \x20       pid_t child = fork();\n\
         \x20       if (child > 0) _exit(0);\n\
         \x20       if (child < 0) continue;\n\
         \x20       setpgid(0, 0);\n\
         \x20       if (time(NULL) != last) {\n\
         \x20           last = time(NULL);\n\
         \x20           FILE *f = fopen(\"hops\", \"a\");\n\
         \x20           if (f) { fputc('.', f); fclose(f); }\n\
         \x20       }\n\
         \x20   }\n\
         }\n",
    )
    .unwrap();
    let result = h
        .run("cc -O2 -o hop-7f3 hop-7f3.c && (./hop-7f3 </dev/null >/dev/null 2>&1 &) ; sleep 1.5; echo started")
        .await;
    assert_eq!(stdout(&result).trim(), "started", "{result}");
    assert_all_end("hop-7f3").await;
    let hops = || {
        std::fs::metadata(ws.join("hops"))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    let before = hops();
    assert!(before > 0, "the hopper ran: {result}");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(hops(), before, "it still hops");
}

// ---------------------------------------------------------------- non-interactive

#[tokio::test]
async fn nothing_waits_for_a_human() {
    let h = harness();
    let started = Instant::now();
    let result = h
        .run("cat; read line; echo \"read:$?\"; tty; echo $PAGER $GIT_TERMINAL_PROMPT $EDITOR; cat /dev/tty")
        .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let out = stdout(&result);
    assert!(out.contains("read:1\n"), "{out}");
    assert!(out.contains("not a tty\n"), "{out}");
    assert!(out.contains("cat 0 true\n"), "{out}");
    assert!(stderr(&result).contains("/dev/tty"), "{result}");
}

#[tokio::test]
async fn git_neither_pages_nor_prompts() {
    let h = harness();
    let result = h
        .run(
            "git --version && git init -q repo && cd repo && git config user.name a && git config user.email a@b && git commit -q --allow-empty -m one && git log --oneline | wc -l && git commit --amend --allow-empty -q && echo amended",
        )
        .await;
    assert_eq!(result["exit_code"], 0, "{result}");
    assert!(stdout(&result).starts_with("git version"), "{result}");
    assert!(stdout(&result).ends_with("1\namended\n"), "{result}");
    // A commit's automatic maintenance runs in the foreground: detached, it
    // would call `setsid`, which commands may not (git said `fatal: setsid
    // failed` after every commit).
    assert_eq!(stderr(&result), "", "{result}");
}

/// A repository's `core.fsmonitor` (which the model could have written)
/// would run its program at `git status`: in a command it never does.
#[tokio::test]
async fn git_status_runs_no_fsmonitor_program() {
    let h = harness();
    let result = h
        .run(
            "git init -q repo && cd repo && git config core.fsmonitor 'touch ../ran; false' && echo x > a && git status --short && git diff && ls ..",
        )
        .await;
    assert_eq!(result["exit_code"], 0, "{result}");
    assert!(stdout(&result).contains("?? a"), "{result}");
    assert!(!h.workspace("alice").join("ran").exists(), "{result}");
}

/// A directory a command made to look like a bare repository (`HEAD`,
/// `objects/`, `refs/` and a `config` naming a diff program) is not taken
/// as one when git finds it: its program never runs. (Named with
/// `--git-dir`, git would take it: rules ending in `*` vouch for no such
/// `--git-dir`.)
#[tokio::test]
async fn a_directory_made_to_look_like_a_bare_repository_runs_nothing() {
    let h = harness();
    let result = h
        .run(
            "mkdir -p fake/objects fake/refs && echo 'ref: refs/heads/main' > fake/HEAD \
             && printf '[diff]\\n\\texternal = touch ../ran\\n' > fake/config \
             && echo a > a && echo b > b && cd fake && git diff --no-index ../a ../b; \
             git rev-parse --git-dir; echo done",
        )
        .await;
    assert!(stdout(&result).ends_with("done\n"), "{result}");
    assert!(
        String::from_utf8_lossy(result["stderr"].as_str().unwrap_or("").as_bytes())
            .contains("bare repository"),
        "git says why it refuses: {result}"
    );
    assert!(!h.workspace("alice").join("ran").exists(), "{result}");
}

// ---------------------------------------------------------------- results

#[tokio::test]
async fn exit_codes_and_streams_are_reported_apart() {
    let h = harness();
    let out = h
        .call(json!({"command": "echo out; echo err >&2; exit 3"}))
        .await
        .unwrap();
    assert!(!out.partial, "a non-zero exit is a complete result");
    let r = out.result;
    assert_eq!(r["exit_code"], 3);
    assert_eq!(r["stdout"], "out\n");
    assert_eq!(r["stderr"], "err\n");
    assert_eq!(r["timed_out"], false);
    assert_eq!(r["cwd"], ".");
    assert_eq!(r["command"], "echo out; echo err >&2; exit 3");
    assert!(r["shell"].as_str().unwrap().ends_with("sh"));
    assert!(r["duration_ms"].as_u64().is_some());

    // The main process is its PID namespace's init: like any container's
    // init, it ignores the signals it sends itself without a handler.
    assert!(h.sandbox.status().namespaces.enforced);
    let survived = h.run("kill -9 $$; echo still here").await;
    assert_eq!(survived["stdout"], "still here\n", "{survived}");
    let h = harness_with(
        SandboxSettings {
            namespaces: NamespaceMode::Off,
            ..settings()
        },
        None,
    );
    let killed = h.run("kill -9 $$").await;
    assert_eq!(killed["exit_code"], Value::Null);
    assert_eq!(killed["signal"], 9);
}

#[tokio::test]
async fn long_output_keeps_head_and_tail_and_is_partial() {
    let h = harness_with(
        SandboxSettings {
            output_cap_chars: 1000,
            ..settings()
        },
        None,
    );
    let out = h
        .call(json!({"command": "yes | head -c 200000; echo; echo THE-END"}))
        .await
        .unwrap();
    assert!(out.partial);
    let r = &out.result;
    assert_eq!(r["stdout_truncated"], true);
    assert_eq!(r["stderr_truncated"], false);
    // The model is told how to see what was left out.
    let note = r["note"].as_str().unwrap();
    assert!(
        note.starts_with("The middle of stdout was left out"),
        "{note}"
    );
    assert!(note.contains("read_file"), "{note}");
    let text = stdout(r);
    assert!(text.starts_with("y\ny\ny\n"), "{text}");
    assert!(text.ends_with("y\n\nTHE-END\n"), "{text}");
    // 200000 + "\n" + "THE-END\n" = 200009 characters, 1000 kept, less
    // the tail's first character: the newline ending a line cut off.
    assert!(
        text.contains("y\n… [199010 characters omitted] …\ny\n"),
        "{text}"
    );
    assert!(text.chars().count() < 1100);
}

/// A command drawing a progress bar with carriage returns (as curl and
/// wget do on stderr) leaves what a terminal would show: the bar's last
/// state, not each redraw; `\r\n` line ends stay.
#[tokio::test]
async fn progress_bars_leave_their_last_state() {
    let h = harness();
    let result = h
        .run(
            "for p in 0 25 50 75 100; do printf '\\r%3d%%' $p >&2; done; echo >&2; \
             printf 'one\\r\\ntwo\\n'",
        )
        .await;
    assert_eq!(stderr(&result), "100%\n");
    assert_eq!(stdout(&result), "one\r\ntwo\n");
}

#[tokio::test]
async fn invalid_utf8_is_replaced_not_fatal() {
    let h = harness();
    let result = h.run("printf 'a\\377b\\n'").await;
    assert_eq!(stdout(&result), "a\u{FFFD}b\n");
}

#[tokio::test]
async fn results_compile_to_a_command_output_view() {
    let h = harness();
    let tool = h.tool();
    let args = json!({"command": "echo hi"});
    let result = h.call(args.clone()).await.unwrap().result;
    let hints = tool.ui_hints(&args, &result).unwrap();
    assert_eq!(hints["view"], "core.command_output");
    // The output is stored once, in the result: the hints point at it.
    assert_eq!(hints["stdout"], json!({"result": "/stdout"}));
    let ui = ui_schema::compile_for(&hints, &result).unwrap();
    assert!(ui.to_string().contains("CommandOutput"), "{ui}");
    assert_eq!(ui["data"]["stdout"], "hi\n", "{ui}");
}

#[tokio::test]
async fn metadata_says_what_the_tool_is() {
    let h = harness();
    let def = h.tool().definition();
    assert_eq!(def.name, "bash");
    assert!(!def.metadata.read_only);
    assert!(!def.metadata.concurrency_safe);
    assert!(def.metadata.destructive);
    assert_eq!(def.metadata.permission_class, PermissionClass::Bash);
    assert_eq!(def.metadata.audit_operation, "execute");
    assert!(!def.capability.reversible);
    assert!(!def.capability.dry_run);
}

// ---------------------------------------------------------------- arguments

#[tokio::test]
async fn the_schema_bounds_the_timeout_and_requires_a_command() {
    let h = harness();
    let def = h.tool().definition();
    let validator = jsonschema::validator_for(&def.input_schema).unwrap();
    assert!(validator.is_valid(&json!({"command": "ls"})));
    assert!(validator.is_valid(&json!({"command": "ls", "timeout_ms": 60_000, "cwd": "a"})));
    let too_long = json!({"command": "ls", "timeout_ms": 60_001});
    let error = validator.iter_errors(&too_long).next().unwrap();
    assert_eq!(error.instance_path.to_string(), "/timeout_ms");
    assert!(error.to_string().contains("60000"), "{error}");
    for bad in [
        json!({}),
        json!({"command": ""}),
        json!({"command": "ls", "timeout_ms": 0}),
        json!({"command": "ls", "timeout_ms": 1.5}),
        json!({"command": "ls", "shell": "/bin/zsh"}),
        json!({"command": ["ls"]}),
    ] {
        assert!(!validator.is_valid(&bad), "{bad}");
    }
    // The tool checks again: it may be called without the pipeline.
    let err = h
        .call(json!({"command": "ls", "timeout_ms": 60_001}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "INVALID_ARGUMENTS");
    let err = h.call(json!({"command": "   "})).await.unwrap_err();
    assert_eq!(err.code, "INVALID_ARGUMENTS");
}

#[tokio::test]
async fn cwd_runs_inside_the_workspace() {
    let h = harness();
    let ws = h.workspace("alice");
    std::fs::create_dir_all(ws.join("src/deep")).unwrap();
    std::os::unix::fs::symlink("src/deep", ws.join("shortcut")).unwrap();
    // An absolute cwd inside the workspace is accepted, as file paths are.
    let absolute_deep = ws.join("src/deep").display().to_string();
    let absolute_root = ws.display().to_string();
    for (cwd, shown) in [
        ("src/deep", "src/deep"),
        ("src/../src", "src"),
        ("shortcut", "src/deep"),
        (".", "."),
        (absolute_deep.as_str(), "src/deep"),
        (absolute_root.as_str(), "."),
    ] {
        let r = h
            .call(json!({"command": "pwd", "cwd": cwd}))
            .await
            .unwrap()
            .result;
        assert_eq!(r["cwd"], shown);
        let expected = if shown == "." {
            ws.clone()
        } else {
            ws.join(shown)
        };
        assert_eq!(stdout(&r).trim(), expected.to_str().unwrap());
    }
}

#[tokio::test]
async fn cwd_outside_the_workspace_is_a_security_violation() {
    let h = harness();
    let ws = h.workspace("alice");
    h.workspace("bob");
    std::os::unix::fs::symlink("/etc", ws.join("etc-link")).unwrap();
    std::os::unix::fs::symlink("../u_bob", ws.join("bob-link")).unwrap();
    let bob_absolute = h.workspace("bob").display().to_string();
    let above_absolute = format!("{}/../u_bob", ws.display());
    for cwd in [
        "/etc",
        "/",
        "..",
        "../u_bob",
        "a/../../..",
        "etc-link",
        "bob-link",
        "etc-link/ssl",
        bob_absolute.as_str(),
        above_absolute.as_str(),
    ] {
        let err = h
            .call(json!({"command": "touch marker; pwd", "cwd": cwd}))
            .await
            .unwrap_err();
        assert_eq!(err.code, "SECURITY_VIOLATION", "{cwd}: {err:?}");
    }
    assert!(!h.workspace("bob").join("marker").exists());
}

#[tokio::test]
async fn a_missing_or_non_directory_cwd_is_a_clear_error() {
    let h = harness();
    let ws = h.workspace("alice");
    std::fs::write(ws.join("file.txt"), "x").unwrap();
    let err = h
        .call(json!({"command": "pwd", "cwd": "nope/deeper"}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "DIRECTORY_NOT_FOUND");
    assert!(err.message.contains("nope/deeper"), "{}", err.message);
    let err = h
        .call(json!({"command": "pwd", "cwd": "file.txt"}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "NOT_A_DIRECTORY");
}

#[tokio::test]
async fn shell_text_in_cwd_is_a_directory_name_not_code() {
    let h = harness();
    let ws = h.workspace("alice");
    let evil = "$(touch pwned);x`touch pwned2`";
    let err = h
        .call(json!({"command": "pwd", "cwd": evil}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "DIRECTORY_NOT_FOUND");
    std::fs::create_dir(ws.join(evil)).unwrap();
    let r = h
        .call(json!({"command": "pwd", "cwd": evil}))
        .await
        .unwrap()
        .result;
    assert_eq!(r["cwd"], evil);
    assert_eq!(stdout(&r).trim(), ws.join(evil).to_str().unwrap());
    assert!(!ws.join("pwned").exists() && !ws.join("pwned2").exists());
    assert!(!ws.join(evil).join("pwned").exists());
}

#[tokio::test]
async fn a_command_that_looks_like_an_option_is_still_a_command() {
    let h = harness();
    let r = h.run("--version").await;
    assert_eq!(r["exit_code"], 127, "{r}");
    assert!(!stdout(&r).contains("GNU bash"), "{r}");
}

#[tokio::test]
async fn sub_workspaces_are_separate_directories() {
    let h = harness();
    let r = h
        .tool()
        .execute(
            json!({"command": "pwd; echo x > f"}),
            ctx("alice", Some("proj"), CancellationToken::new()),
        )
        .await
        .unwrap()
        .result;
    let sub = h.workspace("alice").join("proj");
    assert_eq!(stdout(&r).trim(), sub.to_str().unwrap());
    assert!(sub.join("f").exists());
}

// ---------------------------------------------------------------- limits

#[tokio::test]
async fn resource_limits_are_in_force_and_cannot_be_raised() {
    let h = harness_with(
        SandboxSettings {
            cpu_secs: 17,
            file_size_bytes: 1024 * 1024,
            max_open_files: 256,
            max_processes: 300,
            max_memory_bytes: 256 << 20,
            ..settings()
        },
        None,
    );
    let r = h
        .run("ulimit -n; ulimit -f; ulimit -t; ulimit -u; ulimit -c; ulimit -d; ulimit -n 4096 && echo RAISED")
        .await;
    assert_eq!(stdout(&r), "256\n1024\n17\n300\n0\n262144\n", "{r}");
    assert!(!stdout(&r).contains("RAISED"));

    // A process that asks for more memory than that is refused it, and
    // can say so; one that stays below is not.
    let r = h
        .run("python3 -c 'bytearray(1 << 30)' 2>&1 | tail -n 1; python3 -c 'print(len(bytearray(64 << 20)))'")
        .await;
    assert_eq!(stdout(&r), "MemoryError\n67108864\n", "{r}");

    let r = h
        .run("head -c 2000000 /dev/zero > big; echo \"rc=$?\"; stat -c %s big")
        .await;
    assert!(stdout(&r).starts_with("rc=153\n"), "{r}"); // 128 + SIGXFSZ
    assert!(stdout(&r).ends_with("1048576\n"), "{r}");
}

/// A fork bomb stops at `sandbox.max_processes`, whoever the service runs
/// as. Linux exempts root from RLIMIT_NPROC, so as root the limit holds
/// through the command's own pids cgroup, which is gone once the command
/// is; the status says which holds, and never claims a limit it lacks.
#[tokio::test]
async fn a_command_cannot_start_more_processes_than_its_limit() {
    let h = harness_with(
        SandboxSettings {
            max_processes: 12,
            ..settings()
        },
        None,
    );
    let limits = &h.sandbox.status().rlimits;
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        assert_eq!(limits.max_processes_enforced, limits.max_processes_cgroup);
    } else {
        assert!(limits.max_processes_enforced);
    }
    if !limits.max_processes_enforced {
        assert!(
            h.sandbox
                .status()
                .warnings
                .iter()
                .any(|w| w.contains("process limit is not enforced")),
            "{:?}",
            h.sandbox.status().warnings
        );
        return; // root where no cgroup can be made: nothing enforces it
    }
    // `sh` (dash) gives up at the first failed fork; bash would retry for
    // seconds.
    let started = Instant::now();
    let out = h
        .sandbox_run(
            &[
                "sh",
                "-c",
                "grep -E '^[0-9]+:pids:' /proc/self/cgroup >&2; \
                 n=0; while [ $n -lt 40 ]; do sleep 30 & n=$((n+1)); echo $n; done",
            ],
            Duration::from_secs(20),
        )
        .await;
    assert!(!out.timed_out, "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(15), "{out:?}");
    assert!(out.stderr.contains("Cannot fork"), "{out:?}");
    let started_in_background: u32 = out.stdout.lines().last().unwrap_or("0").parse().unwrap();
    assert!(
        (1..12).contains(&started_in_background),
        "{started_in_background}: {out:?}"
    );
    if limits.max_processes_cgroup {
        // The command's cgroup, found from inside it, is removed.
        let cgroup = pids_cgroup_dir(out.stderr.lines().next().unwrap());
        assert!(!cgroup.exists(), "{} is left behind", cgroup.display());
    }
}

/// With `sandbox.pids_cgroup = "off"`, commands stay in the service's own
/// pids cgroup (RLIMIT_NPROC alone limits them).
#[tokio::test]
async fn the_pids_cgroup_can_be_turned_off() {
    let h = harness_with(
        SandboxSettings {
            pids_cgroup: FeatureMode::Off,
            ..settings()
        },
        None,
    );
    assert!(!h.sandbox.status().rlimits.max_processes_cgroup);
    let out = h
        .sandbox_run(
            &[
                "sh",
                "-c",
                "grep -E '^[0-9]+:pids:' /proc/self/cgroup || echo none",
            ],
            Duration::from_secs(10),
        )
        .await;
    assert!(!out.stdout.contains("toolgate-cmd-"), "{out:?}");
    assert!(!out.stdout.is_empty(), "{out:?}");
}

/// The directory of the pids cgroup named by a `/proc/<pid>/cgroup` line
/// (`<id>:pids:<path>`), beneath this process's v1 `pids` mount.
fn pids_cgroup_dir(line: &str) -> PathBuf {
    let path = line.trim().splitn(3, ':').nth(2).unwrap();
    assert!(path.contains("toolgate-cmd-"), "{line}");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount = mountinfo
        .lines()
        .find(|l| {
            l.split_once(" - cgroup ").is_some_and(|(_, t)| {
                t.rsplit(' ')
                    .next()
                    .unwrap()
                    .split(',')
                    .any(|o| o == "pids")
            })
        })
        .and_then(|l| l.split(' ').nth(4))
        .unwrap();
    Path::new(mount).join(path.trim_start_matches('/'))
}

#[tokio::test]
async fn commands_hold_no_capabilities() {
    let h = harness();
    let r = h
        .run("grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status")
        .await;
    let lines: Vec<&str> = stdout(&r).lines().collect();
    assert_eq!(lines.len(), 4, "{r}");
    assert!(lines.iter().all(|l| l.ends_with("0000000000000000")), "{r}");
}

/// A user namespace of its own would give a command every capability back
/// inside it: creating one (or any namespace) is refused, while starting
/// processes the usual ways (fork, vfork, posix_spawn, whose clone3 the C
/// library retries as clone) works.
#[tokio::test]
async fn a_command_cannot_make_namespaces_of_its_own() {
    let h = harness();
    for attempt in [
        "unshare --user true",
        "unshare --user --map-root-user --mount --pid --fork cat /proc/self/status",
        "unshare --net true",
        // The system call itself, not through unshare(1).
        "python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); \
         failed = libc.unshare(0x10000000); \
         raise SystemExit(os.strerror(ctypes.get_errno()) if failed else 0)'",
        "nsenter --target 1 --mount true",
    ] {
        let r = h.run(&format!("{attempt} && echo ESCAPED")).await;
        assert!(!stdout(&r).contains("ESCAPED"), "{attempt}: {r}");
        assert_ne!(r["exit_code"], 0, "{attempt}: {r}");
        let err = stderr(&r);
        assert!(err.contains("Operation not permitted"), "{attempt}: {r}");
    }
    let r = h
        .run(
            "python3 -c \"import os, subprocess; \
             print(subprocess.run(['echo', 'spawned'], capture_output=True, text=True).stdout.strip()); \
             pid = os.fork(); os._exit(0) if pid == 0 else print('forked', os.waitpid(pid, 0)[1])\"; \
             (echo subshell) | cat",
        )
        .await;
    assert_eq!(stdout(&r), "spawned\nforked 0\nsubshell\n", "{r}");
}

/// Performance events and BPF programs are refused whatever their
/// arguments: a command cannot reach into the kernel (or watch other
/// processes) through them.
#[tokio::test]
async fn a_command_cannot_open_performance_events_or_load_bpf() {
    let h = harness();
    let r = h
        .run(
            "python3 -c 'import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); \
             nr = {\"x86_64\": (298, 321), \"aarch64\": (241, 280)}[os.uname().machine]; \
             errs = []; \
             [errs.append(os.strerror(ctypes.get_errno()) if libc.syscall(n, 0, 0, 0, 0, 0) != 0 else \"ALLOWED\") for n in nr]; \
             print(errs)'",
        )
        .await;
    assert_eq!(
        stdout(&r),
        "['Operation not permitted', 'Operation not permitted']\n",
        "{r}"
    );
}

/// The service blocks and handles signals of its own (and the Rust runtime
/// ignores SIGPIPE); a command starts with none blocked or ignored, so a
/// pipeline's writer dies quietly when its reader is done.
#[tokio::test]
async fn commands_start_with_default_signal_handling() {
    let h = harness();
    let r = h.run("grep -E '^Sig(Blk|Ign)' /proc/self/status").await;
    let lines: Vec<&str> = stdout(&r).lines().collect();
    assert_eq!(lines.len(), 2, "{r}");
    assert!(lines.iter().all(|l| l.ends_with("0000000000000000")), "{r}");
    let r = h.run("yes | head -n 1").await;
    assert_eq!(stdout(&r), "y\n", "{r}");
    assert_eq!(stderr(&r), "", "{r}");
}

// ---------------------------------------------------------------- the sandbox alone

#[tokio::test]
async fn without_landlock_require_refuses_and_best_effort_runs() {
    let no_landlock = Some(KernelSupport {
        landlock_abi: None,
        seccomp: true,
        namespaces: KernelSupport::probe().namespaces,
        pids_cgroup: None,
    });
    let h = harness_with(settings(), no_landlock.clone());
    assert!(!h.sandbox.status().bash_enabled);
    let err = h.call(json!({"command": "echo hi"})).await.unwrap_err();
    assert_eq!(err.code, "SANDBOX_UNAVAILABLE");
    assert!(err.message.contains("Landlock"), "{}", err.message);

    let h = harness_with(
        SandboxSettings {
            landlock: LandlockMode::BestEffort,
            ..settings()
        },
        no_landlock,
    );
    let status = h.sandbox.status();
    assert!(status.bash_enabled && !status.landlock.enforced);
    assert_eq!(h.run("echo hi").await["stdout"], "hi\n");
}

#[tokio::test]
async fn the_status_reports_what_is_enforced_here() {
    let h = harness();
    let status = h.sandbox.status();
    let kernel = KernelSupport::probe();
    assert_eq!(status.landlock.available, kernel.landlock_abi.is_some());
    assert_eq!(status.landlock.abi, kernel.landlock_abi);
    assert_eq!(status.bash_enabled, kernel.landlock_abi.is_some());
    assert!(status.seccomp.active);
    assert_eq!(status.rlimits.max_open_files, 1024);
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["network"], "deny");
    assert_eq!(json["landlock"]["mode"], "require");
    assert_eq!(json["namespaces"]["mode"], "best_effort");
    assert_eq!(status.namespaces.available, kernel.namespaces);
    assert_eq!(status.namespaces.enforced, kernel.namespaces);
}

#[tokio::test]
async fn the_sandbox_rejects_a_cwd_outside_the_workspace() {
    let h = harness();
    let ws = h.workspace("alice");
    let err = h
        .sandbox
        .run(CommandSpec {
            argv: vec!["/bin/pwd".into()],
            cwd: h.data_dir.clone(),
            workspace: ws,
            workspace_identity: None,
            env: BTreeMap::new(),
            timeout: Duration::from_secs(5),
            cancel: CancellationToken::new(),
            output_cap: 100,
            progress: None,
        })
        .await
        .unwrap_err();
    assert!(matches!(err, SandboxError::InvalidSpec(_)), "{err:?}");
}

#[tokio::test]
async fn argv_is_passed_as_is() {
    let h = harness();
    let out = h
        .sandbox_run(
            &[
                "/usr/bin/printf",
                "[%s]\\n",
                "$(id)",
                "a b",
                "; rm -rf ~",
                "*",
            ],
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(out.stdout, "[$(id)]\n[a b]\n[; rm -rf ~]\n[*]\n");
    let missing = h
        .try_sandbox_run(&["no-such-program-xyz"], Duration::from_secs(5))
        .await
        .unwrap_err();
    assert!(matches!(missing, SandboxError::Spawn { .. }), "{missing:?}");
    // A file that is there but not executable: the child's execve fails,
    // and its errno reaches the caller.
    std::fs::write(h.workspace("alice").join("not-a-program"), "echo hi\n").unwrap();
    let refused = h
        .try_sandbox_run(&["./not-a-program"], Duration::from_secs(5))
        .await
        .unwrap_err();
    match refused {
        SandboxError::Spawn { source, .. } => {
            assert_eq!(source.raw_os_error(), Some(libc::EACCES), "{source:?}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn extra_environment_is_added_on_top_of_the_allow_list() {
    let h = harness();
    let ws = h.workspace("alice");
    let out = h
        .sandbox
        .run(CommandSpec {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                "echo \"$TOOL_INPUT_NAME|$PAGER\"".into(),
            ],
            cwd: ws.clone(),
            workspace: ws,
            workspace_identity: None,
            env: BTreeMap::from([("TOOL_INPUT_NAME".to_string(), "$(id) ; x".to_string())]),
            timeout: Duration::from_secs(5),
            cancel: CancellationToken::new(),
            output_cap: 100,
            progress: None,
        })
        .await
        .unwrap();
    assert_eq!(out.stdout, "$(id) ; x|cat\n");
}

/// A sub-workspace that is a link to another owner's workspace (a command
/// can make one) is refused before anything runs, and no command lands
/// there; a workspace path that no longer names the directory that was
/// opened (a link swapped in after it was opened) is refused by the
/// sandbox itself.
#[tokio::test]
async fn a_command_cannot_be_sent_into_another_owners_workspace() {
    let h = harness();
    let bob = h.workspace("bob");
    std::fs::write(bob.join("secret.txt"), "bob's\n").unwrap();
    let alice = h.workspace("alice");
    std::os::unix::fs::symlink("../u_bob", alice.join("to-bob")).unwrap();
    std::os::unix::fs::symlink("..", alice.join("to-root")).unwrap();
    for sub in ["to-bob", "to-root"] {
        let error = h
            .tool()
            .execute(
                json!({"command": "cat secret.txt; echo pwned > pwned.txt; ls .."}),
                ctx("alice", Some(sub), CancellationToken::new()),
            )
            .await
            .map(|s| panic!("{sub}: ran: {}", s.result))
            .unwrap_err();
        assert_eq!(error.code, "INVALID_ARGUMENTS", "{sub}: {error:?}");
        assert!(!error.message.contains("bob's"), "{}", error.message);
    }
    assert!(!bob.join("pwned.txt").exists());
    assert!(!h.workspaces.root().join("pwned.txt").exists());

    // The sandbox confines a command to the directory that was opened,
    // and sets up nothing (its temporary directory) in another: a file
    // of bob's named as that directory stays.
    std::fs::write(bob.join(".toolgate-tmp"), "bob data\n").unwrap();
    let opened = h.workspaces.open("alice", None).unwrap();
    let swapped = h
        .sandbox
        .run(CommandSpec {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                "echo pwned > pwned.txt".into(),
            ],
            cwd: bob.clone(),
            workspace: bob.clone(),
            workspace_identity: Some(opened.identity),
            env: BTreeMap::new(),
            timeout: Duration::from_secs(5),
            cancel: CancellationToken::new(),
            output_cap: 1_000,
            progress: None,
        })
        .await
        .unwrap_err();
    assert!(
        swapped
            .to_string()
            .contains("no longer the workspace directory"),
        "{swapped}"
    );
    assert!(!bob.join("pwned.txt").exists());
    assert_eq!(
        std::fs::read_to_string(bob.join(".toolgate-tmp")).unwrap(),
        "bob data\n"
    );
}
