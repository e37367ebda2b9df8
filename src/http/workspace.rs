//! `GET /v1/workspace`: where the caller's tools work, under which limits
//! and which confinement.

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ApiQuery};
use super::{AppState, AuthUser};
use crate::protocol::calls::valid_workspace_name;

pub fn routes() -> Router<AppState> {
    Router::new().route("/workspace", get(get_workspace))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WorkspaceQuery {
    /// A sub-workspace name (as calls name it in `workspace`): 1–64
    /// characters from A-Z a-z 0-9 _ - . and not `.` or `..`.
    #[param(value_type = Option<crate::protocol::calls::WorkspaceName>)]
    pub workspace: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WorkspaceLimits {
    pub bash_default_timeout_ms: u64,
    pub bash_max_timeout_ms: u64,
    pub output_cap_chars: usize,
    pub cpu_secs: u64,
    pub file_size_bytes: u64,
    pub max_processes: u64,
    pub max_open_files: u64,
    /// `lf` or `crlf`: what write_file normalises to.
    pub line_endings: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WorkspaceView {
    /// Absolute path of the workspace on the server.
    pub root: String,
    pub workspace: Option<String>,
    pub limits: WorkspaceLimits,
    /// Which confinement is active for commands.
    pub sandbox: crate::sandbox::SandboxStatus,
}

/// Describe the caller's workspace (creates nothing).
///
/// The main workspace is described even before a call creates it (`root`
/// is where it will be); a sub-workspace that does not exist is a `404`.
#[utoipa::path(get, path = "/v1/workspace", tag = "workspace", params(WorkspaceQuery),
    responses((status = 200, body = WorkspaceView),
        (status = 400, description = "Bad sub-workspace name", content_type = "application/problem+json"),
        (status = 404, description = "No such sub-workspace (a call that names it creates it)", content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn get_workspace(
    State(state): State<AppState>,
    user: AuthUser,
    ApiQuery(q): ApiQuery<WorkspaceQuery>,
) -> Result<axum::Json<WorkspaceView>, ApiError> {
    if let Some(w) = &q.workspace
        && !valid_workspace_name(w)
    {
        return Err(ApiError::invalid_param(
            "workspace",
            "must be 1-64 characters from A-Z a-z 0-9 _ - . and not `.` or `..`",
        ));
    }
    let workspaces = &state.workspaces;
    let root = match (
        workspaces.open_existing(&user.owner, q.workspace.as_deref()),
        &q.workspace,
    ) {
        (Ok(opened), _) => opened.path,
        // The main workspace exists for every owner, made by the first call.
        (Err(e), None) if e.kind() == std::io::ErrorKind::NotFound => workspaces
            .path(&user.owner, None)
            .map_err(|e| ApiError::Internal(anyhow::anyhow!("the workspace path: {e}")))?,
        (Err(e), Some(sub)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ApiError::NotFound(format!(
                "sub-workspace `{sub}` does not exist; a tool call that names it in `workspace` creates it"
            )));
        }
        (Err(e), Some(_)) if e.kind() == std::io::ErrorKind::InvalidInput => {
            return Err(ApiError::NotFound(e.to_string()));
        }
        (Err(e), _) => {
            return Err(ApiError::Internal(anyhow::anyhow!(
                "opening the workspace: {e}"
            )));
        }
    };
    let s = &state.settings.sandbox;
    Ok(axum::Json(WorkspaceView {
        root: root.display().to_string(),
        workspace: q.workspace,
        limits: WorkspaceLimits {
            bash_default_timeout_ms: s.bash_default_timeout_ms,
            bash_max_timeout_ms: s.bash_max_timeout_ms,
            output_cap_chars: s.output_cap_chars,
            cpu_secs: s.cpu_secs,
            file_size_bytes: s.file_size_bytes,
            max_processes: s.max_processes,
            max_open_files: s.max_open_files,
            line_endings: match state.settings.workspace.line_endings {
                crate::config::LineEndings::Lf => "lf".into(),
                crate::config::LineEndings::Crlf => "crlf".into(),
            },
        },
        sandbox: state.sandbox.status(),
    }))
}
