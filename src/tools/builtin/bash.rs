//! `bash`: run a shell command in the caller's workspace, through the
//! [`Sandbox`].
//!
//! The command text is the model's and reaches the shell as one argv
//! element (`[shell, "-c", "--", command]`); nothing else is spliced into
//! shell text. `cwd` is opened through the workspace's `cap_std` directory,
//! so `..`, absolute paths and symlinks that leave the workspace fail in
//! the kernel (`SECURITY_VIOLATION`).
//!
//! Outcomes:
//! - the command ran to its end: success, whatever its exit code (the
//!   model reads `exit_code`; a command killed by a signal has
//!   `exit_code: null` and `signal`), `partial` when an output stream was
//!   cut to the cap;
//! - it timed out after printing something: `partial`, with
//!   `timed_out: true` and what it printed — that output is worth more to
//!   the model than an error without it;
//! - it timed out silently: failure `TIMEOUT` (not retryable as it is; the
//!   hint says to raise `timeout_ms` or split the work);
//! - the call was cancelled: failure `CANCELLED`;
//! - the sandbox cannot confine commands on this host: failure
//!   `SANDBOX_UNAVAILABLE`.

use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::config::{NetworkPolicy, SandboxSettings};
use crate::protocol::tool_output::codes;
use crate::protocol::ui_schema::hints::{self, Source};
use crate::sandbox::{CommandSpec, Sandbox, SandboxError};
use crate::tools::{
    PermissionClass, Tool, ToolCapability, ToolContext, ToolDefinition, ToolError, ToolMetadata,
    ToolSuccess,
};
use crate::workspace::{Workspace, Workspaces};

/// Error codes of this tool (beyond the pipeline's).
pub mod error_codes {
    /// `cwd` leads outside the workspace.
    pub const SECURITY_VIOLATION: &str = "SECURITY_VIOLATION";
    pub const DIRECTORY_NOT_FOUND: &str = "DIRECTORY_NOT_FOUND";
    pub const NOT_A_DIRECTORY: &str = "NOT_A_DIRECTORY";
    /// The host cannot confine commands as configured.
    pub const SANDBOX_UNAVAILABLE: &str = "SANDBOX_UNAVAILABLE";
}
use error_codes::*;

pub struct Bash {
    pub sandbox: Arc<Sandbox>,
    pub workspaces: Arc<Workspaces>,
    pub settings: SandboxSettings,
}

/// bash when the host has it in /bin or /usr/bin, else sh.
pub fn shell() -> &'static str {
    static SHELL: OnceLock<&'static str> = OnceLock::new();
    SHELL.get_or_init(|| {
        ["/bin/bash", "/usr/bin/bash"]
            .into_iter()
            .find(|p| Path::new(p).is_file())
            .unwrap_or("/bin/sh")
    })
}

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::new(codes::INVALID_ARGUMENTS, message, false)
}

