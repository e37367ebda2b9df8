//! `/v1/tools` and `/v1/system-prompt`: the registry, in each vendor's shape.

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::error::{ApiError, ApiQuery};
use super::{AppState, AuthUser};
use crate::tools::listing::{self, ListingFormat, PromptFormat};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/tools", get(list_tools))
        .route("/tools/{name}", get(get_tool))
        .route("/system-prompt", get(system_prompt))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListingQuery {
    /// `native` (default), `openai`, `anthropic` or `mcp`.
    #[param(inline)]
    pub format: Option<ListingFormat>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ToolList {
    pub format: String,
    /// The tools in the requested shape. `native`: each a `ToolDefinition`
    /// (its `description` as models see it) plus `safety_level`: 2 when the
    /// tool can preview (dry-run), 1 when reversible, 0 when neither —
    /// whether it is destructive is `metadata.destructive`. `openai`,
    /// `anthropic`, `mcp`: that vendor's tool shape.
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<Value>,
}

fn format_name(f: ListingFormat) -> &'static str {
    match f {
        ListingFormat::Native => "native",
        ListingFormat::Openai => "openai",
        ListingFormat::Anthropic => "anthropic",
        ListingFormat::Mcp => "mcp",
    }
}

/// List every registered tool.
#[utoipa::path(get, path = "/v1/tools", tag = "tools", params(ListingQuery),
    responses((status = 200, body = ToolList),
        (status = 400, description = "Unknown format", content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn list_tools(
    State(state): State<AppState>,
    _user: AuthUser,
    ApiQuery(q): ApiQuery<ListingQuery>,
) -> Result<axum::Json<ToolList>, ApiError> {
    let format = q.format.unwrap_or(ListingFormat::Native);
    let tools = state
        .engine
        .registry()
        .list()
        .iter()
        .map(|t| listing::render(&t.definition, format))
        .collect();
    Ok(axum::Json(ToolList {
        format: format_name(format).into(),
        tools,
    }))
}

/// One tool, by name or alias.
#[utoipa::path(get, path = "/v1/tools/{name}", tag = "tools",
    params(("name" = String, Path,), ListingQuery),
    responses((status = 200, body = Object),
        (status = 404, description = "No such tool", content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn get_tool(
    State(state): State<AppState>,
    _user: AuthUser,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<ListingQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let tool = state
        .engine
        .registry()
        .resolve(&name)
        .ok_or_else(|| ApiError::NotFound(format!("no tool named {name:?}")))?;
    Ok(axum::Json(listing::render(
        &tool.definition,
        q.format.unwrap_or(ListingFormat::Native),
    )))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PromptQuery {
    /// `xml` (default) or `json`.
    #[param(inline)]
    pub format: Option<PromptFormat>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SystemPrompt {
    pub format: String,
    pub tool_count: usize,
    /// Text to put into a system prompt.
    pub prompt: String,
}

/// The tools rendered for a system prompt.
#[utoipa::path(get, path = "/v1/system-prompt", tag = "tools", params(PromptQuery),
    responses((status = 200, body = SystemPrompt),
        (status = 400, description = "Unknown format", content_type = "application/problem+json")),
    security(("bearer" = [])))]
pub async fn system_prompt(
    State(state): State<AppState>,
    _user: AuthUser,
    ApiQuery(q): ApiQuery<PromptQuery>,
) -> Result<axum::Json<SystemPrompt>, ApiError> {
    let format = q.format.unwrap_or(PromptFormat::Xml);
    let defs: Vec<_> = state
        .engine
        .registry()
        .list()
        .iter()
        .map(|t| t.definition.clone())
        .collect();
    Ok(axum::Json(SystemPrompt {
        format: match format {
            PromptFormat::Xml => "xml".into(),
            PromptFormat::Json => "json".into(),
        },
        tool_count: defs.len(),
        prompt: listing::system_prompt(&defs, format),
    }))
}
