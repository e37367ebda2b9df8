//! Node.js scripts against the real server: the interop tests drive
//! toolgate with stock client libraries (AG-UI, MCP) pinned in
//! tests/agui/package.json, run as node scripts in tests/agui that print one
//! JSON report line.
//!
//! Needs Node.js 18+ and npm; `npm ci` runs in tests/agui when its
//! node_modules is missing or stale.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;
use tokio::sync::OnceCell;

use super::TestApp;

pub const NPM_CI_TIMEOUT: Duration = Duration::from_secs(300);
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where the scripts and their pinned npm packages live.
pub fn node_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agui")
}

pub struct Output {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn describe(&self) -> String {
        format!(
            "exit {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }

    /// The one JSON line a script prints.
    pub fn report(&self) -> Value {
        let line = self
            .stdout
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .unwrap_or_else(|| panic!("no JSON report line; {}", self.describe()));
        serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("report is not JSON ({e}); {}", self.describe()))
    }
}

/// Runs a program in tests/agui, killed if it outlives `limit`.
pub async fn run_bounded(
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    limit: Duration,
) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(node_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        // The client's warnings are what tells us it fixed something up.
        .env_remove("SUPPRESS_TRANSFORMATION_WARNINGS");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap_or_else(|e| {
        panic!("cannot start `{program}` ({e}): the interop tests need Node.js 18+ and npm on PATH")
    });
    // On timeout the future, and with it the child, is dropped: kill_on_drop
    // ends the process.
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("`{program} {}` ran longer than {limit:?}", args.join(" ")))
        .unwrap_or_else(|e| panic!("`{program}` failed: {e}"));
    Output {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Every dependency package.json pins, with its exact version.
fn pins() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(node_dir().join("package.json")).unwrap();
    let manifest: Value = serde_json::from_str(&text).unwrap();
    manifest["dependencies"]
        .as_object()
        .expect("package.json has dependencies")
        .iter()
        .map(|(name, version)| {
            let version = version
                .as_str()
                .unwrap_or_else(|| panic!("package.json pins {name}"));
            (name.clone(), version.to_string())
        })
        .collect()
}

fn installed(name: &str) -> Option<String> {
    let path = node_dir()
        .join("node_modules")
        .join(name)
        .join("package.json");
    let text = std::fs::read_to_string(path).ok()?;
    let manifest: Value = serde_json::from_str(&text).ok()?;
    manifest["version"].as_str().map(str::to_string)
}

/// Node and npm are present and the pinned packages are installed: runs
/// `npm ci` once per test binary when node_modules is missing or stale.
pub async fn node_ready() {
    static READY: OnceCell<()> = OnceCell::const_new();
    READY
        .get_or_init(|| async {
            let node = run_bounded("node", &["--version"], &[], SCRIPT_TIMEOUT).await;
            assert!(node.status.success(), "node --version: {}", node.describe());
            let major: u32 = node
                .stdout
                .trim()
                .trim_start_matches('v')
                .split('.')
                .next()
                .and_then(|m| m.parse().ok())
                .unwrap_or(0);
            assert!(
                major >= 18,
                "Node.js 18+ is needed (global fetch), found {}",
                node.stdout.trim()
            );
            let pins = pins();
            let stale = pins
                .iter()
                .any(|(name, version)| installed(name).as_ref() != Some(version));
            if stale {
                let npm = run_bounded(
                    "npm",
                    &["ci", "--no-audit", "--no-fund"],
                    &[],
                    NPM_CI_TIMEOUT,
                )
                .await;
                assert!(
                    npm.status.success(),
                    "npm ci in tests/agui failed: {}",
                    npm.describe()
                );
                for (name, version) in &pins {
                    assert_eq!(
                        installed(name).as_ref(),
                        Some(version),
                        "{name} after npm ci"
                    );
                }
            }
        })
        .await;
}

/// Runs a script of tests/agui against `app`: `--base` is the server, the
/// token is in $TOOLGATE_TOKEN.
pub async fn run_script(app: &TestApp, script: &str, args: &[&str]) -> Output {
    let mut all = vec![script, "--base", &app.base];
    all.extend_from_slice(args);
    run_bounded(
        "node",
        &all,
        &[("TOOLGATE_TOKEN", app.token.as_str())],
        SCRIPT_TIMEOUT,
    )
    .await
}