/// The directory a command starts in: the workspace, or `cwd` beneath it.
/// Returns its absolute path and its path relative to the workspace.
// ToolError is large, but it is what the tool returns anyway; this runs
// once per call.
#[allow(clippy::result_large_err)]
fn resolve_cwd(workspace: &Workspace, cwd: Option<&str>) -> Result<(PathBuf, String), ToolError> {
    let Some(raw) = cwd.filter(|c| !c.is_empty() && *c != ".") else {
        return Ok((workspace.path.clone(), ".".into()));
    };
    let escape = || {
        ToolError::new(
            SECURITY_VIOLATION,
            format!("cwd {raw:?} leads outside the workspace"),
            false,
        )
        .with_hint(
            "give a directory inside the workspace: relative to it (without `..` above it) \
             or absolute beneath its root",
        )
    };
    if raw.contains('\0') {
        return Err(invalid("cwd contains a NUL byte"));
    }
    // An absolute cwd is accepted where it lies inside the workspace, as a
    // file tool's path is, and taken as the relative path it names.
    let given = Path::new(raw);
    let relative = if given.has_root() {
        given.strip_prefix(&workspace.path).map_err(|_| escape())?
    } else {
        given
    };
    // The workspace itself, named by its absolute path.
    let relative = if relative.as_os_str().is_empty() {
        Path::new(".")
    } else {
        relative
    };
    // Lexically first, so `a/../..` is an escape even when `a` is missing.
    let mut depth = 0usize;
    for component in relative.components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return Err(escape()),
            },
            Component::RootDir | Component::Prefix(_) => return Err(escape()),
        }
    }
    // Opened through the capability: the kernel resolves it beneath the
    // workspace (openat2 RESOLVE_BENEATH), symlinks included.
    let dir = workspace.dir.open_dir(relative).map_err(|e| {
        use std::io::ErrorKind;
        match e.kind() {
            ErrorKind::NotFound => ToolError::new(
                DIRECTORY_NOT_FOUND,
                format!("cwd {raw:?} does not exist in the workspace"),
                false,
            )
            .with_hint("create it first (mkdir -p) or leave cwd out"),
            ErrorKind::NotADirectory => ToolError::new(
                NOT_A_DIRECTORY,
                format!("cwd {raw:?} is not a directory"),
                false,
            ),
            // cap-std reports every escape (`..` above the root, a symlink
            // out of it) as PermissionDenied.
            ErrorKind::PermissionDenied => escape(),
            _ => ToolError::new(
                codes::EXECUTION_FAILED,
                format!("cannot open cwd {raw:?}: {e}"),
                false,
            ),
        }
    })?;
    // The directory actually opened, named by the kernel.
    let real = {
        use std::os::fd::{AsFd, AsRawFd};
        std::fs::read_link(format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd()))
    }
    .map_err(|e| {
        ToolError::new(
            codes::EXECUTION_FAILED,
            format!("cannot resolve cwd {raw:?}: {e}"),
            false,
        )
    })?;
    let inside = real
        .strip_prefix(&workspace.path)
        .map_err(|_| escape())?
        .to_path_buf();
    let shown = if inside.as_os_str().is_empty() {
        ".".to_string()
    } else {
        inside.display().to_string()
    };
    Ok((real, shown))
}

fn sandbox_error(e: SandboxError) -> ToolError {
    match e {
        SandboxError::Unavailable(reason) => ToolError::new(
            SANDBOX_UNAVAILABLE,
            format!("commands cannot run on this host: {reason}"),
            false,
        )
        .with_hint("an operator must enable Landlock (or set sandbox.landlock = best_effort)"),
        SandboxError::InvalidSpec(m) => invalid(m),
        other => ToolError::new(codes::EXECUTION_FAILED, other.to_string(), false),
    }
}

