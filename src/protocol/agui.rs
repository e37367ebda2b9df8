//! AG-UI 1.0 events and messages, exactly as the stock `@ag-ui/client`
//! validates them: camelCase fields, integer millisecond `timestamp`, no
//! `null` anywhere (absent instead), and everything of ours under
//! `metadata`, the one open object the protocol defines on every event.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

/// One AG-UI event: the typed body plus the fields every event shares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    #[serde(flatten)]
    pub body: EventBody,
    pub timestamp: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl Event {
    pub fn new(body: EventBody) -> Self {
        Event {
            body,
            timestamp: super::now_ms(),
            metadata: None,
        }
    }

    /// A whole text message as a stream announces it: TEXT_MESSAGE_START,
    /// TEXT_MESSAGE_CONTENT (none for an empty message: AG-UI forbids an
    /// empty delta) and TEXT_MESSAGE_END.
    pub fn text_message(message_id: &str, role: &str, content: &str) -> Vec<Event> {
        let mut events = vec![Event::new(EventBody::TextMessageStart {
            message_id: message_id.to_string(),
            role: role.to_string(),
        })];
        if !content.is_empty() {
            events.push(Event::new(EventBody::TextMessageContent {
                message_id: message_id.to_string(),
                delta: content.to_string(),
            }));
        }
        events.push(Event::new(EventBody::TextMessageEnd {
            message_id: message_id.to_string(),
        }));
        events
    }

    pub fn with_metadata(mut self, metadata: Map<String, Value>) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// The wire `type` string (`TOOL_CALL_RESULT`, …).
    pub fn type_name(&self) -> &'static str {
        self.body.type_name()
    }

    /// Compact JSON text: what one SSE `data:` line carries.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("AG-UI events always serialize")
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventBody {
    #[serde(rename_all = "camelCase")]
    RunStarted { thread_id: String, run_id: String },
    #[serde(rename_all = "camelCase")]
    RunFinished {
        thread_id: String,
        run_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<RunOutcome>,
    },
    #[serde(rename_all = "camelCase")]
    RunError {
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    TextMessageStart { message_id: String, role: String },
    #[serde(rename_all = "camelCase")]
    TextMessageContent { message_id: String, delta: String },
    #[serde(rename_all = "camelCase")]
    TextMessageEnd { message_id: String },
    #[serde(rename_all = "camelCase")]
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_message_id: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    ToolCallArgs { tool_call_id: String, delta: String },
    #[serde(rename_all = "camelCase")]
    ToolCallEnd { tool_call_id: String },
    #[serde(rename_all = "camelCase")]
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        content: String,
        role: String,
    },
    #[serde(rename_all = "camelCase")]
    MessagesSnapshot { messages: Vec<Message> },
    #[serde(rename_all = "camelCase")]
    Custom { name: String, value: Value },
}

