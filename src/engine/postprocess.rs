//! The post-processor: a tool's outcome becomes a `ToolAgentOutput` with its
//! ui_hints, and hints compile to the wire `ui_schema`.

use serde_json::Value;

use crate::protocol::tool_output::{ToolAgentOutput, ToolError, ToolStatus};
use crate::protocol::ui_schema::{self, hints};
use crate::tools::ToolSuccess;
use crate::tools::registry::RegisteredTool;

pub fn build_output(
    tool: &RegisteredTool,
    call_id: &str,
    arguments: &Value,
    executed: &Result<ToolSuccess, ToolError>,
) -> ToolAgentOutput {
    match executed {
        Ok(success) => ToolAgentOutput {
            tool_name: tool.definition.name.clone(),
            tool_call_id: call_id.to_string(),
            tool_call_args: arguments.clone(),
            status: if success.partial {
                ToolStatus::Partial
            } else {
                ToolStatus::Success
            },
            result: success.result.clone(),
            error: None,
            ui_hints: if success.result.get("dry_run") == Some(&Value::Bool(true)) {
                Some(dry_run_hints(&success.result))
            } else {
                tool.tool.ui_hints(arguments, &success.result)
            },
        },
        Err(error) => failure_output(&tool.definition.name, call_id, arguments, error.clone()),
    }
}

/// A dry run shows what would be affected and the preview itself.
fn dry_run_hints(result: &Value) -> Value {
    let would_affect = result["would_affect"].as_str().unwrap_or_default();
    let preview = result["preview"].as_str().unwrap_or_default();
    hints::code_block(
        Some(&format!("Dry run: would affect {would_affect}")),
        preview,
        Some("diff"),
        None,
        None,
    )
}

pub fn failure_output(
    tool_name: &str,
    call_id: &str,
    arguments: &Value,
    error: ToolError,
) -> ToolAgentOutput {
    let ui_hints = Some(hints::error(
        &error.code,
        &error.message,
        error.hint.as_deref(),
    ));
    ToolAgentOutput {
        tool_name: tool_name.to_string(),
        tool_call_id: call_id.to_string(),
        tool_call_args: arguments.clone(),
        status: ToolStatus::Failure,
        result: Value::Null,
        error: Some(error),
        ui_hints,
    }
}

/// Compile the stored hints. The same hints always give the same schema, so
/// the live stream and `/history` agree byte for byte. Hints that do not
/// compile are a defect of ours: logged, and the output goes out without UI
/// rather than not at all.
pub fn compile_ui(output: &ToolAgentOutput) -> Option<Value> {
    let hints = output.ui_hints.as_ref()?;
    match ui_schema::compile(hints) {
        Ok(ui) => Some(ui),
        Err(e) => {
            tracing::error!(tool = %output.tool_name, error = %e, "ui_hints did not compile");
            None
        }
    }
}
