//! The safety gates, from the outside, over HTTP.

mod common;

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use common::{Backend, TestApp};
use serde_json::{Value, json};
use toolgate::tools::{
    Tool, ToolCapability, ToolContext, ToolDefinition, ToolError, ToolMetadata, ToolSuccess,
};

/// A tool that demands confidence and records what it was given.
struct Deploy {
    seen: Arc<Mutex<Vec<Value>>>,
}

#[async_trait]
impl Tool for Deploy {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "deploy".into(),
            description: "Deploy a service.".into(),
            input_schema: json!({"type": "object", "properties": {"service": {"type": "string"}},
                                 "required": ["service"], "additionalProperties": false}),
            output_schema: None,
            aliases: vec![],
            metadata: ToolMetadata::default(),
            capability: ToolCapability {
                min_confidence: 70,
                ..ToolCapability::default()
            },
        }
    }

    async fn execute(&self, args: Value, _ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        self.seen.lock().unwrap().push(args.clone());
        Ok(ToolSuccess::complete(json!({"deployed": args["service"]})))
    }
}

async fn confidence_gate_missing_low_and_ok(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let seen = Arc::new(Mutex::new(vec![]));
    app.registry
        .register(Arc::new(Deploy { seen: seen.clone() }))
        .unwrap();

    let listed = app.get_json("/v1/tools/deploy?format=openai").await;
    assert!(
        listed["function"]["description"]
            .as_str()
            .unwrap()
            .contains("[Safety] requires _confidence (integer 0-100) in input, min=70"),
        "{listed}"
    );

    let cases = [
        (
            "c1",
            json!({"service": "api"}),
            "tool requires _confidence (0-100) in input, min=70",
        ),
        (
            "c2",
            json!({"service": "api", "_confidence": "very"}),
            "tool _confidence must be an integer (0-100), min=70",
        ),
        (
            "c3",
            json!({"service": "api", "_confidence": 40}),
            "confidence 40 below required 70 -- reconsider input or explain why you are confident",
        ),
    ];
    for (id, args, message) in cases {
        let (status, out) = app
            .call("g", json!({"id": id, "name": "deploy", "arguments": args}))
            .await;
        assert_eq!(
            status, 200,
            "a refused gate is a recorded tool-level failure: {out}"
        );
        assert_eq!(out["tool_agent_output"]["status"], "failure");
        assert_eq!(
            out["tool_agent_output"]["error"]["code"],
            "CONFIDENCE_TOO_LOW"
        );
        assert_eq!(out["tool_agent_output"]["error"]["message"], message);
        let content: Value =
            serde_json::from_str(out["tool_response"]["content"].as_str().unwrap()).unwrap();
        assert_eq!(content["error"]["code"], "CONFIDENCE_TOO_LOW");
    }
    assert!(seen.lock().unwrap().is_empty(), "nothing ran");

    // Stripped before validation (the schema forbids extra properties) and execution.
    let (status, out) = app
        .call("g", json!({"id": "c4", "name": "deploy", "arguments": {"service": "api", "_confidence": 85}}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(out["tool_agent_output"]["status"], "success", "{out}");
    assert_eq!(*seen.lock().unwrap(), vec![json!({"service": "api"})]);
    assert_eq!(
        app.history("g").await.len(),
        4,
        "every decision is in the history"
    );
}

both_backends!(confidence_gate_missing_low_and_ok);
