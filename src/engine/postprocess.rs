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
            make_storable(&mut result);
            ToolAgentOutput {
                tool_name: tool.definition.name.clone(),
                tool_call_id: call_id.to_string(),
                tool_call_args: storable_arguments(arguments),
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

/// The call's arguments as its output repeats them, made storable (see
/// [`make_storable`]).
fn storable_arguments(arguments: &Value) -> Value {
    let mut arguments = arguments.clone();
    make_storable(&mut arguments);
    arguments
}

/// What a tool produced may hold what Postgres's `jsonb` cannot keep, and
/// the output is stored there (a tool message's metadata), replayed from
/// there (`/history`, a resumed stream) and must read back exactly as it
/// was streamed. On every backend, U+0000 (a command's output, say;
/// Postgres cannot store it in text or jsonb) becomes U+FFFD, as in a
/// lossy UTF-8 decode, and a float is written as jsonb gives it back
/// ([`crate::protocol::json::storable_float`]: a negative zero as 0.0, a
/// whole number such as `1e16` as its integer). (Requests cannot carry
/// U+0000 at all.)
pub fn make_storable(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            *value = crate::protocol::json::storable_float(n.as_f64().unwrap_or(f64::NAN));
        }
        Value::String(s) => replace_nul_in(s),
        Value::Array(items) => items.iter_mut().for_each(make_storable),
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
            map.values_mut().for_each(make_storable);
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
    hints::code_block(
        Some(&format!("Dry run: would affect {would_affect}")),
        hints::Source::in_result(result, "/preview"),
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
        tool_call_args: storable_arguments(arguments),
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
    match ui_schema::compile_for(hints, &output.result) {
        Ok(ui) => Some(ui),
        Err(e) => {
            tracing::error!(tool = %output.tool_name, error = %e, "ui_hints did not compile");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn storable_values_have_no_nul_and_one_zero() {
        let mut value = json!({
            "a\u{0}b": ["x\u{0}", -0.0, 0.0, 0, -1.5, {"deep": [-0.0]}],
            "n": i64::MIN,
        });
        make_storable(&mut value);
        assert_eq!(
            serde_json::to_string(&value).unwrap(),
            "{\"a\u{FFFD}b\":[\"x\u{FFFD}\",0.0,0.0,0,-1.5,{\"deep\":[0.0]}],\
             \"n\":-9223372036854775808}"
        );
    }
}
