use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::protocol::tool_output::codes;
use crate::protocol::ui_schema::hints;
use crate::tools::{
    PermissionClass, Tool, ToolCapability, ToolContext, ToolDefinition, ToolError, ToolMetadata,
    ToolSuccess,
};

/// Sleeps for `ms` milliseconds (up to a configured cap), reporting progress
/// about ten times and stopping at once when cancelled.
pub struct Wait {
    pub max_ms: u64,
}

#[async_trait]
impl Tool for Wait {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "wait".into(),
            description: format!(
                "Wait for `ms` milliseconds (at most {}), reporting progress. Useful to test long-running calls, progress and cancellation.",
                self.max_ms
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "ms": {"type": "integer", "minimum": 0, "maximum": self.max_ms,
                           "description": "How long to wait, in milliseconds."}
                },
                "required": ["ms"],
                "additionalProperties": false
            }),
            output_schema: None,
            aliases: vec!["sleep".into()],
            metadata: ToolMetadata {
                concurrency_safe: true,
                read_only: true,
                permission_class: PermissionClass::Readonly,
                audit_operation: "invoke".into(),
                search_hint: Some("sleep delay".into()),
                ..ToolMetadata::default()
            },
            capability: ToolCapability::default(),
        }
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<ToolSuccess, ToolError> {
        let ms = args["ms"].as_u64().unwrap_or(0).min(self.max_ms);
        let steps = 10u64;
        let step = Duration::from_millis(ms) / steps as u32;
        let started = tokio::time::Instant::now();
        for i in 1..=steps {
            tokio::select! {
                _ = ctx.cancel.cancelled() => {
                    let waited = started.elapsed().as_millis() as u64;
                    return Err(ToolError::new(codes::CANCELLED, format!("cancelled after {waited} of {ms} ms, by its caller"), false)
                        .with_hint("run it again only if the user asks for it"));
                }
                _ = tokio::time::sleep(step) => {}
            }
            if ms > 0 && i < steps {
                ctx.progress.report(
                    i as f64 / steps as f64,
                    format!("{} of {ms} ms", step.as_millis() as u64 * i),
                );
            }
        }
        Ok(ToolSuccess::complete(json!({"waited_ms": ms})))
    }

    fn ui_hints(&self, _args: &Value, result: &Value) -> Option<Value> {
        Some(hints::key_value(Some("wait"), result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::ProgressSink;
    use tokio_util::sync::CancellationToken;

    fn ctx(cancel: CancellationToken, progress: ProgressSink) -> ToolContext {
        ToolContext {
            owner: "o".into(),
            thread_id: "t".into(),
            call_id: "c".into(),
            workspace: None,
            cancel,
            progress,
            path_rules: None,
            judged_path: None,
            shown: None,
        }
    }

    #[tokio::test]
    async fn stops_at_once_when_cancelled() {
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            trigger.cancel();
        });
        let started = std::time::Instant::now();
        let err = Wait { max_ms: 60_000 }
            .execute(json!({"ms": 60_000}), ctx(cancel, ProgressSink::default()))
            .await
            .unwrap_err();
        assert_eq!(err.code, codes::CANCELLED);
        assert!(started.elapsed() < Duration::from_secs(30));
    }

    #[tokio::test]
    async fn reports_progress_and_caps_the_wait() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let out = Wait { max_ms: 100 }
            .execute(
                json!({"ms": 5_000}),
                ctx(CancellationToken::new(), ProgressSink::new(tx)),
            )
            .await
            .unwrap();
        assert_eq!(out.result, json!({"waited_ms": 100}));
        let mut fractions = vec![];
        while let Ok(p) = rx.try_recv() {
            fractions.push(p.fraction);
        }
        assert_eq!(fractions.len(), 9);
        assert!(fractions.windows(2).all(|w| w[0] < w[1]));
    }
}
