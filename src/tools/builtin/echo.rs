use async_trait::async_trait;
use serde_json::{Value, json};

use crate::protocol::ui_schema::hints;
use crate::tools::{
    PermissionClass, Tool, ToolCapability, ToolContext, ToolDefinition, ToolError, ToolMetadata,
    ToolSuccess,
};

/// Returns its arguments unchanged: read-only, concurrency-safe, and the
/// cheapest way to exercise the whole pipeline.
pub struct Echo;

#[async_trait]
impl Tool for Echo {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "echo".into(),
            description: "Return the arguments unchanged. Useful to test the tool pipeline.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "Text to echo back."}
                },
                "required": ["text"]
            }),
            output_schema: None,
            aliases: vec![],
            metadata: ToolMetadata {
                concurrency_safe: true,
                read_only: true,
                destructive: false,
                permission_class: PermissionClass::Readonly,
                audit_operation: "read".into(),
                search_hint: Some("echo test".into()),
                ..ToolMetadata::default()
            },
            capability: ToolCapability::default(),
        }
    }

    async fn execute(&self, args: Value, _ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        Ok(ToolSuccess::complete(args))
    }

    fn ui_hints(&self, _args: &Value, result: &Value) -> Option<Value> {
        match result {
            Value::Object(map) if map.len() == 1 && map.contains_key("text") => Some(hints::text(
                Some("echo"),
                map["text"].as_str().unwrap_or_default(),
            )),
            Value::Object(_) => Some(hints::key_value(Some("echo"), result)),
            _ => None,
        }
    }
}
