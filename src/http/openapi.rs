//! The OpenAPI document (also checked in at `openapi/openapi.json`) and the
//! offline Swagger UI at `/docs`.

use axum::Router;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_swagger_ui::SwaggerUi;

use super::AppState;

#[derive(OpenApi)]
#[openapi(
    info(title = "toolgate", description = "Tool execution for agent backends: gated, stored, streamed as AG-UI events."),
    paths(
        super::threads::post_tool_call,
        super::threads::cancel_tool_call,
        super::threads::undo_tool_call,
        super::threads::rollback_run,
        super::approvals::list_approvals,
        super::approvals::get_approval,
        super::approvals::decide,
        super::approvals::get_permissions,
        super::approvals::put_permissions,
        super::audit::get_audit,
        super::workspace::get_workspace,
        super::batches::post_batch,
        super::threads::post_message,
        super::threads::get_history,
        super::threads::get_context,
        super::events::get_events,
        super::runs::post_run,
        super::tools::list_tools,
        super::tools::get_tool,
        super::tools::system_prompt,
        super::health::healthz,
        super::health::readyz,
        super::health::metrics_text,
    ),
    components(schemas(
        crate::protocol::tool_output::ToolAgentOutput,
        crate::protocol::tool_output::ToolError,
        crate::protocol::tool_output::UndoInfo,
        crate::tools::ToolDefinition,
    )),
    modifiers(&Security),
    tags(
        (name = "tool calls", description = "Execute model tool calls"),
        (name = "messages", description = "Record the rest of the conversation"),
        (name = "history", description = "Replay and rebuild context"),
        (name = "events", description = "AG-UI event stream (SSE)"),
        (name = "ag-ui", description = "AG-UI agent endpoint"),
        (name = "tools", description = "The tool registry"),
        (name = "approvals", description = "Human checkpoint: calls waiting for a decision"),
        (name = "permissions", description = "Permission rules"),
        (name = "audit", description = "Append-only audit log"),
        (name = "workspace", description = "The caller's workspace and its confinement"),
        (name = "operations", description = "Health, readiness, metrics"),
    )
)]
pub struct ApiDoc;

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

/// The document as served and as checked in, with the ui_schema v1 JSON
/// Schema published as the `UiSchema` component (OpenAPI 3.1 schemas are
/// JSON Schema, so it goes in unchanged).
pub fn document() -> serde_json::Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the OpenAPI document serializes");
    let mut ui = crate::protocol::ui_schema::json_schema().clone();
    if let Some(obj) = ui.as_object_mut() {
        // `$schema`/`$id` belong to a standalone document, not a component.
        obj.remove("$schema");
        obj.remove("$id");
    }
    doc["components"]["schemas"]["UiSchema"] = ui;
    doc
}

pub fn document_json() -> String {
    serde_json::to_string_pretty(&document()).expect("the OpenAPI document serializes") + "\n"
}

pub fn routes() -> Router<AppState> {
    Router::new().merge(SwaggerUi::new("/docs").external_url_unchecked("/openapi.json", document()))
}
