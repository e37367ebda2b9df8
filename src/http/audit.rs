//! `GET /v1/audit`: the caller's append-only audit log.

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ApiQuery};
use super::{AppState, AuthUser};
use crate::store::{AuditEntry, AuditFilter};

pub fn routes() -> Router<AppState> {
    Router::new().route("/audit", get(get_audit))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only entries of this thread.
    pub thread_id: Option<String>,
    /// Only entries of this tool (its own name, not an alias).
    pub tool_name: Option<String>,
    /// Only entries of this call.
    pub tool_call_id: Option<String>,
    #[param(schema_with = action_schema)]
    pub action: Option<String>,
    /// Only entries at or after this time (Unix ms, inclusive).
    pub since_ms: Option<i64>,
    /// Only entries before this time (Unix ms, exclusive).
    pub until_ms: Option<i64>,
    /// Cursor from the previous page's `next_cursor` (or `next_before`):
    /// entries older than this entry id.
    #[param(pattern = "^0*[1-9][0-9]{0,17}$")]
    pub before: Option<String>,
    /// 1–500, default 100.
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// The `action` filter: one of the actions the audit log records.
fn action_schema() -> utoipa::openapi::schema::Object {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .description(Some("Only entries of this action."))
        .enum_values(Some(crate::engine::audit::ACTIONS))
        .build()
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    /// Newest first.
    pub entries: Vec<AuditEntry>,
    /// Pass as `before` to get the next (older) page; absent on the last.
    /// The same cursor as the other lists' `next_cursor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// `next_cursor` as a number, for clients written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(deprecated)]
    pub next_before: Option<i64>,
}

/// Every decision and execution of the caller's calls, newest first.
#[utoipa::path(get, path = "/v1/audit", tag = "audit", params(AuditQuery),
    responses((status = 200, body = AuditPage),
        (status = 400, description = "Bad filter", content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn get_audit(
    State(state): State<AppState>,
    user: AuthUser,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<axum::Json<AuditPage>, ApiError> {
    let limit = super::page_limit(q.limit, 100, 500)?;
    if let Some(action) = q.action.as_deref()
        && !crate::engine::audit::ACTIONS.contains(&action)
    {
        return Err(ApiError::invalid_param(
            "action",
            format!(
                "must be one of {}, got {action:?}",
                crate::engine::audit::ACTIONS.join(", ")
            ),
        ));
    }
    // Entry ids start at 1: a smaller one is no cursor this server gave.
    let before = super::positive_cursor(q.before.as_deref())?;
    // One more than a page: a full page with nothing after it is the last.
    let mut entries = state
        .store
        .audit(&AuditFilter {
            owner: user.owner,
            thread_id: q.thread_id,
            tool_name: q.tool_name,
            action: q.action,
            tool_call_id: q.tool_call_id,
            since_ms: q.since_ms,
            until_ms: q.until_ms,
            before_id: before,
            limit: limit + 1,
        })
        .await?;
    let more = entries.len() as i64 > limit;
    entries.truncate(limit as usize);
    let next_before = more.then(|| entries.last().map(|e| e.id)).flatten();
    Ok(axum::Json(AuditPage {
        entries,
        next_cursor: next_before.map(|id| id.to_string()),
        next_before,
    }))
}
