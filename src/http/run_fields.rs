//! The fields of a `RunAgentInput` toolgate does not know. A run takes
//! them, since AG-UI adds fields and a newer stock client must keep
//! working, but says so: its stream carries a `CUSTOM` event
//! `run.fields_ignored` right after `RUN_STARTED`, naming each as a JSON
//! pointer into the input, so that a misspelt field (`"Resume"`) is not
//! dropped without a word. The fields known are the ones the OpenAPI
//! document describes (so the two cannot drift apart), and the ones AG-UI
//! defines that toolgate takes and has no use for ([`AG_UI_ONLY`]): the
//! stock client sends those, and they are no mistake.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use serde_json::{Value, json};

use crate::protocol::agui::{Event, EventBody};

/// The name of the `CUSTOM` event that lists the fields a run left out.
pub const FIELDS_IGNORED: &str = "run.fields_ignored";

/// The most pointers the event lists; `count` says how many there were.
const LISTED: usize = 32;

/// The longest field name a pointer shows whole.
const NAME_CHARS: usize = 64;

type Fields = HashSet<String>;

/// Fields AG-UI's own schemas define that toolgate takes and does not use,
/// by where they stand: `protocolVersion` beside the input's fields, a
/// message's by its role, and those of a tool call and a frontend tool.
const AG_UI_ONLY: [(&str, &[&str]); 10] = [
    ("input", &["protocolVersion"]),
    (
        "user",
        &["subagentRunId", "encryptedValue", "metadata", "name"],
    ),
    (
        "assistant",
        &["subagentRunId", "encryptedValue", "metadata", "name"],
    ),
    (
        "system",
        &["subagentRunId", "encryptedValue", "metadata", "name"],
    ),
    (
        "developer",
        &["subagentRunId", "encryptedValue", "metadata", "name"],
    ),
    ("tool", &["subagentRunId", "encryptedValue", "metadata"]),
    (
        "reasoning",
        &["subagentRunId", "encryptedValue", "metadata"],
    ),
    ("activity", &["subagentRunId", "metadata"]),
    ("tool_call", &["encryptedValue", "metadata"]),
    ("frontend_tool", &["metadata"]),
];

struct Known {
    input: Fields,
    /// A message's fields by its `role`.
    message: HashMap<String, Fields>,
    tool_call: Fields,
    function: Fields,
    tool: Fields,
    resume: Fields,
}

static KNOWN: LazyLock<Known> = LazyLock::new(|| {
    let doc = super::openapi::document();
    let schemas = &doc["components"]["schemas"];
    let fields = |schema: &Value| -> Fields {
        schema["properties"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    };
    let message = schemas["Message"]["oneOf"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|variant| {
            let role = variant["properties"]["role"]["enum"][0].as_str()?;
            Some((role.to_string(), fields(variant)))
        })
        .collect();
    let mut known = Known {
        input: fields(&schemas["RunAgentInput"]),
        message,
        tool_call: fields(&schemas["ToolCall"]),
        function: fields(&schemas["FunctionCall"]),
        tool: fields(&schemas["FrontendTool"]),
        resume: fields(&schemas["ResumeEntry"]),
    };
    for (place, names) in AG_UI_ONLY {
        let fields = match place {
            "input" => &mut known.input,
            "tool_call" => &mut known.tool_call,
            "frontend_tool" => &mut known.tool,
            role => known.message.entry(role.to_string()).or_default(),
        };
        fields.extend(names.iter().map(|n| n.to_string()));
    }
    known
});

/// The pointers to the fields of `input` (a `RunAgentInput` as posted)
/// that toolgate does not know, in the input's order.
pub fn ignored(input: &Value) -> Vec<String> {
    let known = &*KNOWN;
    let mut found = Vec::new();
    unknown(input, &known.input, "", &mut found);
    for (i, message) in items(input, "messages") {
        let at = format!("/messages/{i}");
        if let Some(fields) = message["role"].as_str().and_then(|r| known.message.get(r)) {
            unknown(message, fields, &at, &mut found);
        }
        for (j, call) in items(message, "toolCalls") {
            let at = format!("{at}/toolCalls/{j}");
            unknown(call, &known.tool_call, &at, &mut found);
            unknown(
                &call["function"],
                &known.function,
                &format!("{at}/function"),
                &mut found,
            );
        }
    }
    for (i, tool) in items(input, "tools") {
        unknown(tool, &known.tool, &format!("/tools/{i}"), &mut found);
    }
    for (i, entry) in items(input, "resume") {
        unknown(entry, &known.resume, &format!("/resume/{i}"), &mut found);
    }
    found
}

/// The event telling a run's client which fields were left out; `None`
/// when none were.
pub fn event(ignored: &[String]) -> Option<Event> {
    if ignored.is_empty() {
        return None;
    }
    Some(Event::new(EventBody::Custom {
        name: FIELDS_IGNORED.into(),
        value: json!({
            "fields": &ignored[..ignored.len().min(LISTED)],
            "count": ignored.len(),
            "reason": "neither AG-UI nor toolgate defines these fields of a RunAgentInput; the run goes on without them: check their spelling",
        }),
    }))
}

fn items<'a>(value: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    value[key].as_array().into_iter().flatten().enumerate()
}

