//! The registry rendered for the outside world: native, OpenAI, Anthropic and
//! MCP tool listings, and the system-prompt rendering (XML or JSON).

use serde_json::{Value, json};

use super::ToolDefinition;

/// The description a model sees, in every listing format alike: the tool's
/// own text plus the safety contract it must know before calling.
pub fn model_description(def: &ToolDefinition) -> String {
    let mut text = def.description.trim_end().to_string();
    let min = def.capability.min_confidence;
    if min > 0 {
        text.push_str(&format!(
            "\n[Safety] requires {} (integer 0-100) in input, min={min}",
            crate::engine::gates::CONFIDENCE_FIELD
        ));
    }
    if def.metadata.destructive && def.capability.safety_level() == 0 {
        text.push_str("\n[Warning] destructive and neither previewable (dry-run) nor reversible: its effects cannot be undone");
    }
    text
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ListingFormat {
    Native,
    Openai,
    Anthropic,
    Mcp,
}

pub fn render(def: &ToolDefinition, format: ListingFormat) -> Value {
    let description = model_description(def);
    match format {
        ListingFormat::Native => {
            let mut v = serde_json::to_value(def).expect("definitions serialize");
            v["description"] = Value::String(description);
            v["safety_level"] = json!(def.capability.safety_level());
            v
        }
        ListingFormat::Openai => json!({
            "type": "function",
            "function": {
                "name": def.name,
                "description": description,
                "parameters": def.input_schema,
            }
        }),
        ListingFormat::Anthropic => json!({
            "name": def.name,
            "description": description,
            "input_schema": def.input_schema,
        }),
        ListingFormat::Mcp => {
            // The registry admits only object schemas with a valid `required`.
            let input =
                mcp_object_schema(&def.input_schema).unwrap_or_else(|| def.input_schema.clone());
            let mut v = json!({
                "name": def.name,
                "description": description,
                "inputSchema": input,
                "annotations": mcp_hints(&def.metadata, &def.capability),
            });
            // An output schema MCP cannot carry (structuredContent is an
            // object) is left out: in the listing it would make MCP clients
            // reject the whole tools/list answer, not just this tool.
            if let Some(out) = def.output_schema.as_ref().and_then(mcp_object_schema) {
                v["outputSchema"] = out;
            }
            v
        }
    }
}

/// A schema in the shape MCP requires of a tool's `inputSchema` and
/// `outputSchema` (and the official TypeScript SDK enforces, rejecting the
/// whole tools/list result otherwise): `"type": "object"` at the root, every
/// `properties` entry an object, `required` a list of names. Boolean
/// subschemas in `properties`, valid JSON Schema, become their object
/// equivalents (`true` → `{}`, `false` → `{"not": {}}`); `None` when the
/// schema cannot take that shape.
fn mcp_object_schema(schema: &Value) -> Option<Value> {
    let mut schema = schema.clone();
    let root = schema.as_object_mut()?;
    if root.get("type").and_then(Value::as_str) != Some("object") {
        return None;
    }
    if let Some(properties) = root.get_mut("properties") {
        for sub in properties.as_object_mut()?.values_mut() {
            match sub {
                Value::Bool(true) => *sub = json!({}),
                Value::Bool(false) => *sub = json!({"not": {}}),
                Value::Object(_) => {}
                _ => return None,
            }
        }
    }
    if let Some(required) = root.get("required")
        && !required.as_array()?.iter().all(Value::is_string)
    {
        return None;
    }
    Some(schema)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PromptFormat {
    Xml,
    Json,
}

/// `s` escaped for an XML attribute value.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => push_text_char(&mut out, c),
        }
    }
    out
}

/// `s` escaped for XML element text: only `&`, `<` and `>` need it, so the
/// JSON schemas a model reads keep their quotes as they are.
fn xml_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        push_text_char(&mut out, c);
    }
    out
}

fn push_text_char(out: &mut String, c: char) {
    match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        c => out.push(c),
    }
}

const PREAMBLE: &str = "You can call the following tools. Call a tool with its name and a JSON object of arguments that matches its parameters schema.";

/// A system-prompt section describing every tool (seed 002's generator).
pub fn system_prompt(defs: &[ToolDefinition], format: PromptFormat) -> String {
    match format {
        PromptFormat::Xml => {
            let mut out = format!("{PREAMBLE}\n\n<tools>\n");
            for def in defs {
                out.push_str(&format!(
                    "  <tool name=\"{}\">\n    <description>{}</description>\n    <parameters>{}</parameters>\n  </tool>\n",
                    xml_escape(&def.name),
                    xml_text(&model_description(def)),
                    xml_text(&def.input_schema.to_string()),
                ));
            }
            out.push_str("</tools>\n");
            out
        }
        PromptFormat::Json => {
            let tools: Vec<Value> = defs
                .iter()
                .map(|d| json!({"name": d.name, "description": model_description(d), "parameters": d.input_schema}))
                .collect();
            let body = serde_json::to_string_pretty(&json!({"tools": tools})).expect("json");
            format!("{PREAMBLE}\n\n{body}\n")
        }
    }
}