#[async_trait]
impl Tool for Bash {
    fn definition(&self) -> ToolDefinition {
        let s = &self.settings;
        let network = match s.network {
            NetworkPolicy::Deny => "Network access is off (no sockets).",
            NetworkPolicy::Allow => "Network access is allowed.",
        };
        // Said only where this host confines commands so: Landlock, or
        // namespaces whose mounts are read-only but the workspace's.
        let status = self.sandbox.status();
        let writable = if status.landlock.enforced
            || (status.namespaces.enforced && status.namespaces.read_only_mounts)
        {
            "Only the workspace is writable; "
        } else {
            "Write only inside the workspace; "
        };
        ToolDefinition {
            name: "bash".into(),
            description: format!(
                "Run a shell command ({}) in your workspace and return its exit code, stdout and stderr. \
                 Non-interactive: stdin is empty, there is no terminal, pagers and editors are off, \
                 nothing can prompt. {writable}TMPDIR is a private directory inside it and HOME \
                 an empty one inside TMPDIR, both removed after the command (nothing written to \
                 HOME, such as `git config --global`, carries over). {network} \
                 Background processes are killed when the command ends. Each call is a new shell: \
                 `cd`, `export` and shell variables do not carry over to the next call (use `cwd`, \
                 or chain commands with `&&`). Default timeout {} ms, at most {} ms. \
                 Each of stdout and stderr is capped at {} characters (start and end kept).",
                shell(),
                s.bash_default_timeout_ms,
                s.bash_max_timeout_ms,
                s.output_cap_chars
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string", "minLength": 1,
                        "description": "The command line, run with `-c` by the shell."
                    },
                    "timeout_ms": {
                        "type": "integer", "minimum": 1, "maximum": s.bash_max_timeout_ms,
                        "default": s.bash_default_timeout_ms,
                        "description": "Kill the command (and everything it started) after this many milliseconds."
                    },
                    "cwd": {
                        "type": "string",
                        "description": "Directory to run in, relative to the workspace (default: the workspace itself)."
                    }
                },
                "required": ["command"],
                "additionalProperties": false
            }),
            output_schema: None,
            aliases: vec![],
            metadata: ToolMetadata {
                concurrency_safe: false,
                read_only: false,
                destructive: true,
                permission_class: PermissionClass::Bash,
                audit_operation: "execute".into(),
                search_hint: Some("run shell command".into()),
                ..ToolMetadata::default()
            },
            capability: ToolCapability {
                dry_run: false,
                reversible: false,
                // What a command may touch: the workspace's files and the
                // processes it starts, and the network when it is allowed.
                affected_resources: match s.network {
                    NetworkPolicy::Deny => vec!["file".into(), "process".into()],
                    NetworkPolicy::Allow => {
                        vec!["file".into(), "process".into(), "network".into()]
                    }
                },
                ..ToolCapability::default()
            },
        }
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        let command = args["command"]
            .as_str()
            .ok_or_else(|| invalid("command must be a string"))?;
        if command.trim().is_empty() {
            return Err(invalid("command must not be empty"));
        }
        if command.contains('\0') {
            return Err(invalid("command contains a NUL byte"));
        }
        let max = self.settings.bash_max_timeout_ms;
        let timeout_ms = match args.get("timeout_ms") {
            None | Some(Value::Null) => self.settings.bash_default_timeout_ms.min(max),
            Some(v) => match v.as_u64() {
                Some(ms) if (1..=max).contains(&ms) => ms,
                _ => {
                    return Err(invalid(format!(
                        "timeout_ms must be an integer from 1 to {max}"
                    )));
                }
            },
        };
        let cwd = match args.get("cwd") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(_) => return Err(invalid("cwd must be a string")),
        };
        let workspaces = self.workspaces.clone();
        let owner = ctx.owner.clone();
        let sub = ctx.workspace.clone();
        let workspace =
            tokio::task::spawn_blocking(move || workspaces.open(&owner, sub.as_deref()))
                .await
                .map_err(|e| ToolError::new(codes::EXECUTION_FAILED, e.to_string(), false))?
                .map_err(|e| {
                    if e.kind() == std::io::ErrorKind::InvalidInput {
                        // A name, or a sub-workspace that leads outside.
                        ToolError::new(codes::INVALID_ARGUMENTS, e.to_string(), false)
                    } else {
                        ToolError::new(
                            codes::EXECUTION_FAILED,
                            format!("the workspace cannot be opened: {e}"),
                            true,
                        )
                    }
                })?;
        let (cwd_path, cwd_shown) = resolve_cwd(&workspace, cwd)?;
        let shell = shell();
        let output = self
            .sandbox
            .run(CommandSpec {
                argv: vec![shell.into(), "-c".into(), "--".into(), command.into()],
                cwd: cwd_path,
                workspace: workspace.path.clone(),
                workspace_identity: Some(workspace.identity),
                env: Default::default(),
                timeout: Duration::from_millis(timeout_ms),
                cancel: ctx.cancel.clone(),
                output_cap: self.settings.output_cap_chars,
                progress: Some(running_report(ctx.progress.clone(), timeout_ms)),
            })
            .await
            .map_err(sandbox_error)?;

        if output.cancelled {
            return Err(ToolError::new(
                codes::CANCELLED,
                format!(
                    "the call was cancelled after {} ms, by its caller (a person or the \
                     application), and the command was killed: it may have done part of its work{}",
                    output.duration_ms,
                    printed_until_then(&output),
                ),
                false,
            )
            .with_hint(
                "check what the command changed before anything else; run it again only if \
                 the user asks for it",
            ));
        }
        if output.timed_out && !output.has_output() {
            return Err(ToolError::new(
                codes::TIMEOUT,
                format!("the command printed nothing and did not finish within {timeout_ms} ms; it was killed"),
                false,
            )
            .with_hint(format!(
                "raise timeout_ms (at most {max}), or split the work into shorter commands"
            )));
        }
        let partial = output.timed_out
            || output.stdout_truncated
            || output.stderr_truncated
            || output.output_incomplete;
        let mut result = json!({
            "command": command,
            "shell": shell,
            "cwd": cwd_shown,
            "exit_code": output.exit_code,
            "signal": output.signal,
            "stdout": output.stdout,
            "stderr": output.stderr,
            "timed_out": output.timed_out,
            "timeout_ms": timeout_ms,
            "duration_ms": output.duration_ms,
            "stdout_truncated": output.stdout_truncated,
            "stderr_truncated": output.stderr_truncated,
        });
        if output.timed_out {
            result["error"] = json!({
                "code": codes::TIMEOUT,
                "message": format!("the command did not finish within {timeout_ms} ms and was killed; the output is what it printed until then"),
                "hint": format!("raise timeout_ms (at most {max}), or split the work into shorter commands; check what it changed before running it again"),
            });
        }
        if output.output_incomplete {
            result["output_incomplete"] = json!(true);
        }
        if output.stdout_truncated || output.stderr_truncated {
            let which = match (output.stdout_truncated, output.stderr_truncated) {
                (true, true) => "stdout and stderr",
                (true, false) => "stdout",
                _ => "stderr",
            };
            result["note"] = json!(format!(
                "The middle of {which} was left out (the marker line says how many characters); \
                 the lines around it are whole. To see it, run the command again with its output \
                 sent to a file in the workspace (`… > out.txt 2>&1`) and read that with \
                 read_file (offset, limit) or grep, or narrow the output (`| grep …`, \
                 `| sed -n '100,200p'`, `| tail -n 50`)."
            ));
        }
        Ok(ToolSuccess {
            result,
            partial,
            undo: None,
            undoes: None,
        })
    }

    fn max_duration(&self) -> Option<Duration> {
        // The command's own timeout ends it first; a little slack to kill
        // its session and collect the output.
        Some(Duration::from_millis(self.settings.bash_max_timeout_ms) + Duration::from_secs(5))
    }

    fn ui_hints(&self, _args: &Value, result: &Value) -> Option<Value> {
        Some(hints::command_output(
            result["command"].as_str().unwrap_or_default(),
            Source::in_result(result, "/stdout"),
            Source::in_result(result, "/stderr"),
            result["exit_code"].as_i64(),
            result["timed_out"].as_bool().unwrap_or(false),
        ))
    }
}

