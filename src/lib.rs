//! toolgate: a tool-execution microservice for agent backends. A chat
//! backend hands it the tool calls a model made; toolgate decides whether
//! each may run, runs it, stores the outcome as a message and streams it to
//! frontends as AG-UI events.

// A `ToolError` is deliberately rich (code, hint, schema, per-field errors) so
// a model can correct itself; it travels by value on cold paths only.
#![allow(clippy::result_large_err)]

pub mod auth;
pub mod config;
pub mod engine;
pub mod events;
pub mod http;
pub mod permissions;
pub mod protocol;
pub mod sandbox;
mod stall;
pub mod startup;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod workspace;

/// Create the service's own directory `path` (and its parents) if missing,
/// and make it reachable by the service's user alone (`0700`): the
/// database, the edit history and the workspaces beneath it are no one
/// else's to read, nor a file a command left in a workspace anyone else's
/// to run. A directory that already exists is tightened to `0700` too.
pub fn private_dir(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    let mode = std::fs::metadata(path)?.permissions().mode();
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7700))?;
    }
    Ok(())
}
