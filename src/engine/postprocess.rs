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
        Ok(success) => {
            let mut result = success.result.clone();
            replace_nul(&mut result);
            ToolAgentOutput {
                tool_name: tool.definition.name.clone(),
                tool_call_id: call_id.to_string(),
                tool_call_args: arguments.clone(),
                status: if success.partial {
                    ToolStatus::Partial
                } else {
                    ToolStatus::Success
                },
                error: None,
                ui_hints: if result.get("dry_run") == Some(&Value::Bool(true)) {
                    Some(dry_run_hints(&result))
                } else {
                    tool.tool.ui_hints(arguments, &result)
                },
                result,
            }
        }
        Err(error) => failure_output(&tool.definition.name, call_id, arguments, error.clone()),
    }
}

/// What a tool produced may hold U+0000 (a command's output, say), which
/// Postgres cannot store in text or jsonb. On every backend it becomes
/// U+FFFD, as in a lossy UTF-8 decode, so the result is stored and
/// replayed like any other. (Requests cannot carry U+0000 at all.)
pub fn replace_nul(value: &mut Value) {
    match value {
        Value::String(s) => replace_nul_in(s),
        Value::Array(items) => items.iter_mut().for_each(replace_nul),
        Value::Object(map) => {
            if map.keys().any(|k| k.contains('\0')) {
                *map = std::mem::take(map)
                    .into_iter()
                    .map(|(mut k, v)| {
                        replace_nul_in(&mut k);
                        (k, v)
                    })
                    .collect();
            }
            map.values_mut().for_each(replace_nul);
        }
        _ => {}
    }
}

fn replace_nul_in(text: &mut String) {
    if text.contains('\0') {
        *text = text.replace('\0', "\u{FFFD}");
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
    mut error: ToolError,
) -> ToolAgentOutput {
    std::iter::once(&mut error.message)
        .chain(error.hint.as_mut())
        .for_each(replace_nul_in);
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