impl EventBody {
    pub fn type_name(&self) -> &'static str {
        match self {
            EventBody::RunStarted { .. } => "RUN_STARTED",
            EventBody::RunFinished { .. } => "RUN_FINISHED",
            EventBody::RunError { .. } => "RUN_ERROR",
            EventBody::TextMessageStart { .. } => "TEXT_MESSAGE_START",
            EventBody::TextMessageContent { .. } => "TEXT_MESSAGE_CONTENT",
            EventBody::TextMessageEnd { .. } => "TEXT_MESSAGE_END",
            EventBody::ToolCallStart { .. } => "TOOL_CALL_START",
            EventBody::ToolCallArgs { .. } => "TOOL_CALL_ARGS",
            EventBody::ToolCallEnd { .. } => "TOOL_CALL_END",
            EventBody::ToolCallResult { .. } => "TOOL_CALL_RESULT",
            EventBody::MessagesSnapshot { .. } => "MESSAGES_SNAPSHOT",
            EventBody::Custom { .. } => "CUSTOM",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunOutcome {
    /// Completed; `pendingToolCallIds` names frontend tool calls left for
    /// the application to answer.
    #[serde(rename_all = "camelCase")]
    Success {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pending_tool_call_ids: Option<Vec<String>>,
    },
    /// Paused: calls wait for a human decision (toolgate approvals).
    Interrupt {
        interrupts: Vec<Interrupt>,
    },
    Cancelled,
}

/// Something a run needs from outside before it can continue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interrupt {
    pub id: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A JSON Schema of the answer a resume entry's `payload` carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Value>,
    /// When the interrupt stops being answerable (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// A run's answer to an interrupt of the run it continues
/// (`RunAgentInput.resume`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResumeEntry {
    /// The `id` of the interrupt answered.
    pub interrupt_id: String,
    pub status: ResumeStatus,
    /// The answer, in the shape of the interrupt's `responseSchema` (an
    /// application's call: its result, text or any JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = AnyJson, required = false)]
    pub payload: Option<Value>,
    /// Envelope information about the answer; toolgate keeps none of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
}

/// Whether a resume entry answers its interrupt or abandons it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// A message's content in the OpenAPI document: text, or an array of
/// AG-UI content parts (`protocol::parts`).
/// Never built; fields declare it with `value_type`.
pub struct MessageContent;

impl utoipa::PartialSchema for MessageContent {
    fn schema() -> utoipa::openapi::RefOr<Schema> {
        let kinds = std::iter::once("text").chain(super::parts::MEDIA.iter().copied());
        let part = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "type",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(kinds)),
            )
            .required("type");
        utoipa::openapi::schema::OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::String))
            .item(utoipa::openapi::schema::ArrayBuilder::new().items(part))
            .description(Some(
                "Text, or an array of AG-UI content parts: `text` (`text`), and `image`, `audio`, `video` or `document` with a `source` (`{\"type\": \"data\", \"value\": <base64>, \"mimeType\"}`, `{\"type\": \"url\", \"value\", \"mimeType\"?}` or `{\"type\": \"file\", \"value\", \"provider\"?, \"mimeType\"?}`). A message with media keeps its parts as sent",
            ))
            .into()
    }
}

impl ToSchema for MessageContent {}

/// Any JSON value, in the OpenAPI document. Never built.
pub struct AnyJson;

impl utoipa::PartialSchema for AnyJson {
    fn schema() -> utoipa::openapi::RefOr<Schema> {
        Schema::Object(
            ObjectBuilder::new()
                .schema_type(utoipa::openapi::schema::SchemaType::AnyValue)
                .description(Some("Any JSON value"))
                .build(),
        )
        .into()
    }
}

impl ToSchema for AnyJson {}

