//! Interop with the official MCP TypeScript SDK, not our reading of the
//! spec: `GET /v1/tools?format=mcp` is checked by tests/agui/mcp_tools.mjs
//! with `@modelcontextprotocol/sdk`'s own zod schemas (`ListToolsResultSchema`,
//! `ToolSchema`) and by the SDK's stock `Client.listTools()`, pinned in
//! tests/agui/package.json. A key the SDK would silently drop is a warning,
//! and a warning fails the test like a rejection does.
//!
//! Needs Node.js 18+ and npm; `npm ci` runs in tests/agui when its
//! node_modules is missing or stale.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::node::{Output, node_ready, run_script};
use common::{Backend, TestApp};
use serde_json::{Value, json};
use toolgate::tools::{
    Tool, ToolCapability, ToolContext, ToolDefinition, ToolError, ToolMetadata, ToolSuccess,
};

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("array expected: {v}"))
        .iter()
        .map(|t| {
            t.as_str()
                .or_else(|| t["name"].as_str())
                .unwrap_or_else(|| panic!("a name: {t}"))
                .to_string()
        })
        .collect()
}

/// Runs tests/agui/mcp_tools.mjs and returns its report; a rejection by the
/// SDK, or a warning (a key it would drop, a name it frowns on), fails.
async fn sdk_report(app: &TestApp) -> (Value, Output) {
    let out = run_script(app, "mcp_tools.mjs", &[]).await;
    let report = out.report();
    assert!(
        out.status.success() && report["ok"] == true,
        "the MCP SDK rejected the listing\nfailures: {}\nwarnings: {}\n{}",
        report["failures"],
        report["warnings"],
        out.describe()
    );
    assert_eq!(report["failures"], json!([]));
    assert_eq!(
        report["warnings"],
        json!([]),
        "the SDK would drop or warn about nothing toolgate sends"
    );
    (report, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sdk_accepts_the_mcp_tool_listing() {
    node_ready().await;
    let app = TestApp::spawn(Backend::Sqlite).await;
    let (report, _) = sdk_report(&app).await;

    // Every registered tool is listed, once, in the native listing's order.
    let native = app.get_json("/v1/tools").await;
    let registered = names(&native["tools"]);
    assert!(!registered.is_empty());
    let listed = names(&report["names"]);
    assert_eq!(listed, registered, "the MCP listing holds every tool");
    assert_eq!(report["count"], registered.len());
    let mut registry: Vec<String> = app
        .registry
        .list()
        .iter()
        .map(|t| t.definition.name.clone())
        .collect();
    registry.sort();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(sorted, registry, "and the registry holds no other");

    // The hints, as the SDK's Client hands them over.
    let tools = report["tools"].as_array().expect("the client's tools");
    assert_eq!(names(&report["tools"]), listed);
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} is listed: {listed:?}"))
    };
    let echo = &tool("echo")["annotations"];
    assert_eq!(echo["readOnlyHint"], true, "echo: {echo}");
    assert_eq!(echo["destructiveHint"], false, "echo: {echo}");
    let bash = &tool("bash")["annotations"];
    assert_eq!(bash["destructiveHint"], true, "bash: {bash}");
    assert_eq!(bash["readOnlyHint"], false, "bash: {bash}");

    // write_file replaces a file's content: not an additive update, which
    // is what MCP reads `destructiveHint: false` as.
    let write = &tool("write_file")["annotations"];
    assert_eq!(write["destructiveHint"], true, "write_file: {write}");

    // The hints say what the native metadata says, for every tool: a tool
    // that is not read-only may destroy.
    for def in native["tools"].as_array().unwrap() {
        let name = def["name"].as_str().unwrap();
        let hints = &tool(name)["annotations"];
        let read_only =
            def["metadata"]["read_only"] == true && def["metadata"]["destructive"] == false;
        assert_eq!(hints["readOnlyHint"], read_only, "{name}: {hints}");
        assert_eq!(hints["destructiveHint"], !read_only, "{name}: {hints}");
        assert_eq!(tool(name)["inputSchema"], def["input_schema"], "{name}");
        // An open world is the network: no tool reaches it by default.
        assert_eq!(hints["openWorldHint"], false, "{name}: {hints}");
    }
    assert_eq!(
        native["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "bash")
            .unwrap()["capability"]["affected_resources"],
        json!(["file", "process"])
    );
    app.stop().await;

    // With the network allowed to commands, bash reaches it.
    let app = TestApp::spawn_with(Backend::Sqlite, |s| {
        s.sandbox.network = toolgate::config::NetworkPolicy::Allow
    })
    .await;
    let mcp = app.get_json("/v1/tools?format=mcp").await;
    let bash = mcp["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "bash")
        .unwrap();
    assert_eq!(bash["annotations"]["openWorldHint"], true, "{bash}");
    app.stop().await;
}

/// A tool registered at run time with whatever schemas it likes, as long as
/// the registry takes them.
struct Shaped(ToolDefinition);

#[async_trait]
impl Tool for Shaped {
    fn definition(&self) -> ToolDefinition {
        self.0.clone()
    }
    async fn execute(&self, _args: Value, _ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        Ok(ToolSuccess::complete(json!({})))
    }
}

fn shaped(name: &str, input_schema: Value, output_schema: Option<Value>) -> Arc<Shaped> {
    Arc::new(Shaped(ToolDefinition {
        name: name.into(),
        description: format!("test tool {name}"),
        input_schema,
        output_schema,
        aliases: vec![format!("{name}.alias")],
        metadata: ToolMetadata::default(),
        capability: ToolCapability {
            min_confidence: 60,
            ..ToolCapability::default()
        },
    }))
}

/// Tools added at run time carry schemas the built-ins do not use: boolean
/// subschemas (valid JSON Schema the registry accepts), an output schema,
/// and output schemas MCP cannot express (structuredContent is an object).
/// One such tool must not make the SDK throw the whole listing away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sdk_accepts_runtime_tools_with_any_schema_the_registry_takes() {
    node_ready().await;
    let app = TestApp::spawn(Backend::Sqlite).await;
    let object_out = json!({
        "type": "object",
        "properties": {"count": {"type": "integer"}, "extra": true},
        "required": ["count"]
    });
    for tool in [
        shaped(
            "bool_props",
            json!({
                "type": "object",
                "properties": {"anything": true, "nothing": false, "tag": {"type": "string"}},
                "required": ["anything"]
            }),
            None,
        ),
        shaped(
            "object_out",
            json!({"type": "object", "properties": {}}),
            Some(object_out.clone()),
        ),
        shaped(
            "array_out",
            json!({"type": "object"}),
            Some(json!({"type": "array", "items": {"type": "string"}})),
        ),
        shaped(
            "untyped_out",
            json!({"type": "object"}),
            Some(json!({"properties": {"n": {"type": "number"}}})),
        ),
    ] {
        app.registry.register(tool).unwrap();
    }

    let (report, out) = sdk_report(&app).await;
    let native = app.get_json("/v1/tools").await;
    assert_eq!(
        names(&report["names"]),
        names(&native["tools"]),
        "every tool is listed: {}",
        out.describe()
    );
    let tools = report["tools"].as_array().expect("the client's tools");
    let tool = |name: &str| {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} is listed"))
    };

    // Boolean subschemas as the equivalent object schemas.
    let props = &tool("bool_props")["inputSchema"]["properties"];
    assert_eq!(props["anything"], json!({}), "{props}");
    assert_eq!(props["nothing"], json!({"not": {}}), "{props}");
    assert_eq!(props["tag"], json!({"type": "string"}), "{props}");
    assert_eq!(
        tool("bool_props")["inputSchema"]["required"],
        json!(["anything"])
    );
    assert!(
        tool("bool_props")["description"]
            .as_str()
            .unwrap()
            .contains("min=60"),
        "the safety contract reaches MCP clients too"
    );

    // An object output schema reaches the client (which compiled it).
    let mut expected = object_out;
    expected["properties"]["extra"] = json!({});
    assert_eq!(tool("object_out")["outputSchema"], expected);

    // One MCP cannot express is left out rather than breaking the listing.
    for name in ["array_out", "untyped_out"] {
        assert!(
            tool(name).get("outputSchema").is_none(),
            "{name}: {}",
            tool(name)
        );
    }

    app.stop().await;
}