fn unknown(value: &Value, known: &Fields, at: &str, found: &mut Vec<String>) {
    let Some(object) = value.as_object() else {
        return;
    };
    for key in object.keys().filter(|key| !known.contains(*key)) {
        // RFC 6901: `~` and `/` are escaped in a pointer's tokens.
        let token = crate::protocol::clip(key, NAME_CHARS)
            .replace('~', "~0")
            .replace('/', "~1");
        found.push(format!("{at}/{token}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the stock `HttpAgent` sends, with every field AG-UI 1.0's
    /// schemas define.
    fn stock_input() -> Value {
        let base = json!({"subagentRunId": "sub", "metadata": {}});
        let message = |fields: Value| {
            let mut m = base.clone();
            m.as_object_mut()
                .unwrap()
                .extend(fields.as_object().unwrap().clone());
            m
        };
        json!({
            "threadId": "t", "runId": "r", "protocolVersion": "0.0.58", "parentRunId": "p",
            "state": {}, "context": [], "forwardedProps": {},
            "resume": [{"interruptId": "i", "status": "cancelled", "payload": 1, "metadata": {}}],
            "tools": [{"name": "confirm", "description": "Ask.", "parameters": {}, "metadata": {}}],
            "messages": [
                message(json!({"id": "s", "role": "system", "content": "be brief", "name": "sys", "encryptedValue": "e"})),
                message(json!({"id": "d", "role": "developer", "content": "dev", "name": "dev", "encryptedValue": "e"})),
                message(json!({"id": "u", "role": "user", "content": "hi", "name": "ann", "encryptedValue": "e"})),
                message(json!({"id": "a", "role": "assistant", "content": "ok", "name": "bot", "encryptedValue": "e", "toolCalls": [
                    {"id": "c", "type": "function", "function": {"name": "echo", "arguments": "{}"},
                     "encryptedValue": "e", "metadata": {}}]})),
                message(json!({"id": "t", "role": "tool", "toolCallId": "c", "content": "{}", "error": "no", "encryptedValue": "e"})),
                message(json!({"id": "z", "role": "reasoning", "content": "hmm", "encryptedValue": "e"})),
                message(json!({"id": "v", "role": "activity", "activityType": "plan", "content": {}})),
            ],
        })
    }

    #[test]
    fn a_stock_input_has_no_field_left_out() {
        assert_eq!(ignored(&stock_input()), Vec::<String>::new());
        assert!(event(&[]).is_none());
    }

    #[test]
    fn a_field_agui_defines_for_one_role_is_unknown_on_another() {
        let mut input = stock_input();
        // AG-UI gives a tool message no `name`, an activity no
        // `encryptedValue`.
        input["messages"][4]["name"] = json!("n");
        input["messages"][6]["encryptedValue"] = json!("e");
        assert_eq!(
            ignored(&input),
            ["/messages/4/name", "/messages/6/encryptedValue"]
        );
    }

    #[test]
    fn unknown_fields_are_named_where_they_are() {
        let mut input = stock_input();
        input["Resume"] = json!([]);
        input["messages"][2]["toolcalls"] = json!([]);
        input["messages"][3]["toolCalls"][0]["function"]["args"] = json!("{}");
        input["tools"][0]["schema"] = json!({});
        input["resume"][0]["answer"] = json!(1);
        input["a/b~c"] = json!(1);
        input["x".repeat(100)] = json!(1);
        let mut found = ignored(&input);
        found.sort();
        let long = format!("/{}…", "x".repeat(NAME_CHARS));
        let mut expected = vec![
            "/Resume",
            "/a~1b~0c",
            &long,
            "/messages/2/toolcalls",
            "/messages/3/toolCalls/0/function/args",
            "/resume/0/answer",
            "/tools/0/schema",
        ];
        expected.sort();
        assert_eq!(found, expected);
    }

    #[test]
    fn the_event_lists_a_bounded_number_of_fields() {
        let many: Vec<String> = (0..100).map(|i| format!("/f{i}")).collect();
        let event = event(&many).unwrap();
        let EventBody::Custom { name, value } = &event.body else {
            panic!("a custom event");
        };
        assert_eq!(name, FIELDS_IGNORED);
        assert_eq!(value["fields"].as_array().unwrap().len(), LISTED);
        assert_eq!(value["count"], 100);
    }
}