/// An AG-UI message (snapshot, `RunAgentInput.messages`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    #[serde(rename_all = "camelCase")]
    User {
        #[schema(value_type = super::calls::Id)]
        id: String,
        #[schema(value_type = MessageContent)]
        content: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Assistant {
        #[schema(value_type = super::calls::Id)]
        id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_calls: Option<Vec<ToolCall>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    System {
        #[schema(value_type = super::calls::Id)]
        id: String,
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Developer {
        #[schema(value_type = super::calls::Id)]
        id: String,
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    #[serde(rename_all = "camelCase")]
    Tool {
        #[schema(value_type = super::calls::Id)]
        id: String,
        #[schema(value_type = MessageContent)]
        content: Value,
        #[schema(value_type = super::calls::Id)]
        tool_call_id: String,
        /// Why the tool failed, when it did (beside `content`, which may
        /// hold a partial result).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<Object>)]
        metadata: Option<Map<String, Value>>,
    },
    /// A span of the model's reasoning. A run takes it (the stock client
    /// sends the ones it holds) and leaves it out of the thread: toolgate
    /// neither runs nor replays reasoning, and gives no model it back.
    #[serde(rename_all = "camelCase")]
    Reasoning {
        #[schema(value_type = super::calls::Id)]
        id: String,
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encrypted_value: Option<String>,
    },
    /// A frontend's activity view. A run takes it and leaves it out of the
    /// thread, as for `reasoning`.
    #[serde(rename_all = "camelCase")]
    Activity {
        #[schema(value_type = super::calls::Id)]
        id: String,
        activity_type: String,
        #[schema(value_type = Object)]
        content: Map<String, Value>,
    },
}

impl Message {
    pub fn id(&self) -> &str {
        match self {
            Message::User { id, .. }
            | Message::Assistant { id, .. }
            | Message::System { id, .. }
            | Message::Developer { id, .. }
            | Message::Tool { id, .. }
            | Message::Reasoning { id, .. }
            | Message::Activity { id, .. } => id,
        }
    }

    /// Whether toolgate records the message in its thread: every role but
    /// `reasoning` and `activity`, which a run takes and leaves out.
    pub fn is_recorded(&self) -> bool {
        !matches!(self, Message::Reasoning { .. } | Message::Activity { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolCall {
    #[schema(value_type = super::calls::Id)]
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FunctionCall {
    pub name: String,
    /// The arguments as a JSON text.
    pub arguments: String,
}

/// `RunAgentInput` as the `HttpAgent` posts it. Unknown fields are ignored so
/// newer clients keep working.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    #[schema(value_type = super::calls::Id)]
    pub thread_id: String,
    #[schema(value_type = super::calls::Id)]
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    /// Ignored, as AG-UI leaves it to the agent.
    #[serde(default)]
    #[schema(value_type = AnyJson)]
    pub state: Value,
    pub messages: Vec<Message>,
    /// The frontend's own tools: calls to these are left to the frontend.
    #[serde(default)]
    pub tools: Vec<FrontendTool>,
    /// Ignored.
    #[serde(default)]
    #[schema(value_type = Vec<AnyJson>)]
    pub context: Vec<Value>,
    /// Ignored.
    #[serde(default)]
    #[schema(value_type = AnyJson)]
    pub forwarded_props: Value,
    /// Answers to the interrupts that ended the thread's previous run.
    #[serde(default)]
    pub resume: Vec<ResumeEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FrontendTool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Ignored: the application runs its tools.
    #[serde(default)]
    #[schema(value_type = AnyJson)]
    pub parameters: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_camel_case_without_nulls() {
        let ev = Event {
            body: EventBody::ToolCallStart {
                tool_call_id: "c1".into(),
                tool_call_name: "echo".into(),
                parent_message_id: None,
            },
            timestamp: 5,
            metadata: None,
        };
        assert_eq!(
            ev.to_json(),
            r#"{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"echo","timestamp":5}"#
        );
        let back: Event = serde_json::from_str(&ev.to_json()).unwrap();
        assert_eq!(back, ev);
    }

    #[test]
    fn run_finished_carries_success_outcome() {
        let ev = Event {
            body: EventBody::RunFinished {
                thread_id: "t".into(),
                run_id: "r".into(),
                result: None,
                outcome: Some(RunOutcome::Success {
                    pending_tool_call_ids: None,
                }),
            },
            timestamp: 1,
            metadata: None,
        };
        assert_eq!(
            ev.to_json(),
            r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"success"},"timestamp":1}"#
        );
    }

    #[test]
    fn run_input_accepts_http_agent_shape() {
        let input: RunAgentInput = serde_json::from_value(serde_json::json!({
            "threadId": "t1", "runId": "r1", "state": {}, "tools": [], "context": [],
            "forwardedProps": {},
            "messages": [
                {"id": "u1", "role": "user", "content": "hi"},
                {"id": "a1", "role": "assistant", "toolCalls": [
                    {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"x\"}"}}]}
            ]
        }))
        .unwrap();
        assert_eq!(input.messages.len(), 2);
        assert_eq!(input.messages[1].id(), "a1");
    }
}
