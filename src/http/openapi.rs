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
    modifiers(&Security, &UiSchemaDoc),
    tags(
        (name = "tool calls", description = "Execute model tool calls"),
        (name = "messages", description = "Record the rest of the conversation"),
        (name = "history", description = "Replay and rebuild context"),
        (name = "events", description = "AG-UI event stream (SSE)"),
        (name = "ag-ui", description = "AG-UI agent endpoint"),
        (name = "tools", description = "The tool registry"),
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
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("JWT").build()),
        );
    }
}

/// Publishes the ui_schema v1 JSON Schema as the `UiSchema` component.
struct UiSchemaDoc;

impl Modify for UiSchemaDoc {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let schema = crate::protocol::ui_schema::json_schema().clone();
        match serde_json::from_value::<utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>>(schema) {
            Ok(s) => {
                openapi
                    .components
                    .get_or_insert_with(Default::default)
                    .schemas
                    .insert("UiSchema".into(), s);
            }
            Err(e) => tracing::error!(error = %e, "ui_schema JSON Schema does not fit the OpenAPI model"),
        }
    }
}

/// The document as served and as checked in.
pub fn document_json() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes")
}

pub fn routes() -> Router<AppState> {
    Router::new().merge(SwaggerUi::new("/docs").url("/openapi.json", ApiDoc::openapi()))
}
