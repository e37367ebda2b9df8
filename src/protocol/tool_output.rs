//! `ToolAgentOutput`: the canonical record of one tool call's outcome, and the
//! text projection the model receives.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Success,
    Failure,
    Partial,
}

impl ToolStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Success => "success",
            ToolStatus::Failure => "failure",
            ToolStatus::Partial => "partial",
        }
    }
}

/// A structured, correctable error: enough for a model to fix its next call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolError {
    /// Stable machine code, e.g. `INVALID_ARGUMENTS`, `TIMEOUT`, `INTERRUPTED`.
    pub code: String,
    pub message: String,
    /// Whether repeating the same call unchanged may succeed.
    pub retryable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The tool's input schema, when the arguments were at fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// Per-field problems (JSON path + message) for invalid arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<FieldError>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FieldError {
    /// JSON Pointer into the arguments (`""` is the whole object).
    pub path: String,
    pub message: String,
}

impl ToolError {
    pub fn new(code: &str, message: impl Into<String>, retryable: bool) -> Self {
        ToolError {
            code: code.to_string(),
            message: message.into(),
            retryable,
            hint: None,
            module: None,
            method: None,
            input_schema: None,
            errors: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// Error codes produced by the pipeline itself (tools add their own).
pub mod codes {
    pub const TOOL_NOT_FOUND: &str = "TOOL_NOT_FOUND";
    pub const INVALID_ARGUMENTS: &str = "INVALID_ARGUMENTS";
    pub const TIMEOUT: &str = "TIMEOUT";
    pub const CANCELLED: &str = "CANCELLED";
    pub const INTERRUPTED: &str = "INTERRUPTED";
    /// The tool ran; the database refused to store its result.
    pub const RESULT_NOT_STORED: &str = "RESULT_NOT_STORED";
    pub const EXECUTION_FAILED: &str = "EXECUTION_FAILED";
    pub const DRY_RUN_UNSUPPORTED: &str = "DRY_RUN_UNSUPPORTED";
    pub const PERMISSION_DENIED: &str = "PERMISSION_DENIED";
    pub const APPROVAL_DENIED: &str = "APPROVAL_DENIED";
    pub const APPROVAL_EXPIRED: &str = "APPROVAL_EXPIRED";
    /// Approved, but what its preview showed changed before it ran (its
    /// file was changed meanwhile): it did not run.
    pub const APPROVAL_STALE: &str = "APPROVAL_STALE";
}

/// Reversal record of a reversible tool's execution (seed 000 `UndoInfo`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UndoInfo {
    pub tool_name: String,
    pub input: Value,
    pub description: String,
    #[serde(default)]
    pub irreversible: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual_guide: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolAgentOutput {
    pub tool_name: String,
    pub tool_call_id: String,
    pub tool_call_args: Value,
    pub status: ToolStatus,
    /// Source of truth: JSON-native, machine-oriented. `null` on failure.
    pub result: Value,
    pub error: Option<ToolError>,
    /// Internal: compiled to `ui_schema` for the wire, never sent as-is to a
    /// frontend. Absent when the action has no stable template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ui_hints: Option<Value>,
}

impl ToolAgentOutput {
    /// The text the model receives: the complete JSON text of `result`, or of
    /// the structured error on failure. Never summarised.
    pub fn text_projection(&self) -> String {
        match (&self.status, &self.error) {
            (ToolStatus::Failure, Some(err)) => {
                serde_json::json!({"status": "failure", "error": err}).to_string()
            }
            _ => self.result.to_string(),
        }
    }
}

/// A [`ToolAgentOutput`] as frontends and history clients see it: without
/// the internal `ui_hints`. It serializes the output's own fields where they
/// are, so a large result is written out once, not first copied into a
/// `Value` (its top-level keys sorted, as a `Value` would have them; an
/// error's in the order the stored output has them). Read back, it is the
/// output with no hints.
#[derive(Debug, Clone, PartialEq)]
pub struct PublicOutput(pub ToolAgentOutput);

impl Serialize for PublicOutput {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// Every field of `ToolAgentOutput` but `ui_hints`, sorted by name.
        #[derive(Serialize)]
        struct Public<'a> {
            error: &'a Option<ToolError>,
            result: &'a Value,
            status: ToolStatus,
            tool_call_args: &'a Value,
            tool_call_id: &'a str,
            tool_name: &'a str,
        }
        let ToolAgentOutput {
            tool_name,
            tool_call_id,
            tool_call_args,
            status,
            result,
            error,
            ui_hints: _,
        } = &self.0;
        Public {
            error,
            result,
            status: *status,
            tool_call_args,
            tool_call_id,
            tool_name,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PublicOutput {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut output = ToolAgentOutput::deserialize(deserializer)?;
        output.ui_hints = None;
        Ok(PublicOutput(output))
    }
}

/// What goes back into the model's context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolResponse {
    pub content: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn outputs() -> Vec<ToolAgentOutput> {
        let mut failed = ToolError::new(codes::INVALID_ARGUMENTS, "bad \"path\"", false)
            .with_hint("pass a relative path");
        failed.errors = Some(vec![FieldError {
            path: "/path".into(),
            message: "required".into(),
        }]);
        vec![
            ToolAgentOutput {
                tool_name: "read_file".into(),
                tool_call_id: "call_1".into(),
                tool_call_args: json!({"path": "a.txt", "limit": 2}),
                status: ToolStatus::Partial,
                result: json!({"content": "1\\tx\\n", "lines": [1, 2], "z": null, "a": -1.5}),
                error: None,
                ui_hints: Some(json!({"view": "code_block", "code": {"result": "/content"}})),
            },
            ToolAgentOutput {
                tool_name: "echo".into(),
                tool_call_id: "call_2".into(),
                tool_call_args: json!({}),
                status: ToolStatus::Failure,
                result: Value::Null,
                error: Some(failed),
                ui_hints: None,
            },
        ]
    }

    #[test]
    fn the_public_output_is_the_output_without_its_hints() {
        for output in outputs() {
            // The output as a Value, hints removed.
            let mut copied = serde_json::to_value(&output).unwrap();
            copied.as_object_mut().unwrap().remove("ui_hints");
            let public = PublicOutput(output.clone());
            let written = serde_json::to_string(&public).unwrap();
            assert_eq!(
                serde_json::from_str::<Value>(&written).unwrap(),
                copied,
                "{written}"
            );
            assert!(!written.contains("ui_hints"));
            // Top-level keys sorted, as before (none of them is also a key
            // inside these outputs' values).
            let at: Vec<usize> = [
                "error",
                "result",
                "status",
                "tool_call_args",
                "tool_call_id",
                "tool_name",
            ]
            .iter()
            .map(|key| written.find(&format!("\"{key}\":")).unwrap())
            .collect();
            assert!(at.is_sorted(), "{written}");
            // Read back: the same output, with no hints.
            let back: PublicOutput = serde_json::from_value(copied).unwrap();
            assert_eq!(
                back.0,
                ToolAgentOutput {
                    ui_hints: None,
                    ..output
                }
            );
        }
    }
}