/// MCP's hints from a tool's metadata and capability. MCP reads
/// `destructiveHint: false` as "only additive updates", which clients may
/// take as safe to approve: every tool that writes may overwrite or remove
/// (`write_file` replaces a file), so only a read-only tool says false. A
/// tool that claims to be read-only and destructive is destructive, as for
/// permissions. A tool reaches an open world when the network is among
/// what it affects (`bash` with `sandbox.network = "allow"`).
fn mcp_hints(metadata: &super::ToolMetadata, capability: &super::ToolCapability) -> Value {
    let read_only = metadata.read_only && !metadata.destructive;
    json!({
        "readOnlyHint": read_only,
        "destructiveHint": !read_only,
        "idempotentHint": read_only,
        "openWorldHint": capability.affected_resources.iter().any(|r| r == "network"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{ToolCapability, ToolMetadata};

    fn def() -> ToolDefinition {
        ToolDefinition {
            name: "echo".into(),
            description: "Echo <input> & more".into(),
            input_schema: json!({"type": "object", "properties": {"text": {"type": "string"}}}),
            output_schema: None,
            aliases: vec![],
            metadata: ToolMetadata {
                read_only: true,
                ..ToolMetadata::default()
            },
            capability: ToolCapability::default(),
        }
    }

    #[test]
    fn descriptions_carry_the_safety_contract() {
        let mut d = def();
        assert_eq!(model_description(&d), "Echo <input> & more");
        d.capability.min_confidence = 70;
        d.metadata.destructive = true;
        let text = model_description(&d);
        assert!(text.contains("[Safety] requires _confidence (integer 0-100) in input, min=70"));
        assert!(text.contains("[Warning] destructive"));
        for format in [
            ListingFormat::Openai,
            ListingFormat::Anthropic,
            ListingFormat::Mcp,
        ] {
            assert!(render(&d, format).to_string().contains("min=70"));
        }
        d.capability.reversible = true;
        assert!(!model_description(&d).contains("[Warning]"));
    }

    #[test]
    fn vendor_shapes() {
        let d = def();
        assert_eq!(
            render(&d, ListingFormat::Openai)["function"]["parameters"],
            d.input_schema
        );
        assert_eq!(
            render(&d, ListingFormat::Anthropic)["input_schema"],
            d.input_schema
        );
        let mcp = render(&d, ListingFormat::Mcp);
        assert_eq!(mcp["inputSchema"], d.input_schema);
        assert_eq!(mcp["annotations"]["readOnlyHint"], true);
        assert_eq!(render(&d, ListingFormat::Native)["safety_level"], 0);
    }

    #[test]
    fn mcp_schemas_take_the_shape_mcp_requires() {
        let mut d = def();
        d.input_schema = json!({
            "type": "object",
            "properties": {"any": true, "none": false, "text": {"type": "string"}},
            "required": ["any"]
        });
        d.output_schema = Some(json!({"type": "object", "properties": {"n": true}}));
        let mcp = render(&d, ListingFormat::Mcp);
        assert_eq!(
            mcp["inputSchema"],
            json!({
                "type": "object",
                "properties": {"any": {}, "none": {"not": {}}, "text": {"type": "string"}},
                "required": ["any"]
            })
        );
        assert_eq!(
            mcp["outputSchema"],
            json!({"type": "object", "properties": {"n": {}}})
        );
        // The other formats carry the schema as registered.
        assert_eq!(
            render(&d, ListingFormat::Openai)["function"]["parameters"],
            d.input_schema
        );
        for out in [
            json!({"type": "array", "items": {"type": "string"}}),
            json!({"properties": {"n": {"type": "number"}}}),
            json!({"type": ["object", "null"]}),
            json!({"type": "object", "properties": {"n": 1}}),
            json!({"type": "object", "required": "n"}),
            json!(true),
        ] {
            d.output_schema = Some(out.clone());
            let mcp = render(&d, ListingFormat::Mcp);
            assert!(mcp.get("outputSchema").is_none(), "{out} → {mcp}");
        }
    }

    #[test]
    fn xml_prompt_escapes_and_json_prompt_parses() {
        let xml = system_prompt(&[def()], PromptFormat::Xml);
        assert!(xml.contains("<tool name=\"echo\">"));
        assert!(xml.contains("Echo &lt;input&gt; &amp; more"));
        // The schema reads as JSON: quotes are not entities in text.
        assert!(
            xml.contains("<parameters>{\"properties\":{\"text\""),
            "{xml}"
        );
        assert!(!xml.contains("&quot;"), "{xml}");
        let json_prompt = system_prompt(&[def()], PromptFormat::Json);
        let start = json_prompt.find('{').unwrap();
        let parsed: Value = serde_json::from_str(&json_prompt[start..]).unwrap();
        assert_eq!(parsed["tools"][0]["name"], "echo");
    }
}