/// A command's progress while it runs, every few seconds (a command that
/// ends sooner reports none): how much of its time it has used, and how
/// much it has printed, so a frontend shows a long command alive.
fn running_report(progress: crate::tools::ProgressSink, timeout_ms: u64) -> crate::sandbox::Ticks {
    crate::sandbox::Ticks(std::sync::Arc::new(move |ran: Duration, written: usize| {
        let ran_ms = ran.as_millis() as u64;
        progress.report(
            ran_ms as f64 / timeout_ms.max(1) as f64,
            format!(
                "running for {} s of at most {} s; {written} bytes of output so far",
                ran_ms / 1000,
                timeout_ms.div_ceil(1000)
            ),
        );
    }))
}

/// Characters of each stream a cancelled command's error quotes (its end).
const CANCELLED_TAIL_CHARS: usize = 2_000;

/// What a command stopped part-way had printed, for its error (nothing
/// when it printed nothing): the end of each stream, which says how far
/// it got.
fn printed_until_then(output: &crate::sandbox::CommandOutput) -> String {
    let mut text = String::new();
    for (name, stream, written) in [
        ("stdout", &output.stdout, output.stdout_chars),
        ("stderr", &output.stderr, output.stderr_chars),
    ] {
        if stream.is_empty() {
            continue;
        }
        let kept = stream.chars().count();
        let tail: String = stream
            .chars()
            .skip(kept.saturating_sub(CANCELLED_TAIL_CHARS))
            .collect();
        let shown = tail.chars().count();
        if shown < written {
            text.push_str(&format!(
                "\n{name} until then (its last {shown} of {written} characters):\n{tail}"
            ));
        } else {
            text.push_str(&format!("\n{name} until then:\n{tail}"));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::registry::check_definition;

    #[test]
    fn a_cancelled_commands_error_quotes_the_end_of_what_it_printed() {
        let long = "x".repeat(2_500) + "last line\n";
        let output = crate::sandbox::CommandOutput {
            stdout: long.clone(),
            stderr: String::new(),
            exit_code: None,
            signal: Some(9),
            timed_out: false,
            cancelled: true,
            duration_ms: 10,
            stdout_truncated: false,
            stderr_truncated: false,
            stdout_chars: long.chars().count(),
            stderr_chars: 0,
            output_incomplete: false,
        };
        let text = printed_until_then(&output);
        assert!(
            text.starts_with("\nstdout until then (its last 2000 of 2510 characters):\nxxx"),
            "{text}"
        );
        assert!(text.ends_with("last line\n"), "{text}");
        assert!(!text.contains("stderr"), "{text}");
        let silent = crate::sandbox::CommandOutput {
            stdout: String::new(),
            stdout_chars: 0,
            ..output
        };
        assert_eq!(printed_until_then(&silent), "");
    }

    fn tool(settings: SandboxSettings) -> (tempfile::TempDir, Bash) {
        let tmp = tempfile::tempdir().unwrap();
        let workspaces =
            Workspaces::new(&tmp.path().join("ws"), &tmp.path().join("history")).unwrap();
        let bash = Bash {
            sandbox: Arc::new(Sandbox::new(&settings)),
            workspaces: Arc::new(workspaces),
            settings,
        };
        (tmp, bash)
    }

    #[test]
    fn the_definition_registers_and_bounds_the_timeout_by_the_settings() {
        let (_tmp, bash) = tool(SandboxSettings {
            bash_max_timeout_ms: 1234,
            ..SandboxSettings::default()
        });
        let def = bash.definition();
        let validator = check_definition(&def).unwrap();
        assert_eq!(
            def.input_schema["properties"]["timeout_ms"]["maximum"],
            1234
        );
        assert!(validator.is_valid(&json!({"command": "ls", "timeout_ms": 1234})));
        assert!(!validator.is_valid(&json!({"command": "ls", "timeout_ms": 1235})));
        assert!(def.description.contains("1234"));
    }

    /// The description says the workspace is all a command can write only
    /// where the host confines it so; a host with neither Landlock nor
    /// namespaces (`best_effort`) asks the model to keep to it instead.
    #[test]
    fn the_description_says_only_what_the_host_confines() {
        let settings = SandboxSettings {
            landlock: crate::config::LandlockMode::BestEffort,
            namespaces: crate::config::NamespaceMode::BestEffort,
            ..SandboxSettings::default()
        };
        let bare = crate::sandbox::KernelSupport {
            landlock_abi: None,
            seccomp: true,
            namespaces: false,
            pids_cgroup: None,
        };
        let (_tmp, mut bash) = tool(settings.clone());
        bash.sandbox = Arc::new(Sandbox::with_kernel(
            &settings,
            crate::sandbox::SystemPaths::default(),
            bare,
        ));
        assert!(bash.sandbox.status().bash_enabled);
        let description = bash.definition().description;
        assert!(
            !description.contains("Only the workspace is writable"),
            "{description}"
        );
        assert!(
            description.contains("Write only inside the workspace"),
            "{description}"
        );
        let confined = Sandbox::new(&settings).status();
        if confined.landlock.enforced {
            let (_tmp, bash) = tool(settings);
            assert!(
                bash.definition()
                    .description
                    .contains("Only the workspace is writable")
            );
        }
    }

    #[test]
    fn bash_is_preferred_when_present() {
        let expected = if Path::new("/bin/bash").is_file() || Path::new("/usr/bin/bash").is_file() {
            "bash"
        } else {
            "sh"
        };
        assert!(shell().ends_with(expected));
    }

    #[test]
    fn cwd_escapes_are_caught_before_touching_the_disk() {
        let (_tmp, bash) = tool(SandboxSettings::default());
        let ws = bash.workspaces.open("alice", None).unwrap();
        for cwd in ["/", "/etc", "..", "a/../..", "./../x", "missing/../../.."] {
            let err = resolve_cwd(&ws, Some(cwd)).unwrap_err();
            assert_eq!(err.code, SECURITY_VIOLATION, "{cwd}");
        }
        for cwd in [None, Some(""), Some("."), Some("./")] {
            let (path, shown) = resolve_cwd(&ws, cwd).unwrap();
            assert_eq!(path, ws.path);
            assert_eq!(shown, ".");
        }
        assert_eq!(
            resolve_cwd(&ws, Some("missing")).unwrap_err().code,
            DIRECTORY_NOT_FOUND
        );
        // Absolute: inside the workspace it is the relative path it names;
        // beside it (another owner's workspace) or above it, an escape.
        std::fs::create_dir_all(ws.path.join("src")).unwrap();
        let inside = ws.path.join("src");
        let (path, shown) = resolve_cwd(&ws, inside.to_str()).unwrap();
        assert_eq!((path, shown.as_str()), (inside, "src"));
        let (path, shown) = resolve_cwd(&ws, ws.path.to_str()).unwrap();
        assert_eq!((path, shown.as_str()), (ws.path.clone(), "."));
        let beside = format!("{}_bob", ws.path.display());
        let above = format!("{}/../u_bob", ws.path.display());
        for cwd in [beside.as_str(), above.as_str()] {
            let err = resolve_cwd(&ws, Some(cwd)).unwrap_err();
            assert_eq!(err.code, SECURITY_VIOLATION, "{cwd}");
        }
    }
}
